"""Matrix bulk sampling in torch ops (gnnscale/sampling/matrix/device_*.py) against its oracle, the host
samplers: GraphSAGE's blocks bit for bit; LADIES' drawn nodes and edges exactly, its weights within a float32
rounding (docs/matrix_sampling.md says why); on the CPU here and on CUDA where there is one."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from gnnscale.graph.csc import CSCGraph
from gnnscale.keys import node_stream
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.sampling.matrix.device_ladies import DeviceLadiesSampler, exponential_draws, operator_on
from gnnscale.sampling.matrix.device_products import DeviceMatrix, batch_probabilities, stack_on_device
from gnnscale.sampling.matrix.device_sage import DeviceMatrixSampler
from gnnscale.sampling.matrix.ladies import exponential_draw
from gnnscale.sampling.registry import SamplerInputs, SamplerSpec, sampler_spec
from gnnscale.torch_keys import node_streams
from test_matrix_sampling import P_BATCH_05, P_BATCH_14, P_BATCH_14_NO_SELF, random_stack

# LADIES' weights: float32, equal to the host's but where a float64 sum in another order rounds across a
# float32 boundary (one float32 ulp: 2**-23 relative).
WEIGHT_RTOL = 2.0**-22


def assert_same_blocks(got, want, *, weights_rtol: float | None = None) -> None:
    """Batch by batch, layer by layer: the same ``indptr``, ``indices``, ``src_ids`` (values and dtypes) and
    ``num_dst``; edge weights both absent, or float32 within ``weights_rtol``."""
    assert len(got) == len(want)
    for batch_got, batch_want in zip(got, want, strict=True):
        for g, w in zip(batch_got, batch_want, strict=True):
            assert g.num_dst == w.num_dst
            for name in ("indptr", "indices", "src_ids"):
                a, b = getattr(g, name), getattr(w, name)
                assert a.dtype == b.dtype and torch.equal(a.cpu(), b), name
            if w.edge_weight is None:
                assert g.edge_weight is None
            else:
                assert g.edge_weight.dtype == torch.float32
                torch.testing.assert_close(g.edge_weight.cpu(), w.edge_weight, rtol=weights_rtol, atol=0)


# ---------------------------------------------------------------------------------------------------
# GraphSAGE: the host's blocks, bit for bit
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("replace", [False, True], ids=["noreplace", "replace"])
@pytest.mark.parametrize("fanouts", [(1,), (3, 2, 2), (10, 25), (-1, 0, 2)], ids=str)
@pytest.mark.parametrize("k", [1, 5])
def test_matrix_on_the_device_equals_the_host_sampler(random_graph, fanouts, replace, k):
    seeds, keys = random_stack(400, k, 60, seed=k)
    want = MatrixSampler(random_graph, fanouts, bulk=k, replace=replace).sample_many(seeds, keys)
    sampler = DeviceMatrixSampler(random_graph, fanouts, bulk=k, replace=replace, device="cpu")
    assert sampler.rows.indices.dtype == torch.from_numpy(random_graph.indices).dtype  # int32 stays int32
    assert_same_blocks(sampler.sample_many(seeds, keys), want)


def test_matrix_on_the_device_tiny_graph_by_hand(tiny_graph):
    # Graph drawn in conftest.py; fanouts above every degree: the blocks are determined.
    outer, inner = DeviceMatrixSampler(tiny_graph, [3, 3]).sample(torch.tensor([1, 5]), key=0)
    assert inner.src_ids.tolist() == [1, 5, 0, 3, 4] and inner.indices.tolist() == [2, 3, 4]
    assert outer.src_ids.tolist() == [1, 5, 0, 3, 4, 2] and outer.indptr.tolist() == [0, 3, 3, 4, 5, 6]
    assert outer.indices.tolist() == [2, 3, 4, 5, 2, 5]


def unsorted_graph(idx_dtype) -> CSCGraph:
    """300 nodes whose in-edges are in no order, with repeated edges and self loops (a CSCGraph allows
    them; the builders sort and drop repeats)."""
    rng = np.random.default_rng(1)
    indptr = np.zeros(301, dtype=np.int64)
    np.cumsum(rng.integers(0, 30, 300), out=indptr[1:])
    return CSCGraph(indptr=indptr, indices=rng.integers(0, 300, indptr[-1]).astype(idx_dtype), num_nodes=300)


def test_rows_in_no_order_with_repeats_give_the_host_blocks(idx_dtype):
    # The draw reads a row by position, in A's order with its repeats: the gather keeps both. LADIES' SpGEMM
    # takes the squares coalesced, the extraction the rows as they are.
    graph = unsorted_graph(idx_dtype)
    seeds, keys = random_stack(300, 4, 40, seed=2)
    for replace in (False, True):
        want = MatrixSampler(graph, (5, 3), bulk=4, replace=replace).sample_many(seeds, keys)
        assert_same_blocks(DeviceMatrixSampler(graph, (5, 3), bulk=4, replace=replace).sample_many(seeds, keys), want)
    for self_loops in (True, False):
        want = LadiesSampler(graph, (20, 20), bulk=4, self_loops=self_loops).sample_many(seeds, keys)
        got = DeviceLadiesSampler(graph, (20, 20), bulk=4, self_loops=self_loops).sample_many(seeds, keys)
        assert_same_blocks(got, want, weights_rtol=WEIGHT_RTOL)


# ---------------------------------------------------------------------------------------------------
# LADIES: the host's law and keys; drawn nodes exact, weights within rounding
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("self_loops", [True, False], ids=["gcn", "mean"])
@pytest.mark.parametrize("sizes", [(25, 25), (5,), (400, 3, 60)], ids=str)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_ladies_on_the_device_equals_the_host_sampler(random_graph, sizes, self_loops, k):
    seeds, keys = random_stack(400, k, 30, seed=k)
    want = LadiesSampler(random_graph, sizes, bulk=k, self_loops=self_loops).sample_many(seeds, keys)
    got = DeviceLadiesSampler(random_graph, sizes, bulk=k, self_loops=self_loops, device="cpu").sample_many(seeds, keys)
    assert_same_blocks(got, want, weights_rtol=WEIGHT_RTOL)


def test_ladies_probabilities_on_the_device_by_hand(tiny_graph):
    # The host test's hand-computed rows (tests/sampling/test_matrix_sampling.py), through torch's SpGEMM.
    cpu = torch.device("cpu")
    stack = stack_on_device(torch.tensor([1, 4, 0, 5]), [0, 2, 4])
    probs = batch_probabilities(operator_on(tiny_graph, cpu, self_loops=True).gather(stack.needed), stack, 6)
    np.testing.assert_allclose(probs.to_dense().numpy(), [P_BATCH_14, P_BATCH_05], rtol=1e-12)
    alone = stack_on_device(torch.tensor([1, 4]), [0, 2])
    probs = batch_probabilities(operator_on(tiny_graph, cpu, self_loops=False).gather(alone.needed), alone, 6)
    np.testing.assert_allclose(probs.to_dense().numpy(), [P_BATCH_14_NO_SELF], rtol=1e-12)


@numba.njit
def _host_draws(keys, hop, nodes):
    out = np.empty(nodes.shape[0], dtype=np.float64)
    for i in range(nodes.shape[0]):
        out[i] = exponential_draw(keys[i], hop, nodes[i])
    return out


def test_keyed_draws_are_the_kernels():
    # Each node under its own batch's key: the stream bit for bit, the exponential variate up to the last
    # bits of the logarithm (torch's, not libm's).
    rng = np.random.default_rng(4)
    keys = rng.integers(0, 2**63, size=2000, dtype=np.int64)
    nodes = rng.integers(0, 2**40, size=2000, dtype=np.int64)
    streams = node_streams(torch.from_numpy(keys), 3, torch.from_numpy(nodes))
    want = np.array([node_stream(np.uint64(key), 3, np.int64(v)) for key, v in zip(keys[:50], nodes[:50])])
    np.testing.assert_array_equal(streams[:50].numpy().view(np.uint64), want)
    np.testing.assert_allclose(exponential_draws(torch.from_numpy(keys), 3, torch.from_numpy(nodes)).numpy(),
                               _host_draws(keys, 3, nodes), rtol=1e-14)


def test_blocks_seeded_anywhere_in_a_stack_do_not_depend_on_it(random_graph):
    # A batch's blocks depend on (its seeds, its key) only: alone or third of four, the same.
    seeds, keys = random_stack(400, 4, 80, seed=9)
    for sampler in (DeviceMatrixSampler(random_graph, [5, 2]), DeviceLadiesSampler(random_graph, [30, 30])):
        together = sampler.sample_many(seeds, keys)
        assert_same_blocks([together[2]], [sampler.sample(seeds[2], keys[2])], weights_rtol=0)


# ---------------------------------------------------------------------------------------------------
# the registry, and bad input
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("matrix", DeviceMatrixSampler), ("ladies", DeviceLadiesSampler)])
def test_the_registry_builds_them_on_a_device(random_graph, name, kind):
    spec = sampler_spec(name)
    inputs = SamplerInputs(graph=random_graph, fanouts=(3, 2), bulk=2, replace=False, layer_sizes=(20, 20),
                           self_loops=True)
    sampler = spec.build(inputs, torch.device("cpu"))
    assert spec.runs_on_device and isinstance(sampler, kind) and sampler.bulk == 2
    seeds, keys = random_stack(400, 2, 30)
    assert_same_blocks(sampler.sample_many(seeds, keys), spec.build(inputs).sample_many(seeds, keys),
                       weights_rtol=WEIGHT_RTOL)
    assert spec.device_bytes(random_graph) >= random_graph.nbytes()


def test_a_device_build_without_its_bytes_is_refused():
    with pytest.raises(ValueError, match="device_bytes: sampler 'x' needs both build_device and device_bytes"):
        SamplerSpec(name="x", summary="", models=(), bulk=False, layerwise=False, replace=False, weighted=False,
                    masked=False, eval_method="fused", build_host=print, build_device=print)


def test_bad_input_is_refused_as_on_the_host(random_graph):
    sampler = DeviceMatrixSampler(random_graph, [2])
    with pytest.raises(ValueError, match="keys"):
        sampler.sample_many([torch.tensor([1, 2]), torch.tensor([3])], [1])
    with pytest.raises(ValueError, match="seeds.*batch 1"):
        sampler.sample_many([torch.tensor([1, 2]), torch.tensor([3, 3])], [1, 2])
    with pytest.raises(ValueError, match="seeds"):
        DeviceLadiesSampler(random_graph, [2]).sample(torch.tensor([0, 400]), 1)
    with pytest.raises(ValueError, match="bulk.*--bulk"):
        DeviceMatrixSampler(random_graph, [2], bulk=0)
    with pytest.raises(ValueError, match="layer_sizes.*--layer-size"):
        DeviceLadiesSampler(random_graph, [0])
    with pytest.raises(TypeError, match="graph: expected a CSCGraph or a row source, got tuple"):
        DeviceMatrixSampler((random_graph.indptr, random_graph.indices), [2])
    elsewhere = DeviceMatrix(torch.zeros(1, dtype=torch.int64, device="meta"),
                             torch.zeros(0, dtype=torch.int64, device="meta"), None, 0)
    with pytest.raises(ValueError, match=r"device: the rows lie on meta, got device\(type='cpu'\)"):
        DeviceMatrixSampler(elsewhere, [2], device="cpu")


# ---------------------------------------------------------------------------------------------------
# on a GPU
# ---------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_matrix_and_ladies_on_cuda_equal_the_host_samplers(random_graph):
    """On CUDA: GraphSAGE's blocks bit for bit; LADIES' nodes and edges exactly, weights within rounding
    (cuSPARSE's sums, CUDA's logarithm, atomic row sums)."""
    seeds, keys = random_stack(400, 4, 60, seed=8)
    for replace in (False, True):
        sampler = DeviceMatrixSampler(random_graph, (10, 5), bulk=4, replace=replace, device="cuda")
        got = sampler.sample_many(seeds, keys)
        assert all(b.indices.is_cuda and b.src_ids.is_cuda for batch in got for b in batch)
        assert_same_blocks(got, MatrixSampler(random_graph, (10, 5), bulk=4, replace=replace).sample_many(seeds, keys))
    for self_loops in (True, False):
        ladies = DeviceLadiesSampler(random_graph, (25, 25), bulk=4, self_loops=self_loops, device="cuda")
        want = LadiesSampler(random_graph, (25, 25), bulk=4, self_loops=self_loops).sample_many(seeds, keys)
        assert_same_blocks(ladies.sample_many(seeds, keys), want, weights_rtol=WEIGHT_RTOL)
