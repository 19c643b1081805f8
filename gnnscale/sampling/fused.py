"""The fused sampler (FastSample, Algorithm 1): each hop is sampled straight into a CSC block.

Per hop: (1) count min(fanout, degree) for every destination in parallel and prefix-sum the counts,
which *is* the block's indptr; (2) choose neighbors in parallel straight into their CSC slots;
(3) one serial pass relabels the chosen global ids to local ids through a mapping array. No COO
intermediate, no unique/sort pass, no COO-to-CSC conversion.

The mapping array (global id -> local id, -1 when unseen) lives in a :class:`SamplerWorkspace` that is
reused across batches; only the entries a batch touched are reset, so a batch costs O(sampled edges),
not O(num_nodes). It is shared by all hops: the destination nodes of hop h+1 are the source nodes of
hop h in the same order, so local ids only ever grow and one node list holds every block's sources.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.sampling.choose import choose_all, count_and_offsets


class SamplerWorkspace:
    """The reusable O(num_nodes) mapping array of the fused sampler. Not safe to share between threads."""

    def __init__(self, num_nodes: int) -> None:
        self.node_map = np.full(num_nodes, -1, dtype=np.int64)

    @property
    def num_nodes(self) -> int:
        return int(self.node_map.shape[0])


@numba.njit(cache=True)
def _claim_seeds(seeds, node_map):
    """Give seeds local ids 0..len-1. Returns -1, or the position of the first duplicated seed."""
    for i in range(seeds.shape[0]):
        v = seeds[i]
        if node_map[v] >= 0:
            for j in range(i):
                node_map[seeds[j]] = -1
            return i
        node_map[v] = i
    return -1


@numba.njit(cache=True)
def _relabel(chosen, node_map, nodes, num_known):
    """Turn ``chosen`` global ids into local ids in place; new nodes are appended to ``nodes`` in order
    of first appearance. Returns the new number of known nodes."""
    n = num_known
    for e in range(chosen.shape[0]):
        v = chosen[e]
        local = node_map[v]
        if local < 0:
            local = n
            node_map[v] = n
            nodes[n] = v
            n += 1
        chosen[e] = local
    return n


@numba.njit(parallel=True, cache=True)
def _release(nodes, node_map):
    for i in numba.prange(nodes.shape[0]):
        node_map[nodes[i]] = -1


def fused_hops(
    indptr: np.ndarray,
    indices: np.ndarray,
    seeds: np.ndarray,
    fanouts: tuple[int, ...],
    key: int,
    replace: bool,
    workspace: SamplerWorkspace,
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, int, int]]]:
    """Sample every hop. Returns the node list (int64, seeds first) and, per hop from the seeds
    outwards, ``(indptr, local_indices, num_dst, num_src)``; hop h's sources are ``nodes[:num_src]``.

    Inputs are assumed validated (see :func:`gnnscale.sampling.sample_blocks`).
    """
    node_map = workspace.node_map
    duplicate = _claim_seeds(seeds, node_map)
    if duplicate >= 0:
        raise ValueError(f"seeds: expected unique node ids, node {int(seeds[duplicate])} appears twice")
    nodes = np.empty(max(16, 2 * seeds.shape[0]), dtype=np.int64)
    nodes[: seeds.shape[0]] = seeds
    num_known = seeds.shape[0]
    hops = []
    try:
        for hop, fanout in enumerate(fanouts):
            num_dst = num_known
            offsets = count_and_offsets(indptr, nodes[:num_dst], fanout, replace)
            chosen = choose_all(indptr, indices, nodes[:num_dst], offsets, fanout, replace, key, hop)
            if nodes.shape[0] < num_known + chosen.shape[0]:
                grown = np.empty(max(2 * nodes.shape[0], num_known + chosen.shape[0]), dtype=np.int64)
                grown[:num_known] = nodes[:num_known]
                nodes = grown
            num_known = _relabel(chosen, node_map, nodes, num_known)
            hops.append((offsets, chosen, num_dst, num_known))
    finally:
        _release(nodes[:num_known], node_map)
    return nodes[:num_known], hops
