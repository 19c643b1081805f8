"""The two-step reference sampler, written the way DGL's ``sample_neighbors`` + ``to_block`` work.

Per hop: (1) sample into a COO edge list (global source, global destination); (2) ``to_block``:
a unique pass over destinations and sources to build the local numbering (destinations first, then
new sources in order of first appearance), then relabel both COO rows; (3) convert COO to CSC by a
stable sort on the destination. Each step writes an intermediate that the next reads back: the
memory traffic that fused sampling removes. It shares the neighbor choice with the fused kernel, so
for the same key both return identical blocks.

Below it, :func:`dgs_reference_rows`: the DGS kernel's neighbor choice (gnnscale/sampling/dgs.py)
written plainly in Python, which the tests compare with the kernel bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from gnnscale.keys import GOLDEN, MASK64, mix64_py, node_stream_py
from gnnscale.sampling.choose import ALL_NEIGHBORS, choose_all, count_and_offsets
from gnnscale.sampling.keys import DGS_EXACT_DRAW, DGS_QUOTA_DRAW, DGS_TRY_DRAW


def sample_neighbors_coo(indptr, indices, seeds, fanout, key, hop, replace) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: COO ``(src, dst)`` global ids of the chosen in-edges of every seed."""
    offsets = count_and_offsets(indptr, seeds, 0, fanout, replace)
    src = choose_all(indptr, indices, seeds, offsets, fanout, replace, key, hop)
    dst = np.repeat(seeds, np.diff(offsets))
    return src, dst


def to_block_coo(src: np.ndarray, dst: np.ndarray, dst_nodes: np.ndarray):
    """Step 2: local numbering (``dst_nodes`` first, then new sources by first appearance) and relabel."""
    both = np.concatenate([dst_nodes, src])
    unique, first_pos = np.unique(both, return_index=True)
    order = np.argsort(first_pos, kind="stable")
    src_nodes = both[first_pos[order]]
    local_of_unique = np.empty_like(order)
    local_of_unique[order] = np.arange(order.shape[0])
    local_src = local_of_unique[np.searchsorted(unique, src)]
    local_dst = local_of_unique[np.searchsorted(unique, dst)]
    return src_nodes, local_src, local_dst


def coo_to_csc(local_src: np.ndarray, local_dst: np.ndarray, num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 3: CSC ``(indptr, indices)`` over destinations; a stable sort keeps each node's edge order."""
    perm = np.argsort(local_dst, kind="stable")
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_dst, minlength=num_dst), out=indptr[1:])
    return indptr, local_src[perm].astype(np.int64, copy=False)


def two_step_hops(indptr, indices, seeds, fanouts, key, replace):
    """Same contract as :func:`gnnscale.sampling.fused.fused_hops`, the two-step way."""
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise ValueError("seeds: expected unique node ids, found duplicates")
    dst_nodes = seeds
    hops = []
    for hop, fanout in enumerate(fanouts):
        src, dst = sample_neighbors_coo(indptr, indices, dst_nodes, fanout, key, hop, replace)
        src_nodes, local_src, local_dst = to_block_coo(src, dst, dst_nodes)
        block_indptr, block_indices = coo_to_csc(local_src, local_dst, dst_nodes.shape[0])
        hops.append((block_indptr, block_indices, dst_nodes.shape[0], src_nodes.shape[0]))
        dst_nodes = src_nodes
    return dst_nodes, hops


# --- DGS: the node-sampling kernel's choice, written plainly -----------------------------------------
#
# gnnscale.sampling.dgs draws each destination's neighbors in O(draws) with index arithmetic on sorted
# rows, numba and scratch buffers. What follows is the same choice in plain Python, with Python's own
# integers and floats, from the rules its docstring states: lists of the local and remote neighbors,
# the same counter-based draws (keys.py's SplitMix64 finaliser, at the same draw indices), the same
# quota, Floyd draws, rejection tries and exact inversion. The tests compare the two bit for bit; the
# law itself (successive sampling) is tested statistically against exact probabilities.


def _draw64(state: int, draw: int) -> int:
    """The ``draw``-th 64-bit value of the stream ``state``."""
    return mix64_py((state + (draw + 1) * GOLDEN) & MASK64)


def _below(state: int, draw: int, bound: int) -> int:
    """keys.uniform_below: the top 32 bits, multiply-shift into [0, bound)."""
    return ((_draw64(state, draw) >> 32) * bound) >> 32


