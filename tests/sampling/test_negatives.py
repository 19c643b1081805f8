"""Keyed negatives: the hash's draws, per-source pairs keep their source, bad arguments refused; a batch's
pairs and seed set (batch_pairs) by hand and as the trainer's and the loader's own compositions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gnnscale.keys import node_stream_py
from gnnscale.sampling.negatives import _STREAM, batch_pairs, draw_node_ids, negative_pairs


def expected_draw(key: int, pair: int, draw: int, bound: int) -> int:
    """gnnscale.keys.uniform_below on Python ints: the oracle of one draw."""
    mask = (1 << 64) - 1
    golden = 0x9E3779B97F4A7C15
    z = (node_stream_py(key, _STREAM, pair) + (draw + 1) * golden) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return ((z >> 32) * bound) >> 32


def test_draws_are_the_keyed_streams_values():
    ids = draw_node_ids(5, 3, 1000, key=77)
    assert ids.shape == (5, 3)
    for pair in range(5):
        for draw in range(3):
            assert int(ids[pair, draw]) == expected_draw(77, pair, draw, 1000)


def test_uniform_pairs_cover_the_node_range_and_depend_on_the_key_only():
    sources = torch.arange(2000)
    src, dst = negative_pairs(sources, 50, 2, key=3)
    assert src.shape == dst.shape == (4000,)
    assert int(src.min()) == 0 and int(src.max()) == 49 and int(dst.min()) == 0 and int(dst.max()) == 49
    again = negative_pairs(sources, 50, 2, key=3)
    assert torch.equal(src, again[0]) and torch.equal(dst, again[1])
    assert not torch.equal(dst, negative_pairs(sources, 50, 2, key=4)[1])
    # Uniform: every node drawn about 8000 / 50 = 160 times.
    counts = np.bincount(torch.cat([src, dst]).numpy(), minlength=50)
    assert counts.min() > 100 and counts.max() < 230


def test_uniform_negatives_are_draws_2j_and_2j_plus_1_of_each_positives_stream():
    # Positive i's j-th negative: source = draw 2j, destination = draw 2j + 1 of stream i.
    src, dst = negative_pairs(torch.tensor([8, 3, 8, 0]), 1000, 3, key=77)
    assert src.tolist() == [expected_draw(77, i, 2 * j, 1000) for i in range(4) for j in range(3)]
    assert dst.tolist() == [expected_draw(77, i, 2 * j + 1, 1000) for i in range(4) for j in range(3)]


def test_per_source_negatives_keep_each_edges_source():
    # Positive i's j-th negative: its source, and destination = draw j of stream i.
    sources = torch.tensor([4, 9, 4])
    src, dst = negative_pairs(sources, 10, 3, key=1, law="per_source")
    assert src.tolist() == [4, 4, 4, 9, 9, 9, 4, 4, 4]
    assert dst.tolist() == [expected_draw(1, i, j, 10) for i in range(3) for j in range(3)]


@pytest.mark.parametrize("law", ["uniform", "per_source"])
def test_negatives_are_self_pairs_at_the_rate_of_independent_endpoints(law):
    # Two independent uniform endpoints over 50 nodes meet with probability 1/50: 80 of 4,000 pairs, standard
    # deviation sqrt(4000 * 0.02 * 0.98) = 8.9. Pairs drawn as (u, u) would all be self-pairs.
    src, dst = negative_pairs(torch.arange(2000) % 50, 50, 2, key=5, law=law)
    assert 80 - 4 * 8.9 < int((src == dst).sum()) < 80 + 4 * 8.9


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ratio": 0}, "neg_ratio: expected an int >= 1"),
    ({"law": "hard"}, "neg_sampling: expected one of"),
    ({"num_nodes": 0}, "num_nodes: negatives are drawn"),
])
def test_bad_arguments_are_refused(kwargs, message):
    args = {"num_nodes": 10, "ratio": 1, "key": 0, "law": "uniform", **kwargs}
    with pytest.raises(ValueError, match=message):
        negative_pairs(torch.arange(3), **args)


def by_hand(pairs: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """The seed set of ``pairs`` (sorted endpoints) and each endpoint's position in it, in Python."""
    nodes = sorted(set(pairs[0]) | set(pairs[1]))
    return nodes, [[nodes.index(v) for v in row] for row in pairs]


def test_batch_pairs_without_negatives_by_hand():
    # Positives 3 -> 0, 1 -> 3, 3 -> 5: seeds [0, 1, 3, 5].
    out = batch_pairs(torch.tensor([3, 1, 3]), torch.tensor([0, 3, 5]), 6, key=7)
    assert out.pairs.tolist() == [[3, 1, 3], [0, 3, 5]] and out.num_pos == 3
    assert out.seeds.tolist() == [0, 1, 3, 5] and out.local.tolist() == [[2, 1, 2], [0, 2, 3]]


@pytest.mark.parametrize(("law", "ratio", "num_neg"), [("uniform", 1, 2), ("uniform", 0.5, 1), ("uniform", 1.5, 3),
                                                       ("per_source", 2, 4)])
