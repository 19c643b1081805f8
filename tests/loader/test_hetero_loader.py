"""gnnscale.loader.NeighborLoader on typed graphs (a PyG HeteroData, a gnnscale TypedDataset): PyG's HeteroData
batches, sampled by gnnscale's typed node-wise kernel.

The oracles: PyG's own ``NodeLoader`` (its ``filter_hetero_data`` and batch fields) given gnnscale's draws through
a ``BaseSampler`` (the batches must be equal field by field); PyG's law written in plain torch
(``hetero_reference``; with every neighbor the sample is determined, so the batches must be equal); the typed
fused kernel (hop 0 is its first hop); the homogeneous loader (a graph of one relation); the tiny graph by hand;
invariants against the data's own edges. Then a PyG ``to_hetero`` script trained with only its import changed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")  # the loaders are PyG's: without PyG, nothing here runs

from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, HeteroSamplerOutput

from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.typed_synthetic import typed_preset_config
from gnnscale.keys import derive_key
from gnnscale.loader import NeighborLoader, to_pyg_hetero_data
from gnnscale.sampling.typed import sample_typed_blocks

import hetero_reference

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pyg_to_hetero.py"
WRITES, CITES, TOPIC = ("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "has_topic", "field")
REV_WRITES, REV_TOPIC = ("paper", "rev_writes", "author"), ("field", "rev_has_topic", "paper")


def random_hetero(seed: int = 0) -> HeteroData:
    """Papers (features, labels, a mask, a float64 and a non-contiguous attribute), authors (one attribute, no
    features), fields, venues (no edge at all); five edge types with repeated edges, each edge_index in no
    particular order, some with edge attributes, one empty; a graph-level attribute."""
    rng = np.random.default_rng(seed)
    counts = {"paper": 120, "author": 80, "field": 10, "venue": 4}
    data = HeteroData()
    paper = data["paper"]
    paper.x = torch.arange(120, dtype=torch.float32).view(-1, 1).repeat(1, 3)
    paper.y = torch.arange(120) % 5
    paper.train_mask = torch.arange(120) % 3 == 0
    paper.year = torch.arange(120, dtype=torch.float64)
    paper.x_view = torch.rand(2, 120).t()  # not contiguous: PyG's index_select slices it
    data["author"].score = torch.rand(80)
    data["author"].num_nodes = 80
    data["field"].x = torch.rand(10, 2)
    data["venue"].num_nodes = 4

    def edges(src_type, dst_type, n):
        return torch.from_numpy(np.stack([rng.integers(0, counts[src_type], n), rng.integers(0, counts[dst_type], n)]))

    data[WRITES].edge_index = edges("author", "paper", 400)
    data[WRITES].edge_attr = torch.arange(400, dtype=torch.float32).view(-1, 1).repeat(1, 2)
    data[CITES].edge_index = edges("paper", "paper", 500)
    data[CITES].edge_weight = torch.rand(500)
    data[TOPIC].edge_index = edges("paper", "field", 200)
    data[REV_WRITES].edge_index = data[WRITES].edge_index.flip(0)
    data["field", "rev_has_topic", "paper"].edge_index = data[TOPIC].edge_index.flip(0)
    data["venue", "hosts", "paper"].edge_index = torch.zeros((2, 0), dtype=torch.int64)
    data.name = "toy"
    return data


def type_offsets(data: HeteroData) -> dict[str, int]:
    starts = np.cumsum([0] + [data[t].num_nodes for t in data.node_types])
    return dict(zip(data.node_types, starts.tolist()))


def csc_columns(data: HeteroData, edge_type) -> np.ndarray:
    """The columns of ``edge_index`` in CSC order (by destination, then source, then column): an edge's id."""
    src, dst = data[edge_type].edge_index.numpy()
    return np.lexsort((np.arange(src.shape[0]), src, dst))