def _unit(state: int, draw: int) -> float:
    """A uniform float in (0, 1]: the top 53 bits, centred."""
    return (float(_draw64(state, draw) >> 11) + 0.5) * (1.0 / 9007199254740992.0)


def _floyd(state: int, k: int, n: int) -> list[int]:
    """Floyd's uniform k-subset of range(n), in the order its draws make it (choose.floyd_subset)."""
    chosen: list[int] = []
    for c in range(k):
        j = n - k + c
        t = _below(state, c, j + 1)
        chosen.append(j if t in chosen else t)
    return chosen


def remote_draws(remote_weights: list[float], m: int, replace: bool, state: int,
                 weight_max: float) -> tuple[list[int], int]:
    """``m`` indices into ``remote_weights``, w-proportional (successive sampling without replacement),
    in the order drawn, and how many of them rejection drew: rejection tries while ``replace or 2 m < R``
    and within ``R // 2 + 2 m`` tries, then exact inversion."""
    r = len(remote_weights)
    drawn: list[int] = []
    if replace or 2 * m < r:
        for t in range(r // 2 + 2 * m):
            if len(drawn) == m:
                break
            x = _draw64(state, DGS_TRY_DRAW + t)
            j = ((x >> 32) * r) >> 32
            u = (float(x & 0xFFFFFFFF) + 0.5) * (1.0 / 4294967296.0)
            if (replace or j not in drawn) and u * weight_max < remote_weights[j]:
                drawn.append(j)
    by_rejection = len(drawn)
    left = list(remote_weights)
    total = 0.0
    for w in left:
        total += w  # in order, one addition at a time (Python's sum() compensates since 3.12)
    if not replace:
        for j in drawn:
            total -= left[j]
            left[j] = 0.0
    for q in range(len(drawn), m):
        target = _unit(state, DGS_EXACT_DRAW + q) * total
        acc, pick = 0.0, 0
        for j, w in enumerate(left):
            if w > 0.0:
                pick = j
                acc += w
                if acc > target:
                    break
        drawn.append(pick)
        if not replace:
            total -= left[pick]
            left[pick] = 0.0
    return drawn, by_rejection


def dgs_reference_choice(row: list[int], v: int, fanout: int, replace: bool, key: int, hop: int, lo: int, hi: int,
                         node_cluster, cluster_weight, epsilon: float) -> list[int]:
    """The neighbors (global ids) the DGS kernel chooses for node ``v`` whose in-neighbors are ``row``."""
    d = len(row)
    if d == 0:
        return []
    if fanout == ALL_NEIGHBORS or (not replace and d <= fanout):
        return list(row)
    local = [p for p in range(d) if lo <= row[p] < hi]
    remote = [p for p in range(d) if not lo <= row[p] < hi]
    state = node_stream_py(key, hop, v)
    target = fanout * (len(local) / d + epsilon)
    k = math.floor(target)
    if _unit(state, DGS_QUOTA_DRAW) < target - k:
        k += 1
    if replace:
        low, high = (0 if remote else fanout), (fanout if local else 0)
    else:
        low, high = max(0, fanout - len(remote)), min(fanout, len(local))
    k = min(max(k, low), high)
    if replace:
        ranks = [_below(state, q, len(local)) for q in range(k)]
    else:
        ranks = _floyd(state, k, len(local))
    chosen = [row[local[r]] for r in ranks]
    m = fanout - k
    if m:
        weights = [float(cluster_weight[node_cluster[row[p]]]) for p in remote]
        weight_max = float(max(cluster_weight))
        drawn, _ = remote_draws(weights, m, replace, state, weight_max)
        chosen += [row[remote[j]] for j in drawn]
    return chosen


def dgs_reference_rows(indptr, indices, first_id: int, nodes, fanout: int, replace: bool, key: int, hop: int,
                       policy) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`gnnscale.sampling.dgs.sample_rows` returns, one node at a time in Python (slow: for tests)."""
    lists = []
    for v in (int(x) for x in nodes):
        r = v - first_id
        row = [int(u) for u in indices[indptr[r]:indptr[r + 1]]]
        lists.append(dgs_reference_choice(row, v, fanout, bool(replace), int(key), hop, policy.local_lo,
                                          policy.local_hi, policy.node_cluster, policy.cluster_weight,
                                          float(policy.epsilon)))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in lists], out=offsets[1:])
    chosen = np.array([u for c in lists for u in c], dtype=np.int64)
    return offsets, chosen
