"""Typed models (R-GCN, R-SAGE, R-GAT) against PyG with copied weights on sampled typed blocks: ``RGCNConv`` (one
weight per relation and the basis decomposition) over the homogeneous form of each block, ``to_hetero`` over
``SAGEConv`` and ``GATConv(add_self_loops=False)`` with ``aggr="sum"`` over PyG's per-type form, input projections
and embeddings included; outputs and every gradient; the numba and torch kernels with the same dropout masks; the
layers on a whole-graph block against ``HeteroConv`` on the graph's edges; the input, the config and their errors."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.graph.typed import typed_graph
from gnnscale.nn import (RGATConv, RGCNConv, RSAGEConv, TypedInput, TypedModel, TypedModelConfig, sources_by_type,
                         typed_input)
from gnnscale.nn.functional import csr_attention, csr_sum
from gnnscale.nn.relational import relation_means
from gnnscale.nn.torch_ops import attention as torch_attention
from gnnscale.sampling.typed import RelationBlock, TypedBlock, sample_typed_blocks

torch_geometric = pytest.importorskip("torch_geometric")  # the oracle: the gpu-marked tests collect without PyG
pyg_nn = pytest.importorskip("torch_geometric.nn")

NODES = {"paper": 40, "author": 30, "field": 6}
FEATURES = {"paper": 7, "field": 5}  # authors have none: a learnable embedding
SEEDS = np.arange(0, 40, 5)  # papers; paper 35 has no author (see the graph)
TARGET = "paper"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads cost more than they give on a busy 2-core machine
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _pyg_rgcn_loops_over_relations(monkeypatch):
    # RGCNConv may take pyg_lib's segment_matmul, which (PyG's own TODO) does not divide by the relation's
    # degree under aggr="mean"; the loop over relations is the definition these tests compare against.
    monkeypatch.setattr(torch_geometric.backend, "use_segment_matmul", False)


@pytest.fixture(scope="module")
def graph():
    """A small mag-like graph: authors write papers 0..34 only (papers 35..39 have no in-edge by writes, so some
    destinations have none by one relation), papers cite papers (self-citations included) and have topics; every
    relation with its reverse (PyG's ToUndirected: rev_writes, rev_has_topic; cites gets its reversed edges)."""
    rng = np.random.default_rng(1)
    edges = {"author__writes__paper": (rng.integers(0, 30, 70), rng.integers(0, 35, 70)),
             "paper__cites__paper": (rng.integers(0, 40, 60), rng.integers(0, 40, 60)),
             "paper__has_topic__field": (rng.integers(0, 40, 45), rng.integers(0, 6, 45))}
    return typed_graph(NODES, edges, reverse=True)


@pytest.fixture(scope="module")
def features():
    gen = torch.Generator().manual_seed(5)
    return {t: torch.randn(NODES[t], d, generator=gen, dtype=torch.float64) for t, d in FEATURES.items()}


@pytest.fixture(scope="module", params=[False, True], ids=["noreplace", "replace"])
def blocks(graph, request):
    """Three typed blocks (input layer first) for 8 papers, fanout 3, 2, 2 per relation: below many degrees."""
    return sample_typed_blocks(graph, SEEDS, [3, 2, 2], key=7, replace=request.param)


def test_blocks_exercise_every_case(graph, blocks, request):
    # Guards the oracle tests: every relation has edges, some destination has none by some relation, and with
    # replacement some edge is drawn twice (each copy must count).
    for r in range(len(graph.relations)):
        assert sum(b.relations[r].num_edges for b in blocks) > 0, graph.relations[r]
    assert any(bool((rel.indptr.diff() == 0).any()) for b in blocks for rel in b.relations if rel.dst.numel())
    repeats = 0
    for b in blocks:
        for rel in b.relations:
            dst = np.repeat(rel.dst.numpy(), np.diff(rel.indptr.numpy()))
            pairs = np.stack([rel.indices.numpy(), dst], axis=1)
            repeats += pairs.shape[0] - np.unique(pairs, axis=0).shape[0]
    assert (repeats > 0) == ("replace" in request.node.callspec.id.split("-"))


# --- PyG's forms of a typed block, computed here from the block's global ids -----------------------------------


def _type_positions(src_ids: np.ndarray, graph) -> dict[str, np.ndarray]:
    """{type: positions of its nodes in src_ids}, ascending: PyG's per-type node order."""
    types = np.searchsorted(graph.type_offsets, src_ids, side="right") - 1
    return {t: np.nonzero(types == i)[0] for i, t in enumerate(graph.node_types)}


def _edge_dst(rel: RelationBlock) -> np.ndarray:
    return np.repeat(rel.dst.numpy(), np.diff(rel.indptr.numpy()))


def _hetero_form(block: TypedBlock, graph) -> tuple[dict, dict]:
    """PyG's form of a block: ``edge_index_dict`` over ids within each type (a type's sources numbered in
    block order, so its destinations come first) and the number of destinations of each type."""
    positions = _type_positions(block.src_ids.numpy(), graph)
    rank = np.empty(block.num_src, dtype=np.int64)
    for pos in positions.values():
        rank[pos] = np.arange(pos.shape[0])
    edge_index = {(rel.src, rel.name, rel.dst): torch.from_numpy(np.stack([rank[part.indices.numpy()],
                                                                             rank[_edge_dst(part)]]))
                  for rel, part in zip(graph.relations, block.relations)}
    return edge_index, {t: int((pos < block.num_dst).sum()) for t, pos in positions.items()}


def _homogeneous_form(block: TypedBlock) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edge_index, edge_type)`` of a block for RGCNConv((x_src, x_dst), ...): positions in the block."""
    src = np.concatenate([part.indices.numpy() for part in block.relations])
    dst = np.concatenate([_edge_dst(part) for part in block.relations])
    kind = np.concatenate([np.full(part.num_edges, r) for r, part in enumerate(block.relations)])
    return torch.from_numpy(np.stack([src, dst])), torch.from_numpy(kind)


class _Wrap(torch.nn.Module):
    """One conv as a module for ``to_hetero``; the attribute is named as our layers' (``convs``), so that
    ``to_hetero``'s parameter names (``convs.<src__name__dst>.lin_l.weight``) are ours."""

    def __init__(self, conv):
        super().__init__()
        self.convs = conv

    def forward(self, x, edge_index):
        return self.convs(x, edge_index)