class KeyedHeteroSampler(BaseSampler):
    """PyG's node sampling with gnnscale's draws (the loader's own sampler) under the key of step ``0, 1, ...`` of
    epoch 0; each edge named by its edge_index column, found from the data by this test."""

    def __init__(self, loader: NeighborLoader, data: HeteroData) -> None:
        self.sampler, self.seed, self.step = loader.sampler, loader.seed, 0
        self.offsets = type_offsets(data)
        self.columns = {e: torch.from_numpy(csc_columns(data, e)) for e in data.edge_types}
        self.node_types, self.edge_types = data.metadata()

    def sample_from_nodes(self, index, **kwargs) -> HeteroSamplerOutput:
        out = self.sampler.sample(index.node + self.offsets[index.input_type], derive_key(self.seed, 0, self.step))
        self.step += 1
        return HeteroSamplerOutput(
            node={t: out.nodes[i] - self.offsets[t] for i, t in enumerate(self.node_types)},
            row={e: out.edge_index[r][0] for r, e in enumerate(self.edge_types)},
            col={e: out.edge_index[r][1] for r, e in enumerate(self.edge_types)},
            edge={e: self.columns[e][out.edge_rank[r]] for r, e in enumerate(self.edge_types)}, batch=None,
            num_sampled_nodes={t: out.num_sampled_nodes[i] for i, t in enumerate(self.node_types)},
            num_sampled_edges={e: out.num_sampled_edges[r] for r, e in enumerate(self.edge_types)},
            metadata=(index.input_id, index.time))

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError

    @property
    def edge_permutation(self):
        return None


def assert_same_batch(ours, theirs) -> None:
    """Store by store (and the graph-level one): the same attributes, with equal values."""
    assert ours.node_types == theirs.node_types and ours.edge_types == theirs.edge_types
    for a, b in zip([ours._global_store, *ours.node_stores, *ours.edge_stores],
                    [theirs._global_store, *theirs.node_stores, *theirs.edge_stores]):
        assert sorted(a.keys()) == sorted(b.keys()), (a._key, sorted(a.keys()), sorted(b.keys()))
        for key in b.keys():
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (a._key, key)
            else:
                assert a[key] == b[key], (a._key, key)


CASES = {
    "one list": dict(num_neighbors=[3, 2]),
    "every neighbor, then none": dict(num_neighbors=[-1, 0]),
    "three hops": dict(num_neighbors=[2, 2, 2]),
    "a dict per edge type": "dict",
    "with replacement": dict(num_neighbors=[3, 2], replace=True),
    "authors as seeds": dict(num_neighbors=[4, 4], input_nodes=("author", torch.arange(0, 80, 3))),
    "a node type: all its nodes": dict(num_neighbors=[2, 2], input_nodes="field"),
}


@pytest.mark.parametrize("case", CASES)
def test_batches_equal_pyg_node_loaders_with_the_same_draws(case) -> None:
    data = random_hetero()
    spec = CASES[case]
    if spec == "dict":  # PyG's keys: tuples, or "src__rel__dst"
        spec = dict(num_neighbors={e if r % 2 else "__".join(e): [r % 3 + 1, -1 if r == 1 else 2]
                                   for r, e in enumerate(data.edge_types)})
    spec = {"input_nodes": ("paper", data["paper"].train_mask), **spec}
    ours = list(NeighborLoader(data, batch_size=16, seed=5, **spec))
    loader = NeighborLoader(data, batch_size=16, seed=5, **spec)
    theirs = list(NodeLoader(data, KeyedHeteroSampler(loader, data), input_nodes=spec["input_nodes"], batch_size=16))
    assert len(ours) == len(theirs) == len(loader) > 0
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)


