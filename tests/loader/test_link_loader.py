"""gnnscale.loader.LinkNeighborLoader: PyG's LinkNeighborLoader batches, sampled without PyG's backend.

The oracle is PyG's own link loader: ``torch_geometric.loader.LinkLoader`` with PyG's ``edge_sample``
(seed set, negatives' place, labels) and ``filter_data``, given gnnscale's draws through PyG's two
extension points (a ``BaseSampler`` whose node sampling is gnnscale's node-wise sampler, a
``NegativeSampling`` whose draws are gnnscale's keyed negatives): the batches must be equal field by
field. Then the exact answer on the tiny graph, invariants, keyed determinism and errors.
"""

from __future__ import annotations

import importlib
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")  # the loaders are PyG's: without PyG, nothing here runs

from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import BaseSampler, NegativeSampling, SamplerOutput
from torch_geometric.sampler.neighbor_sampler import edge_sample
from torch_geometric.transforms import RandomLinkSplit

import gnnscale
from gnnscale.keys import derive_key
from gnnscale.loader import LinkNeighborLoader, NeighborLoader
from gnnscale.loader import options as options_module
from gnnscale.sampling.negatives import negative_pairs

from conftest import TINY_DST, TINY_NUM_NODES, TINY_SRC


def random_data(seed: int = 0, n: int = 120, num_edges: int = 900) -> Data:
    """Edges in no particular order (some repeated), features = node id, one edge attribute."""
    rng = np.random.default_rng(seed)
    edge_index = torch.from_numpy(rng.integers(0, n, size=(2, num_edges)))
    return Data(x=torch.arange(n, dtype=torch.float32).view(-1, 1).repeat(1, 2), y=torch.arange(n) % 3,
                edge_index=edge_index, edge_attr=torch.arange(num_edges, dtype=torch.float32), num_nodes=n)


class KeyedSampler(BaseSampler):
    """PyG's edge sampling with gnnscale's draws under the key of step ``0, 1, ...`` of epoch 0."""

    def __init__(self, data: Data, fanouts, seed: int) -> None:
        self.nodes = NeighborLoader(data, fanouts, seed=seed, prefetch=0).sampler  # the loader's own sampler
        self.num_nodes, self.seed, self.step = data.num_nodes, seed, 0
        self.key, self.num_pos = 0, 0

    def sample_from_nodes(self, index, **kwargs):
        raise NotImplementedError

    def sample_from_edges(self, index, neg_sampling=None):
        self.key, self.num_pos = derive_key(self.seed, 0, self.step), index.row.numel()
        self.step += 1
        return edge_sample(index, self._sample, self.num_nodes, False, None, neg_sampling)

    def _sample(self, seed, seed_time):
        out = self.nodes.sample(seed, self.key)
        return SamplerOutput(node=out.nodes, row=out.row, col=out.col, edge=out.edge_pos, batch=None,
                             num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)

    @property
    def edge_permutation(self):
        return None  # the sampler's edge ids are already columns of data.edge_index


class KeyedNegatives(NegativeSampling):
    """PyG's negative sampling configuration drawing gnnscale's keyed negatives of the current batch."""

    def __init__(self, mode: str, amount, sampler: KeyedSampler) -> None:
        super().__init__(mode, amount)
        self.sampler = sampler

    def sample(self, num_samples, endpoint, num_nodes=None):
        s = self.sampler
        sources = torch.zeros(s.num_pos, dtype=torch.int64)  # the uniform law draws both ends: ids unused
        law = "uniform" if self.is_binary() else "per_source"
        pairs = negative_pairs(sources, num_nodes, math.ceil(self.amount), s.key, law)
        return pairs[0 if endpoint == "src" else 1][:num_samples]


def pyg_batches(data, fanouts, seed, batch_size, neg=None, **kwargs) -> list[Data]:
    sampler = KeyedSampler(data, fanouts, seed)
    neg_sampling = None if neg is None else KeyedNegatives(*neg, sampler)
    return list(LinkLoader(data, sampler, neg_sampling=neg_sampling, batch_size=batch_size, **kwargs))


def assert_same_batch(ours: Data, theirs: Data) -> None:
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for key in theirs.keys():
        a, b = ours[key], theirs[key]
        if isinstance(b, Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), key
        else:
            assert a == b, key


