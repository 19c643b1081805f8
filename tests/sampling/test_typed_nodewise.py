"""Typed node-wise sampling (PyG's hetero layout): the tiny graph by hand, against the homogeneous node-wise sampler
on a graph of one relation, against the typed fused kernel's first hop, against the typed blocks cut down to the
frontier by brute force, per-relation counts from the graph, the ranks as the relation's edge ids, thread counts,
seeds of several types, and errors."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.typed import typed_graph
from gnnscale.sampling import set_sampler_threads
from gnnscale.sampling.nodewise import NodewiseSampler
from gnnscale.sampling.typed import sample_typed_blocks
from gnnscale.sampling.typed_nodewise import TypedNodewiseSampler


@pytest.fixture(scope="module")
def mag_like():
    """Papers, authors and fields of study, every relation with its reverse (as test_typed_sampling.py's)."""
    rng = np.random.default_rng(0)
    edges = {"author__writes__paper": (rng.integers(0, 200, 900), rng.integers(0, 300, 900)),
             "paper__cites__paper": (rng.integers(0, 300, 1200), rng.integers(0, 300, 1200)),
             "paper__has_topic__field": (rng.integers(0, 300, 500), rng.integers(0, 20, 500))}
    return typed_graph({"paper": 300, "author": 200, "field": 20}, edges, reverse=True)


def test_tiny_example_of_the_docstring() -> None:
    # Papers 0-2, authors 3-4 (global ids); writes A0->P0, A1->P0, A1->P1; cites P1->P0, P2->P1; rev_writes.
    graph = typed_graph({"paper": 3, "author": 2}, {"author__writes__paper": ([0, 1, 1], [0, 0, 1]),
                                                    "paper__cites__paper": ([1, 2], [0, 1]),
                                                    "paper__rev_writes__author": ([0, 0, 1], [0, 1, 1])})
    out = TypedNodewiseSampler(graph, [-1, -1]).sample(np.array([0]), 0)
    assert [n.tolist() for n in out.nodes] == [[0, 1, 2], [3, 4]]
    assert [e.tolist() for e in out.edge_index] == [[[0, 1, 1], [0, 0, 1]], [[1, 2], [0, 1]], [[0, 0, 1], [0, 1, 1]]]
    assert out.num_sampled_nodes == ([1, 1, 1], [0, 2, 0])
    assert out.num_sampled_edges == ([2, 1], [1, 1], [0, 3])
    assert [r.tolist() for r in out.edge_rank] == [[0, 1, 2], [0, 1], [0, 1, 2]]


@pytest.mark.parametrize("replace", [False, True])
def test_one_relation_samples_as_the_homogeneous_node_wise_sampler(replace) -> None:
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 100, 600), rng.integers(0, 100, 600)
    typed = typed_graph({"node": 100}, {"node__edge__node": (src, dst)})
    plain = csc_from_coo(src, dst, 100)
    seeds = np.array([1, 5, 9, 40])
    for key in (0, 11, 2**40):
        a = TypedNodewiseSampler(typed, [4, 3, 2], replace=replace).sample(seeds, key)
        b = NodewiseSampler(plain, [4, 3, 2], replace=replace).sample(seeds, key)
        assert torch.equal(a.nodes[0], b.nodes) and torch.equal(a.edge_index[0], b.edge_index)
        assert torch.equal(a.edge_rank[0], b.edge_pos)  # one relation: its rank is the CSC position
        assert a.num_sampled_nodes == (b.num_sampled_nodes,) and a.num_sampled_edges == (b.num_sampled_edges,)


def frontier_reference(graph, seeds: np.ndarray, fanouts, key: int) -> tuple[list[list[int]], dict]:
    """Brute force from the typed fused kernel: the same key draws the same neighbors for a node at a hop, so the
    node-wise sample keeps, at hop h, the edges the typed blocks drew for the nodes hop h - 1 added. Walks the
    relations in order within a hop, as PyG. Returns the node lists per type (global ids) and
    ``{(hop, relation): [(source, destination), ...]}`` (global ids)."""
    blocks = sample_typed_blocks(graph, seeds, fanouts, key=key)[::-1]  # seeds outwards
    types = np.searchsorted(graph.type_offsets, np.arange(graph.num_nodes), side="right") - 1
    nodes = [[int(v) for v in seeds if types[v] == t] for t in range(len(graph.node_types))]
    frontier = {int(v) for v in seeds}
    edges = {}
    for hop, block in enumerate(blocks):
        added = set()
        for r, rel in enumerate(block.relations):
            t_src = graph.type_id(graph.relations[r].src)
            dst_nodes = block.src_ids[rel.dst].tolist()
            order = {v: nodes[graph.type_id(graph.relations[r].dst)].index(v) for v in dst_nodes if v in frontier}
            kept = []
            for v in sorted(order, key=order.get):  # frontier order: the order the nodes were added in
                i = dst_nodes.index(v)
                for u in block.src_ids[rel.indices[rel.indptr[i]:rel.indptr[i + 1]]].tolist():
                    kept.append((u, v))
                    if u not in nodes[t_src]:
                        nodes[t_src].append(u)
                        added.add(u)
            edges[hop, r] = kept
        frontier = added
    return nodes, edges


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, 1], [2, 2, 2], "dict"], ids=str)
def test_equals_the_typed_blocks_cut_to_the_frontier(mag_like, fanouts) -> None:
    if fanouts == "dict":
        fanouts = {rel: [r % 3, 4 - r % 2] for r, rel in enumerate(mag_like.relations)}
    seeds = np.array([3, 17, 250, 400, 510, 301])  # papers, authors and a field
    for key in (0, 99, 123456789):
        out = TypedNodewiseSampler(mag_like, fanouts).sample(seeds, key)
        nodes, edges = frontier_reference(mag_like, seeds, fanouts, key)
        assert [n.tolist() for n in out.nodes] == nodes
        for r, rel in enumerate(mag_like.relations):
            src_t, dst_t = mag_like.type_id(rel.src), mag_like.type_id(rel.dst)
            start = 0
            for hop, count in enumerate(out.num_sampled_edges[r]):
                src, dst = out.edge_index[r][:, start:start + count]
                got = list(zip(out.nodes[src_t][src].tolist(), out.nodes[dst_t][dst].tolist()))
                assert got == edges[hop, r], (hop, rel)
                start += count


