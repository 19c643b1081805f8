"""Online splitting (GSplit, section 3.2): one mini-batch, sampled identically on every worker, cut into
per-worker splits by the offline partition map.

Every vertex of every layer belongs to its owner in the :class:`~gnnscale.partition.PartitionBook` (a
range check: parts own contiguous ids). A worker computes the layer's output only for the destinations
it owns, so every hidden feature is computed exactly once, and its layer-0 sources are rows of its own
feature part (the hybrid layout needs no feature fetch). An edge whose endpoints have different owners
crosses splits; who computes it depends on what is shuffled:

* ``"partial_sums"`` (GraphSAGE, GCN): the *source's* owner computes the edge and pre-aggregates, per
  destination, the edges it holds; a remote destination becomes a *reference vertex* of its split
  (GSplit's v_1 in Figure 4), whose partial sum is sent to the destination's owner.
* ``"source_features"`` (GAT, whose softmax needs every in-edge of a destination in one place): the
  *destination's* owner computes the edge; a remote source becomes a reference vertex whose row its
  owner sends (the source-to-destination scatter of Figure 5).

Local ids: a worker numbers the vertices it owns by their position in the mini-batch's node list. The
blocks of one mini-batch share that list (every block's sources are a prefix of it, destinations
first), so one numbering serves every layer: the owned destinations of a layer are the first rows of
its owned sources, and the owned destinations of layer l are the owned sources of layer l + 1.

Every worker scans the whole mini-batch (linear in its edges) and derives both sides of every
exchange from it, so the split itself needs no communication and all workers agree on row order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
import torch
from torch import Tensor

from gnnscale.partition.book import PartitionBook
from gnnscale.sampling.block import Block, SourcePrefixBlock

ShuffleKind = Literal["partial_sums", "source_features"]
SHUFFLE_KINDS = ("partial_sums", "source_features")
# What each model's layers exchange: SAGE and GCN sum messages that depend on the source only, so they
# pre-aggregate; GAT's attention needs source and destination features on one worker.
SHUFFLE_FOR_MODEL = {"sage": "partial_sums", "gcn": "partial_sums", "gat": "source_features"}
MAX_WORKERS = 63  # the kernels keep one bit per worker in an int64


@dataclass(frozen=True, slots=True, kw_only=True)
class ShufflePlan:
    """Both sides of one layer's exchange, as this worker sees them (the same on every worker's side).

    Args:
        send_index: int64 [sum(send_counts)]; rows sent, grouped by receiver in rank order: rows of the
            partial-sum table (``"partial_sums"``: always its reference rows ``num_dst .. num_rows - 1``
            in order, so the layers send them as one contiguous slice) or owned source ids
            (``"source_features"``).
        send_counts: rows sent to each worker, ``world_size`` ints (0 to itself).
        recv_index: int64 [sum(recv_counts)]; where each received row goes, grouped by sender in rank
            order: the owned destination it is added to (``"partial_sums"``), or the source column it
            becomes, ``num_src + k`` for the k-th received row (``"source_features"``).
        recv_counts: rows received from each worker, ``world_size`` ints (0 from itself).
    """

    send_index: Tensor
    send_counts: tuple[int, ...]
    recv_index: Tensor
    recv_counts: tuple[int, ...]

    def moved(self, move: Callable[[Tensor], Tensor]) -> "ShufflePlan":
        """This plan with ``move`` applied to its index tensors (the counts are host ints: the collectives'
        split sizes)."""
        return ShufflePlan(send_index=move(self.send_index), send_counts=self.send_counts,
                           recv_index=move(self.recv_index), recv_counts=self.recv_counts)


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitBlock(SourcePrefixBlock):
    """One worker's split of one layer's block.

    Args:
        kind: ``"partial_sums"`` or ``"source_features"`` (see the module docstring).
        rank: the worker this split belongs to.
        num_dst: destinations this worker owns (rows of the layer's output here).
        src_ids: int64 [num_src]; global ids of the sources it owns, in node-list order; the first
            ``num_dst`` are the owned destinations. Layer 0's are the feature rows it reads.
        degrees: int64 [num_dst]; sampled in-degree of each owned destination in the whole mini-batch.
        indptr: int64 [num_rows + 1]; CSC over the rows this worker aggregates: the owned destinations,
            then (``"partial_sums"``) the reference destinations grouped by owner.
        indices: int64 [num_edges]; source column of every edge computed here: an owned source id in
            [0, num_src), or (``"source_features"``) ``num_src + k`` for the k-th received source row.
        reference_ids: int64 [num_reference]; global ids of the reference vertices: the remote
            destinations whose partial sums this worker sends (``"partial_sums"``, in row order), or
            the remote sources whose rows it receives (``"source_features"``, in column order).
        plan: the layer's exchange.
    """

    kind: ShuffleKind
    rank: int
    num_dst: int
    src_ids: Tensor
    degrees: Tensor
    indptr: Tensor
    indices: Tensor
    reference_ids: Tensor
    plan: ShufflePlan

    @property
    def num_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def moved(self, move: Callable[[Tensor], Tensor]) -> "SplitBlock":
        """This split with ``move`` applied to every tensor it holds (the copy stage's ``move`` to the training
        device, or ``t.to(device)``)."""
        return SplitBlock(kind=self.kind, rank=self.rank, num_dst=self.num_dst, src_ids=move(self.src_ids),
                          degrees=move(self.degrees), indptr=move(self.indptr), indices=move(self.indices),
                          reference_ids=move(self.reference_ids), plan=self.plan.moved(move))


def split_blocks(blocks: Sequence[Block], book: PartitionBook, rank: int, *,
                 kind: ShuffleKind = "partial_sums") -> list[SplitBlock]:
    """Worker ``rank``'s split of every layer of one mini-batch (model order, input layer first).

    Args:
        blocks: the mini-batch, as ``sample_blocks`` returns it: identical on every worker.
        book: node ownership; node ids of ``blocks`` are ids of the partitioned (relabelled) graph.
        rank: the worker, in [0, book.num_parts).
        kind: what the layers shuffle: ``"partial_sums"`` (SAGE, GCN) or ``"source_features"`` (GAT).

    Raises:
        ValueError/TypeError: blocks not chained as one mini-batch, node ids outside the book's graph,
            rank outside the book, unknown kind.
    """
    nodes = check_minibatch(blocks, book)
    if book.num_parts > MAX_WORKERS:
        raise ValueError(f"book: split parallelism supports up to {MAX_WORKERS} parts (workers), got {book.num_parts}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < book.num_parts:
        raise ValueError(f"rank: expected an int in [0, {book.num_parts}) (the book's parts), got {rank!r}")
    if kind not in SHUFFLE_KINDS:
        raise ValueError(f"kind: expected one of {SHUFFLE_KINDS}, got {kind!r}")
    owner, local = owners_and_local_ids(nodes, book)
    owned = torch.from_numpy(nodes[owner == rank])  # owned vertices in node-list order = local id order
    return [_split_one(block, owner, local, owned, rank, book.num_parts, kind) for block in blocks]


def owners_and_local_ids(nodes: np.ndarray, book: PartitionBook) -> tuple[np.ndarray, np.ndarray]:
    """Owner of every node-list position, and its local id: its rank among the positions that owner holds.

    Compact dtypes, because the kernels look both up at random positions once per edge: owner uint8
    (int32 beyond 255 parts), local id int32 (int64 beyond 2**31 nodes). Ids must lie in [0, book.num_nodes).
    """
    owner = np.empty(nodes.shape[0], dtype=np.uint8 if book.num_parts <= 255 else np.int32)
    local = np.empty(nodes.shape[0], dtype=np.int32 if nodes.shape[0] < 2**31 else np.int64)
    _owners_and_local_ids(nodes, book.offsets, owner, local)
    return owner, local


def check_minibatch(blocks: Sequence[Block], book: PartitionBook) -> np.ndarray:
    """The mini-batch's node list (int64 [n], blocks[0]'s sources), after checking that ``blocks`` are the
    layers of one mini-batch (each block's destinations are the next block's sources) on the book's graph.
    """
    if not isinstance(book, PartitionBook):
        raise TypeError(f"book: expected a PartitionBook, got {type(book).__name__}")
    if isinstance(blocks, Block) or not isinstance(blocks, Sequence) or len(blocks) == 0:
        raise ValueError(f"blocks: expected a non-empty list of Blocks (one per layer), got {type(blocks).__name__}")
    for l, block in enumerate(blocks):
        _check_block(block, l)
    for l in range(len(blocks) - 1):
        below, above = blocks[l], blocks[l + 1]
        if above.num_src != below.num_dst or not torch.equal(above.src_ids, below.dst_ids):
            raise ValueError(f"blocks: blocks[{l + 1}]'s sources must be blocks[{l}]'s destinations (one "
                             f"mini-batch from sample_blocks), got {above.num_src} sources vs {below.num_dst} "
                             "destinations or different ids")
    nodes = blocks[0].src_ids.numpy()
    if nodes.shape[0] and (int(nodes.min()) < 0 or int(nodes.max()) >= book.num_nodes):
        raise ValueError(f"blocks: node ids must lie in [0, {book.num_nodes}) (the book's graph), found "
                         f"{int(nodes.max()) if nodes.max() >= book.num_nodes else int(nodes.min())}; were they "
                         "sampled from another graph, or before relabelling?")
    return nodes


def _check_block(block: Block, l: int) -> None:
    """The CSC invariants the kernels index by without bounds checks (:meth:`Block.validate`)."""
    if not isinstance(block, Block):
        raise TypeError(f"blocks[{l}]: expected a Block, got {type(block).__name__}")
    try:
        block.validate()
    except ValueError as err:
        raise ValueError(f"blocks[{l}]: {err}") from None


def _split_one(block: Block, owner: np.ndarray, local: np.ndarray, owned: Tensor, rank: int, num_parts: int,
               kind: ShuffleKind) -> SplitBlock:
    indptr, indices, nd, ns = block.indptr.numpy(), block.indices.numpy(), block.num_dst, block.num_src
    num_dst = int(np.count_nonzero(owner[:nd] == rank))
    num_src = int(np.count_nonzero(owner[:ns] == rank))
    if kind == "partial_sums":
        out = _split_by_source(indptr, indices, nd, owner, local, rank, num_parts, num_dst)
    else:
        needs = np.zeros(ns, dtype=_mask_dtype(num_parts))
        out = _split_by_destination(indptr, indices, nd, ns, owner, local, rank, num_parts, num_dst, num_src, needs)
    rows_ptr, rows_idx, ref_pos, send_index, send_counts, recv_index, recv_counts = out
    degrees = np.diff(indptr)[:nd][owner[:nd] == rank]
    plan = ShufflePlan(send_index=torch.from_numpy(send_index), send_counts=tuple(send_counts.tolist()),
                       recv_index=torch.from_numpy(recv_index), recv_counts=tuple(recv_counts.tolist()))
    return SplitBlock(kind=kind, rank=rank, num_dst=num_dst, src_ids=owned[:num_src],
                      degrees=torch.from_numpy(degrees), indptr=torch.from_numpy(rows_ptr),
                      indices=torch.from_numpy(rows_idx), reference_ids=block.src_ids[torch.from_numpy(ref_pos)],
                      plan=plan)


def _mask_dtype(num_parts: int) -> np.dtype:
    """The smallest integer holding one bit per worker (the source_features kernel writes one per source
    at random positions: the smaller, the more of it stays in cache)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if num_parts <= 8 * np.dtype(dtype).itemsize:
            return np.dtype(dtype)
    return np.dtype(np.int64)  # up to MAX_WORKERS bits; int64 keeps numba's shifts in integers