Tensor = torch.Tensor
CASES = {
    "no negatives": dict(),
    "labels, no negatives": dict(edge_label=True),
    "binary": dict(neg=("binary", 1)),
    "binary x2, class labels from 0": dict(neg=("binary", 2), edge_label=True),
    "binary x1.5": dict(neg=("binary", 1.5)),
    "triplet": dict(neg=("triplet", 1)),
    "triplet x3": dict(neg=("triplet", 3)),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fanouts", [[4, 2], [-1]], ids=str)
def test_batches_equal_pyg_link_loaders_with_the_same_draws(case, fanouts) -> None:
    data = random_data()
    spec = CASES[case]
    rng = np.random.default_rng(1)
    edge_label_index = torch.from_numpy(rng.integers(0, data.num_nodes, size=(2, 70)))
    edge_label = torch.from_numpy(rng.integers(0, 3, size=70)) if spec.get("edge_label") else None
    theirs = pyg_batches(data, fanouts, 5, 16, spec.get("neg"), edge_label_index=edge_label_index,
                         edge_label=edge_label)
    neg = spec.get("neg")
    loader = LinkNeighborLoader(data, fanouts, edge_label_index=edge_label_index, edge_label=edge_label,
                                neg_sampling=None if neg is None else {"mode": neg[0], "amount": neg[1]},
                                batch_size=16, seed=5)
    ours = list(loader)
    assert len(ours) == len(theirs) == len(loader) == 5
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)


def test_random_link_split_data_equals_pyg_with_the_ratio_argument() -> None:
    # RandomLinkSplit's training data carries its own edge_label(_index): the batch's replace them.
    torch.manual_seed(0)
    train, _, _ = RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=False,
                                  add_negative_train_samples=False)(random_data())
    kwargs = dict(edge_label_index=train.edge_label_index, edge_label=train.edge_label)
    theirs = pyg_batches(train, [3, 3], 2, 32, ("binary", 1), **kwargs)
    ours = list(LinkNeighborLoader(train, [3, 3], neg_sampling_ratio=1.0, batch_size=32, seed=2, **kwargs))
    assert len(ours) == len(theirs) > 1
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        num_pos = a.input_id.numel()
        assert a.edge_label.dtype == torch.float32 and a.edge_label.tolist() == [1.0] * num_pos + [0.0] * num_pos


def tiny_data() -> Data:
    """The tiny graph of conftest.py (in-edges 0: [2]  1: [0, 4, 3] (edges 1, 4, 6)  2: [1]  3: [0]
    4: [2]  5: []), x = node id."""
    edge_index = torch.from_numpy(np.stack([TINY_SRC, TINY_DST]))
    return Data(x=torch.arange(TINY_NUM_NODES, dtype=torch.float32).view(-1, 1), edge_index=edge_index,
                num_nodes=TINY_NUM_NODES)


def test_tiny_graph_by_hand() -> None:
    # Seed edge 3 -> 0, every neighbor: the seeds are {0, 3} in id order; hop 0 samples 2 -> 0 (edge 0)
    # and 0 -> 3 (edge 5), adding node 2. Seed edges are not removed from message passing (PyG's rule).
    loader = LinkNeighborLoader(tiny_data(), [-1], edge_label_index=torch.tensor([[3], [0]]), seed=0)
    batch = next(iter(loader))
    assert batch.n_id.tolist() == [0, 3, 2] and batch.x.view(-1).tolist() == [0, 3, 2]
    assert batch.edge_index.tolist() == [[2, 0], [0, 1]] and batch.e_id.tolist() == [0, 5]
    assert batch.edge_label_index.tolist() == [[1], [0]] and "edge_label" not in batch
    assert batch.input_id.tolist() == [0] and "batch_size" not in batch
    assert batch.num_sampled_nodes == [2, 1] and batch.num_sampled_edges == [2]


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_pairs_map_back_to_the_inputs_and_negatives_are_node_ids(mode) -> None:
    data = random_data(seed=3)
    loader = LinkNeighborLoader(data, [5, 3], neg_sampling=NegativeSampling(mode, 2), batch_size=40, shuffle=True,
                                seed=9)
    seen = []
    for batch in loader:
        n_id, num_pos = batch.n_id, batch.input_id.numel()
        seen.append(batch.input_id)
        if mode == "binary":
            pairs = n_id[batch.edge_label_index]
            assert tuple(pairs.shape) == (2, 3 * num_pos)
            assert torch.equal(batch.edge_label, torch.cat([torch.ones(num_pos), torch.zeros(2 * num_pos)]))
        else:
            pairs = torch.stack([n_id[batch.src_index], n_id[batch.dst_pos_index]])
            assert tuple(batch.dst_neg_index.shape) == (num_pos, 2)
            assert bool((n_id[batch.dst_neg_index] < data.num_nodes).all())
        assert torch.equal(pairs[:, :num_pos], data.edge_index[:, batch.input_id])
        # The seeds, sorted, open n_id; every sampled edge is the graph's edge e_id.
        seeds = torch.unique(pairs if mode == "binary" else torch.cat([pairs.view(-1), n_id[batch.dst_neg_index].view(-1)]))
        assert torch.equal(n_id[:seeds.numel()], seeds) and batch.num_sampled_nodes[0] == seeds.numel()
        assert torch.equal(n_id[batch.edge_index], data.edge_index[:, batch.e_id])
        assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(data.num_edges))