def test_ranks_are_the_relations_edge_ids_and_counts_follow_the_fanouts(mag_like) -> None:
    fanouts = {rel: [r + 1, 2] for r, rel in enumerate(mag_like.relations)}
    out = TypedNodewiseSampler(mag_like, fanouts).sample(np.arange(0, 300, 7), 5)
    for r, rel in enumerate(mag_like.relations):
        src_local, dst_local = mag_like.edges(rel)  # the relation's edges by rank (CSC order)
        src_t, dst_t = mag_like.type_id(rel.src), mag_like.type_id(rel.dst)
        src_lo, dst_lo = mag_like.node_range(rel.src)[0], mag_like.node_range(rel.dst)[0]
        rank = out.edge_rank[r].numpy()
        assert np.array_equal(out.nodes[src_t][out.edge_index[r][0]].numpy(), src_local[rank] + src_lo)
        assert np.array_equal(out.nodes[dst_t][out.edge_index[r][1]].numpy(), dst_local[rank] + dst_lo)
        degree = np.bincount(dst_local, minlength=mag_like.count(rel.dst))
        starts = np.cumsum([0] + out.num_sampled_nodes[dst_t])
        e = np.cumsum([0] + out.num_sampled_edges[r])
        for hop in range(2):
            frontier = out.nodes[dst_t][starts[hop]:starts[hop + 1]].numpy() - dst_lo
            targets = out.edge_index[r][1, e[hop]:e[hop + 1]].numpy() - starts[hop]
            counts = np.bincount(targets, minlength=frontier.shape[0])
            assert np.array_equal(counts, np.minimum(degree[frontier], fanouts[rel][hop])), (rel, hop)
            assert np.unique(rank[e[hop]:e[hop + 1]]).shape[0] == e[hop + 1] - e[hop]  # no edge twice


def test_same_key_same_sample_any_thread_count(mag_like, restore_threads) -> None:
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread")
    seeds = np.arange(0, 520, 3)
    results = []
    for threads in (1, 2):
        set_sampler_threads(threads)
        results.append(TypedNodewiseSampler(mag_like, [5, 5]).sample(seeds, 77))
    a, b = results
    assert all(torch.equal(x, y) for x, y in zip(a.nodes + a.edge_index + a.edge_rank, b.nodes + b.edge_index
                                                 + b.edge_rank, strict=True))


def test_repeated_seeds_raise_and_leave_the_sampler_usable(mag_like) -> None:
    sampler = TypedNodewiseSampler(mag_like, [2, 2])
    want = sampler.sample(np.array([3, 400]), 1)
    with pytest.raises(ValueError, match="seeds: expected unique node ids, got repeats"):
        sampler.sample(np.array([3, 400, 3]), 1)
    got = sampler.sample(np.array([3, 400]), 1)
    assert all(torch.equal(x, y) for x, y in zip(want.nodes + want.edge_index, got.nodes + got.edge_index))
    with pytest.raises(ValueError, match=r"seeds: node ids must lie in \[0, 520\)"):
        sampler.sample(np.array([520]), 1)
    with pytest.raises(TypeError, match="graph: expected a TypedGraph"):
        TypedNodewiseSampler(csc_from_coo(np.array([0]), np.array([1]), 2), [2])


def test_a_graph_without_relations_gives_its_seeds_alone() -> None:
    out = TypedNodewiseSampler(typed_graph({"a": 5, "b": 2}, {}), [2, 2]).sample(np.array([6, 1, 3]), 0)
    assert [n.tolist() for n in out.nodes] == [[1, 3], [6]]
    assert out.num_sampled_nodes == ([2, 0, 0], [1, 0, 0]) and out.edge_index == () and out.num_sampled_edges == ()
