"""Matrix sampling in the 1.5D layout (Tripathy, Yelick, Buluç, sections 5.2 and 6).

``P`` workers form a grid of ``P / C`` process rows by ``C`` process columns (worker ``r`` is in row
``r // C`` and column ``r % C``). Process row ``i`` holds block row ``A_i`` of the adjacency and the
feature rows of the same nodes: the contiguous ranges of parts ``i C .. i C + C - 1`` of the partition
directory. Every block row is therefore replicated on the ``C`` members of its process row, and a
process column (one worker of every process row) holds all of ``A`` and all of the features.
``C = 1`` is the fully partitioned topology, ``C = P`` the fully replicated one.

The product ``Q A`` is the sparsity-aware one of Algorithm 2: a worker factors its ``Q`` (the
matrix samplers' :func:`~gnnscale.sampling.matrix.products.stack_rows`), so the rows of ``A`` it needs
are the sorted ``needed`` nodes; it asks each block row's holder *in its own process column* for the
needed rows of that block (round 1, ids) and receives them (round 2: lengths, column ids and, for
LADIES, the operator's values). The received rows, in ``needed`` order, are ``S A``; the draw and the
extraction are the single-process samplers' own, so the blocks equal theirs for the same keys.
Features come the same way: the layout's partitioned feature store runs over the process column and
the block-row book (:class:`Layout15D` holds both), one variable-size exchange of ids and rows.

On a device (``--sample-on device``): the block row stays in host memory and the rows travel as above, over
the column's gloo group (the design's host-side exchanges); the requester's products run on its device
(:class:`FetchedRows` copies the received ``S A`` there once per hop, the device samplers factor, draw and
extract there), so its blocks come out on the device. The device holds no topology, only a stack's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from gnnscale.distributed.comm import Comm
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.directory import LocalPartition, load_partition
from gnnscale.sampling import BatchSampler
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.sampling.matrix.device_ladies import DeviceLadiesSampler
from gnnscale.sampling.matrix.device_products import DeviceRows
from gnnscale.sampling.matrix.device_sage import DeviceMatrixSampler
from gnnscale.sampling.matrix.ladies import check_layer_sizes
from gnnscale.sampling.matrix.products import StackedRows, operator_rows
from gnnscale.sampling.matrix.sage import PHASES, check_bulk
from gnnscale.sampling.registry import sampler_spec
from gnnscale.sampling import check_fanouts
from gnnscale.graph.csc import index_dtype

CATEGORY = "sample"


def check_replication(replication, world_size: int) -> int:
    """``--replication C``: an int >= 1 that divides the worker count ``P`` (block rows of ``P / C`` parts)."""
    if not isinstance(replication, (int, np.integer)) or isinstance(replication, bool):
        raise TypeError(f"replication: expected an int dividing the worker count (--replication), got "
                        f"{type(replication).__name__}")
    if replication < 1 or world_size % replication:
        divisors = [c for c in range(1, world_size + 1) if world_size % c == 0]
        raise ValueError(f"replication: expected a divisor of the {world_size} workers (--replication one of "
                         f"{divisors}), got {replication}")
    return int(replication)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessGrid:
    """The 1.5D grid: ``world_size / replication`` process rows by ``replication`` process columns.

    Args:
        world_size: P, all workers.
        replication: C, the copies of every block row (divides P).
        rank: this worker's global rank.
    """

    world_size: int
    replication: int
    rank: int

    @property
    def num_rows(self) -> int:
        return self.world_size // self.replication

    @property
    def row(self) -> int:
        """This worker's process row: the block row it holds."""
        return self.rank // self.replication

    @property
    def column(self) -> int:
        return self.rank % self.replication

    def column_ranks(self, column: int) -> list[int]:
        """Global ranks of process column ``column``, by process row (its group's rank = the row)."""
        return [row * self.replication + column for row in range(self.num_rows)]

    def block_book(self, book: PartitionBook) -> PartitionBook:
        """Ownership by block row: block row ``i`` = parts ``i C .. i C + C - 1`` (contiguous ids)."""
        return PartitionBook(offsets=np.ascontiguousarray(book.offsets[::self.replication]))


