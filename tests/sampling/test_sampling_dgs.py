"""Explanation-guided node sampling (gnnscale/sampling/dgs.py): block shape, local share, the remote draw
law on each of the kernel's paths (rejection, inversion, the switch between them), the kernel against
its plain Python reference bit for bit, determinism and input checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from gnnscale.graph.csc import CSCGraph, csc_from_coo
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.sampling.dgs import DGSPolicy, rows_sorted, sample_blocks_dgs, sample_rows
from gnnscale.keys import node_stream_py
from gnnscale.sampling.reference import dgs_reference_rows, remote_draws

# A significance level for chi-square tests on fixed keys: deterministic, so never flaky; small enough
# that a correct law passes with margin, large enough that a wrong law (weights ignored) fails by far.
ALPHA = 1e-4


def policy(num_nodes: int, lo: int, hi: int, weights, node_cluster=None, epsilon: float = 0.1) -> DGSPolicy:
    weights = np.asarray(weights, dtype=np.float64)
    if node_cluster is None:
        node_cluster = np.arange(num_nodes) % weights.shape[0]
    return DGSPolicy(local_lo=lo, local_hi=hi, node_cluster=np.asarray(node_cluster, dtype=np.int32),
                     cluster_weight=weights, epsilon=epsilon)


def random_graph(idx_dtype=np.int32) -> CSCGraph:
    """600 nodes, in-degrees 0..60 (mean ~30), nodes 0..9 without in-edges."""
    rng = np.random.default_rng(5)
    degrees = rng.integers(0, 61, size=600)
    degrees[:10] = 0
    dst = np.repeat(np.arange(600), degrees)
    g = csc_from_coo(rng.integers(0, 600, size=dst.shape[0]), dst, 600)
    return CSCGraph(indptr=g.indptr, indices=g.indices.astype(idx_dtype), num_nodes=600)


def neighbors_of(graph: CSCGraph, v: int) -> np.ndarray:
    return np.asarray(graph.indices[graph.indptr[v]:graph.indptr[v + 1]], dtype=np.int64)


def hop_lists(graph: CSCGraph, nodes: np.ndarray, fanout: int, replace: bool, key: int, pol: DGSPolicy):
    offsets, chosen = sample_rows(graph.indptr, graph.indices, 0, nodes, fanout, replace, key, 0, pol, True)
    return [chosen[offsets[i]:offsets[i + 1]] for i in range(nodes.shape[0])]


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("replace", [False, True])
def test_blocks_have_the_plain_shape_and_real_neighbors(idx_dtype, replace):
    graph = random_graph(idx_dtype)
    pol = policy(600, 150, 300, weights=np.linspace(0.1, 1.0, 8))
    seeds = np.arange(150, 230)
    blocks = sample_blocks_dgs(graph, seeds, (10, 5), key=7, policy=pol, replace=replace)
    plain = sample_blocks(graph, seeds, (10, 5), key=7, replace=replace)
    # Same number of samples per destination as plain sampling: the seed hop's CSC has the same indptr.
    assert torch.equal(blocks[-1].indptr, plain[-1].indptr)
    for block, fanout in zip(blocks[::-1], (10, 5)):
        deg = np.diff(graph.indptr)[block.dst_ids.numpy()]
        expected = np.where(deg == 0, 0, fanout if replace else np.minimum(deg, fanout))
        assert np.array_equal(block.in_degrees().numpy(), expected)
        for i, v in enumerate(block.dst_ids.tolist()):
            got = block.src_ids[block.indices[block.indptr[i]:block.indptr[i + 1]]].numpy()
            assert np.isin(got, neighbors_of(graph, v)).all()
            if not replace:
                assert np.unique(got).shape[0] == got.shape[0]


def test_local_quota_is_the_plain_share_plus_epsilon_rounded():
    """Every destination gets floor(t) or ceil(t) local neighbors, t = n (num_local / degree + epsilon),
    and over many destinations the mean is t: the share moved to local neighbors is epsilon."""
    graph = random_graph()
    lo, hi, fanout, eps = 200, 400, 10, 0.1
    nodes = np.flatnonzero(np.diff(graph.indptr) > fanout + 5).astype(np.int64)
    lists = hop_lists(graph, nodes, fanout, False, 99, policy(600, lo, hi, [1.0], epsilon=eps))
    targets, got = [], []
    for v, chosen in zip(nodes, lists):
        nb = neighbors_of(graph, v)
        num_local = int(((nb >= lo) & (nb < hi)).sum())
        t = fanout * (num_local / nb.shape[0] + eps)
        low, high = max(0, fanout - (nb.shape[0] - num_local)), min(fanout, num_local)
        k = int(((chosen >= lo) & (chosen < hi)).sum())
        assert min(max(np.floor(t), low), high) <= k <= min(max(np.ceil(t), low), high), (v, t, k)
        if low <= t <= high - 1:
            targets.append(t)
            got.append(k)
    assert len(got) > 200
    # Stochastic rounding: sum of Bernoulli(frac(t)) around the target, a few standard deviations.
    assert abs(np.sum(got) - np.sum(targets)) < 4 * np.sqrt(len(got) * 0.25)
    plain_share = np.mean([t / fanout - eps for t in targets])
    assert np.mean(got) / fanout == pytest.approx(plain_share + eps, abs=0.02)


def fan_graph(num_dst: int, num_local: int, weights: np.ndarray) -> tuple[CSCGraph, DGSPolicy]:
    """``num_dst`` destinations that share one neighborhood: ``num_local`` local sources and one remote
    source per weight, each remote source in a cluster of its own (epsilon 0). Every destination has its
    own random stream, so one call gives ``num_dst`` independent draws.

        dst 0 .. D-1  <---  local D .. D+L-1  (part [0, D+L))
                      <---  remote D+L .. D+L+R-1  (weights w_1 .. w_R)
    """
    r = weights.shape[0]
    sources = np.arange(num_dst, num_dst + num_local + r)
    graph = csc_from_coo(np.tile(sources, num_dst), np.repeat(np.arange(num_dst), sources.shape[0]),
                         num_dst + num_local + r)
    node_cluster = np.zeros(graph.num_nodes, dtype=np.int32)
    node_cluster[num_dst + num_local:] = np.arange(1, r + 1)
    pol = DGSPolicy(local_lo=0, local_hi=num_dst + num_local, node_cluster=node_cluster,
                    cluster_weight=np.concatenate([[1.0], weights]), epsilon=0.0)
    return graph, pol


@pytest.mark.parametrize("replace", [False, True])
def test_remote_draws_follow_the_node_mask(replace):
    """One remote draw per destination (degree 20, 10 local, fanout 2, epsilon 0: quota 1 local + 1
    remote), 6000 destinations: remote picks are proportional to the weights (chi-square), not uniform."""
    w = np.array([1.0, 2.0, 4.0, 8.0, 0.5, 0.5, 3.0, 1.0, 6.0, 2.0])
    graph, pol = fan_graph(6000, 10, w)
    first_remote = pol.local_hi
    chosen = np.stack(hop_lists(graph, np.arange(6000), 2, replace, derive_key(3), pol))
    assert (chosen[:, 0] < first_remote).all() and (chosen[:, 1] >= first_remote).all()
    counts = np.bincount(chosen[:, 1] - first_remote, minlength=w.shape[0])
    assert stats.chisquare(counts, counts.sum() * w / w.sum()).pvalue > ALPHA
    assert stats.chisquare(counts).pvalue < 1e-30  # uniform is rejected outright
    local_counts = np.bincount(chosen[:, 0] - 6000, minlength=10)
    assert stats.chisquare(local_counts).pvalue > ALPHA  # local neighbors stay uniform


def successive_inclusion(w: np.ndarray, k: int) -> np.ndarray:
    """Exact inclusion probabilities of successive w-proportional sampling of k items without replacement."""
    p = np.zeros(w.shape[0])
    for order in itertools.permutations(range(w.shape[0]), k):
        prob, left = 1.0, w.sum()
        for i in order:
            prob *= w[i] / left
            left -= w[i]
        p[list(order)] += prob
    return p


def test_remote_draws_without_replacement_are_successive_sampling():
    """Three remote draws from five (5 local + 5 remote, fanout 6, epsilon 0: quota 3 + 3), 5000
    destinations: the inclusion frequency of each remote neighbor matches successive sampling's,
    computed exactly by enumeration."""
    w = np.array([1.0, 2.0, 3.0, 5.0, 9.0])
    graph, pol = fan_graph(5000, 5, w)
    chosen = np.stack(hop_lists(graph, np.arange(5000), 6, False, derive_key(4), pol))
    remote = chosen[:, 3:] - pol.local_hi
    assert (remote >= 0).all() and (np.sort(remote, axis=1)[:, 1:] != np.sort(remote, axis=1)[:, :-1]).all()
    counts = np.bincount(remote.ravel(), minlength=5)
    p = successive_inclusion(w, 3)
    # Inclusion indicators are binomial per item (dependent across items, so each is tested on its own).
    z = (counts - 5000 * p) / np.sqrt(5000 * p * (1 - p))
    assert np.all(np.abs(z) < 4.5), (counts, 5000 * p)
    assert abs(counts[4] / 5000 - 3 / 5) > 0.15  # far from uniform inclusion (3/5 each)


def successive_pairs(w: np.ndarray) -> np.ndarray:
    """[R, R]: exact probability that successive sampling draws i first and j second."""
    first = w / w.sum()
    pairs = first[:, None] * w[None, :] / (w.sum() - w)[:, None]
    np.fill_diagonal(pairs, 0.0)
    return pairs


# The kernel's paths for the remote draws without replacement (module docstring of sampling/dgs.py),
# each on R local + R remote neighbors, fanout 6, epsilon 0: a quota of 3 local + 3 remote.
#   rejection: R = 10, weights within 5x (about 1.7 tries per draw, within the R // 2 + 2 m budget);
#   inversion: R = 5 < 2 m, every draw by inversion;
#   switch:    R = 10, skewed weights (about 5 tries per draw): rejection draws some, inversion the rest.
PATHS = {
    "rejection": np.array([1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    "inversion": np.array([1.0, 2.0, 3.0, 5.0, 9.0]),
    "switch": np.array([0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 1.0, 0.5, 0.2, 0.1]),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_each_path_draws_successive_sampling(path):
    """20,000 destinations, 3 remote draws each: which remote neighbors come first and second (ordered
    pairs, chi-square against the exact law) and how often each is included (exact by enumeration) are
    successive sampling's, on every path of the kernel and across the switch between them."""
    w = PATHS[path]
    r, num_dst, key = w.shape[0], 20_000, derive_key(6)
    graph, pol = fan_graph(num_dst, r, w)
    chosen = np.stack(hop_lists(graph, np.arange(num_dst), 6, False, key, pol))
    remote = chosen[:, 3:] - pol.local_hi
    assert (remote >= 0).all() and (np.sort(remote, axis=1)[:, 1:] != np.sort(remote, axis=1)[:, :-1]).all()
    # Which path each destination took, from the reference's count of draws made by rejection.
    weights = [float(x) for x in w]
    by_rejection = np.array([remote_draws(weights, 3, False, node_stream_py(key, 0, v), float(w.max()))[1]
                             for v in range(num_dst)])
    if path == "rejection":
        assert (by_rejection == 3).mean() > 0.95
    elif path == "inversion":
        assert (by_rejection == 0).all()
    else:
        # Measured: 7.5% switch before the first draw, 34% after it, 38% after the second, 20% never.
        share = np.bincount(by_rejection, minlength=4) / num_dst
        assert share.min() > 0.05, share
    pairs = successive_pairs(w)
    observed = np.bincount(remote[:, 0] * r + remote[:, 1], minlength=r * r)
    cells = ~np.eye(r, dtype=bool).ravel()
    assert stats.chisquare(observed[cells], num_dst * pairs.ravel()[cells]).pvalue > ALPHA
    p = successive_inclusion(w, 3)
    z = (np.bincount(remote.ravel(), minlength=r) - num_dst * p) / np.sqrt(num_dst * p * (1 - p))
    assert np.all(np.abs(z) < 4.5), z


