"""Owner-driven split sampling: each worker samples only the destinations it owns, hop by hop, and builds
its own :class:`~gnnscale.distributed.split.SplitBlock` s without ever holding the whole mini-batch.

Sampling is counter-based per destination (:func:`gnnscale.sampling.choose.choose_neighbors` draws
``v``'s in-edges from ``node_stream(key, hop, v)``), so the in-edges a worker draws for the destinations
it owns are exactly those of the single-process mini-batch. Per hop, from the seeds outwards:

1. worker ``w`` samples the in-edges of its owned destinations (``nodes[:num_dst]``, its local order);
2. every edge ``u -> v`` whose source another worker ``r`` owns goes to ``r`` as the pair ``(u, v)``
   (one ``all_to_allv`` of id pairs, category ``"sample"``, on the loading stage's Comm): ``r`` needs it
   because it computes the edge (``"partial_sums"``) or sends ``u``'s row (``"source_features"``), and
   because ``u`` is one of its destinations in the next hop;
3. owned sources not seen yet get the next local ids (own edges in CSC order, then received pairs in
   sender rank order): the owned destinations of hop ``h + 1`` are the owned sources of hop ``h``, a
   prefix of one node list, as :func:`~gnnscale.distributed.split.split_blocks` lays them out;
4. the layer's rows and exchange plan are built from the worker's own edges and the received pairs.

**Canonical order.** The two sides of every exchange agree without exchanging sizes at training time
because both read the same list of pairs: the pairs ``w`` sends to ``r`` (in ``w``'s CSC order) are the
pairs ``r`` receives from ``w``. ``"partial_sums"``: ``r``'s reference rows for ``w`` are the runs of one
destination in that list (one row per destination, in ``w``'s local order), and ``w`` expects one partial
sum from ``r`` per owned destination with an ``r``-owned source, in its local order: the same sequence.
``"source_features"``: the source rows ``r`` sends ``w`` are the distinct sources of that list in order of
first appearance, which is the column order ``w`` gives them. Row orders therefore differ from
``split_blocks`` (which uses the whole mini-batch's node-list order), the contents do not: the same
owned vertices per layer, the same degrees, the same edges per (row, worker), the same row counts per
exchange (tested against ``split_blocks`` on real processes, ``tests/split_workers.py``).

Every pass is linear in the edges this worker samples or receives, plus per-part and per-graph
mapping arrays reused across mini-batches (:class:`OwnerSplitWorkspace`; only touched entries are reset).
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import torch

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.split.plan import MAX_WORKERS, SHUFFLE_KINDS, ShuffleKind, ShufflePlan, SplitBlock, \
    exclusive_prefix, owner_of
from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import check_fanouts, check_key, check_seeds
from gnnscale.sampling.choose import choose_all, count_and_offsets
from gnnscale.sampling.fused import grow_nodes


class OwnerSplitWorkspace:
    """The reusable mapping arrays of one worker (not safe to share between threads).

    ``local_map``: owned id - lo -> local id (-1 unseen); ``remote_map``: global id -> column among the
    received source rows (-1 unseen; ``"source_features"``); ``stamp``: owned id - lo -> last (hop,
    receiver) stamp, so that a source sent twice to the same receiver is sent once.
    """

    def __init__(self, book: PartitionBook, rank: int) -> None:
        lo, hi = book.node_range(rank)
        self.lo = int(lo)
        self.local_map = np.full(int(hi) - self.lo, -1, dtype=index_dtype(max(int(hi) - self.lo, 1)))
        self.remote_map = np.full(book.num_nodes, -1, dtype=np.int64)
        self.stamp = np.zeros(int(hi) - self.lo, dtype=np.int64)
        self.next_stamp = 1  # stamps only grow: the stamp array is never reset


def owner_split_blocks(graph: CSCGraph, book: PartitionBook, seeds, fanouts: Sequence[int], key: int, comm: Comm, *,
                       kind: ShuffleKind = "partial_sums", replace: bool = False,
                       workspace: OwnerSplitWorkspace | None = None) -> tuple[list[SplitBlock], int]:
    """This worker's split of every layer (model order, input layer first) of the mini-batch that
    ``sample_blocks(graph, seeds, fanouts, key=key, replace=replace)`` draws, and the number of edges this
    worker sampled (its owned destinations' in-edges, all layers; summed over workers: the mini-batch's).

    Collective over ``comm`` (one ``"sample"`` round per hop); every worker passes the same seeds, fanouts,
    key and kind. ``graph`` is the whole topology, ``book`` gives the parts (one per worker).

    Raises:
        ValueError/TypeError: before any collective, the same on every worker: bad seeds (range, dtype,
            duplicates), fanouts, key or kind; a book that does not match the graph or the workers.
    """
    if not isinstance(book, PartitionBook):
        raise TypeError(f"book: expected a PartitionBook, got {type(book).__name__}")
    if book.num_parts != comm.world_size:
        raise ValueError(f"book: expected {comm.world_size} parts (one per worker), got {book.num_parts}")
    if book.num_parts > MAX_WORKERS:
        raise ValueError(f"book: split parallelism supports up to {MAX_WORKERS} parts (workers), got {book.num_parts}")
    if book.num_nodes != graph.num_nodes:
        raise ValueError(f"book: expected a book of the graph's {graph.num_nodes} nodes, got {book.num_nodes}")
    if kind not in SHUFFLE_KINDS:
        raise ValueError(f"kind: expected one of {SHUFFLE_KINDS}, got {kind!r}")
    seeds, fanouts, key = check_seeds(seeds, graph.num_nodes), check_fanouts(fanouts), check_key(key)
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise ValueError("seeds: expected unique node ids, got duplicates")
    ws = workspace if workspace is not None else OwnerSplitWorkspace(book, comm.rank)
    lo, hi = book.node_range(comm.rank)
    if ws.local_map.shape[0] != hi - lo or ws.lo != lo or ws.remote_map.shape[0] != book.num_nodes:
        raise ValueError(f"workspace: built for another book or rank (expected rank {comm.rank}'s nodes [{lo}, {hi}))")
    owned_seeds = seeds[(seeds >= lo) & (seeds < hi)]
    nodes = np.empty(max(16, 2 * owned_seeds.shape[0]), dtype=np.int64)
    nodes[: owned_seeds.shape[0]] = owned_seeds
    num_known = _claim(owned_seeds, ws.lo, ws.local_map)
    hops, sampled = [], 0
    try:
        for hop, fanout in enumerate(fanouts):
            hop_out = _one_hop(graph, book, comm, kind, nodes, num_known, fanout, bool(replace), key, hop, ws)
            (indptr, chosen, src_owner, recv, recv_starts), nodes, num_dst, num_known = hop_out
            sampled += int(indptr[-1])
            hops.append(_build(kind, comm.rank, book.num_parts, indptr, chosen, src_owner, recv, recv_starts,
                               num_dst, num_known, ws))
    finally:
        _release(nodes[:num_known], ws.lo, ws.local_map)
    ids = torch.from_numpy(nodes[:num_known].copy())
    return [block(ids) for block in reversed(hops)], sampled


def _one_hop(graph, book, comm, kind, nodes, num_known, fanout, replace, key, hop, ws):
    """Sample the owned destinations ``nodes[:num_known]``, route the cross edges (collective), register
    the new owned sources. Returns the hop's arrays, the (maybe grown) node list, num_dst, num_known."""
    num_dst = num_known
    dst = nodes[:num_dst]
    indptr = count_and_offsets(graph.indptr, dst, 0, fanout, replace)
    chosen = choose_all(graph.indptr, graph.indices, dst, indptr, fanout, replace, key, hop)
    src_owner = np.empty(chosen.shape[0], dtype=np.int64)
    send_counts = _owners_and_counts(chosen, book.offsets, comm.rank, src_owner)
    pair_dtype = np.int32 if book.num_nodes < 2**31 else np.int64  # ids only: half the bytes when they fit
    pairs = np.empty((int(send_counts.sum()), 2), dtype=pair_dtype)
    send_starts = _prefix(send_counts)
    _fill_pairs(indptr, chosen, dst, src_owner, comm.rank, send_starts, pairs)
    splits = np.split(pairs, send_starts[1:-1])
    # Collective: every cross edge to its source's owner (ids only; sizes exchanged first).
    received = comm.all_to_allv([torch.from_numpy(p) for p in splits], "sample")
    recv_counts = np.array([t.shape[0] for t in received], dtype=np.int64)
    recv = torch.cat(received).numpy().astype(np.int64, copy=False).reshape(-1, 2)
    nodes = grow_nodes(nodes, num_known, num_known + chosen.shape[0] + recv.shape[0])
    num_known = int(_register(chosen, src_owner, comm.rank, recv, ws.lo, ws.local_map, nodes, num_known))
    return (indptr, chosen, src_owner, recv, _prefix(recv_counts)), nodes, num_dst, num_known