def column_comms(comm: Comm, grid: ProcessGrid) -> Comm:
    """This worker's process-column Comm. Collective over all workers: every worker creates the ``C``
    column groups in the same order (torch's ``new_group`` rule) and keeps its own."""
    mine = None
    for column in range(grid.replication):
        group = comm.new_group(grid.column_ranks(column))  # collective: every worker, every group
        if column == grid.column:
            mine = group
    return mine


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockRow:
    """What a worker of process row ``i`` holds: block row ``A_i`` and its feature rows.

    Args:
        first_node: global id of the block's first row.
        indptr: int64 [rows + 1], from 0; row ``v - first_node`` lists node ``v``'s in-neighbors.
        indices: int32 | int64 [edges], global source ids (each row in the graph's order).
        features: float32 [rows, d], in memory (the block's share of the feature matrix).
    """

    first_node: int
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def nbytes(self) -> int:
        """Bytes of the topology and features this worker holds (what a larger C costs)."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.features.nbytes)


def load_block_row(partition_dir: str | Path, part: LocalPartition, grid: ProcessGrid) -> BlockRow:
    """Read the "own"-view files (in-edges, features) of the ``C`` parts of this worker's block row."""
    first = grid.row * grid.replication
    parts = [part if q == part.part else load_partition(partition_dir, q, "own", workers=part.num_parts)
             for q in range(first, first + grid.replication)]
    indptrs, base = [np.zeros(1, dtype=np.int64)], 0
    for p in parts:
        indptrs.append(np.asarray(p.topology.local_indptr[1:]) + base)
        base += int(p.topology.local_indptr[-1])
    return BlockRow(first_node=parts[0].node_offset, indptr=np.concatenate(indptrs),
                    indices=np.concatenate([np.asarray(p.topology.local_indices) for p in parts]),
                    features=np.concatenate([np.asarray(p.features) for p in parts]))


class ColumnRows:
    """Fetch rows of a row-distributed sparse matrix inside a process column (Algorithm 2).

    Args:
        block: this process row's rows of the matrix, CSR [block rows, num_nodes] (pattern or values).
        book: block-row ownership (part ``i`` = process row ``i`` = rank ``i`` of ``comm``).
        comm: the process column.
        with_values: send the values too (LADIES: the operator's weights); else only the pattern.
    """

    def __init__(self, block: sp.csr_matrix, book: PartitionBook, comm: Comm, *, with_values: bool) -> None:
        self.block, self.book, self.comm, self.with_values = block, book, comm, with_values
        self.first_node = book.node_range(comm.rank)[0]
        self.num_nodes = book.num_nodes

    def gather(self, needed: np.ndarray) -> sp.csr_matrix:
        """CSR [len(needed), num_nodes]: the rows of ``needed`` (int64, ascending). Collective on the
        process column: 2 "sample" rounds (ids out, rows back), whatever ``needed``."""
        # needed is sorted and block rows are contiguous ranges in rank order: one split per holder.
        cuts = np.searchsorted(needed, self.book.offsets[1:-1])
        asked = np.split(needed, cuts)
        # Collective, round 1: every holder gets the ids of the rows we need from its block row.
        requests = self.comm.all_to_allv([torch.from_numpy(a) for a in asked], CATEGORY)
        replies = [torch.from_numpy(self._encode(r.cpu().numpy())) for r in requests]
        # Collective, round 2: the rows, in the order asked: lengths, then column ids (then the values' bits).
        received = self.comm.all_to_allv(replies, CATEGORY)
        return self._decode([r.cpu().numpy() for r in received], [a.shape[0] for a in asked])

    def _encode(self, ids: np.ndarray) -> np.ndarray:
        rows = self.block[ids - self.first_node]
        parts = [np.diff(rows.indptr).astype(np.int64), rows.indices.astype(np.int64)]
        if self.with_values:
            parts.append(rows.data.astype(np.float64).view(np.int64))  # the float64 bits, exactly
        return np.concatenate(parts)

    def _decode(self, messages: list[np.ndarray], counts: list[int]) -> sp.csr_matrix:
        """Holder by holder (ascending block rows, so ``needed`` order): the CSR of the received rows."""
        lengths, indices, values = [], [], []
        for msg, m in zip(messages, counts, strict=True):
            length = msg[:m]
            e = int(length.sum())
            lengths.append(length)
            indices.append(msg[m:m + e])
            if self.with_values:
                values.append(msg[m + e:m + 2 * e].view(np.float64))
        length = np.concatenate(lengths)
        indptr = np.zeros(length.shape[0] + 1, dtype=np.int64)
        np.cumsum(length, out=indptr[1:])
        index = np.concatenate(indices).astype(self.block.indices.dtype, copy=False)
        data = np.concatenate(values) if self.with_values else np.ones(index.shape[0], dtype=np.bool_)
        return sp.csr_matrix((data, index, indptr), shape=(length.shape[0], self.num_nodes), copy=False)


class FetchedRows:
    """The device samplers' rows in the 1.5D layout (a :class:`~gnnscale.sampling.matrix.device_products.RowSource`):
    fetched by ``rows`` from the process column through host memory, then copied to ``device``.

    Args:
        rows: the column's row fetch (pattern or operator values).
        device: where the sampler runs.
    """

    def __init__(self, rows: ColumnRows, device: torch.device) -> None:
        self.rows, self.device, self.num_nodes = rows, device, rows.num_nodes

    def gather(self, needed: torch.Tensor) -> DeviceRows:
        """The rows ``needed`` (ascending) on the device. Collective on the process column (2 "sample" rounds)."""
        ids = needed.cpu().numpy()  # host sync on a GPU: the ids go out over gloo
        return DeviceRows.from_scipy(self.rows.gather(ids), self.device, with_values=self.rows.with_values)


