"""gnnscale.loader.NeighborLoader: PyG's NeighborLoader conventions, sampled without PyG's backend.

Invariants on a random graph (seeds first, edges exist, per-hop counts, fanout caps, full
neighborhoods), the exact answer on the tiny graph, determinism, epochs, input forms, errors, and
PyG's own GraphSAGE trained on Cora with the loader.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")  # the loaders are PyG's: without PyG, nothing here runs

from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, SamplerOutput

from gnnscale.loader import options as loader_module
from gnnscale.loader import NeighborLoader
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.nodewise import NodewiseSampler
from gnnscale.train.config import TrainConfig

from conftest import TINY_DST, TINY_NUM_NODES, TINY_SRC

CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")) \
    / "cora_planetoid"
needs_cora = pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")


def tiny_data() -> Data:
    """The tiny graph of conftest.py (in-edges 0: [2]  1: [0, 3, 4]  2: [1]  3: [0]  4: [2]  5: []),
    x = node id, y = node id % 2, one edge attribute = edge position."""
    edge_index = torch.from_numpy(np.stack([TINY_SRC, TINY_DST]))
    return Data(x=torch.arange(TINY_NUM_NODES, dtype=torch.float32).view(-1, 1), y=torch.arange(TINY_NUM_NODES) % 2,
                edge_index=edge_index, edge_attr=torch.arange(edge_index.shape[1], dtype=torch.float32),
                num_nodes=TINY_NUM_NODES)


def random_data(seed: int = 0, n: int = 300) -> Data:
    """In-degrees 0..40 (nodes 0..4 isolated), some repeated edges, features = node id."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(0, 41, size=n)
    degrees[:5] = 0
    dst = np.repeat(np.arange(n), degrees)
    src = rng.integers(0, n, size=dst.shape[0])
    perm = rng.permutation(dst.shape[0])  # edge_index in no particular order
    edge_index = torch.from_numpy(np.stack([src[perm], dst[perm]]))
    return Data(x=torch.arange(n, dtype=torch.float32).view(-1, 1).repeat(1, 3), y=torch.arange(n) % 7,
                edge_index=edge_index, edge_attr=torch.arange(edge_index.shape[1], dtype=torch.float32) * 2,
                train_mask=torch.arange(n) % 3 == 0)


def in_degrees(data: Data) -> torch.Tensor:
    return torch.bincount(data.edge_index[1], minlength=data.num_nodes)


