"""The fused sampler (FastSample, Algorithm 1): each hop is sampled straight into a CSC block.

Per hop: (1) count min(fanout, degree) for every destination in parallel and prefix-sum the counts,
which *is* the block's indptr; (2) choose neighbors in parallel straight into their CSC slots;
(3) relabel the chosen global ids to local ids through a mapping array, in edge order, so that new
nodes get ids by first appearance whatever the thread count. No COO intermediate, no unique/sort
pass, no COO-to-CSC conversion.

(2) and (3) run as a pipeline over chunks of destinations: while thread 0 relabels chunk k (the
one serial step), all threads choose chunk k + 1, claiming pieces of it from a shared counter.

The mapping array (global id -> local id, -1 when unseen) lives in a :class:`SamplerWorkspace` that is
reused across batches; only the entries a batch touched are reset, so a batch costs O(sampled edges),
not O(num_nodes). It is shared by all hops: the destination nodes of hop h+1 are the source nodes of
hop h in the same order, so local ids only ever grow and one node list holds every block's sources.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np

from gnnscale.graph.csc import index_dtype
from gnnscale.intrinsics import atomic_fetch_add, prefetch
# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import PIECE_NODES, choose_range, count_and_offsets

RELABEL_PREFETCH = 16  # edges ahead: the mapping-array lookups of the relabel pass are random reads
CHUNK_EDGES = 32768  # edges per pipeline stage: relabelling one overlaps choosing the next


class SamplerWorkspace:
    """The reusable O(num_nodes) mapping array of the fused sampler. Not safe to share between threads."""

    def __init__(self, num_nodes: int) -> None:
        # int32 when ids fit: half the footprint keeps more of it in cache for the random lookups.
        self.node_map = np.full(num_nodes, -1, dtype=index_dtype(num_nodes))

    @property
    def num_nodes(self) -> int:
        return int(self.node_map.shape[0])


@numba.njit(cache=True, nogil=True)
def claim_seeds(seeds, node_map, base):
    """Give seeds local ids 0..len-1 (mapping entries ``base + i``; an entry below ``base`` maps nothing, see
    :func:`relabel_into`). Returns -1, or the position of the first duplicated seed (the entries set are reset)."""
    for i in range(seeds.shape[0]):
        v = seeds[i]
        if node_map[v] >= base:
            for j in range(i):
                node_map[seeds[j]] = -1
            return i
        node_map[v] = base + i
    return -1


@numba.njit(inline="always")
def relabel_into(chosen, lo, hi, node_map, base, nodes, num_known, out, at, prefetch_end):
    """Write the local ids of global ids ``chosen[lo:hi]`` to ``out[at:at + hi - lo]`` (``out`` may be ``chosen``
    itself, ``at`` then ``lo``); new nodes get the next ids, in order of first appearance, and are appended to
    ``nodes``. Returns the new number of known nodes. Node ``v``'s entry maps it to ``node_map[v] - base`` when that
    is at least 0: with ``base`` 0 the plain mapping array (-1: unseen); a sampler that raises ``base`` past its last
    batch's ids starts the next batch with every entry unseen, without resetting any. Lookups are prefetched
    ``RELABEL_PREFETCH`` ids ahead, up to ``chosen[prefetch_end - 1]``.

    One call per range, not per id: a helper taking the arrays per id costs numba a reference count update per
    call (the relabel ran at half speed)."""
    n = num_known
    for e in range(lo, hi):
        if e + RELABEL_PREFETCH < prefetch_end:
            prefetch(node_map, chosen[e + RELABEL_PREFETCH])
        v = chosen[e]
        local = node_map[v] - base
        if local < 0:
            local = n
            node_map[v] = base + n
            nodes[n] = v
            n += 1
        out[at + e - lo] = local
    return n


@numba.njit(cache=True, nogil=True)
def relabel_range(chosen, lo, hi, node_map, nodes, num_known):
    """Turn ``chosen[lo:hi]`` global ids into local ids in place; new nodes are appended to ``nodes``
    in order of first appearance. Returns the new number of known nodes."""
    return relabel_into(chosen, lo, hi, node_map, 0, nodes, num_known, chosen, lo, hi)


@numba.njit(parallel=True, cache=True, nogil=True)
def _choose_and_relabel(indptr, indices, nodes, num_dst, offsets, chunk_starts, fanout, replace, key, hop,
                        node_map, num_known, num_tasks):
    """Choose every destination's neighbors and relabel them; returns (local ids [offsets[-1]], new
    number of known nodes). ``nodes`` must have room for ``num_known + offsets[-1]`` entries.

    Stage s relabels chunk s - 1 (thread 0, serial, in edge order) while all threads choose chunk s;
    the end of each parallel stage is the barrier that makes chunk s ready for relabelling."""
    chosen = np.empty(offsets[-1], dtype=np.int64)
    dst_nodes = nodes[:num_dst]  # read-only here; relabel appends beyond num_known >= num_dst
    num_chunks = chunk_starts.shape[0] - 1
    claim = np.zeros(1, dtype=np.int64)
    known = np.full(1, num_known, dtype=np.int64)
    for stage in range(num_chunks + 1):
        claim[0] = 0
        for task in numba.prange(num_tasks):
            if task == 0 and stage > 0:
                known[0] = relabel_range(chosen, offsets[chunk_starts[stage - 1]], offsets[chunk_starts[stage]],
                                    node_map, nodes, known[0])
            if stage < num_chunks:
                lo, hi = chunk_starts[stage], chunk_starts[stage + 1]
                while True:
                    start = lo + atomic_fetch_add(claim, 0, PIECE_NODES)
                    if start >= hi:
                        break
                    choose_range(indptr, indices, dst_nodes, offsets, start, min(start + PIECE_NODES, hi), fanout,
                                 replace, key, hop, chosen)
    return chosen, known[0]


@numba.njit(parallel=True, cache=True, nogil=True)
def _release(nodes, node_map):
    for i in numba.prange(nodes.shape[0]):
        node_map[nodes[i]] = -1


def pipeline_chunks(offsets: np.ndarray, num_threads: int) -> np.ndarray:
    """int64 [num_chunks + 1]: destination indices cutting the hop into chunks of ~CHUNK_EDGES edges.

    One thread has nothing to overlap, and interleaving the two passes cost it 10% (the ablation in
    benchmarks/README.md): then the hop is one chunk, i.e. choose everything, then relabel."""
    if num_threads == 1:
        return np.array([0, offsets.shape[0] - 1], dtype=np.int64)
    cuts = np.searchsorted(offsets, np.arange(CHUNK_EDGES, offsets[-1], CHUNK_EDGES), side="left")
    return np.unique(np.concatenate([[0], cuts, [offsets.shape[0] - 1]])).astype(np.int64)


def grow_nodes(nodes: np.ndarray, num_known: int, needed: int) -> np.ndarray:
    """``nodes``, or a larger copy holding its first ``num_known`` entries, with room for ``needed``."""
    if nodes.shape[0] >= needed:
        return nodes
    grown = np.empty(max(2 * nodes.shape[0], needed), dtype=np.int64)
    grown[:num_known] = nodes[:num_known]
    return grown


def relabel_all(chosen: np.ndarray, node_map: np.ndarray, nodes: np.ndarray, num_known: int) -> int:
    """The relabel over all of ``chosen`` at once (in place; ``nodes`` must have room for the new ones)."""
    return int(relabel_range(chosen, 0, chosen.shape[0], node_map, nodes, num_known))


# sample_hop(nodes, num_dst, num_known, fanout, hop) -> (indptr, local_indices, nodes, num_known):
# samples the destinations nodes[:num_dst], appends new sources to nodes (grown if needed) and
# returns the hop's CSC with local source ids.
HopSampler = Callable[[np.ndarray, int, int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray, int]]


def claimed_nodes(seeds: np.ndarray, node_map: np.ndarray, base: int) -> np.ndarray:
    """A batch's node list (int64, the seeds first, room for as many again) with the seeds claimed in ``node_map``
    above ``base`` (:func:`claim_seeds`); ValueError naming a seed that appears twice."""
    duplicate = claim_seeds(seeds, node_map, base)
    if duplicate >= 0:
        raise ValueError(f"seeds: expected unique node ids, node {int(seeds[duplicate])} appears twice")
    nodes = np.empty(max(16, 2 * seeds.shape[0]), dtype=np.int64)
    nodes[: seeds.shape[0]] = seeds
    return nodes


def expand_hops(seeds: np.ndarray, fanouts: tuple[int, ...], workspace: SamplerWorkspace,
                sample_hop: HopSampler) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, int, int]]]:
    """Run ``sample_hop`` for every hop from the seeds outwards, sharing one mapping array.

    Returns the node list (int64, seeds first) and, per hop, ``(indptr, local_indices, num_dst,
    num_src)``; hop h's sources are ``nodes[:num_src]``. The mapping entries the batch touched are
    reset even when a hop raises, so the workspace stays reusable.
    """
    node_map = workspace.node_map
    nodes = claimed_nodes(seeds, node_map, 0)
    num_known = seeds.shape[0]
    hops = []
    try:
        for hop, fanout in enumerate(fanouts):
            num_dst = num_known
            indptr, local, nodes, num_known = sample_hop(nodes, num_dst, num_known, fanout, hop)
            hops.append((indptr, local, num_dst, num_known))
    finally:
        _release(nodes[:num_known], node_map)
    return nodes[:num_known], hops


def fused_hops(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, fanouts: tuple[int, ...], key: int,
               replace: bool, workspace: SamplerWorkspace):
    """Sample every hop with the fused kernel; same result as :func:`expand_hops`.

    Inputs are assumed validated (see :func:`gnnscale.sampling.sample_blocks`).
    """

    def sample_hop(nodes, num_dst, num_known, fanout, hop):
        offsets = count_and_offsets(indptr, nodes[:num_dst], 0, fanout, replace)
        nodes = grow_nodes(nodes, num_known, num_known + offsets[-1])
        threads = numba.get_num_threads()
        local, num_known = _choose_and_relabel(indptr, indices, nodes, num_dst, offsets,
                                               pipeline_chunks(offsets, threads), fanout, replace, key, hop,
                                               workspace.node_map, num_known, threads)
        return offsets, local, nodes, int(num_known)

    return expand_hops(seeds, fanouts, workspace, sample_hop)
