"""Explanation-guided node sampling (DGS, Wan et al., section III-C): prefer local neighbors, and draw
remote ones by their explained importance.

For every destination node ``v`` the number of sampled neighbors is the plain sampler's,
``n = min(fanout, degree)`` (``fanout`` with replacement): the block has the same shape. What changes
is which ones:

* the in-neighbors of ``v`` split into *local* ones (owned by the requesting worker, ids in
  ``[local_lo, local_hi)``) and ``R`` *remote* ones, each list in row order;
* the local quota is the plain sampler's expected local count plus ``epsilon * n``:
  ``t = n * (num_local / degree + epsilon)``, rounded stochastically (so its mean is exactly ``t``)
  and clamped to what the neighborhood allows; the remote quota is the rest, ``m = n - k_local``;
* local neighbors are a uniform ``k_local``-subset (Floyd's algorithm over the local ranks, as the plain
  sampler), or ``k_local`` uniform draws with replacement;
* remote neighbors are drawn with probability proportional to their weight
  ``w = cluster_weight[node_cluster[u]]`` (the node mask of their super-node): successive sampling
  without replacement (the first pick ``w``-proportional, every next one ``w``-proportional among the
  rest: the law of Efraimidis-Spirakis keys), or ``m`` independent ``w``-proportional draws with
  replacement.

When ``degree <= fanout`` without replacement every neighbor is taken, as in plain sampling.

The work per destination is proportional to its draws, not to its degree:

* **split**: on rows sorted by source id (what :func:`gnnscale.graph.csc.csc_from_coo` and partitioning
  produce) the local neighbors are one contiguous run, found by two binary searches (none when the
  row's first and last ids show it all local or all remote); the ``r``-th local neighbor is at
  position ``first + r`` and the ``j``-th remote one at ``j`` or ``j + num_local``. Other rows are
  split by one pass into a scratch list (``O(degree)``), with the same result.
* **rejection**, the remote draws in the common case: a try draws a uniform remote index and accepts
  it with probability ``w / w_max`` (``w_max``: the largest cluster weight); without replacement it
  also rejects an index already drawn. An accepted try is an exact ``w``-proportional draw among the
  candidates, and how many tries it took is independent of which one it accepts. Expected tries per
  draw: ``w_max`` over the mean weight of the candidates (``w_max / mean`` is 1.6-2.0 for the masks
  of a run on the ``hard`` preset, whose weights span 0.04-0.96).
* **inversion**, exact and ``O(R)`` per draw: the remote weights into a scratch list (those drawn
  zeroed), a uniform times their total, the first index whose cumulative weight exceeds it. It makes
  every draw of a destination when rejection would mostly hit drawn ones (without replacement,
  ``2 m >= R``: then ``R <= 2 fanout``), and the draws left when its tries run out (``R // 2 + 2 m``
  tries: weights too skewed for rejection). Switching keeps the law exact, whatever the number of
  tries it switches at: each accepted neighbor is independent of the tries it took, and inversion
  draws the rest from the same state (docs/dgs.md).

Every random number is counter-based (:mod:`gnnscale.keys`): a function of ``(key, hop, v)``
and a draw index (the Floyd draw, the quota, the try, the inversion draw: disjoint ranges of one
stream), so the same key and the same policy give the same blocks whatever the thread count, and on
whichever worker samples ``v`` (the vanilla layout's owners sample remote hops with the requester's
key *and policy*). :func:`gnnscale.sampling.reference.dgs_reference_rows` is the same choice written
plainly in Python on lists; the tests compare the two bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.intrinsics import prefetch
from gnnscale.keys import GOLDEN, mix64, node_stream, uniform_below
# gnnscale.sampling's __init__ does not import this module, so importing the package here is no cycle.
from gnnscale.sampling import blocks_from_hops, check_fanouts, check_key, check_seeds
from gnnscale.sampling.block import Block
# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import ALL_NEIGHBORS, PIECE_NODES, PREFETCH_DISTANCE, count_and_offsets, floyd_subset
from gnnscale.sampling.fused import SamplerWorkspace, expand_hops, grow_nodes, relabel_all
from gnnscale.sampling.keys import DGS_EXACT_DRAW, DGS_QUOTA_DRAW, DGS_TRY_DRAW


@dataclass(frozen=True, slots=True, kw_only=True)
class DGSPolicy:
    """What the masks say, in the form the kernel reads.

    Args:
        local_lo, local_hi: the requesting worker's nodes, global ids ``[local_lo, local_hi)``.
        node_cluster: int32 [num_nodes], the super-node (cluster) of every node, the same on every worker.
        cluster_weight: float64 [num_clusters], finite and > 0: the importance of each cluster's nodes
            as remote neighbors (the requester's node mask; the weights of its own clusters do not enter the
            law, only the bound ``max(cluster_weight)`` of the rejection tries).
        epsilon: in [0, 1], the share of each destination's sample count moved from remote to local
            neighbors (DGS's deviation; the issue's default 0.1).
    """

    local_lo: int
    local_hi: int
    node_cluster: np.ndarray
    cluster_weight: np.ndarray
    epsilon: float

    def __post_init__(self) -> None:
        for name in ("local_lo", "local_hi"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        nc, cw = self.node_cluster, self.cluster_weight
        if not isinstance(nc, np.ndarray) or nc.dtype != np.int32 or nc.ndim != 1:
            raise TypeError(f"node_cluster: expected a 1-D int32 numpy array, got {_describe(nc)}")
        if not isinstance(cw, np.ndarray) or cw.dtype != np.float64 or cw.ndim != 1 or cw.shape[0] == 0:
            raise TypeError(f"cluster_weight: expected a non-empty 1-D float64 numpy array, got {_describe(cw)}")
        if not 0 <= self.local_lo <= self.local_hi <= nc.shape[0]:
            raise ValueError(f"local_lo, local_hi: expected 0 <= local_lo <= local_hi <= num_nodes = {nc.shape[0]}, "
                             f"got [{self.local_lo}, {self.local_hi})")
        if not np.all(np.isfinite(cw)) or not np.all(cw > 0):
            raise ValueError("cluster_weight: expected finite weights > 0 (remote neighbors are drawn in "
                             f"proportion to them), got range [{cw.min()}, {cw.max()}]")
        if nc.shape[0] and (int(nc.min()) < 0 or int(nc.max()) >= cw.shape[0]):
            raise ValueError(f"node_cluster: expected cluster ids in [0, len(cluster_weight) = {cw.shape[0]}), "
                             f"got range [{int(nc.min())}, {int(nc.max())}]")
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)) \
                or not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon: expected a number in [0, 1] (--dgs-epsilon), got {self.epsilon!r}")

    @property
    def num_nodes(self) -> int:
        return int(self.node_cluster.shape[0])


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"{x.dtype} array of shape {x.shape}"
    return type(x).__name__


@numba.njit(inline="always")
def _unit(state, draw):
    """The ``draw``-th uniform float in (0, 1] of the stream ``state`` (53 bits)."""
    x = mix64(state + np.uint64(draw + 1) * np.uint64(GOLDEN))
    return (np.float64(x >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def _local_quota(n, num_local, degree, epsilon, replace, state):
    """Local share of the ``n`` draws: stochastic rounding of n * (num_local / degree + epsilon), clamped."""
    target = n * (num_local / degree + epsilon)
    k = np.int64(math.floor(target))
    if _unit(state, DGS_QUOTA_DRAW) < target - k:
        k += 1
    num_remote = degree - num_local
    if replace:
        low = 0 if num_remote > 0 else n
        high = n if num_local > 0 else 0
    else:
        low = max(0, n - num_remote)
        high = min(n, num_local)
    return min(max(k, low), high)


@numba.njit(inline="always")
def _pick_local_ranks(k, num_local, replace, state, out, offset):
    """Write ``k`` ranks in [0, num_local) into ``out[offset:offset + k]``, in the order drawn: a uniform
    subset by Floyd's algorithm, or ``k`` uniform draws with replacement."""
    if replace:
        for q in range(k):
            out[offset + q] = uniform_below(state, q, num_local)
    else:
        floyd_subset(state, k, num_local, out, offset)