def check_batch(batch: Data, data: Data, fanouts, *, replace: bool = False) -> None:
    """PyG's conventions, and every sampled edge is an edge of ``data`` with the right count per node."""
    n_id, edge_index, bs = batch.n_id, batch.edge_index, batch.batch_size
    hops = len(fanouts)
    assert len(batch.num_sampled_nodes) == hops + 1 and len(batch.num_sampled_edges) == hops
    assert batch.num_sampled_nodes[0] == bs
    assert sum(batch.num_sampled_nodes) == n_id.numel() == batch.num_nodes
    assert sum(batch.num_sampled_edges) == edge_index.shape[1] == batch.e_id.numel()
    assert torch.unique(n_id).numel() == n_id.numel()
    assert edge_index.dtype == torch.int64 and edge_index.shape[0] == 2
    if edge_index.numel():
        assert int(edge_index.min()) >= 0 and int(edge_index.max()) < n_id.numel()
    # Each edge, mapped back through n_id, is the edge e_id of the original graph.
    assert torch.equal(n_id[edge_index], data.edge_index[:, batch.e_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    # Hop k's edges point to the nodes hop k - 1 added, grouped by target in node order; their
    # sources are known nodes or the ones hop k adds.
    deg = in_degrees(data)
    starts = np.cumsum([0] + list(batch.num_sampled_nodes))
    e_starts = np.cumsum([0] + list(batch.num_sampled_edges))
    for k, fanout in enumerate(fanouts):
        src, dst = edge_index[:, e_starts[k]:e_starts[k + 1]]
        assert bool((dst[1:] >= dst[:-1]).all())
        if dst.numel():
            assert int(dst.min()) >= starts[k] and int(dst.max()) < starts[k + 1]
            assert int(src.max()) < starts[k + 2]
        counts = torch.bincount(dst - int(starts[k]), minlength=int(starts[k + 1] - starts[k]))
        full = deg[n_id[starts[k]:starts[k + 1]]]
        expected = full if fanout == -1 else (torch.where(full > 0, fanout, 0) if replace else full.clamp(max=fanout))
        assert torch.equal(counts, expected), f"hop {k}: per-node edge counts"
        if not replace:  # without replacement an edge is drawn at most once
            assert torch.unique(batch.e_id[e_starts[k]:e_starts[k + 1]]).numel() == src.numel()


def test_tiny_graph_all_neighbors_is_exact() -> None:
    # Seed 1, all neighbors twice: hop 0 takes 0, 4, 3 -> 1 (edges 1, 4, 6: edge_index order); hop 1
    # samples only 0, 4, 3 (not 1 again): 2 -> 0, 2 -> 4, 0 -> 3 (edges 0, 3, 5).
    batch = next(iter(NeighborLoader(tiny_data(), [-1, -1], input_nodes=torch.tensor([1]), prefetch=0, seed=0)))
    assert batch.n_id.tolist() == [1, 0, 4, 3, 2]
    assert batch.edge_index.tolist() == [[1, 2, 3, 4, 4, 1], [0, 0, 0, 1, 2, 3]]
    assert batch.num_sampled_nodes == [1, 3, 1] and batch.num_sampled_edges == [3, 3]
    assert batch.batch_size == 1 and batch.input_id.tolist() == [0]
    assert batch.e_id.tolist() == [1, 4, 6, 0, 3, 5]
    assert batch.x.view(-1).tolist() == [1, 0, 4, 3, 2]


def test_fanout_zero_samples_no_neighbor_as_pyg() -> None:
    # PyG: a hop of fanout 0 adds no edges and no nodes, so the hops after it have no frontier.
    batch = next(iter(NeighborLoader(tiny_data(), [0, -1], input_nodes=torch.tensor([1, 2]), batch_size=2, seed=0)))
    assert batch.n_id.tolist() == [1, 2] and tuple(batch.edge_index.shape) == (2, 0)
    assert batch.num_sampled_nodes == [2, 0, 0] and batch.num_sampled_edges == [0, 0]


ACCEPTED = [[-1], [0], [-1, 0], [5, 0, -1]]


@pytest.mark.parametrize("fanouts", ACCEPTED + [[-2], [3, -3], [], [2.5], "3"], ids=str)
def test_the_loader_and_the_trainer_take_the_same_fanouts(fanouts) -> None:
    # One rule (gnnscale.sampling.check_fanouts, PyG's): -1 every neighbor, 0 none, below -1 an error;
    # the same outcome and message whether it is NeighborLoader's num_neighbors or TrainConfig's fanouts.
    def outcome(build, name):
        try:
            build()
        except (TypeError, ValueError) as err:
            return type(err).__name__, str(err).replace(name, "NAME", 1)
        return "accepted"

    loader = outcome(lambda: NeighborLoader(tiny_data(), fanouts, batch_size=2), "num_neighbors")
    assert loader == outcome(lambda: TrainConfig(fanouts=fanouts), "fanouts")
    assert (loader == "accepted") == (fanouts in ACCEPTED)


def test_seed_without_in_edges_gives_an_empty_edge_index() -> None:
    batch = next(iter(NeighborLoader(tiny_data(), [3, 3], input_nodes=torch.tensor([5]), seed=0)))
    assert batch.n_id.tolist() == [5] and tuple(batch.edge_index.shape) == (2, 0) and batch.e_id.numel() == 0
    assert batch.num_sampled_nodes == [1, 0, 0] and batch.num_sampled_edges == [0, 0]
    assert batch.edge_index.dtype == torch.int64 and tuple(batch.edge_attr.shape) == (0,)


@pytest.mark.parametrize("fanouts", [[5, 3], [-1, 4], [50, 50], [2, 2, 2], [3, 0], [0, 3]])
@pytest.mark.parametrize("replace", [False, True])
def test_batches_follow_pyg_conventions(fanouts, replace) -> None:
    data = random_data()
    loader = NeighborLoader(data, fanouts, input_nodes=data.train_mask, batch_size=16, shuffle=True, replace=replace,
                            seed=3)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-int(data.train_mask.sum()) // 16)
    for batch in batches:
        check_batch(batch, data, fanouts, replace=replace)
        assert torch.equal(batch.train_mask, data.train_mask[batch.n_id])
    assert sorted(data.keys()) == ["edge_attr", "edge_index", "train_mask", "x", "y"], "data itself unchanged"


@pytest.mark.parametrize("fanouts", [[-1], [40], [1000, 1000]])
def test_fanout_at_least_degree_gives_full_neighborhoods(fanouts) -> None:
    data = random_data(seed=1)
    batch = next(iter(NeighborLoader(data, fanouts, input_nodes=torch.arange(0, 300, 7), batch_size=100, seed=0)))
    seeds = batch.n_id[:batch.batch_size]
    hop0 = batch.edge_index[:, :batch.num_sampled_edges[0]]
    for i, v in enumerate(seeds.tolist()):
        got = sorted(batch.n_id[hop0[0, hop0[1] == i]].tolist())
        assert got == sorted(data.edge_index[0, data.edge_index[1] == v].tolist())


def test_first_hop_is_the_fused_block_samplers_first_hop() -> None:
    # Same key, same draws: the loader's hop 0 is sample_blocks' one-hop block, edge for edge.
    data = random_data(seed=2)
    loader = NeighborLoader(data, [6], batch_size=32, seed=0)
    seeds, key = torch.arange(40, 72), 12345
    batch = loader.batch(seeds, key)
    (block,) = sample_blocks(loader.sampler.graph, seeds, [6], key=key)
    edge_index, _ = block.to_pyg()
    assert torch.equal(batch.n_id, block.src_ids) and torch.equal(batch.edge_index, edge_index)


def test_same_seed_same_batches_whatever_prefetch_or_threads() -> None:
    data = random_data()

    def epochs(seed, prefetch):
        loader = NeighborLoader(data, [4, 4], batch_size=25, shuffle=True, seed=seed, prefetch=prefetch)
        return [[(b.n_id, b.edge_index) for b in loader] for _ in range(2)]

    a, b, c = epochs(7, 0), epochs(7, 2), epochs(8, 1)
    for ea, eb in zip(a, b):
        for (na, ea_), (nb, eb_) in zip(ea, eb):
            assert torch.equal(na, nb) and torch.equal(ea_, eb_)
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a[0], c[0])), "another seed, other batches"
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a[0], a[1])), "each epoch its own order"
    torch.manual_seed(5)
    first = NeighborLoader(data, [3], batch_size=10, shuffle=True).seed
    torch.manual_seed(5)
    assert NeighborLoader(data, [3], batch_size=10, shuffle=True).seed == first, "torch.manual_seed fixes it"


