"""Partitioning: METIS, KaMinPar or random part assignment, contiguous relabelling, the partition directory.

``assign_parts`` -> ``new_ids`` -> ``write_partition_dir`` (which runs both, then writes the
relabelled rows chunk by chunk with ``relabelled_rows``) on the partitioning machine;
``load_partition`` on every worker. ``relabel`` builds the whole relabelled graph in memory. A typed graph's
partition (ids renumbered type by type, then part by part) is :mod:`.typed` and :mod:`.typed_directory`.
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
from gnnscale.partition.relabel import (NewIds, PartitionSummary, Relabeling, new_ids, relabel, relabelled_rows,
                                        summarize)

__all__ = [
    "FORMAT_VERSION", "METHODS", "VIEWS", "LocalPartition", "NewIds", "PartRows", "PartitionBook", "PartitionSummary",
    "Relabeling", "assign_parts", "load_partition", "new_ids", "read_manifest", "relabel", "relabelled_rows",
    "summarize", "symmetric_adjacency", "write_partition_dir",
]