# -- kernels ----------------------------------------------------------------------------------------


@numba.njit(inline="always")
def owner_of(offsets, node):
    """The part owning ``node``: the last part whose offset is <= ``node`` (empty parts share offsets),
    by binary search in the book's ``offsets``. The numba form of :meth:`PartitionBook.owner`, for
    kernels that look up every edge's owner (here and in :mod:`gnnscale.distributed.split.owner`)."""
    lo, hi = 0, offsets.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offsets[mid] <= node:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)  # nogil: it runs in the loading thread beside training
def _owners_and_local_ids(nodes, offsets, owner, local):
    seen = np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    for p in range(nodes.shape[0]):
        q = owner_of(offsets, nodes[p])
        owner[p] = q
        local[p] = seen[q]
        seen[q] += 1


@numba.njit(cache=True, nogil=True)
def exclusive_prefix(counts):
    """int64 [len(counts) + 1]: where each worker's group starts in a list grouped by worker, and its
    end (the split's exchange lists, here and in :mod:`gnnscale.distributed.split.owner`)."""
    starts = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    for q in range(counts.shape[0]):
        starts[q + 1] = starts[q] + counts[q]
    return starts


@numba.njit(cache=True, nogil=True)
def _split_by_source(indptr, indices, num_dst, owner, local, me, num_parts, num_own):
    """``"partial_sums"``: this worker computes the edges whose source it owns.

    Rows: owned destinations (row = local id), then reference destinations (remote, with at least one
    edge from an owned source) grouped by owner, each group in node-list order. It sends the reference
    rows to their owners and receives, from every worker r, one partial sum for each owned destination
    with an edge from an r-owned source (in node-list order: exactly the rows r sends).
    """
    # The one pass with random lookups: every edge's source owner, kept for the fill below.
    src_owner = np.empty(indptr[num_dst], dtype=owner.dtype)
    mine = np.zeros(num_dst, dtype=np.int64)  # edges of each destination whose source is owned here
    from_mask = np.zeros(num_dst, dtype=np.int64)  # bit r: the destination has an edge from an r-owned source
    for i in range(num_dst):
        count, mask = 0, 0
        for e in range(indptr[i], indptr[i + 1]):
            r = owner[indices[e]]
            src_owner[e] = r
            count += r == me
            mask |= 1 << r
        mine[i], from_mask[i] = count, mask
    ref_counts = np.zeros(num_parts, dtype=np.int64)
    recv_counts = np.zeros(num_parts, dtype=np.int64)
    for i in range(num_dst):
        if owner[i] == me:
            for r in range(num_parts):
                if r != me and (from_mask[i] >> r) & 1:
                    recv_counts[r] += 1
        elif mine[i] > 0:
            ref_counts[owner[i]] += 1
    ref_next = exclusive_prefix(ref_counts)[:num_parts] + num_own
    recv_next = exclusive_prefix(recv_counts)[:num_parts]
    num_rows = num_own + ref_counts.sum()
    rows_ptr = np.zeros(num_rows + 1, dtype=np.int64)
    row_of = np.empty(num_dst, dtype=np.int64)
    ref_pos = np.empty(num_rows - num_own, dtype=np.int64)
    recv_index = np.empty(recv_counts.sum(), dtype=np.int64)
    for i in range(num_dst):
        q = owner[i]
        if q == me:
            row_of[i] = local[i]
            for r in range(num_parts):
                if r != me and (from_mask[i] >> r) & 1:
                    recv_index[recv_next[r]] = local[i]
                    recv_next[r] += 1
        elif mine[i] > 0:
            row_of[i] = ref_next[q]
            ref_pos[ref_next[q] - num_own] = i
            ref_next[q] += 1
        if mine[i] > 0:
            rows_ptr[row_of[i] + 1] = mine[i]
    for r in range(num_rows):
        rows_ptr[r + 1] += rows_ptr[r]
    rows_idx = np.empty(rows_ptr[num_rows], dtype=np.int64)
    for i in range(num_dst):
        if mine[i] > 0:  # an owned destination with owned sources, or a reference vertex
            out = rows_ptr[row_of[i]]
            for e in range(indptr[i], indptr[i + 1]):
                if src_owner[e] == me:
                    rows_idx[out] = local[indices[e]]
                    out += 1
    send_index = np.arange(num_own, num_rows, dtype=np.int64)
    return rows_ptr, rows_idx, ref_pos, send_index, ref_counts, recv_index, recv_counts