def test_same_seed_same_batches_whatever_prefetch_and_new_ones_each_epoch() -> None:
    data = random_data()

    def epochs(prefetch):
        loader = LinkNeighborLoader(data, [4, 2], neg_sampling="binary", batch_size=64, shuffle=True, seed=11,
                                    prefetch=prefetch)
        return [list(loader) for _ in range(2)]

    (first, second), (again, _) = epochs(1), epochs(0)
    for a, b in zip(first, again):
        assert_same_batch(a, b)
    assert not torch.equal(first[0].input_id, second[0].input_id)  # a new order
    assert not torch.equal(first[0].n_id, second[0].n_id)


def test_seed_drawn_from_torch_and_transform_applied() -> None:
    data = random_data()
    torch.manual_seed(4)
    a = LinkNeighborLoader(data, [2], batch_size=50, transform=lambda b: b.update({"tag": 1}) or b)
    torch.manual_seed(4)
    b = LinkNeighborLoader(data, [2], batch_size=50)
    assert a.seed == b.seed and next(iter(a)).tag == 1
    assert "LinkNeighborLoader(num_neighbors=[2], edge_label_index=900" in repr(a)


BAD = [
    (dict(edge_label_index=torch.zeros(3, 4, dtype=torch.long)), ValueError, r"edge_label_index: expected shape \[2"),
    (dict(edge_label_index=torch.zeros(2, 0, dtype=torch.long)), ValueError, "edge_label_index: expected shape"),
    (dict(edge_label_index=torch.zeros(2, 4)), TypeError, "edge_label_index: expected an integer tensor"),
    (dict(edge_label_index=[[0], [1]]), TypeError, "edge_label_index: expected an int tensor"),
    (dict(edge_label_index=torch.tensor([[0], [6]])), ValueError, r"edge_label_index: node ids must lie in \[0, 6\), found 6"),
    (dict(edge_label_index=torch.tensor([[-1], [0]])), ValueError, "edge_label_index: node ids must lie in .* found -1"),
    (dict(edge_label=torch.ones(3)), ValueError, r"edge_label: expected one label per edge .*\(7\)"),
    (dict(edge_label=torch.ones(7), neg_sampling="triplet"), ValueError, "edge_label: must be None with neg_sampling='triplet'"),
    (dict(neg_sampling_ratio=-1.0), ValueError, "neg_sampling_ratio: expected a number > 0"),
    (dict(neg_sampling_ratio="1"), ValueError, "neg_sampling_ratio: expected a number > 0"),
    (dict(neg_sampling=("binary", 0)), ValueError, "neg_sampling: .*'amount' needs to be positive"),
    (dict(neg_sampling=("triplet", 1.5)), ValueError, "neg_sampling: .*needs to be an integer"),
    (dict(neg_sampling="pairs"), ValueError, "neg_sampling: expected 'binary', 'triplet'.*'pairs'"),
    (dict(neg_sampling=NegativeSampling("binary", 1, src_weight=torch.ones(6))), ValueError,
     "neg_sampling: weighted negatives"),
    (dict(edge_label_time=torch.zeros(7)), ValueError, "edge_label_time: gnnscale's LinkNeighborLoader supports only None"),
    (dict(input_nodes=torch.tensor([0])), TypeError, "LinkNeighborLoader: unexpected keyword argument 'input_nodes'"),
    (dict(disjoint=True), ValueError, "disjoint: gnnscale's NeighborLoader supports only False"),
    (dict(batch_size=0), ValueError, "batch_size: expected an int >= 1"),
]