@numba.njit(inline="always")
def _lower_bound(indices, start, end, x):
    """First position in ``[start, end)`` of the sorted ``indices`` holding a value >= x (``end`` if none)."""
    while start < end:
        mid = (start + end) >> 1
        if indices[mid] < x:
            start = mid + 1
        else:
            end = mid
    return start


@numba.njit(inline="always")
def _split_row(indices, start, degree, lo, hi, sorted_rows, order):
    """Where the local neighbors (ids in ``[lo, hi)``) of the row at ``start`` are: ``(first, num_local)``.

    Sorted rows: at positions ``[first, first + num_local)`` (the row's ends, else two binary searches,
    tell). Otherwise one pass
    writes the local positions to ``order[:num_local]`` and the remote ones to ``order[num_local:degree]``,
    each in row order (``first`` is 0 then)."""
    if sorted_rows:
        end = start + degree
        if indices[start] >= lo and indices[end - 1] < hi:  # all local (common on a METIS part)
            return np.int64(0), degree
        if indices[end - 1] < lo or indices[start] >= hi:  # all remote
            return np.int64(0), np.int64(0)
        a = _lower_bound(indices, start, end, lo)
        b = _lower_bound(indices, a, end, hi)
        return a - start, b - a
    num_local = 0
    for pos in range(degree):
        u = indices[start + pos]
        if lo <= u < hi:
            order[num_local] = pos
            num_local += 1
    r = num_local
    for pos in range(degree):
        u = indices[start + pos]
        if u < lo or u >= hi:
            order[r] = pos
            r += 1
    return np.int64(0), num_local


