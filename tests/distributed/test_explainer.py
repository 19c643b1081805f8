"""DGS explanation in one process: the cluster map and explanation graph, the mask optimisation, and
the online explainer thread (non-blocking submit, newest masks, failures surfaced, foreign masks refused)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gnnscale.distributed.dgs.explainer import (ExplainConfig, ExplanationError, Masks, OnlineExplainer, check_masks,
                                            explain, masked_input)
from gnnscale.distributed.dgs.explanation import (MAX_EXPLANATION_ROWS, build_cluster_map_local, cluster_part,
                                                  default_probes, explanation_graph_from_batch)
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition import assign_parts, relabel
from gnnscale.sampling import sample_blocks

DIM, CLASSES, PARTS, CLUSTERS = 16, 4, 3, 4


@pytest.fixture(scope="module")
def setup():
    """A 1200-node synthetic graph in 3 METIS parts (relabelled), its cluster map, and part 0's
    explanation graph from 40 probes."""
    ds = make_synthetic(SyntheticConfig(num_nodes=1200, avg_degree=8.0, num_classes=CLASSES, feature_dim=DIM,
                                        homophily=0.7, feature_signal=1.0, seed=4))
    rl = relabel(ds.graph, assign_parts(ds.graph, PARTS, "metis"), PARTS)
    features = ds.features[rl.new_to_old]
    clusters = build_cluster_map_local(rl.graph, rl.book, features, CLUSTERS)
    lo, hi = rl.book.node_range(0)
    blocks = sample_blocks(rl.graph, np.arange(lo, lo + 40), (6, 4), key=3)
    graph = explanation_graph_from_batch(blocks, torch.from_numpy(features[blocks[0].src_ids.numpy()]), clusters, 0)
    return rl, features, clusters, graph


def model_factory(seed: int = 0):
    def make():
        torch.manual_seed(seed)
        return build_model(ModelConfig(name="sage", in_dim=DIM, hidden_dim=16, num_classes=CLASSES, num_layers=2))
    return make


def test_cluster_map_clusters_parts_into_communities(setup):
    rl, features, clusters, _ = setup
    g, nc = rl.graph, clusters.node_cluster
    # Global ids p * C + c; every part's clusters have equal sizes (METIS, balanced to within one node).
    for p in range(PARTS):
        lo, hi = rl.book.node_range(p)
        sizes = np.bincount(nc[lo:hi] - p * CLUSTERS, minlength=CLUSTERS)
        assert sizes.max() - sizes.min() <= 1 and sizes.sum() == hi - lo
    # Communities: far more edges inside a cluster than a random split of the parts would give.
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    inside = (nc[g.indices] == nc[dst]).mean()
    shuffled = np.random.default_rng(0).permutation(nc)
    assert inside > 2 * (shuffled[g.indices] == shuffled[dst]).mean(), inside
    members = nc == 5
    np.testing.assert_allclose(clusters.cluster_mean[5], features[members].mean(0), rtol=1e-5, atol=1e-6)
    assert clusters.cluster_size[5] == members.sum()


def test_cluster_part_handles_fewer_nodes_than_clusters():
    indptr = np.array([0, 1, 2], dtype=np.int64)
    indices = np.array([11, 10], dtype=np.int32)
    assert sorted(cluster_part(indptr, indices, 10, 12, 8).tolist()) == [0, 1]  # one node per cluster
    assert cluster_part(indptr[:2], indices[:1], 10, 11, 8).tolist() == [0]


def test_explanation_graph_pools_remote_rows_by_cluster(setup):
    rl, features, clusters, graph = setup
    ids = graph.blocks[0].src_ids.numpy()
    lo, hi = rl.book.node_range(0)
    remote = (ids < lo) | (ids >= hi)
    assert np.array_equal(graph.super_of_row.numpy() >= 0, remote) and remote.any()
    assert np.array_equal(graph.super_cluster[graph.super_of_row.numpy()[remote]], clusters.node_cluster[ids[remote]])
    assert (graph.super_cluster >= CLUSTERS).all()  # part 0's own clusters are never super-nodes
    np.testing.assert_allclose(graph.baseline.numpy(), features.mean(0), rtol=1e-4, atol=1e-5)
    assert graph.fingerprint == clusters.graph_fingerprint(0) and graph.num_probes == 40


def test_masked_input_and_its_mask_gradients_match_autograd_of_the_expression(setup):
    """The one-pass masking kernels against autograd on the plain torch expression they replace."""
    graph = setup[3]
    gen = torch.Generator().manual_seed(0)
    node_logit = torch.randn(graph.num_super, generator=gen, requires_grad=True)
    feat_logit = torch.randn(graph.feature_dim, generator=gen, requires_grad=True)
    weight = torch.randn(graph.x.shape[0], graph.feature_dim, generator=gen)  # a loss that reads every entry

    def grads(masking):
        out = masking(node_logit.sigmoid(), feat_logit.sigmoid())
        node_logit.grad = feat_logit.grad = None
        (out * weight).sum().backward()
        return out.detach(), node_logit.grad.clone(), feat_logit.grad.clone()

    def expression(m_n, m_f):
        remote = graph.super_of_row >= 0
        row_mask = torch.ones(graph.x.shape[0]).masked_scatter(remote, m_n[graph.super_of_row[remote]])
        return graph.baseline + (graph.x - graph.baseline) * m_f * row_mask.unsqueeze(1)

    got, want = grads(lambda m_n, m_f: masked_input(graph, m_n, m_f)), grads(expression)
    assert (graph.super_of_row >= 0).any() and (graph.super_of_row < 0).any()  # both kinds of rows
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert want[1].abs().min() > 0 and want[2].abs().min() > 0  # every mask entry gets a gradient


def test_default_probes_bound_the_explanation_graph():
    assert default_probes((10, 5)) == default_probes((10, 10)) == 64  # what the benchmarks' graphs explain
    assert default_probes((15, 10, 5)) == 17 and 17 * (1 + 15 + 150 + 750) <= MAX_EXPLANATION_ROWS
    assert default_probes((64, 64)) == 8  # at least 8, whatever the fanouts


def test_explain_gives_deterministic_masks_in_range(setup):
    _, _, clusters, graph = setup
    model = model_factory()()
    config = ExplainConfig(epochs=10)
    first, again = explain(model, graph, config, 30), explain(model, graph, config, 30)
    assert np.array_equal(first.cluster_weight, again.cluster_weight)
    assert np.array_equal(first.feature_importance, again.feature_importance)
    assert first.cluster_weight.shape == (clusters.num_clusters,) and (first.cluster_weight > 0).all()
    assert ((first.feature_importance > 0) & (first.feature_importance < 1)).all()
    assert (first.iteration, first.epochs, first.part) == (30, 10, 0)
    # Clusters outside the graph get the mean weight of the explained ones.
    outside = np.setdiff1d(np.arange(clusters.num_clusters), graph.super_cluster)
    np.testing.assert_allclose(first.cluster_weight[outside], first.cluster_weight[graph.super_cluster].mean())
    check_masks(first, graph.fingerprint, 0, clusters.num_clusters, DIM)


@pytest.mark.parametrize("seed", [1, 3])
def test_explain_ranks_the_dimensions_the_model_reads(setup, seed):
    """A model blind to half the dimensions (zero input weights there): only the penalties act on those,
    so all of them sink to the penalty floor, and the most important dimensions are ones the model reads.
    (GNNExplainer's feature mask is sparse: it keeps enough dimensions to preserve the predictions, and
    read dimensions that are not needed sink as well; with seed 3 only two stay above 0.5.)"""
    _, _, _, graph = setup
    model = model_factory(seed)()
    blind, read = np.arange(1, DIM, 2), np.arange(0, DIM, 2)
    with torch.no_grad():
        first = model.layers[0]
        for lin in (first.lin_l, first.lin_r):
            lin.weight[:, blind] = 0
            lin.weight[:, read] *= 4  # and reads the others strongly
    masks = explain(model, graph, ExplainConfig(), 0)
    assert (masks.feature_importance[blind] < 0.1).all()
    assert (masks.feature_importance[read] > 0.5).sum() >= 2
    assert np.isin(masks.top_dims(2 / DIM), read).all()


def test_top_dims_counts_ties_and_bad_rates():
    masks = Masks(part=0, iteration=0, fingerprint="f/part0", cluster_weight=np.ones(2),
                  feature_importance=np.array([0.5, 0.9, 0.5, 0.1, 0.5], dtype=np.float32), loss=0.0, epochs=1,
                  seconds=0.0, cpu_seconds=0.0)
    assert masks.top_dims(0.4).tolist() == [0, 1]  # round(2.0); tie between 0, 2, 4 goes to 0
    assert masks.top_dims(0.5).tolist() == [0, 1, 2]  # round(2.5) = 3 (half up)
    assert masks.top_dims(0.01).tolist() == [1]  # at least one
    assert masks.top_dims(1.0).tolist() == [0, 1, 2, 3, 4]
    for bad in (0.0, 1.5, True):
        with pytest.raises(ValueError, match=r"rate: expected a number in \(0, 1\] \(--dgs-feature-rate\)"):
            masks.top_dims(bad)


def test_check_masks_refuses_masks_of_another_graph(setup):
    _, _, clusters, graph = setup
    masks = explain(model_factory()(), graph, ExplainConfig(epochs=1), 0)
    with pytest.raises(ValueError, match=r"masks: computed on explanation graph .*/part0 \(part 0\), but this "
                                         r"worker's is .*/part1 \(part 1\)"):
        check_masks(masks, clusters.graph_fingerprint(1), 1, clusters.num_clusters, DIM)
    with pytest.raises(ValueError, match=r"masks: expected 99 cluster weights and 16 feature importances"):
        check_masks(masks, graph.fingerprint, 0, 99, DIM)


class GatedModel(torch.nn.Module):
    """Wraps a model; its forward waits for ``gate`` (so a test knows the explanation is running)."""

    def __init__(self, inner, gate: threading.Event, started: threading.Event) -> None:
        super().__init__()
        self.inner, self.gate, self.started = inner, gate, started
        self.num_layers = inner.num_layers

    def forward(self, blocks, x):
        self.started.set()
        if not self.gate.wait(timeout=60):
            raise RuntimeError("gate never opened")
        return self.inner(blocks, x)


def test_online_explainer_submits_without_blocking_and_explains_every_snapshot_in_order(setup):
    _, _, _, graph = setup
    gate, started = threading.Event(), threading.Event()
    factory = lambda: GatedModel(model_factory()(), gate, started)  # noqa: E731
    state = factory().state_dict()
    with OnlineExplainer(graph, factory, ExplainConfig(epochs=2)) as explainer:
        assert explainer.latest() is None
        explainer.submit(state, 30)  # returns while the explanation waits on the gate
        assert started.wait(timeout=60)
        with pytest.raises(TimeoutError, match=r"wait: the explanation of iteration 30 took longer than 0.05 s"):
            explainer.wait(30, timeout_s=0.05)
        explainer.submit(state, 60)  # queued behind 30 ...
        explainer.submit(state, 90)  # ... and 90 behind 60: the schedule needs each (none is dropped)
        with pytest.raises(TimeoutError, match=r"wait: the explanation of iteration 60 took longer than 0.05 s"):
            explainer.wait(60, timeout_s=0.05)
        gate.set()
        assert explainer.wait(30, timeout_s=60).iteration == 30
        assert explainer.wait(60, timeout_s=60).iteration == 60
        newest = explainer.wait(90, timeout_s=60)
        assert explainer.latest() is newest and newest.iteration == 90
        with pytest.raises(ValueError, match=r"iteration: no explanation of iteration 45 is pending, running or kept"):
            explainer.wait(45, timeout_s=1)
        with pytest.raises(ValueError, match=r"iteration: expected an int > the last submitted \(90\), got 90"):
            explainer.submit(state, 90)


def test_online_explainer_surfaces_a_failed_explanation(setup):
    _, _, _, graph = setup
    model = model_factory()()
    broken = {k: torch.full_like(v, float("nan")) for k, v in model.state_dict().items()}
    with OnlineExplainer(graph, model_factory(), ExplainConfig(epochs=3)) as explainer:
        explainer.submit(broken, 30)
        with pytest.raises(ExplanationError, match=r"explanation of iteration 30: the loss became nan at epoch 1"):
            explainer.wait(30, timeout_s=60)
        with pytest.raises(ExplanationError):  # and every later call, never silence
            explainer.latest()
        with pytest.raises(ExplanationError):
            explainer.submit(model.state_dict(), 60)


def test_online_explainer_wraps_unexpected_errors(setup):
    _, _, _, graph = setup

    class Exploding(torch.nn.Module):
        num_layers = 2

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, blocks, x):
            raise RuntimeError("out of memory (simulated)")

    with OnlineExplainer(graph, Exploding) as explainer:
        explainer.submit(Exploding().state_dict(), 0)
        with pytest.raises(ExplanationError, match=r"explanation of iteration 0 failed: RuntimeError: out of memory") \
                as info:
            explainer.wait(0, timeout_s=60)
        assert isinstance(info.value.__cause__, RuntimeError)


def test_online_explainer_runs_numba_with_its_creators_thread_count(setup):
    """numba's thread count is per thread: a new thread starts at numba's default (every core), and the
    explainer's aggregation kernels would then take cores the run did not give them."""
    import numba
    if numba.config.NUMBA_NUM_THREADS == 1:
        pytest.skip("numba has one thread on this machine: a thread count cannot differ")
    _, _, _, graph = setup
    seen = []

    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model_factory()()
            self.num_layers = self.inner.num_layers

        def forward(self, blocks, x):
            seen.append(numba.get_num_threads())
            return self.inner(blocks, x)

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with OnlineExplainer(graph, Recording, ExplainConfig(epochs=1)) as explainer:
            explainer.submit(Recording().state_dict(), 0)
            explainer.wait(0, timeout_s=60)
    finally:
        numba.set_num_threads(before)
    assert seen and set(seen) == {1}