def test_draws_with_replacement_switching_to_inversion_follow_the_weights():
    """With replacement and skewed weights most destinations run out of tries and draw the rest by
    inversion: every remote draw is still w-proportional (chi-square over all draws)."""
    w = PATHS["switch"]
    graph, pol = fan_graph(4000, 10, w)
    chosen = np.stack(hop_lists(graph, np.arange(4000), 6, True, derive_key(7), pol))
    remote = chosen[chosen >= pol.local_hi] - pol.local_hi
    counts = np.bincount(remote, minlength=w.shape[0])
    assert counts.sum() > 10_000
    assert stats.chisquare(counts, counts.sum() * w / w.sum()).pvalue > ALPHA


def shuffled_rows(graph: CSCGraph, seed: int) -> CSCGraph:
    """The same graph with every row's sources in a random order."""
    rng = np.random.default_rng(seed)
    indices = graph.indices.copy()
    for v in range(graph.num_nodes):
        lo, hi = graph.indptr[v], graph.indptr[v + 1]
        indices[lo:hi] = rng.permutation(indices[lo:hi])
    return CSCGraph(indptr=graph.indptr, indices=indices, num_nodes=graph.num_nodes)


WEIGHTS = {"flat": [1.0], "ramp": np.linspace(0.1, 1.0, 8), "masks": [0.04, 0.96, 0.05, 0.93, 0.5, 0.07]}


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("weights", list(WEIGHTS))
def test_kernel_equals_the_plain_reference(idx_dtype, replace, weights):
    """The numba kernel and the Python reference (gnnscale/sampling/reference.py) choose the same
    neighbors in the same order: every local range (none, all, a middle part), epsilon, fanouts from 1
    to beyond the largest degree, -1 (every neighbor) and 0, whole-graph and part rows, sorted rows and rows in random order."""
    graph = random_graph(idx_dtype)
    assert rows_sorted(graph.indptr, graph.indices)
    shuffled = shuffled_rows(graph, 1)
    assert not rows_sorted(shuffled.indptr, shuffled.indices)
    nodes = np.arange(0, 600, 2, dtype=np.int64)
    for lo, hi, epsilon in [(0, 0, 0.1), (0, 600, 0.1), (150, 300, 0.0), (150, 300, 0.1), (420, 600, 1.0)]:
        pol = policy(600, lo, hi, WEIGHTS[weights], epsilon=epsilon)
        for fanout, key, hop in [(1, 5, 0), (3, 6, 1), (10, 7, 0), (25, 8, 2), (70, 9, 1), (-1, 10, 0), (0, 11, 2)]:
            for g in (graph, shuffled):
                got = sample_rows(g.indptr, g.indices, 0, nodes, fanout, replace, key, hop, pol, g is graph)
                want = dgs_reference_rows(g.indptr, g.indices, 0, nodes, fanout, replace, key, hop, pol)
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (lo, hi, fanout)
            # What the kernel makes of sorted rows does not depend on whether it is told they are sorted,
            # nor on which rows it reads (a part's rows, as the vanilla layout's owners do).
            unsure = sample_rows(graph.indptr, graph.indices, 0, nodes, fanout, replace, key, hop, pol, False)
            part = sample_rows(graph.indptr[300:] - graph.indptr[300], graph.indices[graph.indptr[300]:], 300,
                               nodes[150:], fanout, replace, key, hop, pol, True)
            whole = sample_rows(graph.indptr, graph.indices, 0, nodes, fanout, replace, key, hop, pol, True)
            assert np.array_equal(unsure[1], whole[1])
            assert np.array_equal(part[1], whole[1][whole[0][150]:])


