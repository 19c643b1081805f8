"""The numba kernels of the typed sampler (:mod:`gnnscale.sampling.typed`): one hop's draws per destination and
relation, their relabelling, and the split of the hop into one CSC per relation.

A hop over destinations ``nodes[:n]`` runs in three passes, as the homogeneous fused kernel's
(:mod:`gnnscale.sampling.fused`):

1. :func:`typed_counts`: each destination's type and, per typed row (one per relation into its type), how many
   neighbors it draws; the prefix sums are the hop's CSC over all relations (``offsets``).
2. :func:`relation_layout`: from those counts alone, where every row's draws go in one CSC per relation (over
   the destinations of the relation's destination type): per relation its indptr and its run of the hop's
   relation-major edge array, per row its slot there.
3. :func:`typed_choose_and_relabel`: every destination's draws, relation by relation, into their CSC slots, and
   the relabel to local ids in edge order, which writes each row's ids at its slot: the split by relation costs
   no pass over the edges. On more than one thread a pipeline over chunks, as ``_choose_and_relabel``.
   :func:`typed_choose_all` draws without relabelling (the two-step baseline).

numba caches a kernel under its own file's timestamp: a change to a function inlined from choose.py must also
touch this file.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.intrinsics import atomic_fetch_add, prefetch
from gnnscale.sampling.choose import (CACHE_LINE_BYTES, MARK_WORDS, PIECE_NODES, PREFETCH_DISTANCE, PREFETCH_LINES,
                                      choose_neighbors_marked, num_chosen)
from gnnscale.sampling.fused import relabel_into

# Streams of relation r at hop h: h + r * RELATION_SLOT (hops stay far below it).
RELATION_SLOT = 1 << 16


@numba.njit(inline="always")
def _type_of(v, type_offsets):
    t = 0
    while v >= type_offsets[t + 1]:
        t += 1
    return t


@numba.njit(inline="always")
def _first_row(i, nodes, types, row_base, row_start, type_offsets):
    """The first typed row of destination ``i`` (its type ``types[i]``, its row count from ``row_base``)."""
    t = types[i]
    return row_start[t] + (nodes[i] - type_offsets[t]) * (row_base[i + 1] - row_base[i])


@numba.njit(parallel=True, cache=True, nogil=True)
def typed_counts(rel_indptr, type_offsets, row_start, rel_start, rel_ids, nodes, fanouts, replace):
    """One hop's shape over destinations ``nodes``.

    Returns ``(types, row_base, counts, offsets)``: int64 [n] each destination's type; int64 [n + 1] where its
    typed rows start in ``counts`` (prefix sums of its type's row count); int64 [row_base[n]] the draws of every
    destination's every row, in row order (relation-id order within a type); int64 [n + 1] the prefix sums of each
    destination's draws over all its rows (the hop's CSC indptr)."""
    n = nodes.shape[0]
    types = np.empty(n, dtype=np.int64)
    row_base = np.empty(n + 1, dtype=np.int64)
    row_base[0] = 0
    for i in numba.prange(n):
        t = _type_of(nodes[i], type_offsets)
        types[i] = t
        row_base[i + 1] = rel_start[t + 1] - rel_start[t]
    for i in range(n):
        row_base[i + 1] += row_base[i]
    counts = np.empty(row_base[n], dtype=np.int64)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        if i + PREFETCH_DISTANCE < n:
            ahead = nodes[i + PREFETCH_DISTANCE]
            t_ahead = _type_of(ahead, type_offsets)
            k_ahead = rel_start[t_ahead + 1] - rel_start[t_ahead]
            prefetch(rel_indptr, row_start[t_ahead] + (ahead - type_offsets[t_ahead]) * k_ahead)
        t = types[i]
        k = row_base[i + 1] - row_base[i]
        first = row_start[t] + (nodes[i] - type_offsets[t]) * k
        total = 0
        for j in range(k):
            row = first + j
            got = num_chosen(rel_indptr[row + 1] - rel_indptr[row], fanouts[rel_ids[rel_start[t] + j]], replace)
            counts[row_base[i] + j] = got
            total += got
        offsets[i + 1] = total
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return types, row_base, counts, offsets


@numba.njit(inline="always")
def _choose_range(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, nodes, types, row_base, counts,
                  offsets, lo, hi, fanouts, replace, key, hop, out, marks):
    """Draw destinations ``lo .. hi - 1`` into their CSC slots of ``out``: per row, relation ``r``'s fanout from
    the stream ``(key, hop + r * RELATION_SLOT, v)``; ``marks``: the calling thread's Floyd bitmap
    (:func:`choose_neighbors_marked`). As the homogeneous kernel's ``prefetch_ahead``, the row
    pointers of a destination further ahead and the first cache lines of each row of one a few ahead are
    prefetched, so that their misses overlap."""
    ids_per_line = CACHE_LINE_BYTES // indices.itemsize
    for i in range(lo, hi):
        if i + 2 * PREFETCH_DISTANCE < hi:
            prefetch(rel_indptr, _first_row(i + 2 * PREFETCH_DISTANCE, nodes, types, row_base, row_start, type_offsets))
        if i + PREFETCH_DISTANCE < hi:
            ahead = i + PREFETCH_DISTANCE
            first_ahead = _first_row(ahead, nodes, types, row_base, row_start, type_offsets)
            for row in range(first_ahead, first_ahead + row_base[ahead + 1] - row_base[ahead]):
                start, end = rel_indptr[row], rel_indptr[row + 1]
                for line in range(PREFETCH_LINES):
                    if start + line * ids_per_line < end:
                        prefetch(indices, start + line * ids_per_line)
        v = nodes[i]
        t = types[i]
        k = row_base[i + 1] - row_base[i]
        first = row_start[t] + (v - type_offsets[t]) * k
        at = offsets[i]
        for j in range(k):
            r = rel_ids[rel_start[t] + j]
            choose_neighbors_marked(rel_indptr, indices, first + j, v, fanouts[r], replace, key,
                                    hop + r * RELATION_SLOT, out, at, marks)
            at += counts[row_base[i] + j]


@numba.njit(parallel=True, cache=True, nogil=True)
def typed_choose_all(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, nodes, types, row_base, counts,
                     offsets, fanouts, replace, key, hop, num_tasks):
    """int64 [offsets[-1]]: the chosen global sources of every destination, in CSC order; ``num_tasks`` threads
    claim pieces of destinations from a shared counter, each with its own Floyd bitmap."""
    out = np.empty(offsets[-1], dtype=np.int64)
    n = nodes.shape[0]
    marks = np.zeros((num_tasks, MARK_WORDS), dtype=np.uint64)
    claim = np.zeros(1, dtype=np.int64)
    for task in numba.prange(num_tasks):
        while True:
            lo = atomic_fetch_add(claim, 0, PIECE_NODES)
            if lo >= n:
                break
            _choose_range(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, nodes, types, row_base,
                          counts, offsets, lo, min(lo + PIECE_NODES, n), fanouts, replace, key, hop, out, marks[task])
    return out


@numba.njit(cache=True, nogil=True)
def relation_layout(types, row_base, counts, rel_start, rel_ids):
    """Where one hop's edges go in one CSC per relation, from the per-row counts of :func:`typed_counts`.

    Returns ``(by_type, type_bounds, indptrs, indptr_bounds, edge_bounds, row_slot)``, int64 each: the destinations
    ordered by type, ascending within one (type ``t``'s are ``by_type[type_bounds[t]:type_bounds[t + 1]]``);
    relation ``r``'s indptr over the destinations of its destination type,
    ``indptrs[indptr_bounds[r]:indptr_bounds[r + 1]]``; where its edges lie in the hop's relation-major edge array,
    ``[edge_bounds[r], edge_bounds[r + 1])``; and where each typed row's draws start in that array (``row_slot``,
    indexed as ``counts``). O(destinations x rows per destination), nothing per edge."""
    n = types.shape[0]
    num_types = rel_start.shape[0] - 1
    num_relations = rel_ids.shape[0]  # every relation is a row of its destination type
    type_bounds = np.zeros(num_types + 1, dtype=np.int64)
    for i in range(n):
        type_bounds[types[i] + 1] += 1
    for t in range(num_types):
        type_bounds[t + 1] += type_bounds[t]
    by_type = np.empty(n, dtype=np.int64)
    cursor = type_bounds[:num_types].copy()
    for i in range(n):
        by_type[cursor[types[i]]] = i
        cursor[types[i]] += 1
    rel_type = np.empty(num_relations, dtype=np.int64)  # relation -> its destination type and its row there
    rel_row = np.empty(num_relations, dtype=np.int64)
    for t in range(num_types):
        for j in range(rel_start[t], rel_start[t + 1]):
            rel_type[rel_ids[j]] = t
            rel_row[rel_ids[j]] = j - rel_start[t]
    indptr_bounds = np.zeros(num_relations + 1, dtype=np.int64)
    for r in range(num_relations):
        t = rel_type[r]
        indptr_bounds[r + 1] = indptr_bounds[r] + type_bounds[t + 1] - type_bounds[t] + 1
    indptrs = np.empty(indptr_bounds[num_relations], dtype=np.int64)
    edge_bounds = np.zeros(num_relations + 1, dtype=np.int64)
    row_slot = np.empty(counts.shape[0], dtype=np.int64)
    for r in range(num_relations):
        t, j, base = rel_type[r], rel_row[r], indptr_bounds[r]
        indptrs[base] = 0
        for q in range(type_bounds[t + 1] - type_bounds[t]):
            x = row_base[by_type[type_bounds[t] + q]] + j
            row_slot[x] = edge_bounds[r] + indptrs[base + q]
            indptrs[base + q + 1] = indptrs[base + q] + counts[x]
        edge_bounds[r + 1] = edge_bounds[r] + indptrs[indptr_bounds[r + 1] - 1]
    return by_type, type_bounds, indptrs, indptr_bounds, edge_bounds, row_slot


@numba.njit(cache=True, nogil=True)
def _relabel_rows(chosen, lo, hi, offsets, row_base, counts, row_slot, node_map, base, nodes, num_known, out):
    """Relabel the draws of destinations ``lo .. hi - 1`` (``chosen``, in CSC order) to local ids
    (:func:`~gnnscale.sampling.fused.relabel_into` with ``base``), new nodes appended to ``nodes`` in order of first
    appearance, each row's written at its ``row_slot`` in ``out`` (relation-major). Returns the new number of known
    nodes. The edge order is the homogeneous kernel's ``relabel_range``'s, so are the local ids; only where they are
    written differs."""
    n = num_known
    end = offsets[hi]
    e = offsets[lo]
    for x in range(row_base[lo], row_base[hi]):
        n = relabel_into(chosen, e, e + counts[x], node_map, base, nodes, n, out, row_slot[x], end)
        e += counts[x]
    return n


@numba.njit(parallel=True, cache=True, nogil=True)
def typed_choose_and_relabel(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, nodes, num_dst, types,
                             row_base, counts, offsets, row_slot, chunk_starts, fanouts, replace, key, hop, node_map,
                             base, num_known, num_tasks, chosen):
    """Draw every destination's neighbors and relabel them into the hop's relation-major edge array
    (:func:`relation_layout`): (local ids [offsets[-1]], new number of known nodes). ``nodes`` must have room for
    ``num_known + offsets[-1]`` entries; ``chosen``, the draws' buffer, for ``offsets[-1]`` (an integer type that
    holds a node id and a position in a row). Stage s relabels chunk s - 1 (thread 0, in edge order) while all
    threads draw chunk s, as the homogeneous ``_choose_and_relabel``; the relabel's writes are the split by
    relation, so no pass of its own."""
    out = np.empty(offsets[-1], dtype=np.int64)
    dst_nodes = nodes[:num_dst]  # read-only here; relabel appends beyond num_known >= num_dst
    num_chunks = chunk_starts.shape[0] - 1
    claim = np.zeros(1, dtype=np.int64)
    known = np.full(1, num_known, dtype=np.int64)
    marks = np.zeros((num_tasks, MARK_WORDS), dtype=np.uint64)
    for stage in range(num_chunks + 1):
        claim[0] = 0
        for task in numba.prange(num_tasks):
            if task == 0 and stage > 0:
                known[0] = _relabel_rows(chosen, chunk_starts[stage - 1], chunk_starts[stage], offsets, row_base,
                                         counts, row_slot, node_map, base, nodes, known[0], out)
            if stage < num_chunks:
                lo, hi = chunk_starts[stage], chunk_starts[stage + 1]
                while True:
                    start = lo + atomic_fetch_add(claim, 0, PIECE_NODES)
                    if start >= hi:
                        break
                    _choose_range(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, dst_nodes, types,
                                  row_base, counts, offsets, start, min(start + PIECE_NODES, hi), fanouts, replace,
                                  key, hop, chosen, marks[task])
    return out, known[0]
