"""The torch-ops sampler (gnnscale/sampling/device.py) against its oracle, the fused numba sampler: the
same blocks bit for bit for the same key, on the CPU here and on CUDA where there is one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.synthetic import make_synthetic, products_like_config
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.sampling.device import DeviceNeighborSampler, DeviceTopology
from dist_workers import assert_blocks_equal
from host_syncs import HostSyncs

# Unsorted, with isolated nodes (random_graph's 0..9 have no in-edges) among them.
SEEDS = torch.tensor([5, 17, 300, 42, 0, 399, 123, 9, 250])
KEYS = (derive_key(3, epoch=1, step=2), 2**63 - 1)
# Fanouts seeds outwards: small, -1 (every neighbor), 0 (no edges), above the maximum degree (60), deep.
FANOUTS = [[3, 2], [-1], [0, 4], [25, 10, 5], [100, -1], [1, 0, 2], [2, 2, 2, 2]]


def fused(graph: CSCGraph, seeds, fanouts, key: int, replace: bool):
    return sample_blocks(graph, seeds, fanouts, key=key, replace=replace, method="fused")


@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
@pytest.mark.parametrize("fanouts", FANOUTS, ids=str)
def test_equals_fused_sampler(random_graph, fanouts, replace):
    sampler = DeviceNeighborSampler(random_graph, fanouts, replace=replace, device="cpu")
    assert sampler.topology.indices.dtype == torch.from_numpy(random_graph.indices).dtype
    for key in KEYS:
        assert_blocks_equal(sampler.sample(SEEDS, key), fused(random_graph, SEEDS, fanouts, key, replace))


def test_tiny_graph_by_hand(tiny_graph):
    # tests/conftest.py's tiny graph; in-edges 0: [2]  1: [0, 3, 4]  2: [1]  3: [0]  4: [2]  5: [].
    # Seeds [1, 5], every neighbor: hop 0 finds 0, 3, 4 (in row order), hop 1 finds 2 (via 0 and 4).
    blocks = DeviceNeighborSampler(tiny_graph, [-1, -1]).sample(torch.tensor([1, 5]), 0)
    outer, inner = blocks
    assert inner.src_ids.tolist() == [1, 5, 0, 3, 4] and inner.num_dst == 2
    assert inner.indptr.tolist() == [0, 3, 3] and inner.indices.tolist() == [2, 3, 4]
    assert outer.src_ids.tolist() == [1, 5, 0, 3, 4, 2] and outer.num_dst == 5
    # Destinations 1, 5, 0, 3, 4 take [0, 3, 4], [], [2], [0], [2].
    assert outer.indptr.tolist() == [0, 3, 3, 4, 5, 6] and outer.indices.tolist() == [2, 3, 4, 5, 2, 5]
    assert_blocks_equal(blocks, fused(tiny_graph, torch.tensor([1, 5]), [-1, -1], 0, False))


@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
def test_only_isolated_seeds_give_blocks_without_edges(random_graph, replace):
    seeds = torch.tensor([3, 1, 7])
    blocks = DeviceNeighborSampler(random_graph, [5, -1], replace=replace).sample(seeds, 11)
    assert all(b.num_edges == 0 and torch.equal(b.src_ids, seeds) for b in blocks)
    assert_blocks_equal(blocks, fused(random_graph, seeds, [5, -1], 11, replace))


def test_same_key_same_blocks_and_work_array_left_clean(random_graph):
    sampler = DeviceNeighborSampler(random_graph, [4, 3])
    first = sampler.sample(SEEDS, 5)
    other = sampler.sample(torch.tensor([8, 200, 31]), 6)  # another batch between the two
    assert_blocks_equal(sampler.sample(SEEDS, 5), first)
    assert_blocks_equal(other, fused(random_graph, torch.tensor([8, 200, 31]), [4, 3], 6, False))
    assert bool((sampler._first == torch.iinfo(torch.int64).max).all())
    assert_blocks_equal(sampler.sample_many([SEEDS, SEEDS[:3]], [5, 9])[1], sampler.sample(SEEDS[:3], 9))


def test_blocks_do_not_alias_the_seeds(random_graph):
    seeds = SEEDS.clone()
    blocks = DeviceNeighborSampler(random_graph, [0]).sample(seeds, 1)
    seeds[0] = 1
    assert blocks[0].src_ids.tolist() == SEEDS.tolist()


@pytest.mark.parametrize("seeds", [SEEDS.numpy(), SEEDS.to(torch.int32), SEEDS.numpy().astype(np.uint16)],
                         ids=["numpy-int64", "int32-tensor", "numpy-uint16"])
def test_seed_forms_accepted(random_graph, seeds):
    blocks = DeviceNeighborSampler(random_graph, [3, 2]).sample(seeds, 4)
    assert_blocks_equal(blocks, fused(random_graph, SEEDS, [3, 2], 4, False))


@pytest.mark.parametrize("seeds", [
    torch.tensor([1, -1]), torch.tensor([0, 400]), np.array([399, 1000]),  # out of range
    torch.tensor([5, 5]), torch.tensor([1, 2, 3, 2]), np.array([9, 8, 7, 6, 9]), torch.tensor([4, 9, 4, 9]),
    torch.tensor([1.0, 2.0]), torch.tensor([True, False]), np.array([1.0]), [1, 2],  # not integers
    torch.tensor([[1, 2]]), torch.tensor(3), torch.tensor([], dtype=torch.int64),  # shape
], ids=lambda s: repr(s).replace(" ", ""))
def test_bad_seeds_raise_what_sample_blocks_raises(random_graph, seeds):
    with pytest.raises((TypeError, ValueError)) as expected:
        fused(random_graph, seeds, [2], 0, False)
    with pytest.raises(expected.type) as got:
        DeviceNeighborSampler(random_graph, [2]).sample(seeds, 0)
    assert str(got.value) == str(expected.value) and str(got.value).startswith("seeds: ")


def test_bad_fanouts_and_keys(random_graph):
    with pytest.raises(ValueError, match="fanouts"):
        DeviceNeighborSampler(random_graph, [3, -2])
    with pytest.raises(TypeError, match="fanouts"):
        DeviceNeighborSampler(random_graph, [2.0])
    sampler = DeviceNeighborSampler(random_graph, [2])
    with pytest.raises(ValueError, match="key"):
        sampler.sample(SEEDS, -1)
    with pytest.raises(TypeError, match="key"):
        sampler.sample(SEEDS, 1.0)


def test_topology_from_tensors(random_graph):
    topology = DeviceTopology(indptr=torch.from_numpy(random_graph.indptr),
                              indices=torch.from_numpy(random_graph.indices), num_nodes=random_graph.num_nodes)
    blocks = DeviceNeighborSampler(topology, [6, 3], replace=True).sample(SEEDS, 2)
    assert_blocks_equal(blocks, fused(random_graph, SEEDS, [6, 3], 2, True))


def test_topology_checks(random_graph):
    indptr, indices = torch.from_numpy(random_graph.indptr), torch.from_numpy(random_graph.indices)
    with pytest.raises(TypeError, match="indptr"):
        DeviceTopology(indptr=indptr.to(torch.int32), indices=indices, num_nodes=400)
    with pytest.raises(TypeError, match="indices"):
        DeviceTopology(indptr=indptr, indices=indices.to(torch.float32), num_nodes=400)
    with pytest.raises(ValueError, match="indptr"):
        DeviceTopology(indptr=indptr, indices=indices, num_nodes=399)
    with pytest.raises(ValueError, match="indices"):
        DeviceTopology(indptr=indptr, indices=indices.to("meta"), num_nodes=400)
    with pytest.raises(TypeError, match="graph"):
        DeviceNeighborSampler((indptr, indices), [2])
    with pytest.raises(ValueError, match="device"):
        DeviceNeighborSampler(random_graph, [2], device="tpu")


def test_a_named_device_holds_the_topology_and_the_blocks(random_graph):
    sampler = DeviceNeighborSampler(random_graph, [4], replace=True, device="cpu")
    assert sampler.device == torch.device("cpu") and sampler.replace and sampler.fanouts == (4,)
    assert all(t.device.type == "cpu" for b in sampler.sample(SEEDS, 3) for t in (b.indptr, b.indices, b.src_ids))


@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
def test_a_batch_reads_back_one_verdict_and_two_sizes_per_hop_and_uploads_nothing(products_graph, replace):
    """What a batch of 15,10,5 costs a GPU in host round trips, counted on the CPU (tests/host_syncs.py): the
    seeds' verdict, then each hop's edge count and source count; no tensor made from host data per draw (the
    keys, fanouts and Floyd's draw numbers stay Python ints). Before, a draw uploaded its number: 33 more."""
    seeds = torch.from_numpy(np.random.default_rng(1).choice(products_graph.num_nodes, 256, replace=False))
    sampler = DeviceNeighborSampler(products_graph, [15, 10, 5], replace=replace)
    with HostSyncs() as syncs:
        blocks = sampler.sample(seeds, 7)
    assert dict(syncs.counts) == {"read": 1 + 2 * 3}
    assert_blocks_equal(blocks, fused(products_graph, seeds, [15, 10, 5], 7, replace))


@pytest.mark.gpu
def test_a_cuda_batch_syncs_only_where_it_reads_sizes(random_graph):
    """On CUDA, torch's sync debug mode warns at every synchronising call: the seeds' verdict and two sizes per
    hop (int() of a device scalar), nothing else."""
    import warnings

    sampler = DeviceNeighborSampler(random_graph, [15, 10, 5], device="cuda")
    seeds = SEEDS.cuda()
    sampler.sample(seeds, 1)  # warm: the first call allocates
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler.sample(seeds, 2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= 1 + 2 * 3, [str(w.message) for w in syncs]


@pytest.mark.gpu
@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
def test_cuda_sampler_equals_cpu(random_graph, replace):
    fanouts = [25, -1, 0, 3]
    sampler = DeviceNeighborSampler(random_graph, fanouts, replace=replace, device="cuda")
    assert sampler.topology.indices.dtype == torch.from_numpy(random_graph.indices).dtype
    for key in KEYS:
        blocks = sampler.sample(SEEDS.cuda(), key)  # seeds already on the GPU
        assert all(t.is_cuda for b in blocks for t in (b.indptr, b.indices, b.src_ids))
        assert_blocks_equal([b.to("cpu") for b in blocks], fused(random_graph, SEEDS, fanouts, key, replace))
    with pytest.raises(ValueError, match="appears twice"):
        sampler.sample(torch.tensor([3, 4, 3], device="cuda"), 0)


@pytest.fixture(scope="module")
def products_graph() -> CSCGraph:
    """12k nodes shaped like ogbn-products: power-law in-degrees up to a few hundred."""
    return make_synthetic(dataclasses.replace(products_like_config(0.005), feature_dim=1)).graph


@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
def test_equals_fused_sampler_on_a_products_shaped_graph(products_graph, replace):
    # Floyd's subsets of 15 or 20 out of long rows, and -1 hops of thousands of edges that the fused
    # kernel relabels across its pipelined chunks (CHUNK_EDGES).
    seeds = torch.from_numpy(np.random.default_rng(0).choice(products_graph.num_nodes, 384, replace=False))
    for step, fanouts in enumerate(([15, 10, 5], [20, -1])):
        key = derive_key(1, step=step)
        blocks = DeviceNeighborSampler(products_graph, fanouts, replace=replace).sample(seeds, key)
        assert_blocks_equal(blocks, fused(products_graph, seeds, fanouts, key, replace))
