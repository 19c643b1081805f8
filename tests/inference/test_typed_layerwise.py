"""Layer-wise inference of typed models (R-GCN, R-SAGE, R-GAT) against two oracles: a dense brute force of each
model's formula on a graph drawn by hand, and the model's own forward pass on sampled blocks whose fanouts exceed
every in-degree (so every neighbor is taken) on a mag-like graph; chunking and node subsets change no row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.graph.typed import typed_graph
from gnnscale.inference.typed_layerwise import typed_layerwise_inference
from gnnscale.nn import TypedModel, TypedModelConfig, typed_input
from gnnscale.sampling.typed import sample_typed_blocks

MODELS = ("rgcn", "rsage", "rgat")

# The graph by hand: papers p0..p3 (3 features each), authors a0..a2 (no features: an embedding).
#
#   writes (author -> paper):     a0->p0  a0->p1  a1->p1  a2->p3          (p2: no author)
#   rev_writes (paper -> author): p0->a0  p1->a0  p1->a1  p3->a2
#   cites (paper -> paper):       p1->p0  p2->p0  p0->p1  p3->p2  p0->p2
HAND_EDGES = {"author__writes__paper": ([0, 0, 1, 2], [0, 1, 1, 3]),
              "paper__rev_writes__author": ([0, 1, 1, 3], [0, 0, 1, 2]),
              "paper__cites__paper": ([1, 2, 0, 3, 0], [0, 0, 1, 2, 2])}
HAND_COUNTS = {"paper": 4, "author": 3}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads cost more than they give on a busy 2-core machine
    yield
    torch.set_num_threads(threads)


def model_of(graph, features: dict, name: str, seed: int = 0, **kw) -> TypedModel:
    torch.manual_seed(seed)
    cfg = TypedModelConfig.for_graph(graph, feature_dims={t: x.shape[1] for t, x in features.items()}, name=name,
                                     num_classes=3, num_layers=2, hidden_dim=4, heads=2, **kw)
    return TypedModel(cfg).eval()


def dense_layer(layer, name: str, h: dict, last: bool) -> dict:
    """One layer's output per node type by its formula, over dense adjacency matrices of HAND_EDGES."""
    out = {}
    for t, n in HAND_COUNTS.items():
        total = 0.0
        if name == "rgcn":
            total = h[t] @ layer.root + layer.bias
        weights = layer.relation_weights() if name == "rgcn" else None
        for r, (rel, (src, dst)) in enumerate(HAND_EDGES.items()):
            s_type, _, d_type = rel.split("__")
            if d_type != t:
                continue
            adj = torch.zeros(n, HAND_COUNTS[s_type])
            adj[dst, src] = 1.0
            mean = adj / adj.sum(1, keepdim=True).clamp(min=1)
            if name == "rgcn":
                total = total + mean @ h[s_type] @ weights[r]
            elif name == "rsage":
                conv = layer.convs[rel]
                total = total + conv.lin_l(mean @ h[s_type]) + conv.lin_r(h[t])
            else:
                total = total + dense_attention(layer, layer.convs[rel], adj, h[s_type], h[t])
        out[t] = total if isinstance(total, torch.Tensor) else torch.zeros(n, layer.out_dim)
    if not last:
        out = {t: F.elu(v) if name == "rgat" else F.relu(v) for t, v in out.items()}
    return out


def dense_attention(layer, conv, adj: torch.Tensor, x_src: torch.Tensor, x_dst: torch.Tensor) -> torch.Tensor:
    """GAT of one relation, head by head, destination by destination (no self edge; 0 without in-edges)."""
    heads, width = layer.heads, layer.out_dim
    z_src, z_dst = conv.lin(x_src).view(-1, heads, width), conv.lin(x_dst).view(-1, heads, width)
    out = torch.zeros(x_dst.shape[0], heads, width)
    for i in range(x_dst.shape[0]):
        nbrs = torch.nonzero(adj[i]).flatten()
        if nbrs.numel():
            e = F.leaky_relu((z_src[nbrs] * conv.att_src).sum(-1) + (z_dst[i] * conv.att_dst).sum(-1), 0.2)
            out[i] = (torch.softmax(e, dim=0).unsqueeze(-1) * z_src[nbrs]).sum(0)
    out = out.reshape(x_dst.shape[0], -1) if layer.concat else out.mean(1)
    return out + conv.bias