def test_sorted_rows_are_detected_and_blocks_do_not_depend_on_the_flag():
    graph = random_graph()
    shuffled = shuffled_rows(graph, 2)
    assert rows_sorted(graph.indptr, graph.indices) and not rows_sorted(shuffled.indptr, shuffled.indices)
    pol = policy(600, 100, 350, WEIGHTS["masks"])
    seeds = np.arange(100, 160)
    checked = sample_blocks_dgs(graph, seeds, (6, 4), key=3, policy=pol)  # sorted_rows=None: checked here
    for flag in (True, False):
        told = sample_blocks_dgs(graph, seeds, (6, 4), key=3, policy=pol, sorted_rows=flag)
        for a, b in zip(checked, told):
            assert torch.equal(a.indices, b.indices) and torch.equal(a.src_ids, b.src_ids)
    with pytest.raises(TypeError, match=r"sorted_rows: expected a bool or None, got int"):
        sample_blocks_dgs(graph, seeds, (6, 4), key=3, policy=pol, sorted_rows=1)


def star_graph(num_local: int, num_remote: int) -> tuple[CSCGraph, np.ndarray, np.ndarray]:
    """Node 0 with in-neighbors 1..num_local (local: part [0, num_local + 1)) and num_remote remote
    ones after them, all in cluster 0 of weight 1."""
    n = 1 + num_local + num_remote
    src = np.arange(1, n)
    return csc_from_coo(src, np.zeros_like(src), n), np.zeros(n, dtype=np.int32), np.ones(1)