@numba.njit(inline="always")
def _local_position(rank, first, sorted_rows, order):
    """Row position of the ``rank``-th local neighbor (in row order)."""
    if sorted_rows:
        return first + rank
    return order[rank]


@numba.njit(inline="always")
def _remote_position(j, first, num_local, sorted_rows, order):
    """Row position of the ``j``-th remote neighbor (in row order)."""
    if sorted_rows:
        return j if j < first else j + num_local
    return order[num_local + j]


@numba.njit(inline="always")
def _weight(indices, start, pos, node_cluster, cluster_weight):
    return cluster_weight[node_cluster[indices[start + pos]]]


@numba.njit(inline="always")
def _among(out, lo, hi, x):
    """Whether ``x`` is in ``out[lo:hi]`` (hi - lo < fanout)."""
    for s in range(lo, hi):
        if out[s] == x:
            return True
    return False


@numba.njit(inline="always")
def _try_remote(indices, start, first, num_local, num_remote, m, replace, sorted_rows, order, state, budget,
                node_cluster, cluster_weight, weight_max, out, base):
    """Rejection: up to ``budget`` tries to draw the ``m`` remote indices (ranks among the remote
    neighbors, in row order) into ``out[base:base + m]``; returns how many it drew. Try ``t`` is the
    stream's 64-bit draw ``DGS_TRY_DRAW + t``: its high half picks a uniform remote index (Lemire's
    multiply-shift, as :func:`gnnscale.keys.uniform_below`), its low half accepts it with
    probability ``w / weight_max``; without replacement an index already drawn is rejected."""
    filled = 0
    t = 0
    while filled < m and t < budget:
        x = mix64(state + np.uint64(DGS_TRY_DRAW + t + 1) * np.uint64(GOLDEN))
        t += 1
        j = np.int64(((x >> np.uint64(32)) * np.uint64(num_remote)) >> np.uint64(32))
        if not replace and _among(out, base, base + filled, j):
            continue
        u = (np.float64(x & np.uint64(0xFFFFFFFF)) + 0.5) * (1.0 / 4294967296.0)
        pos = _remote_position(j, first, num_local, sorted_rows, order)
        if u * weight_max < _weight(indices, start, pos, node_cluster, cluster_weight):
            out[base + filled] = j
            filled += 1
    return filled


@numba.njit(inline="always")
def _invert_remote(indices, start, first, num_local, num_remote, m, replace, sorted_rows, order, state, filled,
                   node_cluster, cluster_weight, weights, out, base):
    """Inversion: the draws ``filled .. m - 1`` of the remote indices. The remote weights go to
    ``weights`` (without replacement, those already drawn zeroed); draw ``q`` is the first index whose
    cumulative weight exceeds the stream's uniform ``DGS_EXACT_DRAW + q`` times the remaining total."""
    total = 0.0
    for j in range(num_remote):
        w = _weight(indices, start, _remote_position(j, first, num_local, sorted_rows, order), node_cluster,
                    cluster_weight)
        weights[j] = w
        total += w
    if not replace:
        for s in range(base, base + filled):
            total -= weights[out[s]]
            weights[out[s]] = 0.0
    for q in range(filled, m):
        target = _unit(state, DGS_EXACT_DRAW + q) * total
        acc = 0.0
        pick = 0
        for j in range(num_remote):
            w = weights[j]
            if w > 0.0:  # drawn ones are 0 (weights are > 0)
                pick = j
                acc += w
                if acc > target:
                    break
        out[base + q] = pick  # rounding can leave target >= acc: the last candidate
        if not replace:
            total -= weights[pick]
            weights[pick] = 0.0