def test_iterators_open_at_once_share_the_sampler_safely() -> None:
    data = random_data()
    loader = NeighborLoader(data, [5, 5], batch_size=8, shuffle=True, seed=2, prefetch=2)
    for a, b in zip(loader, loader):  # two background threads, one mapping array
        check_batch(a, data, [5, 5])
        check_batch(b, data, [5, 5])


@pytest.mark.parametrize("batch_size,drop_last", [(16, False), (16, True), (1000, False)])
def test_shuffle_covers_every_input_node_once_per_epoch(batch_size, drop_last) -> None:
    data = random_data()
    ids = torch.arange(3, 300, 2)
    loader = NeighborLoader(data, [2], input_nodes=ids, batch_size=batch_size, shuffle=True, drop_last=drop_last,
                            seed=1)
    for _ in range(2):
        batches = list(loader)
        seeds = torch.cat([b.n_id[:b.batch_size] for b in batches])
        positions = torch.cat([b.input_id for b in batches])
        assert torch.equal(ids[positions], seeds)  # input_id: positions in input_nodes
        if drop_last:
            assert all(b.batch_size == batch_size for b in batches) and len(batches) == ids.numel() // batch_size
            assert torch.unique(seeds).numel() == seeds.numel()
        else:
            assert sorted(seeds.tolist()) == ids.tolist()