@numba.njit(cache=True, nogil=True)
def _split_by_destination(indptr, indices, num_dst, num_src, owner, local, me, num_parts, num_own, num_own_src,
                          needs):
    """``"source_features"``: this worker computes every in-edge of the destinations it owns.

    ``needs[u]`` (zeros on entry, [num_src]) gets bit q when a destination owned by q reads source u owned by
    another worker (only where q or u's owner is this worker). Owned sources go to every q that needs them,
    remote ones needed here are received; both lists run in node-list order within each worker, so a
    sender's list to q is q's list from the sender.
    """
    for i in range(num_dst):
        q = owner[i]
        bit = 1 << q
        for e in range(indptr[i], indptr[i + 1]):
            u = indices[e]
            r = owner[u]
            if r != q and (q == me or r == me):
                needs[u] |= bit
    send_counts = np.zeros(num_parts, dtype=np.int64)
    recv_counts = np.zeros(num_parts, dtype=np.int64)
    for u in range(num_src):
        if needs[u] != 0:
            if owner[u] == me:
                for q in range(num_parts):
                    send_counts[q] += (needs[u] >> q) & 1
            else:
                recv_counts[owner[u]] += (needs[u] >> me) & 1
    send_next = exclusive_prefix(send_counts)[:num_parts]
    recv_next = exclusive_prefix(recv_counts)[:num_parts]
    send_index = np.empty(send_counts.sum(), dtype=np.int64)
    ref_pos = np.empty(recv_counts.sum(), dtype=np.int64)
    column = local[:num_src].copy()  # source column: local id if owned, num_own_src + k if k-th received
    for u in range(num_src):
        if needs[u] == 0:
            continue
        if owner[u] == me:
            for q in range(num_parts):
                if (needs[u] >> q) & 1:
                    send_index[send_next[q]] = local[u]
                    send_next[q] += 1
        elif (needs[u] >> me) & 1:
            k = recv_next[owner[u]]
            ref_pos[k] = u
            column[u] = num_own_src + k
            recv_next[owner[u]] += 1
    rows_ptr = np.zeros(num_own + 1, dtype=np.int64)
    for i in range(num_dst):
        if owner[i] == me:
            rows_ptr[local[i] + 1] = indptr[i + 1] - indptr[i]
    for r in range(num_own):
        rows_ptr[r + 1] += rows_ptr[r]
    rows_idx = np.empty(rows_ptr[num_own], dtype=np.int64)
    for i in range(num_dst):
        if owner[i] == me:
            out = rows_ptr[local[i]]
            for e in range(indptr[i], indptr[i + 1]):
                rows_idx[out] = column[indices[e]]
                out += 1
    recv_index = np.arange(num_own_src, num_own_src + ref_pos.shape[0], dtype=np.int64)
    return rows_ptr, rows_idx, ref_pos, send_index, send_counts, recv_index, recv_counts