@numba.njit(inline="always")
def choose_neighbors_dgs(indptr, indices, row, v, fanout, replace, key, hop, lo, hi, node_cluster, cluster_weight,
                         weight_max, epsilon, sorted_rows, order, weights, out, offset):
    """Write the DGS choice for node ``v`` (global ids) into ``out[offset:offset + num_chosen]``: its
    local neighbors first, then its remote ones, each in the order drawn. ``row`` as in
    :func:`gnnscale.sampling.choose.choose_neighbors`; ``weight_max`` is ``cluster_weight.max()``;
    ``order`` (int64, unsorted rows only) and ``weights`` (float64) are scratch of at least the degree."""
    start = indptr[row]
    degree = indptr[row + 1] - start
    if degree == 0:
        return
    if fanout == ALL_NEIGHBORS or (not replace and degree <= fanout):
        for q in range(degree):
            out[offset + q] = indices[start + q]
        return
    first, num_local = _split_row(indices, start, degree, lo, hi, sorted_rows, order)
    state = node_stream(key, hop, v)
    k_local = _local_quota(fanout, num_local, degree, epsilon, replace, state)
    _pick_local_ranks(k_local, num_local, replace, state, out, offset)
    for s in range(offset, offset + k_local):
        out[s] = indices[start + _local_position(out[s], first, sorted_rows, order)]
    m = fanout - k_local
    if m == 0:
        return
    base = offset + k_local
    num_remote = degree - num_local
    filled = 0
    if replace or 2 * m < num_remote:
        filled = _try_remote(indices, start, first, num_local, num_remote, m, replace, sorted_rows, order, state,
                             (num_remote >> 1) + 2 * m, node_cluster, cluster_weight, weight_max, out, base)
    if filled < m:
        _invert_remote(indices, start, first, num_local, num_remote, m, replace, sorted_rows, order, state, filled,
                       node_cluster, cluster_weight, weights, out, base)
    for s in range(base, base + m):
        out[s] = indices[start + _remote_position(out[s], first, num_local, sorted_rows, order)]