def test_every_node_and_edge_attribute_is_sliced() -> None:
    # Float matrices go through gnnscale's gather kernel, the rest through PyG's filter_data.
    data = random_data()
    data.x_int = torch.arange(data.num_nodes * 2).view(-1, 2)
    data.x_64 = data.x.double()
    data.score = torch.rand(data.num_nodes)
    data.x_view = torch.rand(2, data.num_nodes).t()  # not contiguous
    data.edge_weight = torch.rand(data.num_edges)
    for batch in NeighborLoader(data, [4, 4], batch_size=64, seed=0):
        for key in ("x", "x_int", "x_64", "score", "x_view", "y", "train_mask"):
            assert torch.equal(batch[key], data[key][batch.n_id]), key
        for key in ("edge_attr", "edge_weight"):
            assert torch.equal(batch[key], data[key][batch.e_id]), key


def test_bool_mask_and_numpy_input_nodes() -> None:
    data = random_data()
    batches = list(NeighborLoader(data, [3], input_nodes=data.train_mask, batch_size=40, seed=0))
    seeds = torch.cat([b.n_id[:b.batch_size] for b in batches])
    assert torch.equal(seeds, data.train_mask.nonzero().view(-1))
    assert torch.equal(torch.cat([b.input_id for b in batches]), seeds)  # a mask's input_id: node ids (PyG)
    as_numpy = next(iter(NeighborLoader(data, [3], input_nodes=np.array([9, 4]), batch_size=2, seed=0)))
    assert as_numpy.n_id[:2].tolist() == [9, 4] and as_numpy.input_id.tolist() == [0, 1]


def test_node_dataset_input(random_graph) -> None:
    from gnnscale.graph.dataset import NodeDataset
    n = random_graph.num_nodes
    ds = NodeDataset(name="r", graph=random_graph, features=np.arange(2 * n, dtype=np.float32).reshape(n, 2),
                     labels=np.arange(n) % 3, train_idx=np.arange(0, n, 5), val_idx=np.arange(1, n, 5),
                     test_idx=np.arange(2, n, 5), num_classes=3)
    loader = NeighborLoader(ds, [5, 5], input_nodes=ds.train_idx, batch_size=32, shuffle=True, seed=0)
    indptr, indices = random_graph.indptr, torch.from_numpy(random_graph.indices.astype(np.int64))
    dst_of_pos = torch.from_numpy(np.repeat(np.arange(n), np.diff(indptr)))
    for batch in loader:
        assert torch.equal(batch.x, torch.from_numpy(ds.features)[batch.n_id])
        assert torch.equal(batch.y, torch.from_numpy(ds.labels)[batch.n_id])
        src, dst = batch.n_id[batch.edge_index]
        assert torch.equal(src, indices[batch.e_id]) and torch.equal(dst, dst_of_pos[batch.e_id])


def test_to_pyg_data_holds_the_dataset(random_graph) -> None:
    from gnnscale.graph.dataset import NodeDataset
    from gnnscale.loader import to_pyg_data
    n = random_graph.num_nodes
    ds = NodeDataset(name="r", graph=random_graph, features=np.ones((n, 2), dtype=np.float32),
                     labels=np.arange(n) % 3, train_idx=np.arange(0, n, 5), val_idx=np.arange(1, n, 5),
                     test_idx=np.arange(2, n, 5), num_classes=3)
    data = to_pyg_data(ds)
    assert data.num_nodes == n and data.num_edges == random_graph.num_edges
    assert torch.equal(data.edge_index[0], torch.from_numpy(random_graph.indices.astype(np.int64)))
    assert torch.equal(torch.bincount(data.edge_index[1], minlength=n), torch.from_numpy(random_graph.in_degrees()))
    assert torch.equal(data.train_mask.nonzero().view(-1), torch.from_numpy(ds.train_idx))
    assert int(data.val_mask.sum()) == ds.val_idx.size and int(data.test_mask.sum()) == ds.test_idx.size
    with pytest.raises(TypeError, match="dataset: expected a gnnscale NodeDataset"):
        to_pyg_data(data)