class _Encoder(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.project = torch.nn.ModuleDict({t: torch.nn.Linear(d, width) for t, d in FEATURES.items()})
        self.embed = torch.nn.ModuleDict({t: torch.nn.Embedding(NODES[t], width) for t in NODES if t not in FEATURES})

    def forward(self, x: TypedInput) -> dict:
        return {t: self.project[t](x.features[t]) if t in self.project else self.embed[t](x.ids[t]) for t in NODES}


class PygModel(torch.nn.Module):
    """The same model in PyG, parameters named as ours: input projections and embeddings per type, then per
    layer ``RGCNConv`` (rgcn) or ``to_hetero`` of a ``SAGEConv`` / ``GATConv(add_self_loops=False)`` with
    ``aggr="sum"``; between layers each type is cut to the block's destinations (PyG's ``trim_to_layer``)."""

    def __init__(self, cfg: TypedModelConfig, graph):
        super().__init__()
        self.cfg, self.graph = cfg, graph
        self.encoder = _Encoder(cfg.width)
        metadata = (list(graph.node_types), [(r.src, r.name, r.dst) for r in graph.relations])
        outs = [cfg.width] * (cfg.num_layers - 1) + [cfg.num_classes]
        if cfg.name == "rgcn":
            layers = [pyg_nn.RGCNConv(cfg.width, o, len(graph.relations), num_bases=cfg.num_bases) for o in outs]
        elif cfg.name == "rsage":
            layers = [pyg_nn.to_hetero(_Wrap(pyg_nn.SAGEConv(cfg.width, o)), metadata, aggr="sum") for o in outs]
        else:
            convs = [pyg_nn.GATConv(cfg.width, cfg.hidden_dim, cfg.heads, add_self_loops=False)
                     for _ in range(cfg.num_layers - 1)]
            convs.append(pyg_nn.GATConv(cfg.width, cfg.num_classes, cfg.out_heads, concat=False, add_self_loops=False))
            layers = [pyg_nn.to_hetero(_Wrap(c), metadata, aggr="sum") for c in convs]
        self.layers = torch.nn.ModuleList(layers)

    def _act(self, h):
        return F.elu(h) if self.cfg.name == "rgat" else F.relu(h)

    def forward(self, blocks, x: TypedInput) -> torch.Tensor:
        x_dict = self.encoder(x)
        if self.cfg.name == "rgcn":
            h = torch.cat([x_dict[t] for t in NODES])[self._order(blocks[0])]
            for i, (conv, block) in enumerate(zip(self.layers, blocks)):
                h = conv((h, h[: block.num_dst]), *_homogeneous_form(block))
                h = h if i == len(blocks) - 1 else self._act(h)
            return h
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            edge_index, num_dst = _hetero_form(block, self.graph)
            out = layer(x_dict, edge_index)
            x_dict = {t: v[: num_dst[t]] if i == len(blocks) - 1 else self._act(v[: num_dst[t]])
                      for t, v in out.items()}
        return x_dict[TARGET]

    def _order(self, block) -> torch.Tensor:
        """The row of every source in the per-type rows concatenated in type order."""
        positions = _type_positions(block.src_ids.numpy(), self.graph)
        order = np.empty(block.num_src, dtype=np.int64)
        order[np.concatenate([positions[t] for t in NODES])] = np.arange(block.num_src)
        return torch.from_numpy(order)


def _config(graph, name: str, **fields) -> TypedModelConfig:
    base = dict(name=name, num_classes=4, num_layers=3, hidden_dim=6, heads=3, out_heads=2, dropout=0.0)
    return TypedModelConfig.for_graph(graph, feature_dims=FEATURES, **{**base, **fields})


def _input(block, graph, features, dtype) -> TypedInput:
    x = typed_input(block, graph, {t: f.to(dtype) for t, f in features.items()})
    for rows in x.features.values():
        rows.requires_grad_()
    return x


def _tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)