@numba.njit(parallel=True, cache=True, nogil=True)
def dgs_rows(indptr, indices, first_id, nodes, fanout, replace, key, hop, lo, hi, node_cluster, cluster_weight,
             epsilon, sorted_rows):
    """DGS-sample ``nodes`` (global ids) from CSC rows ``node - first_id`` (0: the whole graph; a part's
    first id: that part's rows, vanilla layout). ``sorted_rows``: every row lists its sources in
    non-decreasing order (:func:`rows_sorted`); the result does not depend on it, the cost does.

    Returns ``(offsets int64 [n + 1], chosen int64 [offsets[-1]])``: node ``i``'s neighbors (global ids)
    are ``chosen[offsets[i]:offsets[i + 1]]``; the counts are the plain sampler's.
    """
    offsets = count_and_offsets(indptr, nodes, first_id, fanout, replace)  # the plain sampler's counts
    chosen = np.empty(offsets[-1], dtype=np.int64)
    weight_max = cluster_weight.max()
    n = nodes.shape[0]
    for piece in numba.prange((n + PIECE_NODES - 1) // PIECE_NODES):
        begin = piece * PIECE_NODES
        end = min(begin + PIECE_NODES, n)
        width = 1  # scratch for the piece's longest row: remote weights, and the split of unsorted rows
        for i in range(begin, end):
            r = nodes[i] - first_id
            width = max(width, indptr[r + 1] - indptr[r])
        weights = np.empty(width, dtype=np.float64)
        order = np.empty(1 if sorted_rows else width, dtype=np.int64)
        for i in range(begin, end):
            # As the fused kernel: the row pointer further ahead, then the row's first line nearer.
            if i + 2 * PREFETCH_DISTANCE < end:
                prefetch(indptr, nodes[i + 2 * PREFETCH_DISTANCE] - first_id)
            if i + PREFETCH_DISTANCE < end:
                prefetch(indices, indptr[nodes[i + PREFETCH_DISTANCE] - first_id])
            choose_neighbors_dgs(indptr, indices, nodes[i] - first_id, nodes[i], fanout, replace, key, hop, lo, hi,
                                 node_cluster, cluster_weight, weight_max, epsilon, sorted_rows, order, weights, chosen,
                                 offsets[i])
    return offsets, chosen


@numba.njit(parallel=True, cache=True, nogil=True)
def _count_unsorted_rows(indptr, indices):
    bad = 0
    for v in numba.prange(indptr.shape[0] - 1):
        for e in range(indptr[v] + 1, indptr[v + 1]):
            if indices[e] < indices[e - 1]:
                bad += 1
                break
    return bad


def rows_sorted(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether every CSC row lists its sources in non-decreasing order (one parallel pass over the
    edges). :func:`gnnscale.graph.csc.csc_from_coo` and partitioning (relabelled rows) produce such rows."""
    return bool(_count_unsorted_rows(indptr, indices) == 0)


def sample_rows(indptr: np.ndarray, indices: np.ndarray, first_id: int, nodes: np.ndarray, fanout: int,
                replace: bool, key: int, hop: int, policy: DGSPolicy,
                sorted_rows: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dgs_rows` with the policy unpacked (inputs assumed validated; ``sorted_rows`` only if
    :func:`rows_sorted` holds)."""
    return dgs_rows(indptr, indices, np.int64(first_id), nodes, fanout, bool(replace), key, hop,
                    np.int64(policy.local_lo), np.int64(policy.local_hi), policy.node_cluster,
                    policy.cluster_weight, float(policy.epsilon), bool(sorted_rows))


def dgs_hops(graph: CSCGraph, seeds: np.ndarray, fanouts: tuple[int, ...], key: int, replace: bool,
             policy: DGSPolicy, workspace: SamplerWorkspace, sorted_rows: bool):
    """Every hop sampled with the DGS policy; same node list and per-hop CSCs as :func:`expand_hops`."""

    def sample_hop(nodes, num_dst, num_known, fanout, hop):
        offsets, chosen = sample_rows(graph.indptr, graph.indices, 0, nodes[:num_dst], fanout, replace, key, hop,
                                      policy, sorted_rows)
        nodes = grow_nodes(nodes, num_known, num_known + chosen.shape[0])
        return offsets, chosen, nodes, relabel_all(chosen, workspace.node_map, nodes, num_known)

    return expand_hops(seeds, fanouts, workspace, sample_hop)


def sample_blocks_dgs(graph: CSCGraph, seeds, fanouts: Sequence[int], *, key: int, policy: DGSPolicy,
                      replace: bool = False, workspace: SamplerWorkspace | None = None,
                      sorted_rows: bool | None = None) -> list[Block]:
    """:func:`gnnscale.sampling.sample_blocks` with explanation-guided neighbor choice.

    Args:
        graph, seeds, fanouts, key, replace, workspace: as for ``sample_blocks``.
        policy: the requester's local range, the node -> cluster map and the cluster weights from the
            node mask, and epsilon; built for a graph of ``graph.num_nodes`` nodes.
        sorted_rows: whether every row of ``graph`` lists its sources in non-decreasing order
            (``rows_sorted(graph.indptr, graph.indices)``, which None computes here: one pass over the
            edges, so callers that sample a graph many times pass what they computed once). The blocks
            are the same either way; sorted rows split each destination's neighborhood in
            ``O(log degree)`` instead of ``O(degree)``.

    Returns blocks in model order (input layer first), with the same per-destination sample counts as
    plain sampling.
    """
    if not isinstance(graph, CSCGraph):
        raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
    if not isinstance(policy, DGSPolicy):
        raise TypeError(f"policy: expected a DGSPolicy, got {type(policy).__name__}")
    if policy.num_nodes != graph.num_nodes:
        raise ValueError(f"policy: built for a graph of {policy.num_nodes} nodes, this graph has {graph.num_nodes}")
    if sorted_rows is None:
        sorted_rows = rows_sorted(graph.indptr, graph.indices)
    elif not isinstance(sorted_rows, (bool, np.bool_)):
        raise TypeError(f"sorted_rows: expected a bool or None, got {type(sorted_rows).__name__}")
    fanouts = check_fanouts(fanouts)
    seeds = check_seeds(seeds, graph.num_nodes)
    key = check_key(key)
    if workspace is None:
        workspace = SamplerWorkspace(graph.num_nodes)
    elif workspace.num_nodes != graph.num_nodes:
        raise ValueError(f"workspace: built for {workspace.num_nodes} nodes, graph has {graph.num_nodes}")
    return blocks_from_hops(*dgs_hops(graph, seeds, fanouts, key, bool(replace), policy, workspace,
                                      bool(sorted_rows)))
