"""Per-node neighbor choice, shared by the fused kernel and the two-step reference.

Both samplers call :func:`choose_neighbors` for each destination node, so for a given key they pick
the same neighbors in the same order, and their blocks can be compared exactly.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.sampling.keys import node_stream, uniform_below
from gnnscale.sampling.intrinsics import prefetch

# Measured on the products-shaped graph (benchmarks/README.md): prefetching the first 4 cache lines
# of the neighborhood 8 destinations ahead, and row pointers 16 ahead, halves the choose pass.
PREFETCH_DISTANCE = 8
PREFETCH_LINES = 4
CACHE_LINE_BYTES = 64


@numba.njit(inline="always")
def num_chosen(degree, fanout, replace):
    """How many neighbors a node with ``degree`` in-edges gets: min(fanout, degree), or fanout with replacement."""
    if degree == 0:
        return 0
    if replace:
        return fanout
    return min(fanout, degree)


@numba.njit(inline="always")
def choose_neighbors(indptr, indices, row, v, fanout, replace, key, hop, out, offset):
    """Write the chosen in-neighbors of node ``v`` (global ids) into ``out[offset:offset + num_chosen]``.

    ``row`` is where ``v``'s in-edges sit in ``indptr``: ``v`` itself for the whole graph, ``v`` minus
    the part's first id for one part's rows (vanilla layout). The random stream depends on ``v``
    only, so both give the same neighbors.

    Without replacement and ``fanout < degree``, Robert Floyd's algorithm picks a uniform random
    ``fanout``-subset of the positions in O(fanout^2) time and O(1) extra memory (the output slots
    double as the "already chosen" set), whatever the degree: no per-node shuffle buffer.
    """
    start = indptr[row]
    degree = indptr[row + 1] - start
    if degree == 0:
        return
    if replace:
        state = node_stream(key, hop, v)
        for q in range(fanout):
            out[offset + q] = indices[start + uniform_below(state, q, degree)]
        return
    if degree <= fanout:
        for q in range(degree):
            out[offset + q] = indices[start + q]
        return
    state = node_stream(key, hop, v)
    first = degree - fanout
    for c in range(fanout):
        j = first + c
        t = uniform_below(state, c, j + 1)
        for q in range(c):
            if out[offset + q] == t:
                t = j
                break
        out[offset + c] = t
    for q in range(fanout):
        out[offset + q] = indices[start + out[offset + q]]


@numba.njit(parallel=True, cache=True, nogil=True)
def count_and_offsets(indptr, dst_nodes, fanout, replace):
    """int64 [len(dst_nodes) + 1]: exclusive prefix sum of the per-node sample counts (a block's indptr)."""
    n = dst_nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch(indptr, dst_nodes[i + PREFETCH_DISTANCE])
        v = dst_nodes[i]
        offsets[i + 1] = num_chosen(indptr[v + 1] - indptr[v], fanout, replace)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets


@numba.njit(inline="always")
def choose_range(indptr, indices, dst_nodes, offsets, lo, hi, fanout, replace, key, hop, out):
    """Choose neighbors for destinations ``lo .. hi - 1`` into their CSC slots of ``out``, prefetching
    the row pointers and the first cache lines of the neighborhoods of destinations further ahead."""
    ids_per_line = CACHE_LINE_BYTES // indices.itemsize
    for i in range(lo, hi):
        if i + 2 * PREFETCH_DISTANCE < hi:
            prefetch(indptr, dst_nodes[i + 2 * PREFETCH_DISTANCE])
        if i + PREFETCH_DISTANCE < hi:
            ahead = dst_nodes[i + PREFETCH_DISTANCE]
            start, end = indptr[ahead], indptr[ahead + 1]
            for line in range(PREFETCH_LINES):
                if start + line * ids_per_line < end:
                    prefetch(indices, start + line * ids_per_line)
        v = dst_nodes[i]
        choose_neighbors(indptr, indices, v, v, fanout, replace, key, hop, out, offsets[i])


# Destinations per unit of parallel work: large enough for prefetching to run ahead, small enough to
# balance threads.
PIECE_NODES = 256


@numba.njit(parallel=True, cache=True, nogil=True)
def choose_all(indptr, indices, dst_nodes, offsets, fanout, replace, key, hop):
    """int64 [offsets[-1]]: chosen global source ids of every destination node, in CSC order."""
    out = np.empty(offsets[-1], dtype=np.int64)
    n = dst_nodes.shape[0]
    for piece in numba.prange((n + PIECE_NODES - 1) // PIECE_NODES):
        lo = piece * PIECE_NODES
        choose_range(indptr, indices, dst_nodes, offsets, lo, min(lo + PIECE_NODES, n), fanout, replace, key,
                     hop, out)
    return out
