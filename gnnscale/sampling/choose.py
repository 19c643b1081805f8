"""Per-node neighbor choice, shared by the fused kernel and the two-step reference.

Both samplers call :func:`choose_neighbors` for each destination node, so for a given key they pick
the same neighbors in the same order, and their blocks can be compared exactly. The pieces every
sampler repeats live here once, so that a change to one reaches all: the block's offsets
(:func:`count_and_offsets`: fused, two-step, matrix, DGS and the vanilla layout's owners), the Floyd
draw (:func:`floyd_subset`: plain and DGS choice) and the prefetching ahead of the destination loop
(:func:`prefetch_ahead`: fused and matrix choice).

numba caches a kernel under its own file's timestamp, not under those of the functions it inlines from
here: a change to these functions must also change the files whose cached kernels inline them
(fused.py, nodewise.py, typed.py, typed_nodewise.py, dgs.py, matrix/kernels.py,
gnnscale/distributed/sampling.py), or their stale kernels keep running (the fused kernel compiled
before fanout -1 existed crashes on it).
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.intrinsics import prefetch
from gnnscale.keys import node_stream, uniform_below

# Measured on the products-shaped graph (benchmarks/README.md): prefetching the first 4 cache lines
# of the neighborhood 8 destinations ahead, and row pointers 16 ahead, halves the choose pass.
PREFETCH_DISTANCE = 8
# A fanout of -1 takes every in-neighbor of the node, once, with or without replacement; 0 takes none
# (PyG's convention; see gnnscale.sampling.check_fanouts).
ALL_NEIGHBORS = -1
PREFETCH_LINES = 4
CACHE_LINE_BYTES = 64


@numba.njit(inline="always")
def num_chosen(degree, fanout, replace):
    """How many neighbors a node with ``degree`` in-edges gets: min(fanout, degree), or fanout with
    replacement; every one for ``ALL_NEIGHBORS``."""
    if degree == 0:
        return 0
    if fanout == ALL_NEIGHBORS:
        return degree
    if replace:
        return fanout
    return min(fanout, degree)


@numba.njit(inline="always")
def floyd_subset(state, k, n, out, offset):
    """Write a uniform random ``k``-subset of ``[0, n)`` (``k <= n``) into ``out[offset:offset + k]``.

    Robert Floyd's algorithm: O(k^2) time and no memory besides the output, whose slots double as the
    "already chosen" set. Draw ``c`` is ``uniform_below(state, c, n - k + c + 1)``: the plain and the
    DGS sampler both call this, so the same stream gives the same subset in both.
    """
    first = n - k
    for c in range(k):
        j = first + c
        t = uniform_below(state, c, j + 1)
        for q in range(c):
            if out[offset + q] == t:
                t = j
                break
        out[offset + c] = t


@numba.njit(inline="always")
def choose_neighbors(indptr, indices, row, v, fanout, replace, key, hop, out, offset):
    """Write the chosen in-neighbors of node ``v`` (global ids) into ``out[offset:offset + num_chosen]``.

    ``row`` is where ``v``'s in-edges sit in ``indptr``: ``v`` itself for the whole graph, ``v`` minus
    the part's first id for one part's rows (vanilla layout). The random stream depends on ``v``
    only, so both give the same neighbors.

    Without replacement and ``fanout < degree``, Robert Floyd's algorithm (:func:`floyd_subset`) picks
    a uniform random ``fanout``-subset of the positions in O(fanout^2) time and O(1) extra memory,
    whatever the degree: no per-node shuffle buffer.
    """
    start = indptr[row]
    degree = indptr[row + 1] - start
    if degree == 0:
        return
    if replace and fanout != ALL_NEIGHBORS:
        state = node_stream(key, hop, v)
        for q in range(fanout):
            out[offset + q] = indices[start + uniform_below(state, q, degree)]
        return
    if degree <= fanout or fanout == ALL_NEIGHBORS:
        for q in range(degree):
            out[offset + q] = indices[start + q]
        return
    floyd_subset(node_stream(key, hop, v), fanout, degree, out, offset)
    for q in range(fanout):
        out[offset + q] = indices[start + out[offset + q]]


# 64-bit words of the bitmap a kernel hands :func:`choose_neighbors_marked`: 2**20 positions (128 KiB, about what
# one core's L2 holds), enough for all but the largest rows.
MARK_WORDS = 1 << 14


@numba.njit(inline="always")
def floyd_subset_marked(state, k, n, out, offset, marks):
    """:func:`floyd_subset` (the same draws, the same subset in the same order) with its membership test on the
    bitmap ``marks`` (at least ``n`` bits, zero on entry and on return) instead of a scan of the draws so far:
    O(k) instead of O(k^2)."""
    first = n - k
    for c in range(k):
        j = first + c
        t = uniform_below(state, c, j + 1)
        if marks[t >> 6] & (np.uint64(1) << np.uint64(t & 63)):
            t = j
        marks[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
        out[offset + c] = t
    for c in range(k):
        marks[out[offset + c] >> 6] = np.uint64(0)


@numba.njit(inline="always")
def choose_neighbors_marked(indptr, indices, row, v, fanout, replace, key, hop, out, offset, marks):
    """:func:`choose_neighbors`, whose Floyd draw tests membership on the bitmap ``marks``
    (:func:`floyd_subset_marked`) where the row's degree fits it: the same neighbors, in the same order."""
    start = indptr[row]
    degree = indptr[row + 1] - start
    if replace or fanout == ALL_NEIGHBORS or degree <= fanout or degree > 64 * marks.shape[0]:
        choose_neighbors(indptr, indices, row, v, fanout, replace, key, hop, out, offset)
        return
    floyd_subset_marked(node_stream(key, hop, v), fanout, degree, out, offset, marks)
    for q in range(fanout):
        out[offset + q] = indices[start + out[offset + q]]


