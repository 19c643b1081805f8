"""Explanation-guided node sampling (DGS, Wan et al., section III-C): prefer local neighbors, and draw
remote ones by their explained importance.

For every destination node ``v`` the number of sampled neighbors is the plain sampler's,
``n = min(fanout, degree)`` (``fanout`` with replacement): the block has the same shape. What changes
is which ones:

* the in-neighbors of ``v`` split into *local* ones (owned by the requesting worker, ids in
  ``[local_lo, local_hi)``) and *remote* ones;
* the local quota is the plain sampler's expected local count plus ``epsilon * n``:
  ``t = n * (num_local / degree + epsilon)``, rounded stochastically (so its mean is exactly ``t``)
  and clamped to what the neighborhood allows; the remote quota is the rest, ``n - k_local``;
* local neighbors are a uniform ``k_local``-subset (Floyd's algorithm over the local ranks, as the plain
  sampler);
* remote neighbors are drawn with probability proportional to their weight
  ``cluster_weight[node_cluster[u]]`` (the node mask of their super-node): successive sampling
  without replacement by Efraimidis-Spirakis keys ``log(U_u) / w_u`` (the largest ``k_remote`` keys:
  the first pick is ``w``-proportional, every next one ``w``-proportional among the rest); with
  replacement, ``k_remote`` independent ``w``-proportional draws.

When ``degree <= fanout`` without replacement every neighbor is taken, as in plain sampling.

Every random number is counter-based (:mod:`gnnscale.sampling.keys`): a function of ``(key, hop, v)``
and a draw index (the neighbor's position in ``v``'s row for the remote keys), so the same key and the
same policy give the same blocks whatever the thread count, and on whichever worker samples ``v``
(the vanilla layout's owners sample remote hops with the requester's key *and policy*).

Cost per destination: two passes over its row (``O(degree)``, against the plain sampler's
``O(fanout^2)``), since every remote neighbor's weight enters the draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph
# gnnscale.sampling's __init__ does not import this module, so importing the package here is no cycle.
from gnnscale.sampling import blocks_from_hops, check_fanouts, check_key, check_seeds
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import count_and_offsets, floyd_subset
from gnnscale.sampling.fused import SamplerWorkspace, expand_hops, grow_nodes, relabel_all
from gnnscale.sampling.keys import GOLDEN, mix64, node_stream, uniform_below

# Keys of the two extra random streams of a node (quota rounding, remote keys), xor-ed into the batch
# key so that they never share draws with the local choice (which uses the plain sampler's stream).
_SALT_QUOTA = 0x5DEECE66D2545F49
_SALT_REMOTE = 0x3C6EF372FE94F82B


@dataclass(frozen=True, slots=True, kw_only=True)
class DGSPolicy:
    """What the masks say, in the form the kernel reads.

    Args:
        local_lo, local_hi: the requesting worker's nodes, global ids ``[local_lo, local_hi)``.
        node_cluster: int32 [num_nodes], the super-node (cluster) of every node, the same on every worker.
        cluster_weight: float64 [num_clusters], finite and > 0: the importance of each cluster's nodes
            as remote neighbors (the requester's node mask; the weights of its own clusters are unused).
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
    """The ``draw``-th uniform float in (0, 1) of the stream ``state`` (53 bits)."""
    x = mix64(state + np.uint64(draw + 1) * np.uint64(GOLDEN))
    return (np.float64(x >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def _remote_key(indices, start, pos, rstate, node_cluster, cluster_weight):
    """Efraimidis-Spirakis key of the neighbor at ``pos`` in the row: log(U) / w (larger wins)."""
    w = cluster_weight[node_cluster[indices[start + pos]]]
    return math.log(_unit(rstate, pos)) / w


@numba.njit(inline="always")
def _local_quota(n, num_local, degree, epsilon, replace, key, hop, v):
    """Local share of the ``n`` draws: stochastic rounding of n * (num_local / degree + epsilon), clamped."""
    target = n * (num_local / degree + epsilon)
    k = np.int64(math.floor(target))
    if _unit(node_stream(np.uint64(key) ^ np.uint64(_SALT_QUOTA), hop, v), 0) < target - k:
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
    """Write ``k`` ranks in [0, num_local) into ``out[offset:offset + k]``, sorted increasingly
    (uniform subset by Floyd's algorithm, or ``k`` uniform draws with replacement)."""
    if replace:
        for q in range(k):
            out[offset + q] = uniform_below(state, q, num_local)
    else:
        floyd_subset(state, k, num_local, out, offset)
    for a in range(1, k):  # insertion sort: k <= fanout
        x = out[offset + a]
        b = a - 1
        while b >= 0 and out[offset + b] > x:
            out[offset + b + 1] = out[offset + b]
            b -= 1
        out[offset + b + 1] = x


@numba.njit(inline="always")
def _pick_remote_positions(indices, start, degree, lo, hi, k, replace, total_w, rstate, node_cluster,
                           cluster_weight, out, base):
    """Write ``k`` row positions of remote neighbors into ``out[base:base + k]``, drawn w-proportionally."""
    if replace:
        for q in range(k):
            target = _unit(rstate, degree + q) * total_w
            acc = 0.0
            last = -1
            for pos in range(degree):
                u = indices[start + pos]
                if lo <= u < hi:
                    continue
                last = pos
                acc += cluster_weight[node_cluster[u]]
                if acc > target:
                    break
            out[base + q] = last  # rounding can leave target == total: the last remote neighbor
        return
    filled = 0
    worst = 0  # slot holding the smallest key among the chosen
    worst_key = 0.0
    for pos in range(degree):
        u = indices[start + pos]
        if lo <= u < hi:
            continue
        key = _remote_key(indices, start, pos, rstate, node_cluster, cluster_weight)
        if filled < k:
            out[base + filled] = pos
            if filled == 0 or key < worst_key:
                worst, worst_key = filled, key
            filled += 1
        elif key > worst_key:
            out[base + worst] = pos
            worst, worst_key = 0, _remote_key(indices, start, out[base], rstate, node_cluster, cluster_weight)
            for s in range(1, k):
                ks = _remote_key(indices, start, out[base + s], rstate, node_cluster, cluster_weight)
                if ks < worst_key:
                    worst, worst_key = s, ks


@numba.njit(inline="always")
def choose_neighbors_dgs(indptr, indices, row, v, fanout, replace, key, hop, lo, hi, node_cluster, cluster_weight,
                         epsilon, out, offset):
    """Write the DGS choice for node ``v`` (global ids) into ``out[offset:offset + num_chosen]``: its
    local neighbors first (in row order), then its remote ones. ``row`` as in
    :func:`gnnscale.sampling.choose.choose_neighbors`."""
    start = indptr[row]
    degree = indptr[row + 1] - start
    if degree == 0:
        return
    if not replace and degree <= fanout:
        for q in range(degree):
            out[offset + q] = indices[start + q]
        return
    n = fanout
    num_local = 0
    total_w = 0.0
    for pos in range(degree):
        u = indices[start + pos]
        if lo <= u < hi:
            num_local += 1
        else:
            total_w += cluster_weight[node_cluster[u]]
    k_local = _local_quota(n, num_local, degree, epsilon, replace, key, hop, v)
    _pick_local_ranks(k_local, num_local, replace, node_stream(key, hop, v), out, offset)
    rstate = node_stream(np.uint64(key) ^ np.uint64(_SALT_REMOTE), hop, v)
    _pick_remote_positions(indices, start, degree, lo, hi, n - k_local, replace, total_w, rstate, node_cluster,
                           cluster_weight, out, offset + k_local)
    # Local ranks (sorted) -> ids, in one pass; each slot is read before it is overwritten.
    i = 0
    rank = 0
    for pos in range(degree):
        if i >= k_local:
            break
        u = indices[start + pos]
        if lo <= u < hi:
            while i < k_local and out[offset + i] == rank:
                out[offset + i] = u
                i += 1
            rank += 1
    for s in range(k_local, n):
        out[offset + s] = indices[start + out[offset + s]]


@numba.njit(parallel=True, cache=True, nogil=True)
def dgs_rows(indptr, indices, first_id, nodes, fanout, replace, key, hop, lo, hi, node_cluster, cluster_weight,
             epsilon):
    """DGS-sample ``nodes`` (global ids) from CSC rows ``node - first_id`` (0: the whole graph; a part's
    first id: that part's rows, vanilla layout).

    Returns ``(offsets int64 [n + 1], chosen int64 [offsets[-1]])``: node ``i``'s neighbors (global ids)
    are ``chosen[offsets[i]:offsets[i + 1]]``; the counts are the plain sampler's.
    """
    offsets = count_and_offsets(indptr, nodes, first_id, fanout, replace)  # the plain sampler's counts
    chosen = np.empty(offsets[-1], dtype=np.int64)
    for i in numba.prange(nodes.shape[0]):
        choose_neighbors_dgs(indptr, indices, nodes[i] - first_id, nodes[i], fanout, replace, key, hop, lo, hi,
                             node_cluster, cluster_weight, epsilon, chosen, offsets[i])
    return offsets, chosen


def sample_rows(indptr: np.ndarray, indices: np.ndarray, first_id: int, nodes: np.ndarray, fanout: int,
                replace: bool, key: int, hop: int, policy: DGSPolicy) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dgs_rows` with the policy unpacked (inputs assumed validated)."""
    return dgs_rows(indptr, indices, np.int64(first_id), nodes, fanout, bool(replace), key, hop,
                    np.int64(policy.local_lo), np.int64(policy.local_hi), policy.node_cluster,
                    policy.cluster_weight, float(policy.epsilon))


def dgs_hops(graph: CSCGraph, seeds: np.ndarray, fanouts: tuple[int, ...], key: int, replace: bool,
             policy: DGSPolicy, workspace: SamplerWorkspace):
    """Every hop sampled with the DGS policy; same node list and per-hop CSCs as :func:`expand_hops`."""

    def sample_hop(nodes, num_dst, num_known, fanout, hop):
        offsets, chosen = sample_rows(graph.indptr, graph.indices, 0, nodes[:num_dst], fanout, replace, key, hop,
                                      policy)
        nodes = grow_nodes(nodes, num_known, num_known + chosen.shape[0])
        return offsets, chosen, nodes, relabel_all(chosen, workspace.node_map, nodes, num_known)

    return expand_hops(seeds, fanouts, workspace, sample_hop)


def sample_blocks_dgs(graph: CSCGraph, seeds, fanouts: Sequence[int], *, key: int, policy: DGSPolicy,
                      replace: bool = False, workspace: SamplerWorkspace | None = None) -> list[Block]:
    """:func:`gnnscale.sampling.sample_blocks` with explanation-guided neighbor choice.

    Args:
        graph, seeds, fanouts, key, replace, workspace: as for ``sample_blocks``.
        policy: the requester's local range, the node -> cluster map and the cluster weights from the
            node mask, and epsilon; built for a graph of ``graph.num_nodes`` nodes.

    Returns blocks in model order (input layer first), with the same per-destination sample counts as
    plain sampling.
    """
    if not isinstance(graph, CSCGraph):
        raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
    if not isinstance(policy, DGSPolicy):
        raise TypeError(f"policy: expected a DGSPolicy, got {type(policy).__name__}")
    if policy.num_nodes != graph.num_nodes:
        raise ValueError(f"policy: built for a graph of {policy.num_nodes} nodes, this graph has {graph.num_nodes}")
    fanouts = check_fanouts(fanouts)
    seeds = check_seeds(seeds, graph.num_nodes)
    key = check_key(key)
    if workspace is None:
        workspace = SamplerWorkspace(graph.num_nodes)
    elif workspace.num_nodes != graph.num_nodes:
        raise ValueError(f"workspace: built for {workspace.num_nodes} nodes, graph has {graph.num_nodes}")
    return blocks_from_hops(*dgs_hops(graph, seeds, fanouts, key, bool(replace), policy, workspace))