def test_transform_and_ignored_worker_options_note_once(monkeypatch) -> None:
    monkeypatch.setattr(loader_module, "_noted", set())
    data = tiny_data()
    with pytest.warns(UserWarning, match="num_workers"):
        loader = NeighborLoader(data, [2], batch_size=2, num_workers=4, persistent_workers=True, seed=0,
                                transform=lambda b: b.update({"marked": True}) or b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second loader: no second note
        NeighborLoader(data, [2], batch_size=2, num_workers=4, seed=0)
    assert all(b.marked for b in loader)


# --- batches on a device -------------------------------------------------------------------------------

def assert_same_batches(got: list[Data], want: list[Data]) -> None:
    """Batch by batch: the same attributes, in the same order, with equal values (tensors on the host)."""
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in b.keys():
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key].cpu(), b[key]), key
            else:
                assert a[key] == b[key], key


def device_data() -> Data:
    """random_data with a graph-level attribute (shared by every batch) and one PyG slices (not contiguous)."""
    data = random_data()
    data.label_names = ["a", "b"]
    data.x_view = torch.rand(2, data.num_nodes).t()
    return data


@pytest.mark.parametrize("prefetch", [0, 2])
def test_device_cpu_and_pin_memory_yield_the_batches_of_the_default(prefetch, monkeypatch) -> None:
    monkeypatch.setattr(loader_module, "_noted", set())
    data = device_data()
    want = list(NeighborLoader(data, [4, 4], batch_size=64, shuffle=True, seed=3, prefetch=prefetch))
    assert_same_batches(list(NeighborLoader(data, [4, 4], batch_size=64, shuffle=True, seed=3, prefetch=prefetch,
                                            device="cpu")), want)
    if torch.cuda.is_available():  # pinned host batches, as torch's DataLoader gives
        pinned = list(NeighborLoader(data, [4, 4], batch_size=64, shuffle=True, seed=3, prefetch=prefetch,
                                     pin_memory=True))
        assert all(b.x.is_pinned() and b.edge_index.is_pinned() for b in pinned)
    else:  # a CPU-only machine: torch's DataLoader warns and goes on, and so does the loader, once
        with pytest.warns(UserWarning, match="pin_memory=True ignored: no CUDA device here"):
            loader = NeighborLoader(data, [4, 4], batch_size=64, shuffle=True, seed=3, prefetch=prefetch,
                                    pin_memory=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pinned = list(NeighborLoader(data, [4, 4], batch_size=64, shuffle=True, seed=3, prefetch=prefetch,
                                         pin_memory=True))
        assert_same_batches(list(loader), want)
    assert_same_batches(pinned, want)


def test_device_and_pin_memory_errors_name_the_argument(monkeypatch) -> None:
    with pytest.raises(ValueError, match="device: expected cpu, cuda, cuda:N or auto, got 'tpu'"):
        NeighborLoader(tiny_data(), [2], device="tpu")
    with pytest.raises(TypeError, match="pin_memory: expected True or False, got 'yes'"):
        NeighborLoader(tiny_data(), [2], pin_memory="yes")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device: cuda asks for a GPU and none is available here"):
        NeighborLoader(tiny_data(), [2], device="cuda")
    assert NeighborLoader(tiny_data(), [2], device="auto").device == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_batches_on_cuda_are_the_cpu_batches(prefetch) -> None:
    data = device_data()
    want = list(NeighborLoader(data, [4, 4], batch_size=32, shuffle=True, seed=5, prefetch=prefetch))
    loader = NeighborLoader(data, [4, 4], batch_size=32, shuffle=True, seed=5, prefetch=prefetch, device="cuda")
    got, sums = [], []
    for batch in loader:
        assert batch.x.is_cuda and batch.edge_index.is_cuda and batch.n_id.is_cuda and batch.x_view.is_cuda
        sums.append((batch.x.sum(), batch.edge_index.sum()))  # kernels on the default stream, after the copy
        got.append(batch)
    assert_same_batches(got, want)
    for (x, e), b in zip(sums, want):
        assert x.item() == b.x.sum().item() and e.item() == b.edge_index.sum().item()
    next(iter(loader))  # epoch 1, left after one batch: its background stage stops
    cpu = NeighborLoader(data, [4, 4], batch_size=32, shuffle=True, seed=5, prefetch=prefetch)
    epochs = [list(cpu) for _ in range(3)]
    assert_same_batches(list(loader), epochs[2])


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(input_nodes=torch.tensor([0.0, 1.0])), TypeError, "input_nodes: expected an integer tensor"),
    (dict(input_nodes=torch.tensor([0, 6])), ValueError, r"input_nodes: node ids must lie in \[0, 6\), found 6"),
    (dict(input_nodes=torch.tensor([-1])), ValueError, "found -1"),
    (dict(input_nodes=torch.tensor([], dtype=torch.long)), ValueError, "input_nodes: expected at least one node"),
    (dict(input_nodes=torch.zeros(6, dtype=torch.bool)), ValueError, "mask is all False"),
    (dict(input_nodes=torch.ones(5, dtype=torch.bool)), ValueError, "one entry per node"),
    (dict(input_nodes=torch.tensor([1, 2, 1])), ValueError, "input_nodes: expected unique"),
    (dict(subgraph_type="induced"), ValueError, "subgraph_type: .* only 'directional', got 'induced'"),
    (dict(subgraph_type="bidirectional"), ValueError, "subgraph_type"),
    (dict(num_neighbors=[2, -2]), ValueError,
     r"num_neighbors: expected every entry >= 0, or -1 for every neighbor, got -2 at position 1"),
    (dict(num_neighbors=[]), ValueError, "num_neighbors: expected a non-empty list"),
    (dict(num_neighbors=[2.5]), TypeError, "num_neighbors: expected ints"),
    (dict(disjoint=True), ValueError, "disjoint: .* supports only False"),
    (dict(time_attr="time"), ValueError, "time_attr"),
    (dict(input_time=torch.zeros(6)), ValueError, "input_time"),
    (dict(batch_size=0), ValueError, "batch_size: expected an int >= 1"),
    (dict(sampler=None), TypeError, r"unexpected keyword arguments \['sampler'\]"),
    (dict(seed=-1), ValueError, "seed"),
])
def test_bad_input_raises_naming_the_argument(kwargs, error, match) -> None:
    kwargs = {"num_neighbors": [2, 2], **kwargs}
    with pytest.raises(error, match=match):
        NeighborLoader(tiny_data(), **kwargs)