def test_epsilon_moves_the_share_and_clamps():
    """epsilon 1 takes every local neighbor it can; no local neighbors leaves every draw remote."""
    graph, node_cluster, cluster_weight = star_graph(4, 8)  # degree 12
    full = DGSPolicy(local_lo=0, local_hi=5, node_cluster=node_cluster, cluster_weight=cluster_weight, epsilon=1.0)
    for key in range(50):
        (chosen,) = hop_lists(graph, np.array([0]), 6, False, key, full)
        assert sorted(chosen[:4].tolist()) == [1, 2, 3, 4] and (chosen[4:] >= 5).all()
    remote_only = DGSPolicy(local_lo=0, local_hi=0, node_cluster=node_cluster, cluster_weight=cluster_weight,
                            epsilon=1.0)
    (chosen,) = hop_lists(graph, np.array([0]), 6, False, 5, remote_only)
    assert chosen.shape[0] == 6 and np.unique(chosen).shape[0] == 6  # every neighbor counts as remote


def test_another_key_other_blocks():
    # (The same key's blocks whatever the thread count: test_sampler_threads.py, with this graph and policy.)
    graph = random_graph()
    pol = policy(600, 0, 300, weights=np.linspace(0.2, 2.0, 16))
    seeds = np.arange(0, 120, 2)
    one = sample_blocks_dgs(graph, seeds, (8, 4, 2), key=11, policy=pol)
    other = sample_blocks_dgs(graph, seeds, (8, 4, 2), key=12, policy=pol)
    assert not torch.equal(other[-1].indices, one[-1].indices) or not torch.equal(other[0].src_ids, one[0].src_ids)


