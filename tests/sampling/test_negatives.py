"""Keyed negatives: the hash's draws, per-source pairs keep their source, bad arguments refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.keys import node_stream_py
from gnnscale.sampling.negatives import _STREAM, draw_node_ids, negative_pairs


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


def test_per_source_negatives_keep_each_edges_source():
    sources = torch.tensor([4, 9, 4])
    src, dst = negative_pairs(sources, 10, 3, key=1, law="per_source")
    assert src.tolist() == [4, 4, 4, 9, 9, 9, 4, 4, 4]
    assert torch.equal(dst, draw_node_ids(3, 3, 10, key=1).reshape(-1))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ratio": 0}, "neg_ratio: expected an int >= 1"),
    ({"law": "hard"}, "neg_sampling: expected one of"),
    ({"num_nodes": 0}, "num_nodes: negatives are drawn"),
])
def test_bad_arguments_are_refused(kwargs, message):
    args = {"num_nodes": 10, "ratio": 1, "key": 0, "law": "uniform", **kwargs}
    with pytest.raises(ValueError, match=message):
        negative_pairs(torch.arange(3), **args)