def check_batch(batch: HeteroData, data: HeteroData, fanouts: list[int], input_type: str, *,
                replace: bool = False) -> None:
    """PyG's conventions, and every sampled edge is an edge of ``data`` with the right count per node."""
    hops = len(fanouts)
    for t in data.node_types:
        store = batch[t]
        assert len(store.num_sampled_nodes) == hops + 1 and sum(store.num_sampled_nodes) == store.n_id.numel()
        assert torch.unique(store.n_id).numel() == store.n_id.numel()
        assert store.num_sampled_nodes[0] == (batch[input_type].batch_size if t == input_type else 0)
        for key in data[t].keys():
            if key != "num_nodes":
                assert torch.equal(store[key], data[t][key][store.n_id]), (t, key)
    for edge_type in data.edge_types:
        src_type, _, dst_type = edge_type
        store = batch[edge_type]
        edge_index, e_id = store.edge_index, store.e_id
        assert len(store.num_sampled_edges) == hops and sum(store.num_sampled_edges) == edge_index.shape[1]
        # Each edge, mapped back through the n_id of its types, is the edge e_id of the data.
        global_edges = torch.stack([batch[src_type].n_id[edge_index[0]], batch[dst_type].n_id[edge_index[1]]])
        assert torch.equal(global_edges, data[edge_type].edge_index[:, e_id])
        for key in data[edge_type].keys():
            if key != "edge_index":
                assert torch.equal(store[key], data[edge_type][key][e_id]), (edge_type, key)
        # Hop k's edges point to the destination type's nodes hop k - 1 added, grouped by destination in
        # order, as many as the fanout allows; their sources are known by the end of hop k.
        in_degree = torch.bincount(data[edge_type].edge_index[1], minlength=data[dst_type].num_nodes)
        node_starts = np.cumsum([0] + batch[dst_type].num_sampled_nodes)
        src_ends = np.cumsum(batch[src_type].num_sampled_nodes)
        edge_starts = np.cumsum([0] + store.num_sampled_edges)
        for k, fanout in enumerate(fanouts):
            src, dst = edge_index[:, edge_starts[k]:edge_starts[k + 1]]
            assert bool((dst[1:] >= dst[:-1]).all())
            if dst.numel():
                assert node_starts[k] <= int(dst.min()) and int(dst.max()) < node_starts[k + 1]
                assert int(src.max()) < src_ends[k + 1]
            frontier = batch[dst_type].n_id[node_starts[k]:node_starts[k + 1]]
            counts = torch.bincount(dst - int(node_starts[k]), minlength=frontier.numel())
            full = in_degree[frontier]
            expected = full if fanout == -1 else (torch.where(full > 0, fanout, 0) if replace
                                                  else full.clamp(max=fanout))
            assert torch.equal(counts, expected), (edge_type, k)
            if not replace:
                assert torch.unique(e_id[edge_starts[k]:edge_starts[k + 1]]).numel() == src.numel()


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, 2], [0, 5], [2, 2, 2]], ids=str)
@pytest.mark.parametrize("replace", [False, True])
def test_batches_follow_pyg_conventions(fanouts, replace) -> None:
    data = random_hetero(seed=1)
    loader = NeighborLoader(data, fanouts, input_nodes=("paper", data["paper"].train_mask), batch_size=12,
                            shuffle=True, replace=replace, seed=3)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-int(data["paper"].train_mask.sum()) // 12)
    for batch in batches:
        check_batch(batch, data, fanouts, "paper", replace=replace)
        assert batch.name == "toy", "graph-level attributes are kept"
    seeds = torch.cat([b["paper"].n_id[:b["paper"].batch_size] for b in batches])
    assert sorted(seeds.tolist()) == data["paper"].train_mask.nonzero().view(-1).tolist()
    assert torch.equal(torch.cat([b["paper"].input_id for b in batches]), seeds)  # a mask's input_id: node ids


@pytest.mark.parametrize("fanouts", [[-1], [-1, -1], [100, 100, 100]], ids=str)
def test_every_neighbor_gives_the_batches_of_pygs_law_written_in_plain_torch(fanouts) -> None:
    # With every neighbor taken the sample is determined: PyG's NodeLoader over the plain-torch sampler of PyG's
    # law (hetero_reference) must give the same batches, node order and edge order included.
    data = random_hetero(seed=2)
    seeds = ("paper", torch.tensor([5, 77, 3, 119, 40, 41]))
    ours = list(NeighborLoader(data, fanouts, input_nodes=seeds, batch_size=4, seed=0))
    reference = hetero_reference.PlainTorchHeteroSampler(data, fanouts)
    theirs = list(NodeLoader(data, reference, input_nodes=seeds, batch_size=4))
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)