class Matrix15DSampler(MatrixSampler):
    """GraphSAGE matrix sampling whose rows of ``A`` come from the process column (1.5D); the same
    blocks as :class:`MatrixSampler` on the whole graph for the same keys. Each ``sample_many`` costs
    2 "sample" rounds per hop on the column (every member must make the same calls)."""

    def __init__(self, rows: ColumnRows, fanouts, *, bulk: int = 1, replace: bool = False) -> None:
        # No whole graph here: only what the single-process sampler's loop reads.
        self.graph, self.rows = None, rows
        self.num_nodes = rows.num_nodes
        self.fanouts = check_fanouts(fanouts)
        self.bulk = check_bulk(bulk)
        self.replace = bool(replace)
        self._position = np.full(self.num_nodes, -1, dtype=index_dtype(self.num_nodes))
        self._maps = np.empty((0, self.num_nodes), dtype=index_dtype(self.num_nodes))
        self.phase_seconds = dict.fromkeys(PHASES, 0.0)

    def _gather(self, stacked: StackedRows) -> sp.csr_matrix:
        return self.rows.gather(stacked.needed)


class Ladies15DSampler(LadiesSampler):
    """LADIES whose operator rows come from the process column (1.5D); the same blocks as
    :class:`LadiesSampler` on the whole graph. 2 "sample" rounds per layer on the column."""

    def __init__(self, rows: ColumnRows, layer_sizes, *, bulk: int = 1, self_loops: bool = True) -> None:
        self.graph, self.rows = None, rows
        self.num_nodes = rows.num_nodes
        self.layer_sizes = check_layer_sizes(layer_sizes)
        self.bulk = check_bulk(bulk)
        self.self_loops = bool(self_loops)
        self._position = np.full(self.num_nodes, -1, dtype=index_dtype(self.num_nodes))
        self._maps = np.empty((0, self.num_nodes), dtype=np.int64)
        self.phase_seconds = dict.fromkeys(PHASES, 0.0)

    def _gather(self, stacked: StackedRows) -> sp.csr_matrix:
        return self.rows.gather(stacked.needed)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout15D:
    """One worker's 1.5D parts: its grid position, block row, column Comm, block-row book and samplers (the
    training one on the host or a device, evaluation's on the host). Its feature store is the partitioned one over
    ``column`` and ``book``: part ``grid.row``, ``block.features``."""

    grid: ProcessGrid
    block: BlockRow
    column: Comm
    book: PartitionBook
    sampler: BatchSampler
    eval_sampler: MatrixSampler


def build_15d(partition_dir: str | Path, part: LocalPartition, comm: Comm, replication: int, *, sampler: str,
              fanouts, inference_fanouts, bulk: int, replace: bool, layer_sizes, self_loops: bool,
              device: torch.device | None = None) -> Layout15D:
    """Load this worker's block row, create the column groups (collective over all workers) and build
    the samplers on its column. ``sampler``: a bulk sampler's name (layer-wise: LADIES; else GraphSAGE's);
    ``device``: where the training sampler runs (None: the host)."""
    grid = ProcessGrid(world_size=comm.world_size, replication=check_replication(replication, comm.world_size),
                       rank=comm.rank)
    block = load_block_row(partition_dir, part, grid)
    column = column_comms(comm, grid)
    book = grid.block_book(part.book)
    pattern = sp.csr_matrix((np.ones(block.indices.shape[0], dtype=np.bool_), block.indices, block.indptr),
                            shape=(block.num_rows, part.book.num_nodes), copy=False)
    pattern_rows = ColumnRows(pattern, book, column, with_values=False)
    if sampler_spec(sampler).layerwise:
        operator = operator_rows(block.indptr, block.indices, block.first_node, part.book.num_nodes,
                                 self_loops=self_loops)
        rows = ColumnRows(operator, book, column, with_values=True)
        train = Ladies15DSampler(rows, layer_sizes, bulk=bulk, self_loops=self_loops) if device is None else \
            DeviceLadiesSampler(FetchedRows(rows, device), layer_sizes, bulk=bulk, self_loops=self_loops)
    elif device is None:
        train = Matrix15DSampler(pattern_rows, fanouts, bulk=bulk, replace=replace)
    else:
        train = DeviceMatrixSampler(FetchedRows(pattern_rows, device), fanouts, bulk=bulk, replace=replace)
    return Layout15D(grid=grid, block=block, column=column, book=book, sampler=train,
                     eval_sampler=Matrix15DSampler(pattern_rows, inference_fanouts))
