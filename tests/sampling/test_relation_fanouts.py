"""A relation's own fanouts (``--relation-fanouts``, ``TrainConfig.relation_fanouts``): which relation a name finds,
the table every relation gets (checked against tables written by hand), the blocks drawn with it (every
destination's in-edges by a relation: min(its fanout, the relation's in-degree), the in-degrees counted from the
graph's edge lists), and one-line errors for what cannot be read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.typed import Relation
from gnnscale.keys import derive_key
from gnnscale.sampling.typed import find_relation, with_relation_fanouts
from gnnscale.train import TrainConfig
from gnnscale.train.samplers import build_samplers

# The mag preset's relations, in id order.
AFFILIATED, WRITES, CITES, HAS_TOPIC, REV_AFFILIATED, REV_WRITES, REV_HAS_TOPIC = range(7)


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=0.003)


def test_a_relation_is_found_by_its_unique_name_or_its_three_parts(mag):
    g = mag.graph
    assert find_relation(g, "cites") == Relation("paper", "cites", "paper")
    assert find_relation(g, "author__writes__paper") == Relation("author", "writes", "paper")
    assert find_relation(g, "author___writes___paper") == Relation("author", "writes", "paper")  # OGB's folders


@pytest.mark.parametrize("text, message", [
    ("likes", "relation: the graph has no relation named 'likes'; it has author__affiliated_with__institution, "),
    ("paper__writes__author", "relation: the graph has no relation paper__writes__author; it has "),
    ("a__b", "relation: relation: expected 'src__name__dst', got 'a__b'"),
])
def test_a_name_the_graph_lacks_is_one_line(mag, text, message):
    with pytest.raises(ValueError) as error:
        find_relation(mag.graph, text)
    assert str(error.value).startswith(message)


def test_a_name_two_relations_share_must_be_written_whole():
    from gnnscale.graph.typed import TypedSchema

    schema = TypedSchema(node_types=("a", "b"), type_offsets=np.array([0, 2, 5]),
                         relations=(Relation("a", "to", "b"), Relation("b", "to", "a")))
    with pytest.raises(ValueError, match=r"2 relations are named 'to' \(a__to__b, b__to__a\); name one as "):
        find_relation(schema, "to")
    assert find_relation(schema, "b__to__a") == Relation("b", "to", "a")


def test_every_relation_not_named_takes_the_fanouts(mag):
    table = with_relation_fanouts(mag.graph, (5, 3), {"cites": (2, 1), "author__writes__paper": (0,)})
    rels = mag.graph.relations
    expected = {rel: (5, 3) for rel in rels}
    expected[rels[CITES]] = (2, 1)
    expected[rels[WRITES]] = (0, 0)  # one number: every hop
    assert table == expected
    assert with_relation_fanouts(mag.graph, (5, 3), {}) == (5, 3)  # nothing named: the plain list, as before


@pytest.mark.parametrize("own, message", [
    ({"cites": (1, 2, 3)}, "relation_fanouts: paper__cites__paper has 3 fanouts, expected 1 (every hop) or 2"),
    ({"cites": (2,), "paper__cites__paper": (1,)}, "relation_fanouts: paper__cites__paper is named twice"),
    ({"cites": (-2,)}, "relation_fanouts: paper__cites__paper: expected every entry >= 0, or -1"),
    ({"likes": (1,)}, "relation_fanouts: the graph has no relation named 'likes'"),
])
def test_relation_fanouts_the_graph_cannot_take_are_one_line(mag, own, message):
    with pytest.raises(ValueError) as error:
        with_relation_fanouts(mag.graph, (5, 3), own)
    assert str(error.value).startswith(message)


def in_degrees(graph, rel: int) -> np.ndarray:
    """The relation's in-degree of every node of its destination type (by local id), from its edge list."""
    relation = graph.relations[rel]
    _, dst = graph.edges(relation)
    return np.bincount(np.asarray(dst), minlength=graph.count(relation.dst))


def test_the_trainers_sampler_draws_each_relations_own_fanout(mag):
    g = mag.graph
    cfg = TrainConfig(fanouts=(3, 2), relation_fanouts=("cites=0", "rev_writes=1,4"), threads=1)
    train, _ = build_samplers(g, None, cfg)
    seeds = np.sort(np.random.default_rng(0).choice(mag.train_idx, 64, replace=False))
    blocks = train.sample(seeds, derive_key(0))
    wanted = {CITES: (0, 0), REV_WRITES: (1, 4)}
    for layer, hop in ((1, 0), (0, 1)):  # blocks run input layer first; hop 0 is the seeds' block
        block = blocks[layer]
        for r, part in enumerate(block.relations):
            rel = g.relations[r]
            k = wanted.get(r, (3, 2))[hop]
            dst_ids = block.src_ids[part.dst].numpy() - g.node_range(rel.dst)[0]
            drawn = np.diff(part.indptr.numpy())
            np.testing.assert_array_equal(drawn, np.minimum(k, in_degrees(g, r)[dst_ids]), err_msg=str(rel))
    assert blocks[1].relations[CITES].num_edges == 0 < blocks[1].relations[WRITES].num_edges


def test_inference_takes_the_relations_fanouts_unless_eval_fanouts_is_set(mag):
    cfg = TrainConfig(fanouts=(3, 2), relation_fanouts=("cites=1",), threads=1)
    train, evaluate = build_samplers(mag.graph, None, cfg)
    expected = np.array([[3] * 7, [2] * 7])
    expected[:, CITES] = 1
    np.testing.assert_array_equal(train.table, expected)
    np.testing.assert_array_equal(evaluate.table, expected)
    _, evaluate = build_samplers(mag.graph, None, replace(cfg, eval_fanouts=(6, 6)))
    np.testing.assert_array_equal(evaluate.table, np.full((2, 7), 6))


@pytest.mark.parametrize("words, message", [
    (("cites",), "relation_fanouts: expected REL=N,N (a relation and its fanouts per hop), got 'cites'"),
    (("cites=a",), "relation_fanouts: expected REL=N,N (a relation and its fanouts per hop), got 'cites=a'"),
    (("=3",), "relation_fanouts: expected REL=N,N"),
    (("cites=1", "cites=2"), "relation_fanouts: cites is named twice"),
    (("cites=1,2,3",), "relation_fanouts: cites has 3 fanouts, expected 1 (every hop) or 2 (one per hop, as fanouts "
                       "[3, 2])"),
    (("cites=-3",), "relation_fanouts: cites: expected every entry >= 0, or -1"),
])
def test_words_the_config_cannot_read_are_one_line(words, message):
    with pytest.raises(ValueError) as error:
        TrainConfig(fanouts=(3, 2), relation_fanouts=words)
    assert str(error.value).startswith(message)


def test_a_plain_graph_refuses_relation_fanouts():
    from gnnscale.graph.csc import CSCGraph

    graph = CSCGraph(indptr=np.array([0, 1, 2]), indices=np.array([1, 0]), num_nodes=2)
    with pytest.raises(ValueError, match="relation_fanouts: a relation's own fanouts need a typed graph"):
        build_samplers(graph, None, TrainConfig(fanouts=(2,), relation_fanouts=("cites=1",)))