def test_tiny_graph_by_hand() -> None:
    # The docstring's example of gnnscale/sampling/typed_nodewise.py, edge_index columns in another order:
    # papers P0 P1 P2, authors A0 A1; writes A0->P0, A1->P0, A1->P1; cites P1->P0, P2->P1; rev_writes the reverse
    # of writes. Seed P0, every neighbor, two hops.
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 3, 2
    data[WRITES].edge_index = torch.tensor([[1, 0, 1], [1, 0, 0]])  # columns: A1->P1, A0->P0, A1->P0
    data[CITES].edge_index = torch.tensor([[2, 1], [1, 0]])
    data[REV_WRITES].edge_index = torch.tensor([[1, 0, 0], [1, 0, 1]])  # P1->A1, P0->A0, P0->A1
    batch = next(iter(NeighborLoader(data, [-1, -1], input_nodes=("paper", [0]), seed=0)))
    assert batch["paper"].n_id.tolist() == [0, 1, 2] and batch["author"].n_id.tolist() == [0, 1]
    assert batch["paper"].num_sampled_nodes == [1, 1, 1] and batch["author"].num_sampled_nodes == [0, 2, 0]
    # writes: hop 0 A0->P0, A1->P0; hop 1 A1->P1.
    assert batch[WRITES].edge_index.tolist() == [[0, 1, 1], [0, 0, 1]] and batch[WRITES].e_id.tolist() == [1, 2, 0]
    assert batch[CITES].edge_index.tolist() == [[1, 2], [0, 1]] and batch[CITES].e_id.tolist() == [1, 0]
    # rev_writes: nothing at hop 0 (no author yet); hop 1 P0->A0, P0->A1, P1->A1.
    assert batch[REV_WRITES].edge_index.tolist() == [[0, 0, 1], [0, 1, 1]]
    assert batch[REV_WRITES].e_id.tolist() == [1, 2, 0]
    assert batch[WRITES].num_sampled_edges == [2, 1] and batch[REV_WRITES].num_sampled_edges == [0, 3]
    assert batch["paper"].batch_size == 1 and batch["paper"].input_id.tolist() == [0]
    assert "batch_size" not in batch["author"] and "input_id" not in batch["author"]


def test_first_hop_is_the_typed_block_samplers_first_hop() -> None:
    # Same key, same draws: hop 0 of the node-wise sample is the typed fused kernel's first hop, edge for edge.
    data = random_hetero(seed=3)
    loader = NeighborLoader(data, [4, 3], input_nodes="paper", batch_size=30, seed=0)
    offsets = type_offsets(data)
    seeds = torch.arange(20, 50)
    key = 987654321
    out = loader.sampler.sample(seeds, key)
    block = sample_typed_blocks(loader.sampler.graph, seeds, [4, 3], key=key)[-1]  # model order: seeds' block last
    for r, (edge_type, rel) in enumerate(zip(data.edge_types, block.relations)):
        hop0 = out.edge_index[r][:, :out.num_sampled_edges[r][0]]
        src_type = data.node_types.index(edge_type[0])
        ours = torch.stack([out.nodes[src_type][hop0[0]], seeds[hop0[1]]])
        dst = torch.repeat_interleave(rel.dst, torch.diff(rel.indptr))
        theirs = torch.stack([block.src_ids[rel.indices], block.src_ids[dst]])
        assert torch.equal(ours, theirs), edge_type
    assert offsets["paper"] == 0


def test_one_relation_samples_as_the_homogeneous_loader() -> None:
    rng = np.random.default_rng(4)
    n = 150
    src, dst = rng.integers(0, n, 1500), rng.integers(0, n, 1500)
    order = np.lexsort((src, dst))  # grouped by destination, then source: both loaders read the same rows
    edge_index = torch.from_numpy(np.stack([src[order], dst[order]]))
    x = torch.rand(n, 4)
    hetero = HeteroData()
    hetero["node"].x = x
    hetero["node", "to", "node"].edge_index = edge_index
    plain = Data(x=x, edge_index=edge_index)
    for replace in (False, True):
        a = list(NeighborLoader(hetero, [5, 3], input_nodes=("node", torch.arange(0, n, 2)), batch_size=20,
                                shuffle=True, replace=replace, seed=9))
        b = list(NeighborLoader(plain, [5, 3], input_nodes=torch.arange(0, n, 2), batch_size=20, shuffle=True,
                                replace=replace, seed=9))
        for p, q in zip(a, b, strict=True):
            store, edges = p["node"], p["node", "to", "node"]
            assert torch.equal(store.n_id, q.n_id) and torch.equal(store.x, q.x)
            assert torch.equal(edges.edge_index, q.edge_index) and torch.equal(edges.e_id, q.e_id)
            assert store.num_sampled_nodes == q.num_sampled_nodes and edges.num_sampled_edges == q.num_sampled_edges
            assert store.batch_size == q.batch_size and torch.equal(store.input_id, q.input_id)


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=0.002)