def test_batch_pairs_with_negatives_from_the_hash_by_hand(law, ratio, num_neg):
    # Positives 4 -> 1, 2 -> 4 over 10 nodes. Positive i's k-th negative: uniform, source = draw 2k and
    # destination = draw 2k + 1 of stream i; per_source, source 4 or 2 and destination = draw k. A fraction
    # keeps ceil(2 * ratio) of the ceil(ratio) per positive, in order.
    per = math.ceil(ratio)
    if law == "uniform":
        negatives = [(expected_draw(9, i, 2 * k, 10), expected_draw(9, i, 2 * k + 1, 10))
                     for i in range(2) for k in range(per)]
    else:
        negatives = [([4, 2][i], expected_draw(9, i, k, 10)) for i in range(2) for k in range(per)]
    negatives = negatives[:num_neg]
    pairs = [[4, 2] + [s for s, _ in negatives], [1, 4] + [d for _, d in negatives]]
    nodes, local = by_hand(pairs)
    out = batch_pairs(torch.tensor([4, 2]), torch.tensor([1, 4]), 10, key=9, ratio=ratio, law=law)
    assert out.pairs.tolist() == pairs and out.num_pos == 2
    assert out.seeds.tolist() == nodes and out.local.tolist() == local


@pytest.mark.parametrize(("law", "ratio"), [("uniform", 1), ("uniform", 3), ("per_source", 1), ("per_source", 3)])
def test_batch_pairs_is_the_trainers_composition(law, ratio):
    # The link task's own steps: negative_pairs, the pairs concatenated, their unique endpoints, searchsorted.
    rng = np.random.default_rng(ratio)
    src, dst = (torch.from_numpy(rng.integers(0, 50, size=37)) for _ in range(2))
    neg_src, neg_dst = negative_pairs(src, 50, ratio, 21, law)
    pairs = (torch.cat([src, neg_src]), torch.cat([dst, neg_dst]))
    seeds = torch.cat(pairs).unique()
    out = batch_pairs(src, dst, 50, 21, ratio=ratio, law=law)
    assert torch.equal(out.pairs, torch.stack(pairs)) and torch.equal(out.seeds, seeds)
    assert torch.equal(out.local, torch.stack([torch.searchsorted(seeds, p) for p in pairs]))


@pytest.mark.parametrize(("mode", "amount"), [("binary", 1.0), ("binary", 2.0), ("binary", 1.5), ("binary", 0.25),
                                              ("triplet", 1), ("triplet", 3)])
def test_batch_pairs_is_the_link_loaders_composition(mode, amount):
    # PyG's LinkNeighborLoader's steps: ceil(amount) negatives per positive cut to ceil(num_pos * amount)
    # for binary (a triplet keeps the sources), then unique(return_inverse=True) of the endpoints.
    rng = np.random.default_rng(5)
    src, dst = (torch.from_numpy(rng.integers(0, 50, size=37)) for _ in range(2))
    law = "uniform" if mode == "binary" else "per_source"
    num_neg = math.ceil(37 * amount)
    neg_src, neg_dst = negative_pairs(src, 50, math.ceil(amount), 4, law)
    ends_dst = torch.cat([dst, neg_dst[:num_neg]])
    ends_src = torch.cat([src, neg_src[:num_neg]]) if mode == "binary" else src
    seeds, local = torch.cat([ends_src, ends_dst]).unique(return_inverse=True)
    out = batch_pairs(src, dst, 50, 4, ratio=amount, law=law)
    assert torch.equal(out.seeds, seeds)
    if mode == "binary":
        assert torch.equal(out.local, local.view(2, -1))
    else:  # src_index, dst_pos_index, dst_neg_index
        assert torch.equal(out.local[0, :37], local[:37]) and torch.equal(out.local[1, :37], local[37:74])
        assert torch.equal(out.local[1, 37:].view(37, -1), local[74:].view(37, -1))
        assert torch.equal(out.pairs[0, 37:], src.repeat_interleave(amount))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"ratio": -1}, ValueError, "neg_ratio: expected a number >= 0"),
    ({"ratio": "1"}, ValueError, "neg_ratio: expected a number >= 0"),
    ({"ratio": True}, ValueError, "neg_ratio: expected a number >= 0"),
    ({"ratio": 1.5, "law": "per_source"}, ValueError, "neg_ratio: expected a whole number >= 0 .*'per_source'"),
    ({"law": "hard"}, ValueError, "neg_sampling: expected one of"),
    ({"dst": torch.arange(2)}, ValueError, r"src, dst: expected two 1-D tensors of the same length, got shapes \(3,\)"),
])
def test_batch_pairs_refuses_bad_arguments(kwargs, error, message):
    args = {"src": torch.arange(3), "dst": torch.arange(3), "num_nodes": 10, "key": 0, "ratio": 1, **kwargs}
    with pytest.raises(error, match=message):
        batch_pairs(**args)