@numba.njit(inline="always")
def choose_positions(indptr, row, v, fanout, replace, key, hop, out, offset):
    """Write where the chosen in-neighbors of node ``v`` sit in its row, as offsets from
    ``indptr[row]`` (in ``[0, degree)``), into ``out[offset:offset + num_chosen]``.

    The same draws, in the same order, as :func:`choose_neighbors`: the neighbor it writes at slot
    ``q`` is ``indices[indptr[row] + out[offset + q]]``. For samplers that need each chosen edge's
    position (its edge id) as well as its source, without an identity array of one int per edge.
    """
    degree = indptr[row + 1] - indptr[row]
    if degree == 0:
        return
    if replace and fanout != ALL_NEIGHBORS:
        state = node_stream(key, hop, v)
        for q in range(fanout):
            out[offset + q] = uniform_below(state, q, degree)
        return
    if degree <= fanout or fanout == ALL_NEIGHBORS:
        for q in range(degree):
            out[offset + q] = q
        return
    floyd_subset(node_stream(key, hop, v), fanout, degree, out, offset)


@numba.njit(parallel=True, cache=True, nogil=True)
def count_and_offsets(indptr, nodes, first_id, fanout, replace):
    """int64 [len(nodes) + 1]: exclusive prefix sum of the per-node sample counts (a block's indptr).

    Node ``nodes[i]``'s in-edges are CSC row ``nodes[i] - first_id``: ``first_id`` is 0 for the whole
    graph (or a stack of rows indexed directly, matrix sampling), a part's first id for that part's
    rows (vanilla layout). Every sampler's offsets come from here, so all agree on the block's shape.
    """
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch(indptr, nodes[i + PREFETCH_DISTANCE] - first_id)
        row = nodes[i] - first_id
        offsets[i + 1] = num_chosen(indptr[row + 1] - indptr[row], fanout, replace)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets


@numba.njit(inline="always")
def prefetch_ahead(indptr, indices, rows, i, hi):
    """Prefetch for a loop at position ``i`` of ``rows[.. hi]`` (CSC rows of ``indptr``/``indices``): the
    row pointer ``2 * PREFETCH_DISTANCE`` rows ahead and the first cache lines of the neighborhood
    ``PREFETCH_DISTANCE`` rows ahead, so that the misses of several rows overlap. No effect on results."""
    if i + 2 * PREFETCH_DISTANCE < hi:
        prefetch(indptr, rows[i + 2 * PREFETCH_DISTANCE])
    if i + PREFETCH_DISTANCE < hi:
        ids_per_line = CACHE_LINE_BYTES // indices.itemsize
        ahead = rows[i + PREFETCH_DISTANCE]
        start, end = indptr[ahead], indptr[ahead + 1]
        for line in range(PREFETCH_LINES):
            if start + line * ids_per_line < end:
                prefetch(indices, start + line * ids_per_line)


@numba.njit(inline="always")
def choose_range(indptr, indices, dst_nodes, offsets, lo, hi, fanout, replace, key, hop, out):
    """Choose neighbors for destinations ``lo .. hi - 1`` into their CSC slots of ``out``, prefetching
    the row pointers and the first cache lines of the neighborhoods of destinations further ahead."""
    for i in range(lo, hi):
        prefetch_ahead(indptr, indices, dst_nodes, i, hi)
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
