"""Layer-wise full-neighborhood inference against PyG's dense full-batch forward, and the model file.

The oracle: the same weights copied into PyG's SAGEConv, GCNConv and GATConv, run once over the whole
graph's edge_index (every in-edge, no sampling, no chunks). Layer-wise inference builds blocks chunk by
chunk and writes every layer to a file before the next reads it; the two must agree for every node.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.graph.csc import CSCGraph, csc_from_coo
from gnnscale.graph.planetoid import load_planetoid
from gnnscale.inference.layerwise import full_block, layerwise_inference, needed_nodes
from gnnscale.nn import ModelConfig

from conftest import TINY_NUM_NODES
from test_model_file import CONFIGS, random_model  # the models every inference test runs

CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data")) \
    / "cora_planetoid"
needs_cora = pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").exists(), reason="Cora not found")


@pytest.fixture(scope="module")
def cora():
    if not (CORA_DIR / "ind.cora.x").exists():
        pytest.skip("Cora not found")
    return load_planetoid(CORA_DIR, "cora")


def edge_index(graph: CSCGraph) -> torch.Tensor:
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees())
    return torch.from_numpy(np.stack([graph.indices.astype(np.int64), dst]))


def pyg_forward(model, graph: CSCGraph, x: torch.Tensor) -> torch.Tensor:
    """The model's full-batch forward with PyG's layers and the model's weights copied in."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")  # here: the module's gpu tests collect without PyG
    ei = edge_index(graph)
    n = graph.num_nodes
    # gnnscale's GCN is the random-walk norm over N(i) and i itself: weight 1 / (deg(i) + 1) on every
    # in-edge and on a self loop; PyG's GCNConv applies given weights as they are with normalize=False.
    deg = torch.from_numpy(graph.in_degrees()).to(torch.float32)
    loops = torch.arange(n).repeat(2, 1)
    gcn_ei = torch.cat([ei, loops], dim=1)
    gcn_w = 1.0 / (deg[gcn_ei[1]] + 1.0)
    for i, layer in enumerate(model.layers):
        kind = type(layer).__name__
        if kind == "SAGEConv":
            ref = pyg_nn.SAGEConv(layer.in_dim, layer.out_dim, aggr="mean")
            ref.lin_l.load_state_dict(layer.lin_l.state_dict())
            ref.lin_r.load_state_dict(layer.lin_r.state_dict())
            x = ref(x, ei)
        elif kind == "GCNConv":
            ref = pyg_nn.GCNConv(layer.in_dim, layer.out_dim, normalize=False, add_self_loops=False)
            ref.lin.weight.data.copy_(layer.lin.weight)
            ref.bias.data.copy_(layer.bias)
            x = ref(x, gcn_ei, gcn_w)
        else:
            ref = pyg_nn.GATConv(layer.in_dim, layer.out_dim, heads=layer.heads, concat=layer.concat,
                                 negative_slope=layer.negative_slope)
            ref.lin.weight.data.copy_(layer.lin.weight)
            ref.att_src.data.copy_(layer.att_src.unsqueeze(0))
            ref.att_dst.data.copy_(layer.att_dst.unsqueeze(0))
            ref.bias.data.copy_(layer.bias)
            x = ref(x, ei)
        if i < len(model.layers) - 1:
            x = F.relu(x) if model.activation == "relu" else F.elu(x)
    return x


# --- full blocks on the tiny graph -------------------------------------------------------------------
#
# In-edges per node of the tiny graph (tests/conftest.py):
#   0: [2]   1: [0, 3, 4]   2: [1]   3: [0]   4: [2]   5: []

def test_full_block_of_the_tiny_graph(tiny_graph):
    block = full_block(tiny_graph, np.array([1, 5, 0]))
    # Destinations first, then sources in order of first appearance: 0 is a destination already.
    assert block.src_ids.tolist() == [1, 5, 0, 3, 4, 2]
    assert block.indptr.tolist() == [0, 3, 3, 4]
    assert block.src_ids[block.indices].tolist() == [0, 3, 4, 2]
    block.validate()


def test_full_block_leaves_its_scratch_map_clean(tiny_graph):
    local = np.full(TINY_NUM_NODES, -1, dtype=np.int64)
    first = full_block(tiny_graph, np.array([1]), local)
    assert (local == -1).all()
    again = full_block(tiny_graph, np.array([1]), local)
    assert torch.equal(first.src_ids, again.src_ids) and torch.equal(first.indices, again.indices)


def test_needed_nodes_grow_by_in_neighbors_per_layer(tiny_graph):
    # Node 3 needs itself and node 0 one layer down, and 0's in-neighbor 2 two layers down.
    assert [s.tolist() for s in needed_nodes(tiny_graph, np.array([3]), 3)] == [[0, 2, 3], [0, 3], [3]]
    assert needed_nodes(tiny_graph, None, 2) == [None, None]