def _build(kind, rank, num_parts, indptr, chosen, src_owner, recv, recv_starts, num_dst, num_src, ws):
    """The layer's SplitBlock, as a function of the final node list (src_ids are its prefix)."""
    if kind == "partial_sums":
        out = _build_partial_sums(indptr, chosen, src_owner, num_dst, rank, num_parts, recv, recv_starts, ws.lo,
                                  ws.local_map)
    else:
        stamp = ws.next_stamp
        ws.next_stamp += num_parts
        out = _build_source_features(indptr, chosen, src_owner, num_src, rank, num_parts, recv, recv_starts, ws.lo,
                                     ws.local_map, ws.remote_map, ws.stamp, stamp)
    rows_ptr, rows_idx, ref_ids, send_index, send_counts, recv_index, recv_counts = out
    plan = ShufflePlan(send_index=torch.from_numpy(send_index), send_counts=tuple(send_counts.tolist()),
                       recv_index=torch.from_numpy(recv_index), recv_counts=tuple(recv_counts.tolist()))
    degrees = torch.from_numpy(np.diff(indptr))

    def block(ids: torch.Tensor) -> SplitBlock:
        return SplitBlock(kind=kind, rank=rank, num_dst=num_dst, src_ids=ids[:num_src], degrees=degrees,
                          indptr=torch.from_numpy(rows_ptr), indices=torch.from_numpy(rows_idx),
                          reference_ids=torch.from_numpy(ref_ids), plan=plan)

    return block


