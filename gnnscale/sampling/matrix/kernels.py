"""numba kernels of matrix sampling, where no library call fits: the per-row draws and the
per-batch relabelling (the paper's "remove empty columns" of the sampled matrix). The per-row counts,
the per-node choice and its prefetching are the fused sampler's (:mod:`gnnscale.sampling.choose`).

Every row's draw is a pure function of ``(batch key, hop, node)`` and of the row's contents, so the
result does not depend on how many batches are stacked or on the thread count.
"""

from __future__ import annotations

import numba
import numpy as np

# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import PIECE_NODES, choose_neighbors, prefetch_ahead
from gnnscale.sampling.fused import relabel_range


@numba.njit(parallel=True, cache=True, nogil=True)
def choose_rows(p_indptr, p_indices, nodes, inverse, row_batch, keys, offsets, fanout, replace, hop):
    """int64 [offsets[-1]]: the chosen global ids of every stacked row, in CSC order.

    Row ``r`` is row ``inverse[r]`` of ``S A`` (= row ``r`` of ``P = Q A``) and is drawn with the
    fused sampler's per-node stream of ``(keys[row_batch[r]], hop, nodes[r])``, so a batch gets the
    neighbors the fused kernel gives it for the same key. Rows are visited in stack order, which
    writes the output front to back; the rows of ``S A`` they read are prefetched ahead as in the
    fused kernel (visiting them in node order instead made the scattered writes cost more).
    """
    out = np.empty(offsets[-1], dtype=np.int64)
    num_rows = nodes.shape[0]
    for piece in numba.prange((num_rows + PIECE_NODES - 1) // PIECE_NODES):
        hi = min((piece + 1) * PIECE_NODES, num_rows)
        for r in range(piece * PIECE_NODES, hi):
            prefetch_ahead(p_indptr, p_indices, inverse, r, hi)
            choose_neighbors(p_indptr, p_indices, inverse[r], nodes[r], fanout, replace, keys[row_batch[r]], hop,
                             out, offsets[r])
    return out


@numba.njit(parallel=True, cache=True, nogil=True)
def relabel_batches(chosen, edge_ptr, nodes, node_ptr, maps):
    """Relabel every batch's chosen ids to its local ids, in place, batches in parallel.

    Batch ``b`` knows ``nodes[node_ptr[b]:node_ptr[b + 1]]`` (local ids 0, 1, ...); its chosen ids are
    ``chosen[edge_ptr[b]:edge_ptr[b + 1]]``. New nodes get the next ids in order of first appearance,
    the fused kernel's numbering. ``maps`` is int32/int64 [num_workers, num_nodes], all -1, and left
    all -1; worker ``w`` handles batches ``w, w + num_workers, ...`` with ``maps[w]``.

    Returns ``(new_nodes, new_ptr)``: every batch's extended node list (old nodes first).
    """
    k = node_ptr.shape[0] - 1
    cap_ptr = extended_capacity(node_ptr, edge_ptr)
    extended = np.empty(cap_ptr[k], dtype=np.int64)
    counts = np.zeros(k, dtype=np.int64)
    num_workers = maps.shape[0]
    for w in numba.prange(num_workers):
        node_map = maps[w]
        for b in range(w, k, num_workers):
            counts[b] = _relabel_one(chosen, edge_ptr[b], edge_ptr[b + 1], nodes[node_ptr[b]:node_ptr[b + 1]],
                                     node_map, extended[cap_ptr[b]:cap_ptr[b + 1]])
    new_ptr = np.zeros(k + 1, dtype=np.int64)
    for b in range(k):
        new_ptr[b + 1] = new_ptr[b] + counts[b]
    new_nodes = np.empty(new_ptr[k], dtype=np.int64)
    for b in range(k):
        new_nodes[new_ptr[b]:new_ptr[b + 1]] = extended[cap_ptr[b]:cap_ptr[b] + counts[b]]
    return new_nodes, new_ptr


@numba.njit(inline="always")
def extended_capacity(node_ptr, new_ptr):
    """int64 [k + 1]: where each of the ``k`` stacked batches' extended node list starts, room for its
    known nodes (``node_ptr``) plus at most its candidate new ones (``new_ptr``, the chosen ids of
    neighbor sampling or the drawn nodes of LADIES), so that batches extend in parallel without sizing
    each other first."""
    k = node_ptr.shape[0] - 1
    cap_ptr = np.zeros(k + 1, dtype=np.int64)
    for b in range(k):
        cap_ptr[b + 1] = cap_ptr[b] + (node_ptr[b + 1] - node_ptr[b]) + (new_ptr[b + 1] - new_ptr[b])
    return cap_ptr


@numba.njit(inline="always")
def _relabel_one(chosen, lo, hi, known, node_map, out):
    """One batch: ``known`` nodes first, then new ones by first appearance in ``chosen[lo:hi]``."""
    count = known.shape[0]
    for i in range(count):
        node_map[known[i]] = i
        out[i] = known[i]
    count = relabel_range(chosen, lo, hi, node_map, out, count)  # the fused kernel's loop
    for i in range(count):
        node_map[out[i]] = -1
    return count
