"""Online splitting and the edge metrics, in one process: the numba kernel against a pure-Python
reference, every worker's exchange simulated with numpy against the whole mini-batch's aggregation, a
hand-checked tiny graph, errors, and the bfloat16 wire's rounding both ways (a process group of this
process alone). The cooperative layers on real processes are in tests/distributed/test_split_distributed.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.distributed import (SHUFFLE_KINDS, EdgeMetrics, data_parallel_edge_metrics, split_blocks,
                                  split_edge_metrics)
from gnnscale.distributed.split.shuffle import PartialSums, Shuffle, exchange
from gnnscale.distributed.edge_metrics import (epoch_edge_metrics, minibatch_signature, split_edge_counts,
                                                union_minibatch_edges)
from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import ModelConfig, aggregate_sum, build_model
from gnnscale.nn.cooperative import SplitAwareBlock
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import Block, sample_blocks
from test_feature_dtype import CRAFTED, assert_same_bits, torch_rounded

# The tiny graph (messages flow src -> dst), parts: {0, 1, 2} | {3, 4, 5}
#
#        part 0          |        part 1
#                        |
#     2 --> 1 --> 0 <----+---- 4 <-- 5
#           |     |      |     ^ |   |
#           |     +------+---> 3 |   |
#           +------------+---> 3 |   |       (1 -> 3)
#                 0 -----+---------> 4       (0 -> 4)
#           1 <----------+---------- 5       (5 -> 1)
#                        |
# In-edges: 0: [1, 4]   1: [2, 5]   2: []   3: [0, 1, 4]   4: [0, 5]   5: []
#
# Seeds [0, 3], fanouts (3, 3) >= every degree: every in-edge is taken, so the mini-batch is fixed.
#   layer 1 (seeds):        1->0, 4->0, 0->3, 1->3, 4->3                                     5 edges
#   layer 0 (0, 3, 1, 4):   1->0, 4->0, 0->3, 1->3, 4->3, 2->1, 5->1, 0->4, 5->4             9 edges
# Local (same part at both ends): 1->0, 4->3 | 1->0, 4->3, 2->1, 5->4: 6 of 14.
# By source owner: part 0 computes 3 + 5 = 8 edges, part 1 computes 2 + 4 = 6: skew (8 - 6) / 7.
# By destination owner: part 0 computes 2 + 4 = 6, part 1 computes 3 + 5 = 8: skew 2 / 7.
# Data parallel, worker 0 samples seed [0], worker 1 seed [3]:
#   micro 0: layer 1: 1->0, 4->0 (2); layer 0 over 0, 1, 4: 2 + 2 + 2 (6)       8 edges, 4 local
#   micro 1: layer 1: 0->3, 1->3, 4->3 (3); layer 0 over 3, 0, 1, 4: 3+2+2+2    12 edges, 5 local
#   union: layer 1 over {0, 3}: 5; layer 0 over {0, 1, 3, 4}: 9 -> 14 (the mini-batch above)
#   redundancy 20 / 14 - 1, skew (12 - 8) / 10, local 9 / 20.
TINY_SRC = np.array([1, 4, 2, 5, 0, 1, 4, 0, 5])
TINY_DST = np.array([0, 0, 1, 1, 3, 3, 3, 4, 4])
TINY_BOOK = PartitionBook(offsets=np.array([0, 3, 6], dtype=np.int64))


@pytest.fixture(scope="module")
def tiny_blocks():
    graph = csc_from_coo(TINY_SRC, TINY_DST, 6)
    return graph, sample_blocks(graph, np.array([0, 3]), (3, 3), key=1)


def test_tiny_metrics_by_hand(tiny_blocks):
    graph, blocks = tiny_blocks
    assert [b.num_edges for b in blocks] == [9, 5]
    by_source = split_edge_metrics(blocks, TINY_BOOK, kind="partial_sums")
    assert (by_source.edges_per_worker, by_source.minibatch_edges, by_source.local_edges) == ((8, 6), 14, 6)
    assert by_source.redundancy == 0.0
    assert by_source.local_edge_fraction == pytest.approx(6 / 14)
    assert by_source.edge_skew == pytest.approx(2 / 7)
    by_destination = split_edge_metrics(blocks, TINY_BOOK, kind="source_features")
    assert by_destination.edges_per_worker == (6, 8)

    micro = [sample_blocks(graph, np.array([seed]), (3, 3), key=1 + seed) for seed in (0, 3)]
    dp = data_parallel_edge_metrics(micro, TINY_BOOK)
    assert (dp.edges_per_worker, dp.minibatch_edges, dp.local_edges) == ((8, 12), 14, 9)
    assert dp.redundancy == pytest.approx(20 / 14 - 1)
    assert dp.edge_skew == pytest.approx(0.4)
    assert dp.local_edge_fraction == pytest.approx(9 / 20)
    total = dp.merge(by_source).to_dict()
    assert (total["edges_computed"], total["minibatch_edges"], total["local_edges"]) == (34, 28, 15)


def test_tiny_split_by_hand(tiny_blocks):
    """Node list [0, 3, 1, 4, 2, 5]; part 0's local ids: 0 -> 0, 1 -> 1, 2 -> 2; part 1's: 3 -> 0, 4 -> 1, 5 -> 2."""
    _, blocks = tiny_blocks
    assert blocks[0].src_ids.tolist() == [0, 3, 1, 4, 2, 5]
    top = split_blocks(blocks, TINY_BOOK, 0, kind="partial_sums")[1]  # layer 1: seeds 0 and 3
    assert (top.num_dst, top.src_ids.tolist(), top.degrees.tolist()) == (1, [0, 1], [2])
    # Row 0: seed 0 from owned source 1; row 1: reference vertex 3 from owned sources 0 and 1.
    assert top.indptr.tolist() == [0, 1, 3] and top.reference_ids.tolist() == [3]
    assert sorted(top.indices[1:].tolist()) == [0, 1] and top.indices[0].item() == 1
    assert (top.plan.send_counts, top.plan.recv_counts, top.plan.recv_index.tolist()) == ((0, 1), (0, 1), [0])
    top = split_blocks(blocks, TINY_BOOK, 1, kind="source_features")[1]
    # Seed 3 reads owned 4 (local 1) and remote 0 and 1, received from part 0 as columns 2 and 3;
    # seed 0 (part 0's) reads 4, which part 1 sends.
    assert (top.num_dst, top.src_ids.tolist(), top.reference_ids.tolist()) == (1, [3, 4], [0, 1])
    assert sorted(top.indices.tolist()) == [1, 2, 3]
    assert (top.plan.send_counts, top.plan.recv_counts, top.plan.send_index.tolist()) == ((1, 0), (2, 0), [1])


# -- against a reference ----------------------------------------------------------------------------


def reference_split(blocks, book, rank, kind):
    """The split, written as plainly as possible: lists, sets and sorting."""
    nodes = blocks[0].src_ids.numpy()
    owner = book.owner(nodes)
    local = np.array([int(np.count_nonzero(owner[:p] == owner[p])) for p in range(nodes.shape[0])])
    out = []
    for block in blocks:
        indptr, indices, nd, ns = block.indptr.numpy(), block.indices.numpy(), block.num_dst, block.num_src
        edges = {i: [int(u) for u in indices[indptr[i]:indptr[i + 1]]] for i in range(nd)}
        own_dst = [i for i in range(nd) if owner[i] == rank]
        own_src = [u for u in range(ns) if owner[u] == rank]
        recv_pairs, send_pairs = [], []  # (peer, what)
        if kind == "partial_sums":
            refs = sorted((owner[i], i) for i in range(nd)
                          if owner[i] != rank and any(owner[u] == rank for u in edges[i]))
            rows = own_dst + [i for _, i in refs]
            row_edges = [[local[u] for u in edges[i] if owner[u] == rank] for i in rows]
            send_pairs = [(q, len(own_dst) + k) for k, (q, _) in enumerate(refs)]
            recv_pairs = sorted((r, i) for i in own_dst for r in {owner[u] for u in edges[i]} if r != rank)
            recv_index = [local[i] for _, i in recv_pairs]
            reference = [i for _, i in refs]
        else:
            halo = sorted({(owner[u], u) for i in own_dst for u in edges[i] if owner[u] != rank})
            column = {u: local[u] for u in own_src} | {u: len(own_src) + k for k, (_, u) in enumerate(halo)}
            row_edges = [[column[u] for u in edges[i]] for i in own_dst]
            send_pairs = sorted((q, u) for u in own_src
                                for q in {owner[i] for i in range(nd) if u in edges[i]} if q != rank)
            send_pairs = [(q, local[u]) for q, u in send_pairs]
            recv_pairs = [(r, u) for r, u in halo]
            recv_index = list(range(len(own_src), len(own_src) + len(halo)))
            reference = [u for _, u in halo]
        counts = lambda pairs: tuple(sum(1 for p, _ in pairs if p == q) for q in range(book.num_parts))  # noqa: E731
        out.append(dict(num_dst=len(own_dst), src_ids=nodes[own_src].tolist(),
                        degrees=[len(edges[i]) for i in own_dst],
                        indptr=np.cumsum([0] + [len(r) for r in row_edges]).tolist(),
                        indices=[c for r in row_edges for c in r], reference_ids=nodes[reference].tolist(),
                        send_index=[s for _, s in send_pairs], send_counts=counts(send_pairs),
                        recv_index=recv_index, recv_counts=counts(recv_pairs)))
    return out


def _random_minibatch(num_parts, replace, seed):
    """300 nodes, in-degrees 0..20, a skewed book (one part twice the others), 3 layers."""
    rng = np.random.default_rng(seed)
    n = 300
    dst = np.repeat(np.arange(n), rng.integers(0, 21, n))
    graph = csc_from_coo(rng.integers(0, n, dst.shape[0]), dst, n)
    cuts = np.sort(rng.choice(np.arange(1, n), num_parts - 1, replace=False))
    book = PartitionBook(offsets=np.concatenate([[0], cuts, [n]]).astype(np.int64))
    blocks = sample_blocks(graph, rng.choice(n, 20, replace=False), (4, 3, 2), key=seed, replace=replace)
    return graph, book, blocks


@pytest.mark.parametrize("kind", SHUFFLE_KINDS)
@pytest.mark.parametrize("num_parts,replace", [(2, False), (3, True), (4, False)])
def test_split_equals_reference(kind, num_parts, replace):
    _, book, blocks = _random_minibatch(num_parts, replace, seed=num_parts)
    for rank in range(num_parts):
        for got, expected in zip(split_blocks(blocks, book, rank, kind=kind),
                                 reference_split(blocks, book, rank, kind)):
            assert got.kind == kind and got.rank == rank
            assert got.num_dst == expected["num_dst"]
            for field in ("src_ids", "degrees", "indptr", "indices", "reference_ids"):
                assert getattr(got, field).tolist() == expected[field], field
            for field in ("send_index", "recv_index"):
                assert getattr(got.plan, field).tolist() == expected[field], field
            assert got.plan.send_counts == expected["send_counts"]
            assert got.plan.recv_counts == expected["recv_counts"]


@pytest.mark.parametrize("kind", SHUFFLE_KINDS)
def test_split_with_an_empty_part_equals_reference(tiny_blocks, kind):
    _, blocks = tiny_blocks
    book = PartitionBook(offsets=np.array([0, 0, 3, 3, 6], dtype=np.int64))  # parts 0 and 2 own nothing
    for rank in range(4):
        for got, expected in zip(split_blocks(blocks, book, rank, kind=kind), reference_split(blocks, book, rank, kind)):
            assert got.indices.tolist() == expected["indices"] and got.src_ids.tolist() == expected["src_ids"]
            assert got.plan.send_counts == expected["send_counts"]
            assert got.plan.recv_counts == expected["recv_counts"]
        assert split_blocks(blocks, book, rank, kind=kind)[0].num_src == (0 if rank in (0, 2) else 3)


@pytest.mark.parametrize("kind", SHUFFLE_KINDS)
@pytest.mark.parametrize("num_parts", [2, 4])
def test_simulated_exchange_gives_the_whole_aggregation(kind, num_parts):
    """Route every worker's rows by its plan (numpy in place of all_to_allv): every owned destination
    then holds the sum over all its in-edges in the mini-batch, and each edge was computed once."""
    _, book, blocks = _random_minibatch(num_parts, False, seed=10 + num_parts)
    nodes = blocks[0].src_ids.numpy()
    x = np.random.default_rng(0).standard_normal((nodes.shape[0], 5))  # one row per node-list position
    position = {int(v): p for p, v in enumerate(nodes)}
    splits = [split_blocks(blocks, book, r, kind=kind) for r in range(num_parts)]
    for layer, block in enumerate(blocks):
        whole = _csc_sum(block.indptr.numpy(), block.indices.numpy(), block.num_dst, x)
        parts = [s[layer] for s in splits]
        rows_x = [x[[position[int(v)] for v in s.src_ids]] for s in parts]  # owned source rows
        outbox = [_send_rows(s, rows_x[s.rank], kind) for s in parts]
        inbox = [np.concatenate([outbox[r][q] for r in range(num_parts)]) for q in range(num_parts)]
        for s in parts:
            assert inbox[s.rank].shape[0] == sum(s.plan.recv_counts)
            if kind == "partial_sums":
                partial = _csc_sum(s.indptr.numpy(), s.indices.numpy(), s.num_rows, rows_x[s.rank])
                got = partial[: s.num_dst].copy()
                np.add.at(got, s.plan.recv_index.numpy(), inbox[s.rank])
            else:
                columns = np.concatenate([rows_x[s.rank], inbox[s.rank]])
                got = _csc_sum(s.indptr.numpy(), s.indices.numpy(), s.num_dst, columns)
            expected = whole[[position[int(v)] for v in s.dst_ids]]
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        assert sum(s.num_edges for s in parts) == block.num_edges


def _send_rows(split, rows_x, kind):
    """What worker ``split.rank`` sends each peer, as ``num_parts`` arrays."""
    if kind == "partial_sums":
        table = _csc_sum(split.indptr.numpy(), split.indices.numpy(), split.num_rows, rows_x)
    else:
        table = rows_x
    sent = table[split.plan.send_index.numpy()]
    return np.split(sent, np.cumsum(split.plan.send_counts)[:-1])


def _csc_sum(indptr, indices, num_rows, x):
    out = np.zeros((num_rows, x.shape[1]))
    for r in range(num_rows):
        out[r] = x[indices[indptr[r]:indptr[r + 1]]].sum(axis=0)
    return out


def test_layer_chaining_and_input_rows():
    """Owned destinations of layer l are the owned sources of layer l + 1, and every input row is owned."""
    _, book, blocks = _random_minibatch(3, False, seed=5)
    for rank in range(3):
        splits = split_blocks(blocks, book, rank)
        for below, above in zip(splits, splits[1:]):
            assert torch.equal(below.dst_ids, above.src_ids)
        lo, hi = book.node_range(rank)
        assert bool(((splits[0].src_ids >= lo) & (splits[0].src_ids < hi)).all())


def test_data_parallel_union_with_a_shared_key_is_the_minibatch():
    graph, book, _ = _random_minibatch(4, False, seed=7)
    seeds = np.random.default_rng(1).choice(graph.num_nodes, 40, replace=False)
    micro = [sample_blocks(graph, part, (4, 3, 2), key=99) for part in np.split(seeds, 4)]
    whole = sample_blocks(graph, seeds, (4, 3, 2), key=99)
    dp = data_parallel_edge_metrics(micro, book)
    assert dp.minibatch_edges == sum(b.num_edges for b in whole)
    assert dp.redundancy > 0  # 10 seeds per worker on 300 nodes: the neighborhoods overlap
    # Per-rank keys (as data-parallel training samples): different edges, the same union size rule.
    own_keys = [sample_blocks(graph, part, (4, 3, 2), key=w) for w, part in enumerate(np.split(seeds, 4))]
    assert data_parallel_edge_metrics(own_keys, book).edges_computed == sum(
        b.num_edges for blocks in own_keys for b in blocks)


# -- errors ----------------------------------------------------------------------------------------


def test_split_errors(tiny_blocks):
    graph, blocks = tiny_blocks
    with pytest.raises(ValueError, match=r"rank: expected an int in \[0, 2\).*got 2"):
        split_blocks(blocks, TINY_BOOK, 2)
    with pytest.raises(ValueError, match=r"kind: expected one of \('partial_sums', 'source_features'\), got 'edges'"):
        split_blocks(blocks, TINY_BOOK, 0, kind="edges")
    with pytest.raises(TypeError, match="book: expected a PartitionBook, got ndarray"):
        split_blocks(blocks, TINY_BOOK.offsets, 0)
    with pytest.raises(ValueError, match="blocks: expected a non-empty list of Blocks"):
        split_blocks([], TINY_BOOK, 0)
    with pytest.raises(ValueError, match="blocks: expected a non-empty list of Blocks"):
        split_blocks(blocks[0], TINY_BOOK, 0)
    with pytest.raises(TypeError, match=r"blocks\[1\]: expected a Block, got Tensor"):
        split_blocks([blocks[0], blocks[0].indptr], TINY_BOOK, 0)
    bad = Block(indptr=blocks[1].indptr, indices=blocks[1].indices + 4, src_ids=blocks[1].src_ids, num_dst=2)
    with pytest.raises(ValueError, match=r"blocks\[1\]: indices: expected source ids in \[0, num_src = 4\), got range "
                                         r"\[4, 7\]"):
        split_blocks([blocks[0], bad], TINY_BOOK, 0)
    with pytest.raises(ValueError, match=r"indptr: expected num_dst \+ 1 = 3 offsets, got 2"):  # a Block checks itself
        Block(indptr=blocks[1].indptr[:-1], indices=blocks[1].indices, src_ids=blocks[1].src_ids, num_dst=2)
    unordered = Block(indptr=blocks[1].indptr.flip(0), indices=blocks[1].indices, src_ids=blocks[1].src_ids, num_dst=2)
    with pytest.raises(ValueError, match=r"blocks\[1\]: indptr: expected 3 non-decreasing offsets from 0"):
        split_blocks([blocks[0], unordered], TINY_BOOK, 0)
    other = sample_blocks(graph, np.array([1, 4]), (3, 3), key=1)
    with pytest.raises(ValueError, match=r"blocks\[1\]'s sources must be blocks\[0\]'s destinations"):
        split_blocks([other[0], blocks[1]], TINY_BOOK, 0)
    small = PartitionBook(offsets=np.array([0, 2, 4], dtype=np.int64))
    with pytest.raises(ValueError, match=r"node ids must lie in \[0, 4\) \(the book's graph\), found 5"):
        split_blocks(blocks, small, 0)
    with pytest.raises(ValueError, match="kind: expected one of"):
        split_edge_metrics(blocks, TINY_BOOK, kind="gat")
    many = PartitionBook(offsets=np.concatenate([np.zeros(59), np.arange(1, 7)]).astype(np.int64))
    with pytest.raises(ValueError, match="book: split parallelism supports up to 63 parts .*, got 64"):
        split_blocks(blocks, many, 0)


@pytest.mark.parametrize("kind", SHUFFLE_KINDS)
def test_each_workers_counts_read_off_its_splits_match_the_metrics(kind):
    """What the trainer counts per worker from its own splits (no pass over the edges) adds up to
    split_edge_metrics of the whole mini-batch, worker by worker."""
    _, book, blocks = _random_minibatch(3, False, seed=7)
    metrics = split_edge_metrics(blocks, book, kind=kind)
    counts = [split_edge_counts(split_blocks(blocks, book, rank, kind=kind)) for rank in range(3)]
    assert tuple(computed for computed, _ in counts) == metrics.edges_per_worker
    assert sum(local for _, local in counts) == metrics.local_edges


def test_union_of_signatures_and_epoch_metrics_by_hand(tiny_blocks):
    graph, blocks = tiny_blocks
    micro = [sample_blocks(graph, np.array([seed]), (3, 3), key=1 + seed) for seed in (0, 3)]
    # The tiny graph's union (see the top of this file): 14 edges, whichever micro-batch is listed first.
    signatures = [minibatch_signature(m) for m in micro]
    assert union_minibatch_edges(signatures) == union_minibatch_edges(signatures[::-1]) == 14
    assert minibatch_signature(blocks).tolist() == [[0, 0, 2], [0, 3, 3], [0, 1, 2], [0, 4, 2], [1, 0, 2], [1, 3, 3]]
    first = EdgeMetrics(edges_per_worker=(8, 12), minibatch_edges=14, local_edges=9)   # skew 0.4
    second = EdgeMetrics(edges_per_worker=(5, 5), minibatch_edges=10, local_edges=10)  # skew 0
    epoch = epoch_edge_metrics([first, second])
    assert (epoch["edges_computed"], epoch["minibatch_edges"], epoch["local_edges"]) == (30, 24, 19)
    assert epoch["redundancy"] == pytest.approx(30 / 24 - 1) and epoch["edge_skew"] == pytest.approx(0.2)
    assert epoch["iterations"] == 2 and epoch_edge_metrics([]) == {"iterations": 0}


def test_data_parallel_errors(tiny_blocks):
    graph, blocks = tiny_blocks
    with pytest.raises(ValueError, match="micro_batches: expected one list of blocks per worker"):
        data_parallel_edge_metrics(blocks[0], TINY_BOOK)
    with pytest.raises(ValueError, match=r"same number of layers in every micro-batch, got \[1, 2\]"):
        data_parallel_edge_metrics([blocks, blocks[1:]], TINY_BOOK)
    narrow = sample_blocks(graph, np.array([3]), (1, 3), key=1)  # node 3 keeps 1 of its 3 in-edges
    with pytest.raises(ValueError, match="node 3 has different sampled in-degrees in layer 1"):
        data_parallel_edge_metrics([blocks, narrow], TINY_BOOK)


# -- the layers' hook --------------------------------------------------------------------------------


class _WholeLayer:
    """A SplitAwareBlock that owns the whole layer: the layers must give the Block's result through it,
    and must go through its two hooks (counted) rather than around them."""

    def __init__(self, block):
        self.block, self.calls = block, {"aggregate_sum": 0, "gather_sources": 0}
        self.num_dst, self.num_src, self.indices = block.num_dst, block.num_src, block.indices
        self.num_edges, self.indptr = block.num_edges, block.indptr
        self.edge_weight = None

    def in_degrees(self):
        return self.block.in_degrees()

    def dst_index(self):
        return self.block.dst_index()

    def aggregate_sum(self, x_src, *, kernels="auto"):
        self.calls["aggregate_sum"] += 1
        return aggregate_sum(self.block, x_src, backend=kernels)

    def gather_sources(self, x_src):
        self.calls["gather_sources"] += 1
        return x_src

    def exchanged_ahead(self, x_src):
        return False


@pytest.mark.parametrize("name,hook", [("sage", "aggregate_sum"), ("gcn", "aggregate_sum"), ("gat", "gather_sources")])
def test_layers_aggregate_through_the_split_hook(name, hook):
    _, _, blocks = _random_minibatch(2, False, seed=3)
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, in_dim=4, hidden_dim=3, num_classes=2, num_layers=3, heads=2,
                                    dropout=0.0))
    x = torch.randn(blocks[0].num_src, 4)
    wrapped = [_WholeLayer(b) for b in blocks]
    assert all(isinstance(w, SplitAwareBlock) for w in wrapped) and not isinstance(blocks[0], SplitAwareBlock)
    # A whole Block takes the numba kernels, the hook the torch path: equal up to summation order.
    torch.testing.assert_close(model(wrapped, x), model(blocks, x))
    assert [w.calls[hook] for w in wrapped] == [1, 1, 1]
    with pytest.raises(TypeError, match="block: expected a Block or a SplitAwareBlock, got dict"):
        model([{}] * 3, x)


# --- the bfloat16 wire ---------------------------------------------------------------------------------


def crafted_rows() -> torch.Tensor:
    """float32 [10, 4]: the crafted values (tests/graph/test_feature_dtype.py: ties, subnormals, inf, NaN)."""
    return torch.from_numpy(CRAFTED.copy())


@pytest.mark.parametrize("category", ["shuffle", "feature"])  # split's shuffles; layer 0's exchange ahead
def test_the_bfloat16_wire_is_torchs_rounding_bit_for_bit(solo_comm, category):
    rows = crafted_rows()
    n = rows.shape[0]
    narrow = exchange(solo_comm, rows, (n,), (n,), category, torch.bfloat16)
    assert_same_bits(narrow, torch_rounded(rows, torch.bfloat16))
    assert_same_bits(exchange(solo_comm, rows, (n,), (n,), category, None), rows)  # float32 travels as it is
    assert exchange(solo_comm, rows[:0], (0,), (0,), category, torch.bfloat16).shape == (0, 4)


def test_a_shuffle_rounds_its_rows_forward_and_their_gradients_backward_as_torch_does(solo_comm):
    rows = crafted_rows().requires_grad_()
    n = rows.shape[0]
    out = Shuffle.apply(rows, solo_comm, (n,), (n,), torch.bfloat16)
    assert_same_bits(out.detach(), torch_rounded(rows, torch.bfloat16))
    grad = crafted_rows().flip(0)  # other crafted values as the gradients
    out.backward(grad)
    assert_same_bits(rows.grad, torch_rounded(grad, torch.bfloat16))


def test_partial_sums_round_the_rows_sent_and_the_gradients_returned_as_torch_does(solo_comm):
    """The owned destinations start at -0.0, which adds nothing (-0 + x is x, -0 included): the sums are the
    received rows, rounded, placed by ``recv_index``; the backward returns each destination's gradient,
    rounded, to the row that was sent for it."""
    reference = crafted_rows()
    n = reference.shape[0]
    partial = torch.cat([torch.full((n, 4), -0.0), reference]).requires_grad_()
    recv_index = torch.arange(n).flip(0)
    out = PartialSums.apply(partial, solo_comm, n, recv_index, (n,), (n,), torch.bfloat16)
    sums = torch.full((n, 4), -0.0).index_add(0, recv_index, torch_rounded(reference, torch.bfloat16))
    assert_same_bits(out.detach(), sums)
    grad = crafted_rows().roll(1, 0)
    out.backward(grad)
    assert_same_bits(partial.grad[:n], grad)  # the owned rows' own gradient: not sent, not rounded
    assert_same_bits(partial.grad[n:], torch_rounded(grad[recv_index], torch.bfloat16))