def _prefix(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


# -- kernels ----------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)  # nogil: it runs in the loading thread beside training
def _claim(seeds, lo, local_map):
    for i in range(seeds.shape[0]):
        local_map[seeds[i] - lo] = i
    return seeds.shape[0]


@numba.njit(cache=True, nogil=True)
def _release(nodes, lo, local_map):
    for i in range(nodes.shape[0]):
        local_map[nodes[i] - lo] = -1


@numba.njit(cache=True, nogil=True)
def _owners_and_counts(chosen, offsets, me, src_owner):
    """Every edge's source owner (a binary search in the book's offsets), and the cross edges per owner."""
    counts = np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    for e in range(chosen.shape[0]):
        r = owner_of(offsets, chosen[e])
        src_owner[e] = r
        if r != me:
            counts[r] += 1
    return counts


@numba.njit(cache=True, nogil=True)
def _fill_pairs(indptr, chosen, dst, src_owner, me, starts, pairs):
    """Cross edges ``(u, v)`` grouped by the source's owner, each group in CSC order."""
    pos = starts[:-1].copy()
    for i in range(dst.shape[0]):
        for e in range(indptr[i], indptr[i + 1]):
            r = src_owner[e]
            if r != me:
                pairs[pos[r], 0] = chosen[e]
                pairs[pos[r], 1] = dst[i]
                pos[r] += 1


@numba.njit(cache=True, nogil=True)
def _register(chosen, src_owner, me, recv, lo, local_map, nodes, num_known):
    """New owned sources get the next local ids: own edges in CSC order, then received pairs in order."""
    n = num_known
    for e in range(chosen.shape[0]):
        if src_owner[e] == me:
            u = chosen[e] - lo
            if local_map[u] < 0:
                local_map[u] = n
                nodes[n] = chosen[e]
                n += 1
    for k in range(recv.shape[0]):
        u = recv[k, 0] - lo
        if local_map[u] < 0:
            local_map[u] = n
            nodes[n] = recv[k, 0]
            n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _build_partial_sums(indptr, chosen, src_owner, num_dst, me, num_parts, recv, recv_starts, lo, local_map):
    """Rows: owned destinations (row = local id) with their owned-source edges, then one reference row per
    run of one destination in the pairs received from each worker (rank order). Receives from worker r one
    partial sum per owned destination with an r-owned source, in local order: r's rows for this worker."""
    mine = np.zeros(num_dst, dtype=np.int64)
    from_mask = np.zeros(num_dst, dtype=np.int64)
    recv_counts = np.zeros(num_parts, dtype=np.int64)
    for i in range(num_dst):
        for e in range(indptr[i], indptr[i + 1]):
            r = src_owner[e]
            if r == me:
                mine[i] += 1
            else:
                from_mask[i] |= 1 << r
        for r in range(num_parts):
            recv_counts[r] += (from_mask[i] >> r) & 1
    ref_counts = np.zeros(num_parts, dtype=np.int64)
    for q in range(num_parts):
        for k in range(recv_starts[q], recv_starts[q + 1]):
            if k == recv_starts[q] or recv[k, 1] != recv[k - 1, 1]:
                ref_counts[q] += 1
    num_ref = ref_counts.sum()
    rows_ptr = np.zeros(num_dst + num_ref + 1, dtype=np.int64)
    rows_idx = np.empty(mine.sum() + recv.shape[0], dtype=np.int64)
    ref_ids = np.empty(num_ref, dtype=np.int64)
    out = 0
    for i in range(num_dst):
        for e in range(indptr[i], indptr[i + 1]):
            if src_owner[e] == me:
                rows_idx[out] = local_map[chosen[e] - lo]
                out += 1
        rows_ptr[i + 1] = out
    row = num_dst
    for q in range(num_parts):
        for k in range(recv_starts[q], recv_starts[q + 1]):
            if k == recv_starts[q] or recv[k, 1] != recv[k - 1, 1]:  # a run of one destination: one row
                ref_ids[row - num_dst] = recv[k, 1]
                row += 1
            rows_idx[out] = local_map[recv[k, 0] - lo]
            out += 1
            rows_ptr[row] = out
    recv_next = exclusive_prefix(recv_counts)[:num_parts]
    recv_index = np.empty(recv_counts.sum(), dtype=np.int64)
    for i in range(num_dst):
        for r in range(num_parts):
            if (from_mask[i] >> r) & 1:
                recv_index[recv_next[r]] = i
                recv_next[r] += 1
    send_index = np.arange(num_dst, num_dst + num_ref, dtype=np.int64)
    return rows_ptr, rows_idx, ref_ids, send_index, ref_counts, recv_index, recv_counts


@numba.njit(cache=True, nogil=True)
def _build_source_features(indptr, chosen, src_owner, num_src, me, num_parts, recv, recv_starts, lo, local_map,
                           remote_map, stamp, first_stamp):
    """Rows: the owned destinations with all their in-edges; a remote source's column is ``num_src + k``, k
    its position among the received rows (grouped by owner, each group in order of first appearance in
    the pairs sent to that owner). Sends to worker q the distinct owned sources of the pairs q sent, in
    order of first appearance: q's columns."""
    num_edges = chosen.shape[0]
    distinct = np.zeros(num_parts, dtype=np.int64)
    edge_col = np.empty(num_edges, dtype=np.int64)
    for e in range(num_edges):
        r = src_owner[e]
        if r != me:
            u = chosen[e]
            if remote_map[u] < 0:
                remote_map[u] = distinct[r]
                distinct[r] += 1
            edge_col[e] = remote_map[u]
    base = exclusive_prefix(distinct)[:num_parts]
    rows_idx = np.empty(num_edges, dtype=np.int64)
    ref_ids = np.empty(distinct.sum(), dtype=np.int64)
    for e in range(num_edges):
        r = src_owner[e]
        if r == me:
            rows_idx[e] = local_map[chosen[e] - lo]
        else:
            c = base[r] + edge_col[e]
            rows_idx[e] = num_src + c
            ref_ids[c] = chosen[e]
            remote_map[chosen[e]] = -1  # reset as we go: edge_col already holds every edge's column
    send_counts = np.zeros(num_parts, dtype=np.int64)
    send_index = np.empty(recv.shape[0], dtype=np.int64)
    out = 0
    for q in range(num_parts):
        mark = first_stamp + q
        for k in range(recv_starts[q], recv_starts[q + 1]):
            u = recv[k, 0] - lo
            if stamp[u] != mark:
                stamp[u] = mark
                send_index[out] = local_map[u]
                out += 1
                send_counts[q] += 1
    recv_index = np.arange(num_src, num_src + ref_ids.shape[0], dtype=np.int64)
    return indptr.copy(), rows_idx, ref_ids, send_index[:out].copy(), send_counts, recv_index, distinct
