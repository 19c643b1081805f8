"""Typed graphs: ids by type, the CSC grouped by relation, the typed rows, PyG's reverses, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from gnnscale.graph.typed import Relation, _csc_order, parse_relation, typed_graph

# The tiny typed graph (local ids; edges point the way messages flow):
#
#   authors a0 a1 a2, papers p0 p1 p2 p3
#   writes:  a0 -> p0, a1 -> p0, a2 -> p1, a0 -> p3
#   cites:   p1 -> p0, p2 -> p0, p3 -> p2
#
# Global ids: papers first (0..3), then authors (4..6).
COUNTS = {"paper": 4, "author": 3}
EDGES = {"author__writes__paper": ([0, 1, 2, 0], [0, 0, 1, 3]), "paper__cites__paper": ([1, 2, 3], [0, 0, 2])}


def test_ids_rows_and_edges_by_hand():
    g = typed_graph(COUNTS, EDGES)
    assert g.node_types == ("paper", "author") and g.type_offsets.tolist() == [0, 4, 7]
    assert [str(r) for r in g.relations] == ["author__writes__paper", "paper__cites__paper"]
    # In-edges of each paper: writes (author global ids) first, then cites; authors have none.
    assert g.graph.indptr.tolist() == [0, 4, 5, 6, 7, 7, 7, 7]
    assert g.graph.indices.tolist() == [4, 5, 1, 2, 6, 3, 4]
    # Typed rows: every paper has two (writes, cites), authors none.
    assert g.rel_indptr.tolist() == [0, 2, 4, 5, 5, 5, 6, 7, 7]
    assert g.in_relations(0).tolist() == [0, 1] and g.in_relations(1).tolist() == []
    src, dst = g.edges("author__writes__paper")
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(*EDGES["author__writes__paper"]))
    assert g.count("author") == 3 and g.node_range("author") == (4, 7)


def test_reverse_relations_as_pyg_to_undirected():
    g = typed_graph(COUNTS, EDGES, reverse=True)
    assert [str(r) for r in g.relations] == ["author__writes__paper", "paper__cites__paper",
                                             "paper__rev_writes__author"]
    # A relation within one type gets its reversed edges; one between types a rev_ relation.
    cites = set(zip(*g.edges("paper__cites__paper")))
    assert cites == {(1, 0), (2, 0), (3, 2), (0, 1), (0, 2), (2, 3)}
    rev = set(zip(*g.edges(("paper", "rev_writes", "author"))))
    assert rev == {(0, 0), (0, 1), (1, 2), (3, 0)}
    assert g.num_edges == 4 + 6 + 4


def test_repeated_edges_are_kept_once_per_relation():
    g = typed_graph({"a": 2}, {"a__x__a": ([0, 0, 1], [1, 1, 0]), "a__y__a": ([0], [1])})
    assert g.num_edges == 3  # (0, 1) twice in x is one edge; y's (0, 1) is another relation's
    assert g.rel_indptr.tolist() == [0, 1, 1, 2, 3]


@pytest.mark.parametrize("text", ["author__writes__paper", "author___writes___paper", ("author", "writes", "paper")])
def test_relations_parse_from_names_and_tuples(text):
    assert parse_relation(text) == Relation("author", "writes", "paper")


@pytest.mark.parametrize("counts, edges, match", [
    ({"paper": 2}, {"paper__cites__venue": ([0], [0])}, "names node type 'venue'"),
    ({"paper": 2}, {"paper__cites__paper": ([0], [2])}, r"paper ids must lie in \[0, 2\)"),
    ({"paper": 2}, {"paper__cites__paper": ([0, 1], [1])}, "has 2 sources and 1 destinations"),
    ({"paper": 2}, {"cites": ([0], [1])}, "expected 'src__name__dst'"),
    ({"paper": -1}, {}, "expected counts >= 0"),
])
def test_bad_input_is_one_clear_error(counts, edges, match):
    with pytest.raises(ValueError, match=match):
        typed_graph(counts, edges)


def test_unknown_relation_and_type_names():
    g = typed_graph(COUNTS, EDGES)
    with pytest.raises(ValueError, match="relation: expected one of author__writes__paper, paper__cites__paper"):
        g.relation_id("paper__cites__author")
    with pytest.raises(ValueError, match="node type: expected one of paper, author, got 'venue'"):
        g.count("venue")
    assert np.array_equal(g.first_rows(), [0, 2, 4, 6, 8, 8, 8])


def test_one_sort_key_and_three_sorted_columns_give_one_order():
    # The key of (destination, relation, source) packed in one int64 is the fast path; the lexsort of three columns
    # serves graphs whose ids do not fit: the same edges, the same order, repeats dropped alike.
    rng = np.random.default_rng(0)
    # Types of 20 and 30 nodes (global ids 0-19, 20-49); relations 20 -> 30, 30 -> 30, 30 -> 20.
    shifts = [(0, 20), (20, 20), (20, 0)]
    sizes = [(20, 30, 400), (30, 30, 300), (30, 20, 5)]
    edges = [(rng.integers(0, n_src, m), rng.integers(0, n_dst, m)) for n_src, n_dst, m in sizes]
    fast = _csc_order(edges, shifts, 50, one_key=True)
    slow = _csc_order(edges, shifts, 50, one_key=False)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    triples = {(int(d) + shifts[r][1], r, int(s) + shifts[r][0]) for r in range(3) for s, d in zip(*edges[r])}
    assert list(zip(fast[1].tolist(), fast[2].tolist(), fast[0].tolist())) == sorted(triples)
