"""``gnnscale convert``: edge lists (.npy files, or OGB's papers100M archives) into a dataset directory,
in bounded memory."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from gnnscale.cli.generate import TenthsProgress, print_written
from gnnscale.graph.convert import DEFAULT_SPLIT, ConvertInputs, convert_dataset, npy_inputs, ogb_inputs
from gnnscale.graph.generate import CHUNK_EDGES

# Names the converters give settings in their errors, where they differ from the flag's dest.
FLAG_ALIASES = {"root": "--ogb-root", "splits": "--train-idx", "out_dir": "--out"}
# Flags that --ogb-root replaces: the archives hold the edges, features, labels and splits.
NPY_FLAGS = ("edges", "src", "dst", "features", "labels", "train_idx", "val_idx", "test_idx", "num_nodes",
             "num_classes")


def fractions(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 3 comma-separated fractions such as 0.8,0.1,0.1, got {text!r}") \
            from None


def add_convert_parser(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="edge lists (.npy files, or ogbn-papers100M's raw archives) into a dataset directory, in bounded memory",
        description="Edges from --edges files (each one int array [2, E], row 0 the sources, or [E, 2], one edge "
                    "per row) and/or --src/--dst pairs of 1-D files; or everything from --ogb-root. Without "
                    "--features/--labels the output is a graph directory (topology only, read by "
                    "gnnscale.graph.storage.load_graph).")
    edges = p.add_argument_group("edges (.npy files)")
    edges.add_argument("--edges", nargs="+", default=[], metavar="FILE",
                       help="edge list files, each an int array [2, E] or [E, 2] ([2, 2] reads as [2, E])")
    edges.add_argument("--src", nargs="+", default=[], metavar="FILE",
                       help="1-D int files of source ids, paired in order with --dst")
    edges.add_argument("--dst", nargs="+", default=[], metavar="FILE", help="1-D int files of destination ids")
    edges.add_argument("--num-nodes", type=int, default=None,
                       help="node count (default: the rows of --features, else the largest id + 1)")
    nodes = p.add_argument_group("node arrays (.npy files; --features and --labels together)")
    nodes.add_argument("--features", default=None, metavar="FILE",
                       help="float [num_nodes, d] (float16/32/64), copied chunk by chunk as float32")
    nodes.add_argument("--labels", default=None, metavar="FILE",
                       help="int [num_nodes] or [num_nodes, 1]; -1 (or NaN in a float file) marks an unlabeled node")
    nodes.add_argument("--num-classes", type=int, default=None, help="class count (default: the largest label + 1)")
    for part in ("train", "val", "test"):
        nodes.add_argument(f"--{part}-idx", default=None, metavar="FILE",
                           help=f"1-D int node ids of the {part} split (all three, or none for a random split)")
    nodes.add_argument("--split-fractions", type=fractions, default=",".join(map(str, DEFAULT_SPLIT)),
                       metavar="TRAIN,VAL,TEST",
                       help="without split files: random train/val/test fractions of the labeled nodes")
    nodes.add_argument("--seed", type=int, default=0, help="seed of the random split")
    p.add_argument("--ogb-root", default=None, metavar="DIR",
                   help="instead of the files above: OGB's root holding ogbn_papers100M/ (raw/data.npz, "
                        "raw/node-label.npz, split/time/); NaN labels become -1 (unlabeled)")
    p.add_argument("--symmetrize", action="store_true", help="add the reverse of every edge")
    p.add_argument("--keep-self-loops", action="store_true", help="keep edges v -> v (default: dropped)")
    p.add_argument("--name", default=None,
                   help="the dataset's name in meta.json (default: the --out folder's name; ogbn-papers100M with "
                        "--ogb-root)")
    p.add_argument("--chunk-edges", type=int, default=CHUNK_EDGES,
                   help="directed edges held in memory at a time: sets the memory, never the output")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the directory to write (train on it with --dataset dir --data-dir DIR)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")


def cmd_convert(args) -> None:
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    inputs = _inputs(args, out)
    print(f"converting {sum(e.num_edges for e in inputs.edges):,} edges from {len(inputs.edges)} source(s)"
          f"{', with node arrays' if inputs.nodes is not None else ' (topology only)'}", flush=True)
    start = time.perf_counter()
    summary = convert_dataset(inputs, out, symmetrize=args.symmetrize, keep_self_loops=args.keep_self_loops,
                              chunk_edges=args.chunk_edges, split_fractions=args.split_fractions, seed=args.seed,
                              overwrite=args.overwrite, progress=TenthsProgress("convert") if sys.stderr.isatty()
                              else None)
    print_written(out, summary, f"from {summary.edges_read:,} read", time.perf_counter() - start)


def _inputs(args, out: Path) -> ConvertInputs:
    if args.ogb_root is not None:
        given = [f"--{flag.replace('_', '-')}" for flag in NPY_FLAGS if getattr(args, flag) not in (None, [])]
        if given:
            raise ValueError(f"ogb_root: reads its own edges, features, labels and splits; drop {', '.join(given)}")
        inputs = ogb_inputs(args.ogb_root)
        return inputs if args.name is None else dataclasses.replace(inputs, name=args.name)
    split_files = (args.train_idx, args.val_idx, args.test_idx)
    if any(f is not None for f in split_files) and None in split_files:
        raise ValueError("train_idx: give the three split files (train, val, test idx) together, or none")
    return npy_inputs(edges=args.edges, src=args.src, dst=args.dst, num_nodes=args.num_nodes, features=args.features,
                      labels=args.labels, splits=None if args.train_idx is None else split_files,
                      num_classes=args.num_classes, name=args.name or out.name)
