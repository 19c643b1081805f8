"""Per-node neighbor choice, shared by the fused kernel and the two-step reference.

Both samplers call :func:`choose_neighbors` for each destination node, so for a given key they pick
the same neighbors in the same order, and their blocks can be compared exactly.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.sampling.keys import node_stream, uniform_below


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


@numba.njit(parallel=True, cache=True)
def count_and_offsets(indptr, dst_nodes, fanout, replace):
    """int64 [len(dst_nodes) + 1]: exclusive prefix sum of the per-node sample counts (a block's indptr)."""
    n = dst_nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        v = dst_nodes[i]
        offsets[i + 1] = num_chosen(indptr[v + 1] - indptr[v], fanout, replace)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets


@numba.njit(parallel=True, cache=True)
def choose_all(indptr, indices, dst_nodes, offsets, fanout, replace, key, hop):
    """int64 [offsets[-1]]: chosen global source ids of every destination node, in CSC order."""
    out = np.empty(offsets[-1], dtype=np.int64)
    for i in numba.prange(dst_nodes.shape[0]):
        v = dst_nodes[i]
        choose_neighbors(indptr, indices, v, v, fanout, replace, key, hop, out, offsets[i])
    return out