@pytest.mark.parametrize("name", MODELS)
def test_layerwise_equals_the_dense_formula_on_a_graph_by_hand(name, tmp_path):
    graph = typed_graph(HAND_COUNTS, HAND_EDGES)
    features = {"paper": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    model = model_of(graph, features, name)
    files = typed_layerwise_inference(model, graph, features, tmp_path, chunk_size=2)
    with torch.no_grad():
        h = {"paper": model.encoder.project["paper"](torch.from_numpy(features["paper"])),
             "author": model.encoder.embed["author"].weight}
        for i, layer in enumerate(model.layers):
            h = dense_layer(layer, name, h, last=i == len(model.layers) - 1)
            got = np.load(files[i])
            torch.testing.assert_close(torch.from_numpy(got[:4]), h["paper"], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(torch.from_numpy(got[4:]), h["author"], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def mag():
    """A mag-like graph with every reverse; authors without features, papers 35..39 without an author."""
    rng = np.random.default_rng(1)
    edges = {"author__writes__paper": (rng.integers(0, 30, 70), rng.integers(0, 35, 70)),
             "paper__cites__paper": (rng.integers(0, 40, 60), rng.integers(0, 40, 60)),
             "paper__has_topic__field": (rng.integers(0, 40, 45), rng.integers(0, 6, 45))}
    graph = typed_graph({"paper": 40, "author": 30, "field": 6}, edges, reverse=True)
    features = {"paper": rng.standard_normal((40, 7)).astype(np.float32),
                "field": rng.standard_normal((6, 5)).astype(np.float32)}
    return graph, features


@pytest.mark.parametrize("name", MODELS)
def test_layerwise_equals_the_forward_pass_on_blocks_that_take_every_neighbor(mag, name, tmp_path):
    graph, features = mag
    model = model_of(graph, features, name, seed=2)
    files = typed_layerwise_inference(model, graph, features, tmp_path, chunk_size=16)
    seeds = np.arange(graph.num_nodes)  # every node of every type
    degree = int(np.diff(graph.graph.indptr).max())
    blocks = sample_typed_blocks(graph, seeds, [degree + 1, degree + 1], key=7)
    with torch.no_grad():
        expected = model(blocks, typed_input(blocks[0], graph, {t: torch.from_numpy(x) for t, x in features.items()}))
    torch.testing.assert_close(torch.from_numpy(np.load(files[-1])[seeds]), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rgcn", "rgat"])
def test_a_node_subset_and_any_chunk_size_give_the_same_rows(mag, name, tmp_path):
    graph, features = mag
    model = model_of(graph, features, name, seed=3)
    for folder in ("whole", "some"):
        (tmp_path / folder).mkdir()
    whole = np.load(typed_layerwise_inference(model, graph, features, tmp_path / "whole", chunk_size=1000)[-1])
    papers = np.array([3, 17, 39], dtype=np.int64)
    some = np.load(typed_layerwise_inference(model, graph, features, tmp_path / "some", nodes=papers, chunk_size=2)[-1])
    np.testing.assert_allclose(some[papers], whole[papers], rtol=1e-5, atol=1e-6)


def test_bad_input_is_one_line_naming_the_argument(mag, tmp_path):
    graph, features = mag
    model = model_of(graph, features, "rgcn")
    with pytest.raises(ValueError, match=r"features: expected node type 'field'\'s rows of shape \[6, 5\]"):
        typed_layerwise_inference(model, graph, {"paper": features["paper"]}, tmp_path)
    with pytest.raises(ValueError, match=r"nodes: expected global ids in \[0, 76\), got range \[0, 76\]"):
        typed_layerwise_inference(model, graph, features, tmp_path, nodes=np.array([0, 76]))
    with pytest.raises(ValueError, match="chunk_size: expected a positive int, got 0"):
        typed_layerwise_inference(model, graph, features, tmp_path, chunk_size=0)
    with pytest.raises(TypeError, match="model: expected a TypedModel"):
        typed_layerwise_inference(torch.nn.Linear(2, 2), graph, features, tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_layerwise_on_cuda_equals_the_cpu(mag, name, tmp_path):
    graph, features = mag
    model = model_of(graph, features, name, seed=4)
    for folder in ("cpu", "cuda"):
        (tmp_path / folder).mkdir()
    cpu = np.load(typed_layerwise_inference(model, graph, features, tmp_path / "cpu", chunk_size=16)[-1])
    cuda = np.load(typed_layerwise_inference(model, graph, features, tmp_path / "cuda", chunk_size=16,
                                             device="cuda")[-1])
    np.testing.assert_allclose(cuda, cpu, rtol=0, atol=1e-5)  # another summation order on the GPU
    assert next(model.parameters()).device.type == "cpu"  # the weights are back where they were