@pytest.mark.parametrize("kwargs, error, match", BAD, ids=lambda v: str(v)[:40] if isinstance(v, dict) else "")
def test_bad_input_raises_one_error_naming_the_argument(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        LinkNeighborLoader(tiny_data(), [2], **kwargs)


def test_ratio_zero_means_no_negatives_as_pyg() -> None:
    loader = LinkNeighborLoader(tiny_data(), [2], neg_sampling_ratio=0.0, batch_size=7, seed=0)
    assert loader.neg_sampling is None and next(iter(loader)).edge_label_index.shape[1] == 7


class SeedsAloneSampler(KeyedSampler):
    """KeyedSampler where the node sample is known by hand: on a graph without edges, or with no hop, a batch
    is its seeds and no edge (``hops`` hops that add nothing)."""

    def __init__(self, num_nodes: int, hops: int, seed: int) -> None:  # no node-wise sampler to build
        self.num_nodes, self.seed, self.step, self.hops = num_nodes, seed, 0, hops
        self.key, self.num_pos = 0, 0

    def _sample(self, seed, seed_time):
        none = torch.zeros(0, dtype=torch.int64)
        return SamplerOutput(node=seed, row=none, col=none, edge=none, batch=None,
                             num_sampled_nodes=[seed.numel()] + [0] * self.hops, num_sampled_edges=[0] * self.hops)


@pytest.mark.parametrize("graph, fanouts", [("no edges", []), ("no edges", [2, 2]), ("edges", [])], ids=str)
@pytest.mark.parametrize("neg", [None, ("binary", 1.5), ("triplet", 2)], ids=str)
def test_no_edges_or_no_hop_gives_pygs_batches(graph, fanouts, neg) -> None:
    # PyG's own test (test_homo_link_neighbor_loader_no_edges): Data(num_nodes=100) has no edge_index at
    # all, num_neighbors=[] samples no hop. PyG's LinkLoader, given the seeds as the node sample, is the oracle.
    data = Data(num_nodes=100) if graph == "no edges" else random_data(n=100)
    edge_label_index = torch.from_numpy(np.random.default_rng(2).integers(0, 100, size=(2, 100)))
    ours = list(LinkNeighborLoader(data, num_neighbors=fanouts, batch_size=20, edge_label_index=edge_label_index,
                                   neg_sampling=None if neg is None else NegativeSampling(*neg), seed=3))
    sampler = SeedsAloneSampler(100, len(fanouts), 3)
    theirs = list(LinkLoader(data, sampler, edge_label_index=edge_label_index, batch_size=20,
                             neg_sampling=None if neg is None else KeyedNegatives(*neg, sampler)))
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        assert ("edge_index" in a) == (graph == "edges")
        assert a.input_id.numel() == 20 and a.num_sampled_nodes[0] == a.num_nodes == a.n_id.numel()
        if neg is None:  # PyG's test's own checks
            assert a.edge_label_index.size(1) == 20 and a.num_nodes == a.edge_label_index.unique().numel()


def test_a_graph_without_edges_needs_its_seed_edges() -> None:
    with pytest.raises(ValueError, match="edge_label_index: expected the seed edges.*data has no edge_index"):
        LinkNeighborLoader(Data(num_nodes=5), [])


def assert_same_batches_on_the_host(got: list[Data], want: list[Data]) -> None:
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert list(a.keys()) == list(b.keys())
        for key in b.keys():
            if isinstance(b[key], Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key].cpu(), b[key]), key
            else:
                assert a[key] == b[key], key


@pytest.mark.parametrize("prefetch", [0, 2])
def test_device_cpu_and_pin_memory_go_through_the_copy_stage_as_the_node_loaders(prefetch, monkeypatch) -> None:
    monkeypatch.setattr(options_module, "_noted", set())
    data = random_data()
    kwargs = dict(neg_sampling="binary", batch_size=128, shuffle=True, seed=11, prefetch=prefetch)
    want = list(LinkNeighborLoader(data, [4, 2], **kwargs))
    assert_same_batches_on_the_host(list(LinkNeighborLoader(data, [4, 2], device="cpu", **kwargs)), want)
    if torch.cuda.is_available():  # pinned host batches, as torch's DataLoader gives
        pinned = list(LinkNeighborLoader(data, [4, 2], pin_memory=True, **kwargs))
        assert all(b.x.is_pinned() and b.edge_label_index.is_pinned() for b in pinned)
    else:  # a CPU-only machine: one warning, no effect
        with pytest.warns(UserWarning, match="LinkNeighborLoader: pin_memory=True ignored: no CUDA device here"):
            pinned = list(LinkNeighborLoader(data, [4, 2], pin_memory=True, **kwargs))
    assert_same_batches_on_the_host(pinned, want)