def test_typed_dataset_input_gives_the_batches_of_its_heterodata(mag) -> None:
    data = to_pyg_hetero_data(mag)
    train = mag.local_ids(mag.train_idx)
    ours = list(NeighborLoader(mag, [4, 3], input_nodes=("paper", train), batch_size=64, seed=1))
    theirs = list(NeighborLoader(data, [4, 3], input_nodes=("paper", train), batch_size=64, seed=1))
    default = next(iter(NeighborLoader(mag, [4, 3], batch_size=64, seed=1)))  # None: every node of the target type
    assert default["paper"].n_id[:64].tolist() == list(range(64))
    for a, b in zip(ours, theirs, strict=True):
        for t in data.node_types:
            keys = sorted(a[t].keys())
            assert keys == sorted(["n_id", "num_sampled_nodes"] + [k for k in ("x", "y") if k in data[t]]
                                  + (["batch_size", "input_id"] if t == "paper" else []))
            for key in keys:
                assert (torch.equal(a[t][key], b[t][key]) if isinstance(b[t][key], torch.Tensor)
                        else a[t][key] == b[t][key]), (t, key)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id)
        check_batch(b, data, [4, 3], "paper")


def test_to_pyg_hetero_data_holds_the_dataset(mag) -> None:
    data = to_pyg_hetero_data(mag)
    graph = mag.graph
    assert data.node_types == list(graph.node_types)
    assert data.edge_types == [(r.src, r.name, r.dst) for r in graph.relations]
    for t in graph.node_types:
        assert data[t].num_nodes == graph.count(t)
        assert ("x" in data[t]) == (mag.features[t] is not None)
    assert torch.equal(data["paper"].x, torch.from_numpy(mag.features["paper"]))
    assert torch.equal(data["paper"].y, torch.from_numpy(mag.labels))
    lo = mag.target_range[0]
    assert data["paper"].train_mask.nonzero().view(-1).tolist() == (mag.train_idx - lo).tolist()
    # Each relation joins its own pair of types in the mag preset: its edges are the global CSC's edges between
    # those types, in CSC order (by destination, then source), in local ids.
    src_all = np.asarray(graph.graph.indices, dtype=np.int64)
    dst_all = np.repeat(np.arange(graph.num_nodes), np.diff(graph.graph.indptr))
    for rel in graph.relations:
        (src_lo, src_hi), (dst_lo, dst_hi) = graph.node_range(rel.src), graph.node_range(rel.dst)
        mine = (src_all >= src_lo) & (src_all < src_hi) & (dst_all >= dst_lo) & (dst_all < dst_hi)
        want = np.stack([src_all[mine] - src_lo, dst_all[mine] - dst_lo])
        assert np.array_equal(data[rel.src, rel.name, rel.dst].edge_index.numpy(), want), rel
    with pytest.raises(TypeError, match="dataset: expected a gnnscale TypedDataset"):
        to_pyg_hetero_data(data)


def test_same_seed_same_batches_whatever_prefetch() -> None:
    data = random_hetero(seed=5)

    def epochs(seed, prefetch):
        loader = NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=25, shuffle=True, seed=seed,
                                prefetch=prefetch)
        return [[(b["author"].n_id, b[WRITES].edge_index, b[REV_WRITES].e_id) for b in loader] for _ in range(2)]

    a, b, c = epochs(7, 0), epochs(7, 2), epochs(8, 1)
    for ea, eb in zip(a, b, strict=True):
        for x, y in zip(ea, eb, strict=True):
            assert all(torch.equal(p, q) for p, q in zip(x, y))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a[0], c[0])), "another seed, other batches"
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a[0], a[1])), "each epoch its own order"


