"""``gnnscale convert`` for typed graphs: OGB's ogbn-mag raw layout and IGB-H's ``.npy`` layout into a typed dataset
directory (:mod:`gnnscale.graph.typed_storage`).

ogbn-mag (:func:`ogb_mag_inputs`; ``root`` is OGB's root, holding ``ogbn_mag/``)::

    raw/num-node-dict.csv.gz                     a header row of node types, one row of their counts
    raw/triplet-type-list.csv.gz                 one relation per row: src,name,dst
    raw/relations/<src>___<name>___<dst>/edge.csv.gz          one edge per row: src,dst (local ids)
    raw/relations/<src>___<name>___<dst>/num-edge-list.csv.gz one row: the edge count
    raw/node-feat/<type>/node-feat.csv.gz        a row of floats per node (a type without the file: no features)
    raw/node-label/<type>/node-label.csv.gz      a class id per node (the labeled type: the target type)
    split/time/<type>/{train,valid,test}.csv.gz  local ids of the target type

IGB-H (:func:`igbh_inputs`; ``root`` is the folder holding ``processed/``, IGB's ``<path>/<size>``)::

    processed/<type>/node_feat.npy               float [count, 1024] for paper, author, institute, fos (and
                                                 journal, conference where present: IGB-H large and full)
    processed/<src>__<name>__<dst>/edge_index.npy  int [E, 2]: column 0 the source, column 1 the destination
    processed/paper/node_label_19.npy            [papers] or [papers, 1] (or node_label_2K.npy: 2983 classes);
                                                 -1 or NaN: unlabeled

IGB-H has no split files: the split is IGB's own (its loaders'), the labeled papers in id order, the first 60%
train, the next 20% val, the rest test.

The node types are numbered target type first (its global ids are its local ids), then in the layout's order; the
relations in the layout's order, their reverses after them with ``symmetrize`` (PyG's ``ToUndirected``). Every
edge id is checked against its type's count; errors name the file. The topology is built in memory (the relations'
edges: about 40 bytes per edge); features are copied block by block.
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnscale.graph.convert import Reader, feature_reader, read_labels
from gnnscale.graph.generate import CHUNK_EDGES
from gnnscale.graph.npy_stream import MappedNpy
from gnnscale.graph.ogb import _dir_name, _int_labels, _read_csv_gz, _read_split, _require_file, _single_count
from gnnscale.graph.storage import check_target
from gnnscale.graph.typed import Relation, typed_graph
from gnnscale.graph.typed_storage import FeatureRows, Progress, WriteSummary, write_typed_dataset

OGB_MAG = "ogbn-mag"
IGB_TYPES = ("paper", "author", "institute", "fos")
IGB_MORE_TYPES = ("journal", "conference")  # IGB-H large and full only
IGB_RELATIONS = ("paper__cites__paper", "paper__written_by__author", "author__affiliated_to__institute",
                 "paper__topic__fos", "paper__published__journal", "paper__venue__conference")
IGB_LABELS = {"19": ("node_label_19.npy", 19), "2K": ("node_label_2K.npy", 2983)}
IGB_SPLIT = (0.6, 0.2)  # train, val: fractions of the labeled papers in id order; the rest is test


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedInputs:
    """What :func:`convert_typed` reads.

    node_counts: ``{node type: count}`` in id order. edges: ``{relation: (src, dst)}`` int64 local ids, checked.
    features: ``{node type: reader}`` of float [count, d] (a type not named has none). labels: int64 [count of the
    target type], -1 unlabeled. splits: (train, val, test) sorted int64 *local* ids of the target type.
    """

    name: str
    node_counts: dict[str, int]
    edges: dict[Relation, tuple[np.ndarray, np.ndarray]]
    features: dict[str, Reader | CsvRows]
    target_type: str
    labels: np.ndarray
    splits: tuple[np.ndarray, np.ndarray, np.ndarray]
    num_classes: int

    @property
    def num_edges(self) -> int:
        return sum(src.shape[0] for src, _ in self.edges.values())


class CsvRows:
    """A gzip-compressed CSV of floats [num_rows, width] (OGB's ``node-feat.csv.gz``), read ``chunk`` lines at a
    time; its width is its first line's, its row count checked against ``num_rows`` as it is read."""

    def __init__(self, path: Path, num_rows: int, count_source: str) -> None:
        self.where = str(path)
        self._path = path
        self._count_source = count_source
        try:
            with gzip.open(path, "rt") as f:
                first = f.readline()
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: expected a gzip-compressed CSV of numbers ({exc})") from exc
        self.dtype = np.dtype(np.float32)
        self.shape = (num_rows, len(first.split(",")) if first.strip() else 0)

    def rows(self, chunk: int) -> Iterator[np.ndarray]:
        done = 0
        try:
            with gzip.open(self._path, "rt") as f:
                while lines := list(itertools.islice(f, chunk)):
                    try:
                        block = np.loadtxt(lines, delimiter=",", dtype=np.float32, ndmin=2)
                    except ValueError as exc:
                        raise ValueError(f"{self.where}: rows {done} to {done + len(lines) - 1}: expected "
                                         f"{self.shape[1]} numbers per row ({exc})") from exc
                    if block.shape[1] != self.shape[1] or done + block.shape[0] > self.shape[0]:
                        raise ValueError(f"{self.where}: expected {self.shape[0]} rows ({self._count_source}) of "
                                         f"{self.shape[1]} numbers, found more or a row of {block.shape[1]}")
                    done += block.shape[0]
                    yield block
        except (OSError, EOFError) as exc:
            raise ValueError(f"{self.where}: expected a gzip-compressed CSV of numbers ({exc})") from exc
        if done != self.shape[0]:
            raise ValueError(f"{self.where}: expected {self.shape[0]} rows ({self._count_source}), got {done}")


# --- ogbn-mag -------------------------------------------------------------------------------------


def ogb_mag_inputs(root: str | Path, target_type: str | None = None) -> TypedInputs:
    """ogbn-mag's raw layout under OGB's ``root`` (see the module docstring); ``target_type``: the labeled type to
    classify (default: the one type that has labels)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"ogb_mag_root: expected the folder holding {_dir_name(OGB_MAG)}/ (OGB's root), got {root}")
    folder = root / _dir_name(OGB_MAG)
    raw = folder / "raw"
    counts_file = _require_file(raw / "num-node-dict.csv.gz", OGB_MAG, root)
    counts = _read_node_counts(counts_file)
    labeled = [t for t in counts if (raw / "node-label" / t / "node-label.csv.gz").is_file()]
    target = _target(target_type, labeled, counts, raw)
    edges = {}
    for src, name, dst in _read_triplets(_require_file(raw / "triplet-type-list.csv.gz", OGB_MAG, root)):
        rel = Relation(src, name, dst)
        for end in (src, dst):
            if end not in counts:
                raise ValueError(f"{raw / 'triplet-type-list.csv.gz'}: relation {rel} names node type {end!r}, not "
                                 f"one of {counts_file.name}'s ({', '.join(counts)})")
        folder_r = raw / "relations" / f"{src}___{name}___{dst}"
        edge_file = _require_file(folder_r / "edge.csv.gz", OGB_MAG, root)
        expected = _single_count(_require_file(folder_r / "num-edge-list.csv.gz", OGB_MAG, root))
        pairs = _read_csv_gz(edge_file, np.int64) if expected else np.zeros((0, 2), np.int64)
        if pairs.shape != (expected, 2):
            raise ValueError(f"{edge_file}: expected {expected} rows 'src,dst' (num-edge-list.csv.gz), got shape "
                             f"{list(pairs.shape)}")
        edges[rel] = checked_edges(str(edge_file), rel, pairs[:, 0].copy(), pairs[:, 1].copy(), counts)
    features = {t: feature_reader(CsvRows(raw / "node-feat" / t / "node-feat.csv.gz", counts[t], counts_file.name),
                                  counts[t])
                for t in counts if (raw / "node-feat" / t / "node-feat.csv.gz").is_file()}
    label_file = raw / "node-label" / target / "node-label.csv.gz"
    labels = _int_labels(_read_csv_gz(label_file, np.float64).ravel(), label_file)
    if labels.shape != (counts[target],):
        raise ValueError(f"{label_file}: expected {counts[target]} labels (one per {target} node), got {labels.size}")
    if labels.size and labels.min() < -1:
        raise ValueError(f"{label_file}: expected class ids >= 0 or -1 (unlabeled), found {labels.min()}")
    splits = tuple(_read_split(folder / "split" / "time" / target / f"{part}.csv.gz", OGB_MAG, root, counts[target])
                   for part in ("train", "valid", "test"))
    return TypedInputs(name=OGB_MAG, node_counts=_target_first(counts, target), edges=edges, features=features,
                       target_type=target, labels=labels, splits=splits, num_classes=max(int(labels.max()) + 1, 1))


def _read_node_counts(path: Path) -> dict[str, int]:
    """``{node type: count}`` from OGB's ``num-node-dict.csv.gz`` (a header row of types, one row of counts)."""
    rows = [line.strip().split(",") for line in _gzip_lines(path) if line.strip()]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError(f"{path}: expected a header row of node types and one row of as many counts (one graph), "
                         f"got {len(rows)} rows")
    try:
        counts = {t: int(n) for t, n in zip(rows[0], rows[1])}
    except ValueError as exc:
        raise ValueError(f"{path}: expected integer counts under the header ({exc})") from exc
    if any(n < 0 for n in counts.values()) or len(counts) != len(rows[0]):
        raise ValueError(f"{path}: expected distinct node types with counts >= 0, got {counts}")
    return counts


def _read_triplets(path: Path) -> list[tuple[str, str, str]]:
    rows = [tuple(line.strip().split(",")) for line in _gzip_lines(path) if line.strip()]
    if any(len(row) != 3 for row in rows):
        raise ValueError(f"{path}: expected rows of three names 'src,name,dst'")
    return rows


def _gzip_lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rt") as f:
            return f.readlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: expected a gzip-compressed CSV ({exc})") from exc


def _target(target_type: str | None, labeled: list[str], counts: dict[str, int], raw: Path) -> str:
    """The target type: the one given (it must have labels), else the one labeled type."""
    if target_type is not None:
        if target_type not in counts:
            raise ValueError(f"target_type: expected one of the node types {', '.join(counts)}, got {target_type!r}")
        if target_type not in labeled:
            missing = raw / "node-label" / target_type / "node-label.csv.gz"
            raise ValueError(f"target_type: {target_type!r} has no labels ({missing} is missing); labeled types: "
                             f"{', '.join(labeled) or 'none'}")
        return target_type
    if not labeled:
        raise ValueError(f"target_type: no node type has labels (nothing under {raw / 'node-label'}); node "
                         "classification needs a labeled type")
    if len(labeled) > 1:
        raise ValueError(f"target_type: several node types have labels ({', '.join(labeled)}); give the one to "
                         "classify")
    return labeled[0]


# --- IGB-H ----------------------------------------------------------------------------------------


def igbh_inputs(root: str | Path, labels: str = "19") -> TypedInputs:
    """IGB-H's ``.npy`` layout under ``root`` (the folder holding ``processed/``; see the module docstring);
    ``labels``: ``"19"`` (IGB's 19 classes) or ``"2K"`` (its 2983)."""
    if labels not in IGB_LABELS:
        raise ValueError(f"igb_labels: expected one of {', '.join(IGB_LABELS)}, got {labels!r}")
    root = Path(root)
    processed = root / "processed"
    if not processed.is_dir():
        raise ValueError(f"igb_root: expected IGB-H's folder holding processed/ (IGB's <path>/<size>, e.g. "
                         f"igbh/small), got {root}")
    types = [*IGB_TYPES, *(t for t in IGB_MORE_TYPES if (processed / t).is_dir())]
    features = {t: feature_reader(MappedNpy(_igb_file(processed / t / "node_feat.npy")), None) for t in types}
    counts = {t: features[t].shape[0] for t in types}
    edges = {}
    for text in IGB_RELATIONS:
        rel = Relation(*text.split("__"))
        if rel.src not in counts or rel.dst not in counts:
            continue
        reader = MappedNpy(_igb_file(processed / text / "edge_index.npy"))
        if len(reader.shape) != 2 or reader.shape[1] != 2 or not np.issubdtype(reader.dtype, np.integer):
            raise ValueError(f"{reader.where}: expected int edges [E, 2] (column 0 the {rel.src}, column 1 the "
                             f"{rel.dst}), got {reader.dtype} of shape {list(reader.shape)}")
        pairs = np.concatenate([np.zeros((0, 2), np.int64), *reader.rows(max(1, reader.shape[0]))]).astype(np.int64)
        edges[rel] = checked_edges(reader.where, rel, pairs[:, 0].copy(), pairs[:, 1].copy(), counts)
    label_name, num_classes = IGB_LABELS[labels]
    label_ids = read_labels(MappedNpy(_igb_file(processed / "paper" / label_name)), counts["paper"])
    if label_ids.size and label_ids.max() >= num_classes:
        raise ValueError(f"{processed / 'paper' / label_name}: label {label_ids.max()} found, IGB's {labels} label set "
                         f"has {num_classes} classes")
    return TypedInputs(name=f"igbh-{root.resolve().name}", node_counts=counts, edges=edges, features=features,
                       target_type="paper", labels=label_ids, splits=igb_split(label_ids), num_classes=num_classes)


def igb_split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IGB's split: the labeled nodes in id order, ``int(0.6 n)`` train, ``int(0.2 n)`` val, the rest test."""
    labeled = np.flatnonzero(labels >= 0).astype(np.int64)
    n_train, n_val = int(IGB_SPLIT[0] * labeled.size), int(IGB_SPLIT[1] * labeled.size)
    return labeled[:n_train], labeled[n_train:n_train + n_val], labeled[n_train + n_val:]


def _igb_file(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"{path}: missing (IGB-H's processed layout: processed/<type>/node_feat.npy, "
                         "processed/<src>__<name>__<dst>/edge_index.npy, processed/paper/node_label_19.npy; IGB's "
                         "download script writes it)")
    return path


# --- shared ---------------------------------------------------------------------------------------


def checked_edges(where: str, rel: Relation, src: np.ndarray, dst: np.ndarray,
                  counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` as int64, every id within its type's count (else a ValueError naming ``where``, the edge and
    the type)."""
    for role, ids, node_type in (("source", src, rel.src), ("destination", dst, rel.dst)):
        bad = np.flatnonzero((ids < 0) | (ids >= counts[node_type]))
        if bad.size:
            raise ValueError(f"{where}: edge {int(bad[0])}: {role} id {int(ids[bad[0]])} out of range "
                             f"[0, {counts[node_type]}) ({rel}: {counts[node_type]} {node_type} nodes)")
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)


def _target_first(counts: dict[str, int], target: str) -> dict[str, int]:
    return {target: counts[target], **{t: n for t, n in counts.items() if t != target}}


def convert_typed(inputs: TypedInputs, out_dir: str | Path, *, symmetrize: bool = False, keep_self_loops: bool = False,
                  chunk_values: int = CHUNK_EDGES, overwrite: bool = False,
                  progress: Progress | None = None) -> WriteSummary:
    """Write ``inputs`` to ``out_dir`` as a typed dataset directory.

    Args:
        inputs: from :func:`ogb_mag_inputs` or :func:`igbh_inputs`.
        out_dir: the directory to write (a ValueError, before any work, if it exists and not ``overwrite``).
        symmetrize: add every relation's reverse (PyG's ``ToUndirected``: ``rev_<name>``; a relation within one
            type gets its reversed edges).
        keep_self_loops: keep edges ``v -> v`` of a relation within one type (default: dropped). Repeated edges of
            a relation are always kept once.
        chunk_values: feature values copied at a time (memory, not output).
        progress: ``progress("features", rows done, rows in all)``.
    """
    if not isinstance(inputs, TypedInputs):
        raise TypeError(f"inputs: expected TypedInputs (ogb_mag_inputs, igbh_inputs), got {type(inputs).__name__}")
    out_dir = Path(out_dir)
    check_target(out_dir, overwrite, "out_dir")
    edges = {}
    for rel, (src, dst) in inputs.edges.items():
        if rel.src == rel.dst and not keep_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        edges[rel] = (src, dst)
    graph = typed_graph(_target_first(inputs.node_counts, inputs.target_type), edges, reverse=symmetrize)
    del edges
    features = {t: FeatureRows(rows=r.shape[0], dim=r.shape[1],
                               blocks=r.rows(max(1, chunk_values // max(r.shape[1], 1))))
                for t, r in inputs.features.items()}
    lo = graph.node_range(inputs.target_type)[0]
    return write_typed_dataset(out_dir, name=inputs.name, graph=graph, features=features,
                               target_type=inputs.target_type, labels=inputs.labels,
                               splits=tuple(ids + lo for ids in inputs.splits), num_classes=inputs.num_classes,
                               overwrite=overwrite, progress=progress)