def test_device_and_pin_memory_errors_name_the_argument(monkeypatch) -> None:
    with pytest.raises(ValueError, match="device: expected cpu, cuda, cuda:N or auto, got 'tpu'"):
        LinkNeighborLoader(tiny_data(), [2], device="tpu")
    with pytest.raises(TypeError, match="pin_memory: expected True or False, got 1"):
        LinkNeighborLoader(tiny_data(), [2], pin_memory=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device: cuda asks for a GPU and none is available here"):
        LinkNeighborLoader(tiny_data(), [2], device="cuda")
    assert LinkNeighborLoader(tiny_data(), [2], device="auto").device == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("neg", ["binary", ("triplet", 2)], ids=str)
@pytest.mark.parametrize("prefetch", [0, 2])
def test_batches_on_cuda_are_the_cpu_batches(neg, prefetch) -> None:
    data = random_data()
    kwargs = dict(neg_sampling=neg, batch_size=64, shuffle=True, seed=5, prefetch=prefetch)
    want = list(LinkNeighborLoader(data, [4, 2], **kwargs))
    got, sums = [], []
    for batch in LinkNeighborLoader(data, [4, 2], device="cuda", **kwargs):
        assert all(v.is_cuda for v in batch.values() if isinstance(v, Tensor))
        sums.append(batch.x.sum())  # a kernel on the default stream, after the copy
        got.append(batch)
    assert_same_batches_on_the_host(got, want)
    assert [s.item() for s in sums] == [b.x.sum().item() for b in want]


LOADER_MODULES = sorted(p.stem for p in Path(gnnscale.__file__).parent.joinpath("loader").glob("*.py"))


@pytest.mark.parametrize("name", LOADER_MODULES)
def test_each_module_of_the_package_imports_on_its_own(name, monkeypatch) -> None:
    # No circle between the loader's modules: each one imported first, into a fresh package, works.
    # monkeypatch puts the original modules back afterwards.
    for module in [m for m in sys.modules if m == "gnnscale.loader" or m.startswith("gnnscale.loader.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.delattr(gnnscale, "loader")
    fresh = importlib.import_module("gnnscale.loader" if name == "__init__" else f"gnnscale.loader.{name}")
    link = importlib.import_module("gnnscale.loader.link")  # the one imported with it, or a fresh one
    assert next(iter(link.LinkNeighborLoader(tiny_data(), [1], seed=0))).edge_label_index.shape == (2, 1)
    assert link.LinkNeighborLoader is not LinkNeighborLoader and fresh is sys.modules[fresh.__name__]


def test_node_dataset_seeds_every_csc_edge_like_its_pyg_data(random_graph) -> None:
    from gnnscale.graph.dataset import NodeDataset
    from gnnscale.loader import to_pyg_data
    n = random_graph.num_nodes
    ds = NodeDataset(name="r", graph=random_graph, features=np.arange(n, dtype=np.float32).reshape(n, 1),
                     labels=np.arange(n) % 3, train_idx=np.arange(0, n, 5), val_idx=np.arange(1, n, 5),
                     test_idx=np.arange(2, n, 5), num_classes=3)
    kwargs = dict(neg_sampling="binary", batch_size=256, seed=1)
    ours, theirs = LinkNeighborLoader(ds, [3, 2], **kwargs), LinkNeighborLoader(to_pyg_data(ds), [3, 2], **kwargs)
    assert len(ours) == -(-random_graph.num_edges // 256)
    indices = torch.from_numpy(random_graph.indices.astype(np.int64))
    for a, b in itertools.islice(zip(ours, theirs), 3):  # to_pyg_data's edge_index: the CSC, column = position
        for key in ("n_id", "edge_index", "e_id", "edge_label_index", "edge_label", "input_id", "x"):
            assert torch.equal(a[key], b[key]), key
        assert torch.equal(a.n_id[a.edge_label_index[0, :a.input_id.numel()]], indices[a.input_id])
