"""Partitioning: METIS, KaMinPar or random part assignment, contiguous relabelling, the partition directory.

``assign_parts`` -> ``relabel`` -> ``write_partition_dir`` (which runs both) on the partitioning
machine; ``load_partition`` on every worker.
"""

from __future__ import annotations

from gnnscale.partition.assign import METHODS, assign_parts, symmetric_adjacency
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.directory import (
    FORMAT_VERSION,
    VIEWS,
    LocalPartition,
    PartRows,
    load_partition,
    read_manifest,
    write_partition_dir,
)
from gnnscale.partition.relabel import PartitionSummary, Relabeling, relabel, summarize

__all__ = [
    "FORMAT_VERSION", "METHODS", "VIEWS", "LocalPartition", "PartRows", "PartitionBook", "PartitionSummary",
    "Relabeling", "assign_parts", "load_partition", "read_manifest", "relabel", "summarize",
    "symmetric_adjacency", "write_partition_dir",
]