def test_rows_of_a_part_give_the_whole_graphs_choice():
    """Sampling a part's rows (vanilla owners) draws what the whole graph's rows draw."""
    graph = random_graph()
    pol = policy(600, 100, 250, weights=np.linspace(0.5, 3.0, 5))
    lo, hi = 300, 450
    indptr = graph.indptr[lo:hi + 1] - graph.indptr[lo]
    indices = graph.indices[graph.indptr[lo]:graph.indptr[hi]]
    nodes = np.arange(lo, hi, 3, dtype=np.int64)
    for replace in (False, True):
        whole = sample_rows(graph.indptr, graph.indices, 0, nodes, 7, replace, 21, 1, pol, True)
        part = sample_rows(indptr, indices, lo, nodes, 7, replace, 21, 1, pol, True)
        assert np.array_equal(whole[0], part[0]) and np.array_equal(whole[1], part[1])


@pytest.mark.parametrize("field, value, error, match", [
    ("epsilon", 1.5, ValueError, r"epsilon: expected a number in \[0, 1\] \(--dgs-epsilon\), got 1.5"),
    ("cluster_weight", np.array([1.0, 0.0]), ValueError, r"cluster_weight: expected finite weights > 0"),
    ("cluster_weight", np.array([1.0, np.nan]), ValueError, r"cluster_weight: expected finite weights > 0"),
    ("cluster_weight", np.array([1.0, 2.0], dtype=np.float32), TypeError, r"cluster_weight: expected .*float64"),
    ("node_cluster", np.zeros(10, dtype=np.int64), TypeError, r"node_cluster: expected a 1-D int32"),
    ("node_cluster", np.full(10, 2, dtype=np.int32), ValueError, r"node_cluster: expected cluster ids in \[0, len\(cluster_weight\) = 2\)"),
    ("local_hi", 11, ValueError, r"local_lo, local_hi: expected 0 <= local_lo <= local_hi <= num_nodes = 10"),
])
def test_policy_rejects_bad_input(field, value, error, match):
    args = dict(local_lo=0, local_hi=5, node_cluster=np.zeros(10, dtype=np.int32),
                cluster_weight=np.array([1.0, 2.0]), epsilon=0.1)
    with pytest.raises(error, match=match):
        DGSPolicy(**{**args, field: value})


def test_policy_for_another_graph_is_rejected():
    graph = random_graph()
    with pytest.raises(ValueError, match=r"policy: built for a graph of 500 nodes, this graph has 600"):
        sample_blocks_dgs(graph, np.arange(5), (3,), key=1, policy=policy(500, 0, 10, [1.0]))