# --- against PyG ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_layerwise_equals_pyg_on_a_random_graph(name, tmp_path):
    rng = np.random.default_rng(1)
    n = 300
    graph = csc_from_coo(rng.integers(0, n, 1500), rng.integers(0, n, 1500), n, remove_self_loops=True)
    features = rng.standard_normal((n, 10)).astype(np.float32)
    model = random_model(ModelConfig(in_dim=10, num_classes=4, **CONFIGS[name]))
    paths = layerwise_inference(model, graph, features, tmp_path, chunk_size=37)
    got = np.load(paths[-1])
    want = pyg_forward(model, graph, torch.from_numpy(features)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@needs_cora
@pytest.mark.parametrize("name", list(CONFIGS))
def test_layerwise_equals_pyg_on_cora_for_every_node(cora, name, tmp_path):
    graph = cora.graph
    assert not np.any(graph.indices == np.repeat(np.arange(graph.num_nodes), graph.in_degrees())), \
        "PyG's GATConv drops graph self loops; the oracle needs a graph without them"
    model = random_model(ModelConfig(in_dim=cora.feature_dim, num_classes=cora.num_classes, **CONFIGS[name]))
    paths = layerwise_inference(model, graph, cora.features, tmp_path, chunk_size=500)
    assert len(paths) == model.num_layers
    got = np.load(paths[-1], mmap_mode="r")
    want = pyg_forward(model, graph, torch.from_numpy(cora.features)).detach().numpy()
    assert got.shape == (graph.num_nodes, cora.num_classes)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@needs_cora
def test_a_subset_of_nodes_gets_the_rows_of_the_full_run(cora, tmp_path):
    model = random_model(ModelConfig(in_dim=cora.feature_dim, num_classes=cora.num_classes, **CONFIGS["gat"]))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = np.load(layerwise_inference(model, cora.graph, cora.features, tmp_path / "a", chunk_size=1000)[-1])
    nodes = np.array([2707, 0, 1500, 3, 1500])
    subset = np.load(layerwise_inference(model, cora.graph, cora.features, tmp_path / "b", nodes=nodes,
                                         chunk_size=2)[-1])
    # Equal up to rounding: a layer picks aggregate-first or transform-first by its block's shape.
    np.testing.assert_allclose(subset[nodes], full[nodes], rtol=0, atol=1e-6)


def test_bad_arguments_are_named(tiny_graph, tmp_path):
    model = random_model(ModelConfig(in_dim=3, num_classes=2, **CONFIGS["sage"]))
    x = np.zeros((TINY_NUM_NODES, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="chunk_size: expected a positive int, got 0"):
        layerwise_inference(model, tiny_graph, x, tmp_path, chunk_size=0)
    with pytest.raises(ValueError, match=r"nodes: expected node ids in \[0, 6\), got range \[0, 6\]"):
        layerwise_inference(model, tiny_graph, x, tmp_path, nodes=np.array([0, 6]))
    with pytest.raises(ValueError, match=r"features: expected shape \[6, in_dim\]"):
        layerwise_inference(model, tiny_graph, x[:4], tmp_path)


# --- on a device -----------------------------------------------------------------------------------------

def random_case(name: str, n: int = 300, seed: int = 1):
    """A random graph without self loops, its features and a random-weight model ``name`` on it."""
    rng = np.random.default_rng(seed)
    graph = csc_from_coo(rng.integers(0, n, 1500), rng.integers(0, n, 1500), n, remove_self_loops=True)
    features = rng.standard_normal((n, 10)).astype(np.float32)
    return graph, features, random_model(ModelConfig(in_dim=10, num_classes=4, **CONFIGS[name]))


@pytest.mark.parametrize("name", ["sage", "gat"])
def test_device_cpu_is_the_run_without_a_device_bit_for_bit(name, tmp_path):
    graph, features, model = random_case(name)
    model.train()
    runs = {}
    for i, device in enumerate((None, "cpu", torch.device("cpu"))):
        (tmp_path / str(i)).mkdir()
        paths = layerwise_inference(model, graph, features, tmp_path / str(i), chunk_size=37, device=device)
        runs[i] = [np.load(p) for p in paths]
    for i in (1, 2):
        for got, want in zip(runs[i], runs[0]):
            np.testing.assert_array_equal(got, want)
    assert model.training, "the caller's mode is restored"


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CONFIGS))
def test_layerwise_on_cuda_equals_the_cpu_run(name, tmp_path):
    graph, features, model = random_case(name)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cuda").mkdir()
    want = [np.load(p) for p in layerwise_inference(model, graph, features, tmp_path / "cpu", chunk_size=37)]
    got = [np.load(p) for p in layerwise_inference(model, graph, features, tmp_path / "cuda", chunk_size=37,
                                                   device="cuda")]
    for g, w in zip(got, want):  # the torch path on the GPU against numba on the CPU: summation order only
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    assert next(model.parameters()).device.type == "cpu", "the weights go back where they were"
    nodes = np.array([299, 0, 150])
    (tmp_path / "some").mkdir()
    some = np.load(layerwise_inference(model, graph, features, tmp_path / "some", nodes=nodes, chunk_size=2,
                                       device="cuda")[-1])
    np.testing.assert_allclose(some[nodes], want[-1][nodes], rtol=0, atol=1e-5)