def test_bad_data_raises() -> None:
    with pytest.raises(TypeError, match="data: expected a torch_geometric.data.Data"):
        NeighborLoader({"edge_index": None}, [2])
    bad = tiny_data()
    bad.edge_index = bad.edge_index.float()
    with pytest.raises(ValueError, match="data.edge_index: expected an integer tensor"):
        NeighborLoader(bad, [2])


class SeedsAlone(BaseSampler):
    """PyG's node sampling where the answer is known by hand: a graph without edges gives every batch its
    seeds, ``hops`` hops that add nothing, and no edge."""

    def __init__(self, hops: int) -> None:
        self.hops = hops

    def sample_from_nodes(self, index, **kwargs):
        none = torch.zeros(0, dtype=torch.int64)
        return SamplerOutput(node=index.node, row=none, col=none, edge=none, batch=None,
                             num_sampled_nodes=[index.node.numel()] + [0] * self.hops,
                             num_sampled_edges=[0] * self.hops, metadata=(index.input_id, index.time))

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError


@pytest.mark.parametrize("fanouts", [[3], [2, -1]], ids=str)
def test_a_data_without_edges_gives_pygs_batches(fanouts) -> None:
    # Data(num_nodes=...) without edge_index is a graph without edges (PyG's loaders take one): PyG's own
    # NodeLoader, given the seeds as the sample, is the oracle, field by field (no edge_index in either).
    n = 50
    data = Data(x=torch.arange(2 * n, dtype=torch.float32).view(n, 2), y=torch.arange(n) % 3,
                train_mask=torch.arange(n) % 2 == 0, num_nodes=n)
    ours = list(NeighborLoader(data, fanouts, input_nodes=data.train_mask, batch_size=8, seed=0))
    theirs = list(NodeLoader(data, SeedsAlone(len(fanouts)), input_nodes=data.train_mask, batch_size=8))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        assert sorted(a.keys()) == sorted(b.keys()) and "edge_index" not in a
        for key in b.keys():
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key
    assert next(iter(NeighborLoader(Data(num_nodes=7), [1], batch_size=7, seed=0))).n_id.tolist() == list(range(7))


