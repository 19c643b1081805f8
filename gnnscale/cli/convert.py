"""``gnnscale convert``: edge lists (.npy files, or OGB's papers100M archives) into a dataset directory,
in bounded memory; OGB's ogbn-mag and IGB-H's layouts into a typed dataset directory."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gnnscale.cli.flags import add_settings, read_settings
from gnnscale.cli.generate import TenthsProgress, print_written
from gnnscale.graph.convert import DEFAULT_SPLIT, ConvertInputs, convert_dataset, npy_inputs, ogb_inputs
from gnnscale.graph.generate import CHUNK_EDGES
from gnnscale.graph.typed_convert import IGB_LABELS, TypedInputs, convert_typed, igbh_inputs, ogb_mag_inputs
from gnnscale.settings import setting

EDGES = "edges (.npy files)"
NODES = "node arrays (.npy files; --features and --labels together)"
TYPED = "typed graphs (into a typed dataset directory)"
# The fields a root (--ogb-root, --ogb-mag-root, --igb-root) replaces: its files hold the edges, features, labels
# and splits.
NPY_FIELDS = ("edges", "src", "dst", "features", "labels", "train_idx", "val_idx", "test_idx", "num_nodes",
              "num_classes")
ROOTS = ("ogb_root", "ogb_mag_root", "igb_root")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertConfig:
    """What ``gnnscale convert`` reads and writes: the inputs (:func:`~gnnscale.graph.convert.npy_inputs`'s
    keywords, or ``ogb_root`` for :func:`~gnnscale.graph.convert.ogb_inputs`, or a typed graph's root:
    ``ogb_mag_root`` for :func:`~gnnscale.graph.typed_convert.ogb_mag_inputs`, ``igb_root`` for
    :func:`~gnnscale.graph.typed_convert.igbh_inputs`) and :func:`~gnnscale.graph.convert.convert_dataset`'s
    (:func:`~gnnscale.graph.typed_convert.convert_typed`'s) keywords.

    Args:
        edges: edge list files, each an int array [2, E] or [E, 2].
        src, dst: 1-D int files of source and destination ids, paired in order.
        num_nodes: the node count (None: the rows of ``features``, else the largest id + 1).
        features: float [num_nodes, d] features (with ``labels``; None: a graph directory, topology only).
        labels: int [num_nodes] labels, -1 (or NaN) for an unlabeled node.
        num_classes: the class count (None: the largest label + 1).
        train_idx, val_idx, test_idx: 1-D int node id files of the splits (all three or none).
        split_fractions: without split files: random train/val/test fractions of the labeled nodes.
        seed: seed of the random split.
        ogb_root: instead of the files above: OGB's root holding ogbn_papers100M/.
        ogb_mag_root: instead of the files above: OGB's root holding ogbn_mag/ (a typed dataset directory).
        target_type: with ogb_mag_root: the labeled node type to classify (None: the one labeled type).
        igb_root: instead of the files above: IGB-H's folder holding processed/ (a typed dataset directory).
        igb_labels: with igb_root: IGB's label set, "19" or "2K" (2983 classes).
        symmetrize: add the reverse of every edge (typed graphs: every relation's reverse).
        keep_self_loops: keep edges v -> v (dropped by default).
        name: the dataset's name in meta.json (None: the ``out`` folder's name; with a root, its dataset's:
            ogbn-papers100M, ogbn-mag, igbh-<folder>).
        chunk_edges: directed edges held in memory at a time (typed graphs: feature values copied at a time).
        out: the directory to write; required.
        overwrite: replace an existing ``out``.
    """

    edges: tuple[str, ...] = setting((), "edge list files, each an int array [2, E] or [E, 2] ([2, 2] reads as "
                                         "[2, E])", group=EDGES)
    src: tuple[str, ...] = setting((), "1-D int files of source ids, paired in order with --dst", group=EDGES)
    dst: tuple[str, ...] = setting((), "1-D int files of destination ids", group=EDGES)
    num_nodes: int | None = setting(None, "node count", default_text="the rows of --features, else the largest id + 1",
                                    group=EDGES)
    features: str | None = setting(None, "float [num_nodes, d] (float16/32/64), copied chunk by chunk as float32",
                                   metavar="FILE", group=NODES)
    labels: str | None = setting(None, "int [num_nodes] or [num_nodes, 1]; -1 (or NaN in a float file) marks an "
                                       "unlabeled node", metavar="FILE", group=NODES)
    num_classes: int | None = setting(None, "class count", default_text="the largest label + 1", group=NODES)
    train_idx: str | None = setting(None, "1-D int node ids of the train split (all three, or none for a random "
                                          "split)", metavar="FILE", aliases=("splits",), group=NODES)
    val_idx: str | None = setting(None, "1-D int node ids of the val split (all three, or none for a random split)",
                                  metavar="FILE", group=NODES)
    test_idx: str | None = setting(None, "1-D int node ids of the test split (all three, or none for a random "
                                         "split)", metavar="FILE", group=NODES)
    split_fractions: tuple[float, ...] = setting(DEFAULT_SPLIT, "without split files: random train/val/test "
                                                                "fractions of the labeled nodes",
                                                 metavar="TRAIN,VAL,TEST", group=NODES)
    seed: int = setting(0, "seed of the random split", group=NODES)
    ogb_root: str | None = setting(None, "instead of the files above: OGB's root holding ogbn_papers100M/ "
                                         "(raw/data.npz, raw/node-label.npz, split/time/); NaN labels become -1 "
                                         "(unlabeled)", metavar="DIR", aliases=("root",))
    ogb_mag_root: str | None = setting(None, "instead of the files above: OGB's root holding ogbn_mag/ (raw/ and "
                                             "split/time/); writes a typed dataset directory", metavar="DIR",
                                       group=TYPED)
    target_type: str | None = setting(None, "with --ogb-mag-root: the labeled node type to classify",
                                      default_text="the one type with labels", group=TYPED)
    igb_root: str | None = setting(None, "instead of the files above: IGB-H's folder holding processed/ (IGB's "
                                         "<path>/<size>); writes a typed dataset directory, split as IGB splits "
                                         "(the labeled papers in id order: the first 0.6 train, the next 0.2 val, "
                                         "the rest test)", metavar="DIR", group=TYPED)
    igb_labels: str = setting("19", "with --igb-root: IGB's label set (node_label_19.npy, or node_label_2K.npy: "
                                    "2983 classes)", choices=tuple(IGB_LABELS), group=TYPED)
    symmetrize: bool = setting(False, "add the reverse of every edge (typed graphs: every relation's reverse, "
                                      "rev_<name>, as PyG's ToUndirected)")
    keep_self_loops: bool = setting(False, "keep edges v -> v (default: dropped)")
    name: str | None = setting(None, "the dataset's name in meta.json",
                               default_text="the --out folder's name; with a root, its dataset's (ogbn-papers100M, "
                                            "ogbn-mag, igbh-<folder>)")
    chunk_edges: int = setting(CHUNK_EDGES, "directed edges held in memory at a time (typed graphs: feature "
                                            "values copied at a time): sets the memory, never the output")
    out: str | None = setting(None, "the directory to write (train on it with --dataset dir --data-dir DIR)",
                              metavar="DIR", aliases=("out_dir",), required=True)
    overwrite: bool = setting(False, "replace an existing --out directory")

    def __post_init__(self) -> None:
        if self.out is None:
            raise ValueError("out: required (--out)")
        for name in ("edges", "src", "dst"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        roots = [name for name in ROOTS if getattr(self, name) is not None]
        if len(roots) > 1:
            raise ValueError(f"{roots[1]}: give one of {', '.join(_flag(name) for name in ROOTS)}, got "
                             f"{' and '.join(_flag(name) for name in roots)}")
        if roots:
            given = [_flag(name) for name in NPY_FIELDS if getattr(self, name) not in (None, ())]
            if given:
                raise ValueError(f"{roots[0]}: reads its own edges, features, labels and splits; drop "
                                 f"{', '.join(given)}")
        if self.target_type is not None and self.ogb_mag_root is None:
            raise ValueError("target_type: only with --ogb-mag-root (IGB-H's labels are on papers)")
        if any(f is not None for f in self.split_files) and None in self.split_files:
            raise ValueError("train_idx: give the three split files (train, val, test idx) together, or none")

    @property
    def split_files(self) -> tuple[str | None, str | None, str | None]:
        return self.train_idx, self.val_idx, self.test_idx

    @property
    def typed(self) -> bool:
        """Whether the inputs are a typed graph's (a typed dataset directory is written)."""
        return self.ogb_mag_root is not None or self.igb_root is not None

    def typed_inputs(self) -> TypedInputs:
        """A typed graph's inputs: the topology and labels read, every feature file's header checked."""
        if self.ogb_mag_root is not None:
            inputs = ogb_mag_inputs(self.ogb_mag_root, self.target_type)
        else:
            inputs = igbh_inputs(self.igb_root, self.igb_labels)
        return inputs if self.name is None else dataclasses.replace(inputs, name=self.name)

    def inputs(self) -> ConvertInputs:
        """The inputs, every file's header checked (no data read yet)."""
        if self.ogb_root is not None:
            inputs = ogb_inputs(self.ogb_root)
            return inputs if self.name is None else dataclasses.replace(inputs, name=self.name)
        return npy_inputs(edges=self.edges, src=self.src, dst=self.dst, num_nodes=self.num_nodes,
                          features=self.features, labels=self.labels,
                          splits=None if self.train_idx is None else self.split_files, num_classes=self.num_classes,
                          name=self.name or Path(self.out).name)


def add_convert_parser(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="edge lists (.npy files, or ogbn-papers100M's raw archives) into a dataset directory, in bounded "
             "memory; ogbn-mag's or IGB-H's files into a typed dataset directory",
        description="Edges from --edges files (each one int array [2, E], row 0 the sources, or [E, 2], one edge "
                    "per row) and/or --src/--dst pairs of 1-D files; or everything from --ogb-root. Without "
                    "--features/--labels the output is a graph directory (topology only, read by "
                    "gnnscale.graph.storage.load_graph). A typed graph from --ogb-mag-root or --igb-root: its "
                    "topology is built in memory, its features copied block by block.")
    add_settings(p, ConvertConfig)


def read_convert_config(args: argparse.Namespace) -> ConvertConfig:
    return read_settings(ConvertConfig, args)


def cmd_convert(args: argparse.Namespace) -> None:
    cfg = read_convert_config(args)
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    if cfg.typed:
        convert_typed_graph(cfg, out)
        return
    inputs = cfg.inputs()
    print(f"converting {sum(e.num_edges for e in inputs.edges):,} edges from {len(inputs.edges)} source(s)"
          f"{', with node arrays' if inputs.nodes is not None else ' (topology only)'}", flush=True)
    start = time.perf_counter()
    summary = convert_dataset(inputs, out, symmetrize=cfg.symmetrize, keep_self_loops=cfg.keep_self_loops,
                              chunk_edges=cfg.chunk_edges, split_fractions=cfg.split_fractions, seed=cfg.seed,
                              overwrite=cfg.overwrite, progress=TenthsProgress("convert") if sys.stderr.isatty()
                              else None)
    print_written(out, summary, f"from {summary.edges_read:,} read", time.perf_counter() - start)


def convert_typed_graph(cfg: ConvertConfig, out: Path) -> None:
    inputs = cfg.typed_inputs()
    print(f"converting {inputs.num_edges:,} edges of {len(inputs.edges)} relations between "
          f"{len(inputs.node_counts)} node types ({', '.join(inputs.node_counts)}), features on "
          f"{', '.join(inputs.features) or 'no type'}", flush=True)
    start = time.perf_counter()
    summary = convert_typed(inputs, out, symmetrize=cfg.symmetrize, keep_self_loops=cfg.keep_self_loops,
                            chunk_values=cfg.chunk_edges, overwrite=cfg.overwrite,
                            progress=TenthsProgress("convert") if sys.stderr.isatty() else None)
    print_written(out, summary, f"from {inputs.num_edges:,} read", time.perf_counter() - start)


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"
