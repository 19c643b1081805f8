"""``gnnscale partition``: split a dataset into parts and write a partition directory."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from gnnscale.cli.common import add_dataset_args, load_cli_dataset
from gnnscale.cli.flags import add_settings, read_settings
from gnnscale.graph.feature_dtype import FEATURE_DTYPES
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.partition import METHODS, write_partition_dir
from gnnscale.partition.typed_directory import write_typed_partition_dir
from gnnscale.partition.coarsen import budget_bytes
from gnnscale.settings import setting


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSettings:
    """What ``gnnscale partition`` writes; the aliases are the names :func:`write_partition_dir` and the
    partitioners give the same settings in their errors."""

    parts: int | None = setting(None, "number of parts (workers)", aliases=("num_parts",), required=True)
    method: str = setting("metis", "the partitioner", choices=METHODS)
    out: str | None = setting(None, "the partition directory to write", metavar="DIR", aliases=("out_dir",),
                              required=True)
    seed: int = setting(0, "seed of METIS / KaMinPar / the random assignment")
    threads: int = setting(1, "KaMinPar's threads (more: faster, but the partition then varies from run to run)")
    memory_gb: float | None = setting(None, "memory KaMinPar may use, in GB (default: MemAvailable of "
                                            "/proc/meminfo); a graph whose estimated KaMinPar footprint exceeds it "
                                            "is coarsened by streaming first")
    overwrite: bool = setting(False, "replace an existing --out directory")
    feature_dtype: str = setting("float32", "how the part features are stored and sent: float16 or bfloat16 halve "
                                            "the bytes on disk, in memory and on the wire (workers compute in "
                                            "float32)", choices=FEATURE_DTYPES)


def add_partition_parser(sub) -> None:
    p = sub.add_parser("partition", help="split a dataset into parts and write a partition directory")
    add_dataset_args(p)
    add_settings(p, PartitionSettings)


def read_partition_settings(args: argparse.Namespace) -> PartitionSettings:
    return read_settings(PartitionSettings, args)


def cmd_partition(args: argparse.Namespace) -> None:
    settings = read_partition_settings(args)
    out = Path(settings.out)
    if out.exists() and not settings.overwrite:  # checked before loading and partitioning (minutes)
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    if settings.memory_gb is not None:
        budget_bytes(settings.memory_gb)  # a bad value fails before loading and partitioning (minutes)
    dataset = load_cli_dataset(args)
    # A typed graph: one graph of all types partitioned, ids renumbered type by type (gnnscale.partition.typed).
    write = write_typed_partition_dir if isinstance(dataset, TypedDataset) else write_partition_dir
    summary = write(dataset, settings.parts, settings.method, out, settings.seed, overwrite=settings.overwrite,
                    feature_dtype=settings.feature_dtype, threads=settings.threads, memory_gb=settings.memory_gb)
    print(summary.describe())
    print(f"wrote {out}")