@pytest.mark.filterwarnings("ignore:Unable to accurately infer 'num_nodes'")  # PyG's own, for Data()
def test_data_without_a_node_count_or_with_a_sparse_adjacency_is_refused() -> None:
    with pytest.raises(ValueError, match="data.num_nodes: expected the node count"):
        NeighborLoader(Data(), [2])
    sparse = Data(num_nodes=3)
    sparse.adj_t = torch.eye(3).to_sparse()  # a SparseTensor's place: no edge_index beside it
    with pytest.raises(TypeError, match="a SparseTensor adj_t is not supported"):
        NeighborLoader(sparse, [2])


def test_edge_index_order_changes_only_e_id() -> None:
    # The same graph given grouped by target (no permutation kept) and in a shuffled order (edge ids
    # looked up per sampled edge): the same batches, and e_id names each edge's column in either order.
    data = random_data(seed=5)
    order = torch.argsort(data.edge_index[1], stable=True)
    grouped = Data(x=data.x, y=data.y, edge_index=data.edge_index[:, order], edge_attr=data.edge_attr[order],
                   num_classes=7)
    a = next(iter(NeighborLoader(grouped, [6, 4], batch_size=50, seed=4)))
    b = next(iter(NeighborLoader(data, [6, 4], batch_size=50, seed=4)))
    assert NeighborLoader(grouped, [2]).sampler.edge_ids is None, "grouped by target: CSC positions are the ids"
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(order[a.e_id], b.e_id)
    check_batch(a, grouped, [6, 4])
    check_batch(b, data, [6, 4])
    assert a.num_classes == 7 and b.num_nodes == b.n_id.numel(), "graph-level attributes are kept"


def test_nodewise_sampler_edge_ids() -> None:
    from gnnscale.graph.csc import csc_from_coo
    graph = csc_from_coo(TINY_SRC, TINY_DST, TINY_NUM_NODES)
    ids = np.arange(100, 100 + graph.num_edges, dtype=np.int64)
    plain = NodewiseSampler(graph, [-1, 2]).sample(np.array([1, 4]), 9)
    named = NodewiseSampler(graph, [-1, 2], edge_ids=ids).sample(np.array([1, 4]), 9)
    assert torch.equal(named.edge_pos, plain.edge_pos + 100) and torch.equal(named.edge_index, plain.edge_index)
    assert torch.equal(plain.row, plain.edge_index[0]) and torch.equal(plain.col, plain.edge_index[1])
    with pytest.raises(ValueError, match=r"edge_ids: expected an int64 array \[num_edges = 7\]"):
        NodewiseSampler(graph, [2], edge_ids=ids[:3])


def test_nodewise_sampler_tiny_example_of_its_docstring() -> None:
    from gnnscale.graph.csc import csc_from_coo
    out = NodewiseSampler(csc_from_coo(TINY_SRC, TINY_DST, TINY_NUM_NODES), [-1, -1]).sample(np.array([1]), 0)
    assert out.nodes.tolist() == [1, 0, 3, 4, 2]
    assert out.num_sampled_nodes == [1, 3, 1] and out.num_sampled_edges == [3, 3]


@needs_cora
def test_pyg_graphsage_trained_with_the_loader_on_cora() -> None:
    from torch_geometric.nn import GraphSAGE

    from gnnscale.graph.planetoid import load_planetoid
    ds = load_planetoid(CORA_DIR, "cora")
    data = Data(x=torch.from_numpy(ds.features), y=torch.from_numpy(ds.labels),
                edge_index=torch.from_numpy(np.stack([ds.graph.indices.astype(np.int64),
                                                      np.repeat(np.arange(ds.graph.num_nodes),
                                                                ds.graph.in_degrees())])))
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=ds.num_classes, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    train = NeighborLoader(data, [10, 10], input_nodes=torch.from_numpy(ds.train_idx), batch_size=32, shuffle=True,
                           seed=0)
    for _ in range(10):
        model.train()
        for batch in train:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in NeighborLoader(data, [-1, -1], input_nodes=torch.from_numpy(ds.test_idx), batch_size=256, seed=0):
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
    accuracy = correct / ds.test_idx.size
    assert accuracy > 0.70, f"test accuracy {accuracy:.3f}"
