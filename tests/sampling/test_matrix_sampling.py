"""Matrix bulk sampling (gnnscale/sampling/matrix): GraphSAGE == fused, bulk == single batches,
the LADIES law and weights on a graph small enough to check by hand, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from gnnscale.sampling import NeighborSampler, derive_key
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler, layer_probabilities
from gnnscale.sampling.matrix.products import gcn_operator, stack_rows
from test_sampling import P_MIN, assert_blocks_equal, check_blocks, draw, star_graph, subset_counts


def random_stack(num_nodes: int, k: int, size: int, seed: int = 0) -> tuple[list[torch.Tensor], list[int]]:
    """k batches of unique seeds (batches may share nodes) and their keys."""
    rng = np.random.default_rng(seed)
    seeds = [torch.from_numpy(rng.choice(num_nodes, size, replace=False)) for _ in range(k)]
    return seeds, [derive_key(seed, 0, step) for step in range(k)]


def assert_weighted_blocks_equal(a, b, *, weighted: bool = True) -> None:
    """The same blocks, and the same edge weights: both present and equal, or (``weighted=False``, a
    sampler that draws unweighted blocks) both absent."""
    assert_blocks_equal(a, b)
    for x, y in zip(a, b):
        if weighted:
            assert torch.equal(x.edge_weight, y.edge_weight)
        else:
            assert x.edge_weight is None and y.edge_weight is None


# ---------------------------------------------------------------------------------------------------
# GraphSAGE by sparse products: the fused kernel's blocks, bulk or not
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("replace", [False, True], ids=["noreplace", "replace"])
@pytest.mark.parametrize("fanouts", [(1,), (3, 2, 2), (10, 25), (-1, 0, 2)], ids=str)
def test_matrix_equals_fused(random_graph, fanouts, replace):
    # Same per-node stream, and P's rows are A's rows in A's order: the same blocks, bit for bit.
    seeds, keys = random_stack(400, 5, 60, seed=3)
    fused = NeighborSampler(random_graph, fanouts, replace=replace)
    stacked = MatrixSampler(random_graph, fanouts, bulk=5, replace=replace).sample_many(seeds, keys)
    for s, key, blocks in zip(seeds, keys, stacked, strict=True):
        assert_blocks_equal(blocks, fused.sample(s, key))
        check_blocks(random_graph, s, fanouts, blocks, replace)


def test_matrix_tiny_graph_exact(tiny_graph):
    # Graph drawn in conftest.py; fanouts above every degree: the blocks are determined.
    outer, inner = MatrixSampler(tiny_graph, [3, 3]).sample(torch.tensor([1, 5]), key=0)
    assert inner.src_ids.tolist() == [1, 5, 0, 3, 4] and inner.indices.tolist() == [2, 3, 4]
    assert outer.src_ids.tolist() == [1, 5, 0, 3, 4, 2] and outer.indptr.tolist() == [0, 3, 3, 4, 5, 6]
    assert outer.indices.tolist() == [2, 3, 4, 5, 2, 5]


INT32, INT64 = np.dtype(np.int32), np.dtype(np.int64)
# (sampler, its sizes, seeds per batch, weighted blocks): GraphSAGE with fanouts, LADIES with layer sizes
# (on scipy's arrays whatever the graph's index dtype: int32 only).
BULK_CASES = [*(pytest.param(MatrixSampler, [4, 3], 50, False, k, dtype, id=f"matrix-{dtype}-{k}")
                for dtype in (INT32, INT64) for k in (1, 2, 7)),
              *(pytest.param(LadiesSampler, [25, 25], 30, True, k, INT32, id=f"ladies-int32-{k}") for k in (1, 3, 6))]


@pytest.mark.parametrize(("make", "sizes", "size", "weighted", "k", "idx_dtype"), BULK_CASES)
def test_bulk_equals_single_batches(random_graph, make, sizes, size, weighted, k):
    seeds, keys = random_stack(400, k, size, seed=k)
    sampler = make(random_graph, sizes, bulk=k)
    for s, key, blocks in zip(seeds, keys, sampler.sample_many(seeds, keys), strict=True):
        assert_weighted_blocks_equal(blocks, sampler.sample(s, key), weighted=weighted)


def test_batch_blocks_do_not_depend_on_its_stack(random_graph):
    # A batch's draws depend on (its key, hop, node) only: not on its neighbors in the stack nor its place.
    seeds, keys = random_stack(400, 4, 80, seed=9)
    sampler = MatrixSampler(random_graph, [5, 2])
    alone = sampler.sample(seeds[2], keys[2])
    assert_blocks_equal(sampler.sample_many(seeds, keys)[2], alone)
    assert_blocks_equal(sampler.sample_many([seeds[2], seeds[0]], [keys[2], keys[0]])[0], alone)


def test_matrix_uniform_without_replacement(make_graph):
    # Chi-square against uniform, on the matrix sampler itself (equality with fused is tested above).
    degree, fanout = 10, 3
    graph, seeds = star_graph(make_graph, degree)
    sampler = MatrixSampler(graph, [fanout], bulk=10)
    keys = list(range(10))
    stacked = sampler.sample_many([seeds] * 10, keys)
    rows = [b[0].src_ids[b[0].indices].numpy().reshape(-1, fanout) for b in stacked]
    s = np.concatenate(rows)  # 20000 draws
    np.testing.assert_array_equal(s, draw(graph, seeds, fanout, keys, False, "fused"))
    assert all(len(set(row)) == fanout for row in s[:500])
    assert chisquare(np.bincount(s.ravel(), minlength=degree)).pvalue > P_MIN
    assert chisquare(subset_counts(s, degree)).pvalue > P_MIN


# ---------------------------------------------------------------------------------------------------
# LADIES
# ---------------------------------------------------------------------------------------------------
#
# The tiny graph of conftest.py (src -> dst), in-edges  0: [2]  1: [0, 3, 4]  2: [1]  3: [0]  4: [2]  5: []
#
#     +------------+
#     v            |
#     0 --> 1 --> 2 --> 4
#     |     ^ ^         |
#     v     | +---------+
#     3 ----+                5
#
# GCN operator P = D~^-1 (A + I), row = destination:
#   row 1: {0, 1, 3, 4} each 1/4     row 4: {2, 4} each 1/2     row 0: {0, 2} each 1/2     row 5: {5}: 1
# Batch [1, 4]: squared column norms over rows 1 and 4:
#   node 0: 1/16   node 1: 1/16   node 2: 1/4   node 3: 1/16   node 4: 1/16 + 1/4 = 5/16    (sum 12/16)
#   -> p = (1, 1, 4, 1, 5, 0) / 12
# Batch [0, 5]: node 0: 1/4, node 2: 1/4, node 5: 1 -> p = (1/6, 0, 1/6, 0, 0, 2/3)
# Without self loops (P = D^-1 A), batch [1, 4]: rows 1: {0, 3, 4} each 1/3, 4: {2}: 1
#   -> node 0: 1/9, node 2: 1, node 3: 1/9, node 4: 1/9 -> p = (1, 0, 9, 1, 1, 0) / 12

P_BATCH_14 = np.array([1, 1, 4, 1, 5, 0]) / 12
P_BATCH_05 = np.array([1 / 6, 0, 1 / 6, 0, 0, 2 / 3])
P_BATCH_14_NO_SELF = np.array([1, 0, 9, 1, 1, 0]) / 12


def test_ladies_probabilities_by_hand(tiny_graph):
    batches = [np.array([1, 4]), np.array([0, 5])]
    stacked = stack_rows(np.concatenate(batches), np.array([0, 2, 4]), np.full(6, -1, dtype=np.int64))
    probs = layer_probabilities(gcn_operator(tiny_graph, self_loops=True), stacked).toarray()
    np.testing.assert_allclose(probs, [P_BATCH_14, P_BATCH_05], rtol=1e-12)
    alone = stack_rows(np.array([1, 4]), np.array([0, 2]), np.full(6, -1, dtype=np.int64))
    probs = layer_probabilities(gcn_operator(tiny_graph, self_loops=False), alone).toarray()
    np.testing.assert_allclose(probs, [P_BATCH_14_NO_SELF], rtol=1e-12)


@pytest.mark.parametrize("idx_dtype", [np.dtype(np.int32)], ids=["int32"])  # scipy's arrays either way
def test_ladies_weights_by_hand(tiny_graph):
    # Batch [1, 4], one layer of size 2: the draw picks 2 of {0, 1, 2, 3, 4}; whatever it picks, row i
    # keeps its self term P_ii exactly and P_ij / (2 p_j) for each drawn neighbor j != i, then sums to 1.
    operator = gcn_operator(tiny_graph, self_loops=True).toarray()
    for (block,) in LadiesSampler(tiny_graph, [2]).sample_many([torch.tensor([1, 4])] * 20, list(range(20))):
        src = block.src_ids.tolist()
        assert src[:2] == [1, 4] and block.num_dst == 2
        drawn = set(src[2:])  # drawn nodes that are not destinations; destinations may be drawn too
        assert len(drawn) <= 2 and drawn <= {0, 2, 3}
        for row, i in enumerate((1, 4)):
            lo, hi = int(block.indptr[row]), int(block.indptr[row + 1])
            got = {src[int(j)]: float(w) for j, w in zip(block.indices[lo:hi], block.edge_weight[lo:hi])}
            assert abs(sum(got.values()) - 1) < 1e-6
            assert got.pop(i) > 0  # the exact self term is always there
            assert set(got) <= drawn | {1, 4} and all(operator[i, j] > 0 for j in got)
    # A layer larger than the support takes it all: row 1 = self 1/4, and 1/4 / (5 p_j) for j = 0, 3, 4.
    (block,) = LadiesSampler(tiny_graph, [50]).sample(torch.tensor([1, 4]), 0)
    assert sorted(block.src_ids.tolist()) == [0, 1, 2, 3, 4]
    raw = {1: 0.25, 0: 0.25 / (5 / 12), 3: 0.25 / (5 / 12), 4: 0.25 / (5 * 5 / 12)}
    src = block.src_ids.tolist()
    lo, hi = int(block.indptr[0]), int(block.indptr[1])
    got = {src[int(j)]: float(w) for j, w in zip(block.indices[lo:hi], block.edge_weight[lo:hi])}
    assert got == pytest.approx({j: w / sum(raw.values()) for j, w in raw.items()}, rel=1e-6)


@pytest.mark.parametrize("idx_dtype", [np.dtype(np.int32)], ids=["int32"])  # scipy's arrays either way
def test_ladies_draw_law(make_graph):
    # With one node per layer, P(node j is drawn) = p_j: chi-square of 4000 draws against p.
    graph = make_graph(*_two_star(), 7)
    sampler = LadiesSampler(graph, [1], self_loops=False)
    seeds = [torch.tensor([5, 6])] * 4000
    blocks = sampler.sample_many(seeds, [derive_key(1, 0, step) for step in range(4000)])
    drawn = np.array([b[0].src_ids[2:].tolist()[0] if b[0].num_src > 2 else -1 for b in blocks])
    # rows 5: {0, 1, 2} each 1/3, 6: {2, 3, 4} each 1/3: p = (1, 1, 2, 1, 1) / 6 over nodes 0..4
    counts = np.bincount(drawn, minlength=5)
    assert counts.sum() == 4000
    assert chisquare(counts, 4000 * np.array([1, 1, 2, 1, 1]) / 6).pvalue > P_MIN


def _two_star() -> tuple[np.ndarray, np.ndarray]:
    """Nodes 0..4 have no in-edges; node 5 <- {0, 1, 2}, node 6 <- {2, 3, 4}."""
    return np.array([0, 0, 0, 0, 0, 0, 3, 6]), np.array([0, 1, 2, 2, 3, 4])


@pytest.mark.parametrize("idx_dtype", [np.dtype(np.int32)], ids=["int32"])  # scipy's arrays either way
@pytest.mark.parametrize("self_loops", [True, False], ids=["gcn", "mean"])
def test_ladies_blocks_contract(random_graph, self_loops):
    seeds, keys = random_stack(400, 3, 40, seed=5)
    sizes = (30, 20)
    operator = gcn_operator(random_graph, self_loops=self_loops).toarray()
    for s, blocks in zip(seeds, LadiesSampler(random_graph, sizes, self_loops=self_loops).sample_many(seeds, keys)):
        assert torch.equal(blocks[-1].dst_ids, s)
        for hop, size in enumerate(sizes):
            b = blocks[-1 - hop]
            if hop:
                assert torch.equal(b.dst_ids, blocks[-hop].src_ids)
            assert b.edge_weight.dtype == torch.float32 and b.edge_weight.shape == (b.num_edges,)
            assert b.num_src - b.num_dst <= size and torch.unique(b.src_ids).shape[0] == b.num_src
            src = b.src_ids[b.indices].numpy()
            dst = b.dst_ids.repeat_interleave(b.in_degrees()).numpy()
            assert (operator[dst, src] > 0).all(), "an edge that is not in the operator"
            sums = torch.zeros(b.num_dst, dtype=torch.float64).index_add_(0, b.dst_index(), b.edge_weight.double())
            assert torch.allclose(sums[b.in_degrees() > 0], torch.ones(1, dtype=torch.float64), atol=1e-6)
            if self_loops:  # every destination keeps its exact self term
                assert (b.in_degrees() >= 1).all()


# ---------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bulk", [0, -3])
def test_bad_bulk_value(random_graph, bulk):
    with pytest.raises(ValueError, match="bulk.*--bulk"):
        MatrixSampler(random_graph, [2], bulk=bulk)
    with pytest.raises(ValueError, match="bulk.*--bulk"):
        LadiesSampler(random_graph, [2], bulk=bulk)


@pytest.mark.parametrize("bulk", [1.5, True, "4"], ids=["float", "bool", "str"])
def test_bad_bulk_type(random_graph, bulk):
    with pytest.raises(TypeError, match="bulk"):
        MatrixSampler(random_graph, [2], bulk=bulk)


@pytest.mark.parametrize("sizes", [[0], [4, -1], [], 5], ids=str)
def test_bad_layer_sizes(random_graph, sizes):
    with pytest.raises(ValueError, match="layer_sizes.*--layer-size"):
        LadiesSampler(random_graph, sizes)


def test_bad_stacks(random_graph):
    sampler = MatrixSampler(random_graph, [2])
    with pytest.raises(ValueError, match="keys"):
        sampler.sample_many([torch.tensor([1, 2]), torch.tensor([3])], [1])
    with pytest.raises(ValueError, match="seeds_list"):
        sampler.sample_many([], [])
    with pytest.raises(ValueError, match="seeds.*batch 1"):
        sampler.sample_many([torch.tensor([1, 2]), torch.tensor([3, 3])], [1, 2])
    with pytest.raises(ValueError, match="seeds"):
        LadiesSampler(random_graph, [2]).sample(torch.tensor([0, 400]), 1)
    with pytest.raises(ValueError, match="key"):
        sampler.sample(torch.tensor([1]), -1)
    with pytest.raises(TypeError, match="graph"):
        MatrixSampler((random_graph.indptr, random_graph.indices), [2])


def test_node_maps_left_clean(random_graph):
    sampler, ladies = MatrixSampler(random_graph, [5, 5]), LadiesSampler(random_graph, [20])
    seeds, keys = random_stack(400, 4, 50)
    sampler.sample_many(seeds, keys)
    ladies.sample_many(seeds, keys)
    for s in (sampler, ladies):
        assert (s._maps == -1).all() and (s._position == -1).all()
