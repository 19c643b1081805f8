"""Layers against PyG oracles on sampled blocks; models: shapes, gradients, learning, config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import (GAT, GCN, MODELS, GATConv, GCNConv, GraphSAGE, ModelConfig, SAGEConv, aggregate_sum,
                         build_model)
from gnnscale.sampling import Block, sample_blocks

NUM_NODES = 60
IN_DIM = 12


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The tensors here are tiny: with more than one intra-op thread the hand-off costs more than the
    # work, and on a busy 2-core machine OpenMP spin-waiting made a training step 100x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def graph():
    # Undirected random graph, ~4 neighbors per node, no self loops: PyG's GATConv drops existing self
    # loops before adding its own, so a graph self loop would make the oracle differ from our layer.
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, NUM_NODES, 120), rng.integers(0, NUM_NODES, 120)
    return csc_from_coo(src, dst, NUM_NODES, symmetrize=True, remove_self_loops=True)


@pytest.fixture(scope="module", params=[False, True], ids=["noreplace", "replace"])
def blocks(graph, request):
    """Three blocks (input layer first) for 8 seeds; fanouts 3 below some degrees, so sampling matters.
    With replacement a destination may receive the same source twice: every layer must count it twice."""
    return sample_blocks(graph, np.arange(0, 40, 5), [3, 4, 5], key=7, replace=request.param)


def _features(num_rows: int, dim: int = IN_DIM, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(num_rows * 1000 + dim)
    return torch.randn(num_rows, dim, generator=gen).to(dtype)


def _empty_block(num_src: int, num_dst: int) -> Block:
    return Block(indptr=torch.zeros(num_dst + 1, dtype=torch.int64), indices=torch.zeros(0, dtype=torch.int64),
                 src_ids=torch.arange(num_src), num_dst=num_dst)


def _tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)


def test_blocks_have_edges_and_no_self_loops(blocks, request):
    # Guards the oracle tests below: they are vacuous on edgeless blocks and wrong with self loops, and
    # the replace=True case tests nothing unless some edge is repeated.
    repeats = 0
    for b in blocks:
        edge_index, _ = b.to_pyg()
        assert b.num_edges > 0
        assert b.indptr.dtype == b.indices.dtype == torch.int64  # the Block contract; CSR needs equal dtypes
        assert not bool((edge_index[0] == edge_index[1]).any())
        repeats += b.num_edges - torch.unique(edge_index, dim=1).shape[1]
    assert (repeats > 0) == ("replace" in request.node.callspec.id.split("-"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aggregate_sum_backends_agree(blocks, dtype):
    for b in blocks:
        x = _features(b.num_src, dtype=dtype).requires_grad_()
        grads = []
        outs = []
        for backend in ("numba", "csr", "index_add"):
            out = aggregate_sum(b, x, backend=backend)
            (out * torch.arange(out.numel(), dtype=dtype).view_as(out)).sum().backward()
            outs.append(out.detach())
            grads.append(x.grad.clone())
            x.grad = None
        for out, grad in zip(outs[1:], grads[1:]):
            torch.testing.assert_close(outs[0], out, **_tol(dtype))
            torch.testing.assert_close(grads[0], grad, **_tol(dtype))


def test_aggregate_sum_bfloat16_falls_back_to_index_add(blocks):
    b = blocks[0]
    x = _features(b.num_src)
    out = aggregate_sum(b, x.to(torch.bfloat16))  # CSR has no bfloat16 kernel on CPU
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), aggregate_sum(b, x), atol=0.1, rtol=0.02)
    with pytest.raises(ValueError, match="backend"):
        aggregate_sum(b, x, backend="dense")


# (backend, order): the numba kernels in both orders, and the two reference backends.
BACKEND_ORDERS = [("numba", "aggregate_first"), ("numba", "transform_first"), ("csr", "auto"), ("index_add", "auto")]


@pytest.mark.parametrize("backend, order", BACKEND_ORDERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sage_matches_pyg(blocks, backend, order, dtype):
    torch.manual_seed(0)
    ours = SAGEConv(IN_DIM, 5, backend=backend, order=order).to(dtype)
    pyg_nn = pytest.importorskip("torch_geometric.nn")  # the oracle; the gpu tests here collect without PyG
    ref = pyg_nn.SAGEConv(IN_DIM, 5, aggr="mean").to(dtype)
    with torch.no_grad():
        ref.lin_l.weight.copy_(ours.lin_l.weight)
        ref.lin_l.bias.copy_(ours.lin_l.bias)
        ref.lin_r.weight.copy_(ours.lin_r.weight)
    for b in blocks:
        x = _features(b.num_src, dtype=dtype).requires_grad_()
        edge_index, size = b.to_pyg()
        out, expected = ours(b, x), ref((x, x[: b.num_dst]), edge_index, size)
        torch.testing.assert_close(out, expected, **_tol(dtype))
        params = ("lin_l.weight", "lin_l.bias", "lin_r.weight")
        _assert_same_gradients(out, expected, [x, *(ours.get_parameter(p) for p in params)],
                               [x, *(ref.get_parameter(p) for p in params)], dtype)


def _assert_same_gradients(out, expected, ours: list, theirs: list, dtype) -> None:
    """Gradients of a weighted sum of the outputs w.r.t. the input and every parameter (in the same
    order on both sides)."""
    weight = torch.arange(out.numel(), dtype=dtype).view_as(out) / out.numel()
    ours_grads = torch.autograd.grad((out * weight).sum(), ours)
    theirs_grads = torch.autograd.grad((expected * weight).sum(), theirs)
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, **_tol(dtype))


@pytest.mark.parametrize("backend, order", BACKEND_ORDERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gcn_matches_pyg_with_explicit_self_edges(blocks, backend, order, dtype):
    torch.manual_seed(0)
    ours = GCNConv(IN_DIM, 5, backend=backend, order=order).to(dtype)
    with torch.no_grad():
        ours.bias.normal_()  # a zero bias would not test that it is copied and added
    pyg_nn = pytest.importorskip("torch_geometric.nn")  # the oracle; the gpu tests here collect without PyG
    ref = pyg_nn.GCNConv(IN_DIM, 5, normalize=False, add_self_loops=False).to(dtype)
    with torch.no_grad():
        ref.lin.weight.copy_(ours.lin.weight)
        ref.bias.copy_(ours.bias)
    for b in blocks:
        x = _features(b.num_src, dtype=dtype).requires_grad_()
        edge_index, _ = b.to_pyg()
        self_edges = torch.arange(b.num_dst).repeat(2, 1)
        edge_index = torch.cat([edge_index, self_edges], dim=1)
        edge_weight = 1.0 / (b.in_degrees().to(dtype) + 1)[edge_index[1]]
        # PyG's GCNConv is not bipartite: run it on all sources and keep the destination rows.
        out, expected = ours(b, x), ref(x, edge_index, edge_weight)[: b.num_dst]
        torch.testing.assert_close(out, expected, **_tol(dtype))
        _assert_same_gradients(out, expected, [x, ours.lin.weight, ours.bias], [x, ref.lin.weight, ref.bias], dtype)


@pytest.mark.parametrize("backend", ["numba", "index_add"])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gat_matches_pyg(blocks, backend, concat, dtype):
    torch.manual_seed(0)
    heads, out_dim = 3, 4
    ours = GATConv(IN_DIM, out_dim, heads, concat=concat, backend=backend).to(dtype)
    with torch.no_grad():
        ours.bias.normal_()
    pyg_nn = pytest.importorskip("torch_geometric.nn")  # the oracle; the gpu tests here collect without PyG
    ref = pyg_nn.GATConv(IN_DIM, out_dim, heads, concat=concat, add_self_loops=True).to(dtype)
    with torch.no_grad():
        ref.lin.weight.copy_(ours.lin.weight)
        ref.att_src.copy_(ours.att_src.view(1, heads, out_dim))
        ref.att_dst.copy_(ours.att_dst.view(1, heads, out_dim))
        ref.bias.copy_(ours.bias)
    for b in blocks:
        x = _features(b.num_src, dtype=dtype).requires_grad_()
        edge_index, size = b.to_pyg()
        out, expected = ours(b, x), ref((x, x[: b.num_dst]), edge_index, size=size)
        torch.testing.assert_close(out, expected, **_tol(dtype))
        weight = torch.arange(out.numel(), dtype=dtype).view_as(out) / out.numel()
        ours_grads = torch.autograd.grad((out * weight).sum(), [x, ours.lin.weight, ours.att_src, ours.att_dst])
        ref_grads = torch.autograd.grad((expected * weight).sum(), [x, ref.lin.weight, ref.att_src, ref.att_dst])
        for a, r in zip(ours_grads, ref_grads, strict=True):
            torch.testing.assert_close(a, r.view_as(a), **_tol(dtype))


@pytest.mark.parametrize("replace", [False, True])
def test_gat_kernel_equals_reference_with_attention_dropout(graph, replace):
    """The numba attention and the torch reference drop the same weights for the same key."""
    block = sample_blocks(graph, np.arange(0, 60, 3), [4, 3], key=5, replace=replace)[0]
    torch.manual_seed(0)
    fast = GATConv(IN_DIM, 4, heads=3, attn_dropout=0.3).double()
    reference = GATConv(IN_DIM, 4, heads=3, attn_dropout=0.3, backend="index_add").double()
    reference.load_state_dict(fast.state_dict())
    x = _features(block.num_src, dtype=torch.float64).requires_grad_()
    out, expected = fast(block, x, dropout_key=3), reference(block, x, dropout_key=3)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out, fast.eval()(block, x))  # dropout did drop something
    weight = torch.randn(out.shape, dtype=torch.float64)
    grads = torch.autograd.grad((out * weight).sum(), [x, *fast.parameters()])
    expected_grads = torch.autograd.grad((expected * weight).sum(), [x, *reference.parameters()])
    for a, r in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)


def test_gat_softmax_is_stable_for_large_logits(blocks):
    b = blocks[-1]
    conv = GATConv(IN_DIM, 4, heads=2)
    with torch.no_grad():
        conv.att_src.mul_(1e4)
        conv.att_dst.mul_(1e4)
    out = conv(b, _features(b.num_src))
    assert torch.isfinite(out).all()


def test_gat_attention_dropout_only_in_training(blocks):
    b = blocks[-1]
    conv = GATConv(IN_DIM, 4, heads=2, attn_dropout=0.5)
    x = _features(b.num_src)
    conv.eval()
    torch.testing.assert_close(conv(b, x), conv(b, x))
    conv.train()
    torch.manual_seed(1)
    assert not torch.allclose(conv(b, x), conv.eval()(b, x))


def test_layer_order_and_backend_are_checked():
    with pytest.raises(ValueError, match="order: expected one of"):
        SAGEConv(IN_DIM, 5, order="sideways")
    with pytest.raises(ValueError, match="order: expected one of"):
        GCNConv(IN_DIM, 5, order="")
    with pytest.raises(ValueError, match="backend: expected one of"):
        SAGEConv(IN_DIM, 5, backend="gpu")(_empty_block(3, 2), _features(3))


LAYERS = {
    "sage": lambda: SAGEConv(IN_DIM, 5),
    "gcn": lambda: GCNConv(IN_DIM, 5),
    "gat": lambda: GATConv(IN_DIM, 5, heads=2, concat=True),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_on_block_without_edges(name):
    # Every destination keeps only its own features: SAGE -> lin_r(x_i) + b, GCN -> W x_i + b,
    # GAT -> the self edge has weight 1, so W x_i + b per head.
    torch.manual_seed(0)
    conv = LAYERS[name]()
    b = _empty_block(num_src=7, num_dst=4)
    x = _features(7)
    x_dst = x[:4]
    expected = {
        "sage": lambda: conv.lin_r(x_dst) + conv.lin_l.bias,
        "gcn": lambda: conv.lin(x_dst) + conv.bias,
        "gat": lambda: conv.lin(x_dst) + conv.bias,
    }[name]()
    out = conv(b, x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_rejects_wrong_feature_shape(blocks, name):
    b = blocks[0]
    with pytest.raises(ValueError, match=r"x_src: expected shape \[num_src="):
        LAYERS[name]()(b, _features(b.num_src + 1))


def _config(name: str, num_layers: int, **kw) -> ModelConfig:
    return ModelConfig(name=name, in_dim=IN_DIM, hidden_dim=8, num_classes=3, num_layers=num_layers,
                       heads=2, out_heads=2, **kw)


@pytest.mark.parametrize("num_layers", [2, 3])
@pytest.mark.parametrize("name", MODELS)
def test_model_forward_backward_reaches_every_parameter(graph, name, num_layers):
    torch.manual_seed(0)
    bs = sample_blocks(graph, np.arange(0, 40, 5), [3] * num_layers, key=11)
    model = build_model(_config(name, num_layers, dropout=0.2, input_dropout=0.1, attn_dropout=0.1))
    x = _features(bs[0].num_src)
    out = model(bs, x)
    assert out.shape == (bs[-1].num_dst, 3)
    out.square().sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


def test_build_model_types_and_gat_heads():
    assert type(build_model(_config("sage", 2))) is GraphSAGE
    assert type(build_model(_config("gcn", 2))) is GCN
    # The paper's Cora GAT: hidden_dim is per head, 8 heads x 8 features concatenated, 1 output head.
    gat = build_model(ModelConfig(name="gat", in_dim=IN_DIM, hidden_dim=8, num_classes=7, num_layers=3))
    assert type(gat) is GAT
    first, middle, output = gat.layers
    assert (first.in_dim, first.heads, first.out_dim, first.concat) == (IN_DIM, 8, 8, True)
    assert (middle.in_dim, middle.heads, middle.out_dim, middle.concat) == (64, 8, 8, True)
    assert (output.in_dim, output.heads, output.out_dim, output.concat) == (64, 1, 7, False)


@pytest.mark.parametrize("name", MODELS)
def test_model_learns_a_separable_problem(graph, name):
    # Labels are a function of a node's own features, so a model that passes x_i through (every layer
    # here has a self term) can fit them; 40 Adam steps must cut the loss substantially.
    torch.manual_seed(0)
    seeds = np.arange(0, NUM_NODES, 2)
    bs = sample_blocks(graph, seeds, [3, 3], key=3)
    x_all = _features(NUM_NODES)
    labels_all = (x_all[:, 0] > 0).long() + (x_all[:, 1] > 0).long()
    x, y = x_all[bs[0].src_ids], labels_all[bs[-1].dst_ids]
    model = build_model(_config(name, 2, dropout=0.0))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = F.cross_entropy(model(bs, x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # host sync, fine in a test
    assert losses[-1] < 0.5 * losses[0], losses


# The regular graph of the model-level test: every node has exactly NEEDS_DEGREE in-neighbors (no self
# loop), and fanout NEEDS_DEGREE takes them all, so the blocks are the full 2-hop neighborhoods.
NEEDS_NODES, NEEDS_DEGREE, NEEDS_TRAIN = 800, 4, 560


@pytest.fixture(scope="module")
def nonlinear_neighbor_task():
    """Labels that need both the neighbors and the non-linearity: with m_u = mean of feature 0 over u
    and its in-neighbors, a node's label says whether the mean of |m_u| over it and its in-neighbors is
    above the median. |.| is not linear (a model without activation sits at chance), and m depends on
    the neighbors (a model that sees only the node's own features sits at chance too). A 2-layer SAGE
    or GCN with ReLU computes it exactly: layer 1 gives relu(m) and relu(-m), layer 2 averages their sum.
    """
    rng = np.random.default_rng(0)
    src = np.concatenate([rng.choice(np.delete(np.arange(NEEDS_NODES), v), NEEDS_DEGREE, replace=False)
                          for v in range(NEEDS_NODES)])
    dst = np.repeat(np.arange(NEEDS_NODES), NEEDS_DEGREE)
    graph = csc_from_coo(src, dst, NEEDS_NODES)
    x = torch.from_numpy(rng.standard_normal((NEEDS_NODES, IN_DIM)).astype(np.float32))

    def closed_mean(values: torch.Tensor) -> torch.Tensor:  # mean over the node and its in-neighbors
        sums = values.clone().index_add_(0, torch.from_numpy(dst), values[torch.from_numpy(src)])
        return sums / (NEEDS_DEGREE + 1)

    score = closed_mean(closed_mean(x[:, 0]).abs())
    labels = (score > score.median()).long()
    order = rng.permutation(NEEDS_NODES)
    train, test = np.sort(order[:NEEDS_TRAIN]), np.sort(order[NEEDS_TRAIN:])
    return graph, x, labels, train, test


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_model_learns_labels_that_need_activation_and_neighbors(nonlinear_neighbor_task, name):
    # Fails if the activation between layers is dropped (test accuracy ~0.55, measured), if the layers
    # ignore the neighbors (~0.5), or if dropout stays on in eval mode (the repeat check below).
    graph, x, labels, train, test = nonlinear_neighbor_task
    fanouts = [NEEDS_DEGREE, NEEDS_DEGREE]
    train_blocks, test_blocks = sample_blocks(graph, train, fanouts, key=1), sample_blocks(graph, test, fanouts, key=2)
    assert all(torch.all(b.in_degrees() == NEEDS_DEGREE) for b in train_blocks + test_blocks)
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, in_dim=IN_DIM, hidden_dim=16, num_classes=2, num_layers=2,
                                    dropout=0.3))
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    model.train()
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(model(train_blocks, x[train_blocks[0].src_ids]), labels[train]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(test_blocks, x[test_blocks[0].src_ids])
        again = model(test_blocks, x[test_blocks[0].src_ids])
    assert torch.equal(logits, again), "eval mode must be deterministic (dropout off)"
    accuracy = float((logits.argmax(1) == labels[test]).float().mean())
    # Measured: 0.85 (sage) and 0.92 (gcn) on the 240 held-out nodes; without the activation 0.58,
    # without neighbors 0.50.
    assert accuracy >= 0.75, accuracy


@pytest.mark.parametrize("name", MODELS)
def test_model_eval_mode_turns_every_dropout_off(blocks, name):
    # Dropout everywhere: in training mode two passes differ, in eval mode they must not, and
    # must equal the same weights built without dropout.
    torch.manual_seed(0)
    noisy = build_model(_config(name, 3, dropout=0.5, input_dropout=0.5, attn_dropout=0.5))
    clean = build_model(_config(name, 3))
    clean.load_state_dict(noisy.state_dict())
    x = _features(blocks[0].num_src)
    noisy.train()
    assert not torch.equal(noisy(blocks, x), noisy(blocks, x))
    noisy.eval()
    clean.eval()
    torch.testing.assert_close(noisy(blocks, x), clean(blocks, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_model_rejects_wrong_number_of_blocks(blocks, name):
    model = build_model(_config(name, 2))
    with pytest.raises(ValueError, match=r"blocks: expected 2 blocks .* got 3"):
        model(blocks, _features(blocks[0].num_src))


def test_model_on_blocks_without_edges():
    bs = [_empty_block(9, 6), _empty_block(6, 3)]
    for name in MODELS:
        out = build_model(_config(name, 2))(bs, _features(9))
        assert out.shape == (3, 3) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(name="gin"), r"model: expected one of \('sage', 'gcn', 'gat'\), got 'gin'"),
        (dict(in_dim=0), "in_dim: expected a positive int, got 0"),
        (dict(hidden_dim=-4), "hidden_dim: expected a positive int"),
        (dict(num_classes=0), "num_classes: expected a positive int"),
        (dict(num_layers=0), "num_layers: expected a positive int"),
        (dict(name="gat", heads=0), "heads: expected a positive int"),
        (dict(name="gat", out_heads=-1), "out_heads: expected a positive int"),
        (dict(dropout=1.0), r"dropout: expected a probability in \[0, 1\)"),
        (dict(attn_dropout=-0.1), "attn_dropout: expected a probability"),
    ],
)
def test_model_config_errors(kwargs, match):
    base = dict(name="sage", in_dim=IN_DIM, hidden_dim=8, num_classes=3, num_layers=2)
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**base, **kwargs})


def test_model_config_is_frozen_and_build_model_checks_type():
    cfg = _config("sage", 2)
    with pytest.raises(AttributeError):
        cfg.num_layers = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="cfg: expected a ModelConfig"):
        build_model({"name": "sage"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# weighted blocks (LADIES): edge_weight replaces the layer's own normalisation
# ---------------------------------------------------------------------------------------------------


def _weighted(block: Block, seed: int = 0) -> Block:
    """The block with random positive weights, every row normalised to sum to one."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.rand(block.num_edges, generator=gen, dtype=torch.float64) + 0.1
    sums = torch.zeros(block.num_dst, dtype=torch.float64).index_add_(0, block.dst_index(), raw)
    weight = (raw / sums[block.dst_index()]).float()
    return Block(indptr=block.indptr, indices=block.indices, src_ids=block.src_ids, num_dst=block.num_dst,
                 edge_weight=weight)


def _dense_operator(block: Block) -> torch.Tensor:
    """[num_dst, num_src] float64: the weighted adjacency written out entry by entry."""
    dense = torch.zeros(block.num_dst, block.num_src, dtype=torch.float64)
    for e, (i, j) in enumerate(zip(block.dst_index().tolist(), block.indices.tolist())):
        dense[i, j] += float(block.edge_weight[e])
    return dense


@pytest.mark.parametrize("backend", ["auto", "numba", "csr", "index_add"])
def test_aggregate_sum_uses_edge_weights(blocks, backend):
    b = _weighted(blocks[1])
    x = _features(b.num_src, dtype=torch.float64)
    torch.testing.assert_close(aggregate_sum(b, x, backend=backend), _dense_operator(b) @ x, **_tol(torch.float64))


def test_sage_and_gcn_use_the_weights_as_their_normalisation(blocks):
    torch.manual_seed(0)
    b = _weighted(blocks[1], seed=3)
    x = _features(b.num_src)
    mean = (_dense_operator(b) @ x.double()).float()
    sage, gcn = SAGEConv(IN_DIM, 5), GCNConv(IN_DIM, 5)
    torch.testing.assert_close(sage(b, x), sage.lin_l(mean) + sage.lin_r(x[:b.num_dst]))
    torch.testing.assert_close(gcn(b, x), gcn.lin(mean) + gcn.bias)  # no implicit self term, no degree
    (sage(b, x).sum() + gcn(b, x).sum()).backward()
    unweighted = Block(indptr=b.indptr, indices=b.indices, src_ids=b.src_ids, num_dst=b.num_dst)
    assert not torch.allclose(gcn(b, x), gcn(unweighted, x))
    moved = b.to("cpu")
    assert torch.equal(moved.edge_weight, b.edge_weight)


@pytest.mark.parametrize("order", ["auto", "aggregate_first", "transform_first"])
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_weighted_blocks_bypass_the_kernels(blocks, name, order):
    """The numba kernels have no per-edge weight: a weighted block gives the torch path's values and
    gradients whatever backend and order the layer was built with."""
    b = _weighted(blocks[0], seed=5)
    layer_type = SAGEConv if name == "sage" else GCNConv
    torch.manual_seed(1)
    fast = layer_type(IN_DIM, 6, backend="numba", order=order)
    reference = layer_type(IN_DIM, 6, backend="index_add")
    reference.load_state_dict(fast.state_dict())
    x1 = _features(b.num_src).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    out1, out2 = fast(b, x1), reference(b, x2)
    torch.testing.assert_close(out1, out2)
    out1.square().sum().backward()
    out2.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    unweighted = Block(indptr=b.indptr, indices=b.indices, src_ids=b.src_ids, num_dst=b.num_dst)
    assert not torch.allclose(fast(unweighted, x1), out1)  # the weights were used, not dropped


def test_gat_rejects_weighted_blocks(blocks):
    with pytest.raises(ValueError, match="edge_weight"):
        GATConv(IN_DIM, 5)(_weighted(blocks[0]), _features(blocks[0].num_src))