def test_online_explainer_rejects_a_state_of_another_model(setup):
    _, _, _, graph = setup
    with OnlineExplainer(graph, model_factory()) as explainer:
        other = build_model(ModelConfig(name="sage", in_dim=DIM, hidden_dim=8, num_classes=CLASSES, num_layers=2))
        with pytest.raises(ValueError, match=r"model_state: layers.0.lin_l.weight expected \(16, 16\)"):
            explainer.submit(other.state_dict(), 0)
        with pytest.raises(ValueError, match=r"model_state: does not match the explainer's model \(missing"):
            explainer.submit({}, 0)


def test_explain_leaves_the_model_as_it_was(setup):
    """The trainer may explain its own model: mode, requires_grad and gradients come back unchanged."""
    _, _, _, graph = setup
    model = model_factory()()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    explain(model, graph, ExplainConfig(epochs=2), 0)
    assert model.training and all(p.requires_grad and p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_online_explainer_gives_the_masks_of_explain_without_weight_gradients(setup):
    """The explainer's private copy records no gradients for its weights (cheaper steps), which must not
    change the masks: they equal explain() on a model that keeps its gradients."""
    _, _, _, graph = setup
    config = ExplainConfig(epochs=3)
    model = model_factory(seed=5)()
    expected = explain(model, graph, config, 7)
    with OnlineExplainer(graph, model_factory(), config) as explainer:
        explainer.submit(model.state_dict(), 7)
        got = explainer.wait(7, timeout_s=60)
        assert not any(p.requires_grad for p in explainer._model.parameters())
    np.testing.assert_array_equal(got.cluster_weight, expected.cluster_weight)
    np.testing.assert_array_equal(got.feature_importance, expected.feature_importance)
    assert got.loss == expected.loss