def test_iterators_open_at_once_share_the_sampler_safely() -> None:
    data = random_hetero()
    loader = NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=8, shuffle=True, seed=2, prefetch=2)
    for a, b in zip(loader, loader):  # two background threads, one mapping array
        check_batch(a, data, [3, 3], "paper")
        check_batch(b, data, [3, 3], "paper")


def test_device_cpu_gives_the_batches_of_the_default() -> None:
    data = random_hetero()
    want = list(NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=40, seed=3))
    got = list(NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=40, seed=3, device="cpu", prefetch=2))
    for a, b in zip(got, want, strict=True):
        assert_same_batch(a, b)


@pytest.mark.gpu
def test_batches_on_cuda_are_the_cpu_batches() -> None:
    data = random_hetero()
    want = list(NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=40, seed=3))
    got = list(NeighborLoader(data, [3, 2], input_nodes="paper", batch_size=40, seed=3, device="cuda"))
    for a, b in zip(got, want, strict=True):
        assert a["paper"].x.is_cuda and a[WRITES].edge_index.is_cuda and a["author"].n_id.is_cuda
        assert_same_batch(a.cpu(), b)


def edited(change) -> HeteroData:
    data = random_hetero()
    change(data)
    return data


@pytest.mark.parametrize("data,kwargs,error,match", [
    (None, dict(input_nodes=("venue2", [0])), ValueError,
     "input_nodes: node type 'venue2' is not one of paper, author, field, venue"),
    (None, dict(input_nodes=("paper", [0, 120])), ValueError,
     r"input_nodes: node ids must lie in \[0, 120\) \(the paper nodes\), found 120"),
    (None, dict(input_nodes=("author", torch.ones(120, dtype=torch.bool))), ValueError,
     r"input_nodes: a bool mask needs one entry per node \(80 \(the author nodes\)\), got 120"),
    (None, dict(input_nodes=None), ValueError,
     "input_nodes: a heterogeneous graph takes a node type or \\(node type, ids\\), got NoneType"),
    (None, dict(num_neighbors={("paper", "cited_by", "paper"): [2]}), ValueError,
     r"num_neighbors: \('paper', 'cited_by', 'paper'\) is not an edge type of the data; expected one of"),
    (None, dict(num_neighbors={WRITES: [2], CITES: [2]}), ValueError,
     r"num_neighbors: expected a list for every edge type \(PyG's rule\), missing \('paper', 'has_topic', 'field'\)"),
    (None, dict(num_neighbors={**{e: [2] for e in random_hetero().edge_types}, CITES: [2, 2]}), ValueError,
     r"num_neighbors: expected the same number of hops for every edge type, got \[1, 2\]"),
    (None, dict(num_neighbors={e: [2.5] for e in random_hetero().edge_types}), TypeError,
     r"num_neighbors\[\('author', 'writes', 'paper'\)\]: expected ints"),
    (None, dict(num_neighbors=[2, -2]), ValueError, "num_neighbors: expected every entry >= 0"),
    (lambda d: d[WRITES].update({"edge_index": torch.tensor([[80], [0]])}), {}, ValueError,
     r"data\[\('author', 'writes', 'paper'\)\].edge_index: author ids must lie in \[0, 80\) \(the author nodes\), "
     "found 80"),
    (lambda d: d[CITES].update({"edge_index": d[CITES].edge_index.float()}), {}, ValueError,
     r"data\[\('paper', 'cites', 'paper'\)\].edge_index: expected an integer tensor \[2, num_edges\]"),
    pytest.param(lambda d: d["paper", "has__topic", "field"].update({"edge_index": torch.zeros((2, 0), dtype=int)}),
                 {}, ValueError, r"data: edge type \('paper', 'has__topic', 'field'\): relation: expected names",
                 marks=pytest.mark.filterwarnings("ignore:There exist type names")),  # PyG's own warning
])
def test_bad_input_raises_naming_the_argument(data, kwargs, error, match) -> None:
    data = random_hetero() if data is None else edited(data)
    kwargs = {"num_neighbors": [2, 2], "input_nodes": ("paper", [0, 1]), **kwargs}
    with pytest.raises(error, match=match):
        NeighborLoader(data, **kwargs)