def _grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of a fixed weighted sum of ``out``; a tensor the output does not reach gets zeros (the last
    layer's relations into other types than the seeds' do not reach it, in PyG's model as in ours)."""
    weight = torch.arange(out.numel(), dtype=out.dtype, device=out.device).view_as(out) / out.numel()
    grads = torch.autograd.grad((out * weight).sum(), inputs, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]


MODEL_CASES = [("rgcn", None), ("rgcn", 2), ("rsage", None), ("rgat", None)]


@pytest.mark.parametrize("name, num_bases", MODEL_CASES, ids=["rgcn", "rgcn-bases", "rsage", "rgat"])
@pytest.mark.parametrize("kernels", ["numba", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_model_matches_pyg_with_copied_weights(graph, blocks, features, name, num_bases, kernels, dtype):
    torch.manual_seed(0)
    cfg = _config(graph, name, num_bases=num_bases, kernels=kernels)
    ours = TypedModel(cfg).to(dtype)
    ref = PygModel(cfg, graph).to(dtype)
    ours_params, ref_params = dict(ours.named_parameters()), dict(ref.named_parameters())
    assert set(ours_params) == set(ref_params)  # the same parameters, under the same names
    with torch.no_grad():
        for pname, p in ours_params.items():
            if pname.endswith("bias"):
                p.normal_()  # zero biases would not test that they are copied and added
            ref_params[pname].copy_(p.view_as(ref_params[pname]))
    x = _input(blocks[0], graph, features, dtype)
    out, expected = ours(blocks, x), ref(blocks, x)
    assert out.shape == (len(SEEDS), cfg.num_classes)
    torch.testing.assert_close(out, expected, **_tol(dtype))
    names = sorted(ours_params)
    leaves = list(x.features.values())
    got = _grads(out, leaves + [ours_params[n] for n in names])
    want = _grads(expected, leaves + [ref_params[n] for n in names])
    for n, a, b in zip(["features"] * len(leaves) + names, got, want, strict=True):
        torch.testing.assert_close(a, b.view_as(a), **_tol(dtype), msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_layer_on_a_whole_graph_block_matches_heteroconv_on_the_graph(graph, name):
    """A block of every node with all its neighbors (what layer-wise inference gives a layer) against PyG on the
    graph's own edges (TypedGraph.edges), not the block's."""
    (block,) = sample_typed_blocks(graph, np.arange(graph.num_nodes), [-1], key=1)
    torch.manual_seed(1)
    width, rels = 5, [(r.src, r.name, r.dst) for r in graph.relations]
    x = torch.randn(graph.num_nodes, width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    x_dict = {t: x[slice(*graph.node_range(t))] for t in graph.node_types}
    edge_index = {rel: torch.from_numpy(np.stack(graph.edges(rel))) for rel in rels}
    if name == "rgcn":
        ours = RGCNConv(width, 3, len(rels)).double()
        ref = pyg_nn.RGCNConv(width, 3, len(rels)).double()
        ref.load_state_dict(ours.state_dict())
        offsets = {t: graph.node_range(t)[0] for t in graph.node_types}
        homogeneous = torch.cat([edge_index[r] + torch.tensor([[offsets[r[0]]], [offsets[r[2]]]]) for r in rels], 1)
        kinds = torch.cat([torch.full((edge_index[r].shape[1],), i) for i, r in enumerate(rels)])
        out, expected = ours(block, x), ref(x, homogeneous, kinds)
    else:
        if name == "rsage":
            ours = RSAGEConv(width, 3, graph.relations).double()
            ref = pyg_nn.HeteroConv({r: pyg_nn.SAGEConv(width, 3) for r in rels}, aggr="sum").double()
        else:
            ours = RGATConv(width, 3, 2, graph.relations).double()
            ref = pyg_nn.HeteroConv({r: pyg_nn.GATConv(width, 3, 2, add_self_loops=False) for r in rels},
                                    aggr="sum").double()
        with torch.no_grad():
            for rel, conv in zip(graph.relations, ours.convs.values()):
                for pname, p in ref.convs[(rel.src, rel.name, rel.dst)].named_parameters():
                    p.copy_(conv.get_parameter(pname).view_as(p))
        args = ({t: torch.arange(*graph.node_range(t)) for t in graph.node_types},) if name == "rgat" else ()
        out = ours(block, x, *args)
        expected = torch.cat([ref(x_dict, edge_index)[t] for t in graph.node_types])
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


# --- the numba and torch kernels: the same numbers and the same dropout masks ------------------------------------


@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_torch_kernels_match_numba_with_every_dropout(graph, blocks, features, name):
    """Input, hidden and attention dropout all on: the same key draws the same masks on both paths."""
    results = {}
    for kernels in ("numba", "torch"):
        torch.manual_seed(3)
        cfg = _config(graph, name, num_bases=2 if name == "rgcn" else None, dropout=0.5, input_dropout=0.2,
                      attn_dropout=0.3, kernels=kernels)
        model = TypedModel(cfg)
        x = _input(blocks[0], graph, features, torch.float32)
        out = model(blocks, x, dropout_key=2024)
        params = [p for _, p in sorted(model.named_parameters())]
        results[kernels] = [out.detach(), *_grads(out, list(x.features.values()) + params)]
        assert not torch.allclose(out, model.eval()(blocks, x))  # dropout dropped something
    for i, (a, b) in enumerate(zip(results["torch"], results["numba"], strict=True)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"tensor {i} (0: output): {m}")


def _relation_attention_oracle(indptr, indices, z, score_src, score_dst, slope):
    """Per destination and head, softmax over its in-edges only, by hand (float64)."""
    out = torch.zeros(score_dst.shape[0], z.shape[1], z.shape[2], dtype=z.dtype)
    for i in range(score_dst.shape[0]):
        edges = indices[indptr[i]:indptr[i + 1]]
        if edges.numel():
            logits = F.leaky_relu(score_src[edges] + score_dst[i], slope)  # [deg, H]
            out[i] = (torch.softmax(logits, dim=0).unsqueeze(-1) * z[edges]).sum(0)
    return out


def test_attention_without_self_edge_by_hand_and_both_kernels():
    # 5 destinations over 3 sources (more destinations than sources: no destination is a row of z):
    #   dst 0 <- 0, 2;  dst 1 <- (none);  dst 2 <- 1, 1 (a repeated draw);  dst 3 <- 2;  dst 4 <- 0, 1, 2
    indptr = torch.tensor([0, 2, 2, 4, 5, 8])
    indices = torch.tensor([0, 2, 1, 1, 2, 0, 1, 2])
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(3, 2, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    score_src = torch.randn(3, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    score_dst = torch.randn(5, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    expected = _relation_attention_oracle(indptr, indices, z, score_src, score_dst, 0.2)
    weight = torch.randn(expected.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = torch.autograd.grad((expected * weight).sum(), [z, score_src, score_dst])
    options = dict(negative_slope=0.2, dropout=0.0, key=0, self_edge=False)
    for out in (csr_attention(indptr, indices, z, score_src, score_dst, **options),
                torch_attention(indptr, indices, z, score_src, score_dst, **options)):
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
        assert torch.equal(out[1], torch.zeros(2, 4, dtype=torch.float64))
        got = torch.autograd.grad((out * weight).sum(), [z, score_src, score_dst])
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda *t: csr_attention(indptr, indices, *t, **options), (z, score_src, score_dst))
    with pytest.raises(ValueError, match="z: a self edge reads destination i's row of z"):
        csr_attention(indptr, indices, z, score_src, score_dst)


def test_attention_without_self_edge_drops_the_same_weights_on_both_kernels():
    indptr, indices = torch.tensor([0, 3, 3, 7]), torch.tensor([0, 1, 1, 2, 0, 3, 3])
    gen = torch.Generator().manual_seed(6)
    z = torch.randn(4, 3, 2, dtype=torch.float64, generator=gen)
    score_src, score_dst = torch.randn(4, 3, generator=gen).double(), torch.randn(3, 3, generator=gen).double()
    options = dict(negative_slope=0.2, dropout=0.5, key=77, self_edge=False)
    fast = csr_attention(indptr, indices, z, score_src, score_dst, **options)
    torch.testing.assert_close(torch_attention(indptr, indices, z, score_src, score_dst, **options), fast,
                               atol=1e-12, rtol=1e-12)
    assert not torch.allclose(fast, csr_attention(indptr, indices, z, score_src, score_dst,
                                                  **{**options, "dropout": 0.0}))


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_relation_means_by_hand(kernels):
    # 3 destinations, 4 sources. Relation 0 into destinations 0, 2: 0 <- x1, x3; 2 <- (none): 0. Relation 1 into
    # destination 1: 1 <- x3, x3, x0. Own rows: x2, x0.
    block = TypedBlock(src_ids=torch.arange(4), num_dst=3, relations=(
        RelationBlock(dst=torch.tensor([0, 2]), indptr=torch.tensor([0, 2, 2]), indices=torch.tensor([1, 3])),
        RelationBlock(dst=torch.tensor([1]), indptr=torch.tensor([0, 3]), indices=torch.tensor([3, 3, 0]))))
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0], [13.0, 17.0]], dtype=torch.float64, requires_grad=True)
    out = relation_means(block, x, torch.tensor([2, 0]), kernels=kernels)
    torch.testing.assert_close(out, torch.tensor([[8.0, 11.0], [0.0, 0.0], [9.0, 12.0], [7.0, 11.0], [1.0, 2.0]],
                                                 dtype=torch.float64))
    (grad,) = torch.autograd.grad((out * torch.arange(1.0, 6.0, dtype=torch.float64).unsqueeze(1)).sum(), x)
    # x0: relation 1's row (weight 3) / 3 + own row (weight 5); x1: row 0 (1) / 2; x2: own (4); x3: 1/2 + 2 * 3/3
    torch.testing.assert_close(grad[:, 0], torch.tensor([6.0, 0.5, 4.0, 2.5], dtype=torch.float64))


def test_csr_mean_by_hand():
    # rows: 0 <- x0, x2;  1 <- (none): 0;  2 <- x1, x1
    indptr, indices = torch.tensor([0, 2, 2, 4]), torch.tensor([0, 2, 1, 1])
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0]], requires_grad=True)
    out = csr_sum(indptr, indices, 3, x, norm="mean")
    torch.testing.assert_close(out, torch.tensor([[4.0, 6.5], [0.0, 0.0], [3.0, 5.0]]))
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, torch.tensor([[0.5, 0.5], [1.0, 1.0], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="norm: expected 'sum' or 'mean', got 'gcn'"):
        csr_sum(indptr, indices, 3, x, norm="gcn")


def _block_to(block: TypedBlock, device) -> TypedBlock:
    return TypedBlock(src_ids=block.src_ids.to(device), num_dst=block.num_dst,
                      relations=tuple(RelationBlock(dst=r.dst.to(device), indptr=r.indptr.to(device),
                                                    indices=r.indices.to(device)) for r in block.relations))


@pytest.mark.parametrize("kernels", ["torch", "auto"])
@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_model_runs_on_a_device_without_host_syncs(graph, blocks, features, name, kernels):
    """On the meta device, as on CUDA, ``.item()``, ``.numpy()`` and mixes with CPU tensors raise; ``"auto"``
    takes the torch path there."""
    torch.manual_seed(2)
    cfg = _config(graph, name, num_bases=2 if name == "rgcn" else None, dropout=0.5, input_dropout=0.2,
                  attn_dropout=0.3, kernels=kernels)
    model = TypedModel(cfg).to("meta")
    x = typed_input(blocks[0], graph, {t: f.float() for t, f in features.items()}).to("meta")
    out = model([_block_to(b, "meta") for b in blocks], x, dropout_key=5)
    out.sum().backward()
    assert out.device.type == "meta" and out.shape == (len(SEEDS), cfg.num_classes)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_model_on_cuda_matches_numba_on_the_cpu(graph, blocks, features, name):
    results = {}
    for device, kernels in (("cpu", "numba"), ("cuda", "auto")):
        torch.manual_seed(3)
        model = TypedModel(_config(graph, name, dropout=0.5, input_dropout=0.2, attn_dropout=0.3,
                                   kernels=kernels)).to(device)
        x = typed_input(blocks[0], graph, {t: f.float() for t, f in features.items()}).to(device)
        out = model([_block_to(b, device) for b in blocks], x, dropout_key=9)
        params = [p for _, p in sorted(model.named_parameters())]
        results[device] = [t.cpu() for t in [out.detach(), *_grads(out, params)]]
    for a, b in zip(results["cuda"], results["cpu"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# --- feature rows stored in half precision -----------------------------------------------------------------------


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_rows_project_as_their_widened_rows_and_only_the_half_rows_are_kept(monkeypatch, half):
    from gnnscale.nn import typed_models

    monkeypatch.setattr(typed_models, "ROWS_PER_CHUNK", 7)  # several chunks, the last one short
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(23, 16, generator=gen).to(half)
    linear = torch.nn.Linear(16, 8)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.dtype, tuple(t.shape))) or t, lambda t: t):
        out = typed_models.project_rows(linear, rows)
    grad = torch.randn(out.shape, generator=gen)
    ours = [out, *torch.autograd.grad(out, (linear.weight, linear.bias), grad)]
    widened = linear(rows.float())  # the oracle: torch's Linear on a float32 copy of the rows
    expected = [widened, *torch.autograd.grad(widened, (linear.weight, linear.bias), grad)]
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (half, (23, 16)) in saved and (torch.float32, (23, 16)) not in saved, saved


@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_a_model_fed_half_rows_computes_as_on_the_same_values_in_float32(graph, blocks, features, name):
    torch.manual_seed(4)
    model = TypedModel(_config(graph, name))
    half = {t: f.to(torch.float16) for t, f in features.items()}
    outs = [model(blocks, typed_input(blocks[0], graph, rows)) for rows in (half, {t: f.float() for t, f in
                                                                                 half.items()})]
    assert typed_input(blocks[0], graph, half).features["paper"].dtype == torch.float16
    params = [p for _, p in sorted(model.named_parameters())]
    for a, b in zip([outs[0], *_grads(outs[0], params)], [outs[1], *_grads(outs[1], params)], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# --- input, config and their errors -----------------------------------------------------------------------------


def test_sources_by_type_and_typed_input_by_hand(graph, blocks, features):
    block = blocks[0]
    src = block.src_ids.numpy()
    by_type = sources_by_type(block.src_ids, graph)
    x = typed_input(block, graph, features)
    assert list(by_type) == list(graph.node_types) and x.num_src == block.num_src
    for t in graph.node_types:
        lo, hi = graph.node_range(t)
        pos = np.array([p for p, v in enumerate(src) if lo <= v < hi])
        positions, ids = by_type[t]
        assert positions.tolist() == pos.tolist() and ids.tolist() == (src[pos] - lo).tolist()
        assert torch.equal(x.positions[t], positions)
        if t in features:
            assert torch.equal(x.features[t], features[t][src[pos] - lo]) and t not in x.ids
        else:
            assert torch.equal(x.ids[t], ids) and t not in x.features
    with pytest.raises(ValueError, match=r"src_ids: expected global ids in \[0, 76\), got range"):
        sources_by_type(torch.tensor([3, 76]), graph)
    with pytest.raises(ValueError, match="features: node type 'venue' is not one of paper, author, field"):
        typed_input(block, graph, {"venue": features["paper"]})


def test_config_records_what_rebuilds_the_model(graph, blocks, features):
    torch.manual_seed(4)
    cfg = _config(graph, "rgcn", num_bases=3, kernels="torch")
    assert cfg.embedding_rows == {"author": 30} and cfg.feature_dims == FEATURES
    assert cfg.relations[0] == ("author", "writes", "paper") and cfg.relations[-1] == ("field", "rev_has_topic", "paper")
    again = TypedModelConfig(**json.loads(json.dumps(asdict(cfg))))  # lists back from JSON: the same config
    assert again == cfg
    model, rebuilt = TypedModel(cfg).eval(), TypedModel(again).eval()
    rebuilt.load_state_dict(model.state_dict())
    x = typed_input(blocks[0], graph, {t: f.float() for t, f in features.items()})
    assert torch.equal(model(blocks, x), rebuilt(blocks, x))
    assert model.layers[0].weight.shape == (3, 6, 6) and model.layers[0].comp.shape == (len(graph.relations), 3)
    assert model.encoder.embed["author"].weight.shape == (30, 6)
    gat = TypedModel(_config(graph, "rgat", hidden_dim=5, heads=4, out_heads=2))
    assert gat.encoder.project["paper"].out_features == 20 and gat.layers[-1].out_width == 4


@pytest.mark.parametrize("change, match", [
    (dict(name="hgt"), r"model: expected one of \('rgcn', 'rsage', 'rgat'\), got 'hgt'"),
    (dict(feature_dims={"paper": 7}), "feature_dims, embedding_rows: expected node type 'field' in exactly one"),
    (dict(embedding_rows={"author": 30, "field": 6}), "expected node type 'field' in exactly one .* found it in 2"),
    (dict(feature_dims={"paper": 0, "field": 5}), r"feature_dims\[paper\]: expected a positive int, got 0"),
    (dict(embedding_rows={"author": 30, "venue": 3}), "embedding_rows: node type 'venue' is not one of"),
    (dict(relations=[("author", "writes", "venue")]), "relations: author__writes__venue names node type 'venue'"),
    (dict(relations=[]), "relations: expected one or more distinct relations"),
    (dict(num_bases=0), "num_bases: expected a positive int, got 0"),
    (dict(kernels="cuda"), "kernels: expected one of"),
    (dict(attn_dropout=1.0), r"attn_dropout: expected a probability in \[0, 1\), got 1.0"),
])
def test_config_errors(change, match):
    fields = dict(name="rgcn", node_types=("paper", "author", "field"), feature_dims=FEATURES,
                  embedding_rows={"author": 30}, relations=[("author", "writes", "paper")], num_classes=3,
                  num_layers=2)
    with pytest.raises(ValueError, match=match):
        TypedModelConfig(**{**fields, **change})


@pytest.mark.parametrize("name", ["rsage", "rgat"])
def test_a_type_that_sends_but_receives_nothing_needs_its_reverse(name):
    fields = dict(node_types=("paper", "author"), feature_dims={"paper": 4}, embedding_rows={"author": 3},
                  relations=[("author", "writes", "paper")], num_classes=2)
    with pytest.raises(ValueError, match="relations: node type 'author' sends messages but no relation enters it"):
        TypedModelConfig(name=name, num_layers=2, **fields)
    TypedModelConfig(name=name, num_layers=1, **fields)  # one layer reads the input rows only
    TypedModelConfig(name="rgcn", num_layers=2, **fields)  # R-GCN's root weight keeps every type


def test_input_errors(graph, blocks, features):
    model = TypedModel(_config(graph, "rsage"))
    x = typed_input(blocks[0], graph, {t: f.float() for t, f in features.items()})
    narrow = TypedInput(num_src=x.num_src, positions=x.positions, features={**x.features, "paper": x.features[
        "paper"][:, :3]}, ids=x.ids)
    with pytest.raises(ValueError, match=r"x: node type 'paper' has feature rows of shape \[\d+, 3\], the model "
                                         r"takes 7 features"):
        model(blocks, narrow)
    with pytest.raises(ValueError, match="x: node type 'field' has both features and ids"):
        TypedInput(num_src=x.num_src, positions=x.positions, features=x.features, ids={**x.ids, "field": x.ids[
            "author"][:0]})
    with pytest.raises(ValueError, match="x: expected the local ids of node type 'author'"):
        model(blocks, TypedInput(num_src=x.num_src, positions=x.positions, features=x.features, ids={}))
    with pytest.raises(ValueError, match=r"x: the positions of all types cover \d+ sources, expected num_src=3"):
        TypedInput(num_src=3, positions=x.positions, features=x.features, ids=x.ids)
    with pytest.raises(ValueError, match=r"x: node type 'paper' has 2 rows for \d+ positions"):
        TypedInput(num_src=x.num_src, positions=x.positions, features={**x.features, "paper": x.features["paper"][:2]},
                   ids=x.ids)
    with pytest.raises(ValueError, match=f"x: expected the {blocks[-1].num_src} sources of the first block, got "
                                         f"{x.num_src}"):
        model(blocks[::-1], x)
    with pytest.raises(ValueError, match="blocks: expected 3 blocks"):
        model(blocks[:2], x)
    with pytest.raises(TypeError, match="x: expected a TypedInput"):
        model(blocks, torch.zeros(blocks[0].num_src, 7))
    with pytest.raises(ValueError, match=r"x_src: expected shape \[num_src="):
        model.layers[0](blocks[0], torch.zeros(blocks[0].num_src, 2))
    with pytest.raises(ValueError, match="block: expected 5 relations"):
        model.layers[0](TypedBlock(src_ids=blocks[0].src_ids, num_dst=blocks[0].num_dst,
                                   relations=blocks[0].relations[:3]), torch.zeros(blocks[0].num_src, 6))
    gat = RGATConv(6, 2, 2, graph.relations)
    with pytest.raises(ValueError, match="src_positions: expected the sources of every type a relation leaves, "
                                         "missing author, field"):
        gat(blocks[0], torch.zeros(blocks[0].num_src, 6), {"paper": x.positions["paper"]})
    with pytest.raises(ValueError, match="relations: expected one or more distinct relations"):
        RSAGEConv(6, 2, [graph.relations[0], graph.relations[0]])