def test_a_graph_without_edge_types_is_refused() -> None:
    data = HeteroData()
    data["paper"].x = torch.rand(5, 2)
    with pytest.raises(ValueError, match="data: expected at least one edge type, got none"):
        NeighborLoader(data, [2], input_nodes="paper")


@pytest.mark.filterwarnings("ignore:Unable to accurately infer 'num_nodes'")  # PyG's own
def test_a_node_type_without_a_count_is_refused() -> None:
    data = HeteroData()
    data["paper"].x = torch.rand(5, 2)
    data["paper", "cites", "topic"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"data\['topic'\].num_nodes: expected the node count"):
        NeighborLoader(data, [2], input_nodes="paper")  # no node store for topics
    data["topic"].score = torch.rand(3, 3).t()[0]  # a store whose count PyG cannot infer
    with pytest.raises(ValueError, match=r"data\['topic'\].num_nodes: expected the node count"):
        NeighborLoader(data, [2], input_nodes="paper")


def test_the_plain_torch_stand_in_follows_pyg_conventions() -> None:
    # The stand-in for PyG's NeighborLoader where PyG's backend is missing: checked like gnnscale's batches.
    data = random_hetero(seed=6)
    for batch in hetero_reference.NeighborLoader(data, [3, 2], input_nodes=("paper", data["paper"].train_mask),
                                                 batch_size=16, shuffle=True):
        check_batch(batch, data, [3, 2], "paper")


# --- a PyG to_hetero script, its import changed -------------------------------------------------------------

SWAPPED = "from gnnscale.loader import NeighborLoader  # the line a PyG script changes"


def run_script(import_line: str, *args: str) -> float:
    """examples/pyg_to_hetero.py with its NeighborLoader import replaced by ``import_line``, run in this process;
    returns its test accuracy."""
    source = EXAMPLE.read_text()
    assert source.count(SWAPPED) == 1
    namespace = {"__name__": "pyg_to_hetero_script"}
    exec(compile(source.replace(SWAPPED, import_line), str(EXAMPLE), "exec"), namespace)  # noqa: S102
    return namespace["main"](list(args))


def script_accuracies(scale: float, seeds: tuple[int, ...], epochs: int) -> tuple[list[float], list[float]]:
    """The script's test accuracy on the mag-shaped graph at ``scale`` with gnnscale's loader and with PyG's (its own
    NeighborLoader where its backend runs, else PyG's NodeLoader over PyG's law in plain torch: ``hetero_reference``),
    seed by seed, one import line apart. Each run is deterministic (gnnscale's draws are keyed, the stand-in's come
    from torch's generator, which the script seeds). One torch thread: a tiny model, which more threads only slow
    down on a shared machine."""
    args = ("--scale", str(scale), "--epochs", str(epochs), "--hidden", "16")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours = [run_script("from gnnscale.loader import NeighborLoader", *args, "--seed", str(s)) for s in seeds]
        theirs = [run_script("from hetero_reference import NeighborLoader", *args, "--seed", str(s)) for s in seeds]
    finally:
        torch.set_num_threads(threads)
    return ours, theirs


def test_a_pyg_to_hetero_script_trains_with_only_its_import_changed() -> None:
    # The papers' own features tell their class feature_accuracy of the time at best; the typed neighborhood more.
    features_only = typed_preset_config("mag", 0.002).feature_accuracy
    ours, theirs = script_accuracies(0.002, (0,), epochs=3)
    assert min(ours + theirs) >= features_only + 0.2, (ours, theirs)
    assert abs(ours[0] - theirs[0]) <= 0.15, (ours, theirs)  # one seed, about 80 test papers: a wide band


@pytest.mark.slow
@pytest.mark.timeout(1800)  # six short trainings: minutes, more on a busy machine
def test_a_pyg_to_hetero_script_reaches_pygs_accuracy_over_seeds() -> None:
    features_only = typed_preset_config("mag", 0.004).feature_accuracy
    ours, theirs = script_accuracies(0.004, (0, 1, 2), epochs=5)  # about 170 test papers
    assert min(ours + theirs) >= features_only + 0.3, (ours, theirs)
    assert abs(np.mean(ours) - np.mean(theirs)) <= 0.05, (ours, theirs)
