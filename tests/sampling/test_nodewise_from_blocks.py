"""The node-wise (PyG) subgraph inside layered blocks: exactly what the node-wise sampler draws with the
same seeds and key, whatever the fanouts, replacement and index dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.sampling.nodewise import NodewiseSampler, nodewise_from_blocks


@pytest.mark.parametrize("fanouts", [(1,), (5, 3), (4, 3, 2), (100, 100)])
@pytest.mark.parametrize("replace", [False, True])
def test_the_blocks_hold_the_nodewise_sample_of_their_seeds_and_key(random_graph, fanouts, replace):
    sampler = NodewiseSampler(random_graph, fanouts, replace=replace)
    rng = np.random.default_rng(len(fanouts))
    for step in range(4):
        seeds = torch.from_numpy(rng.choice(random_graph.num_nodes, size=30, replace=False))
        key = derive_key(7, 0, step)
        blocks = sample_blocks(random_graph, seeds, fanouts, key=key, replace=replace)
        sub, rows = nodewise_from_blocks(blocks)
        expected = sampler.sample(seeds, key)
        for field in ("nodes", "row", "col"):
            assert torch.equal(getattr(sub, field), getattr(expected, field)), field
        assert sub.num_sampled_nodes == expected.num_sampled_nodes
        assert sub.num_sampled_edges == expected.num_sampled_edges
        assert sub.batch_size == seeds.numel()
        # rows: where each node's features sit among the blocks' input rows.
        assert torch.equal(blocks[0].src_ids[rows], sub.nodes)


def test_later_hops_sample_only_the_frontier(tiny_graph):
    """With every neighbor taken, hop 1 keeps the in-edges of the nodes hop 0 added, not the seed's again
    (which the layered blocks hold twice: once per hop)."""
    blocks = sample_blocks(tiny_graph, torch.tensor([1]), (100, 100), key=0)
    sub, _ = nodewise_from_blocks(blocks)
    assert sum(b.num_edges for b in blocks) > sub.row.numel()
    hop1_targets = sub.col[sub.num_sampled_edges[0]:]
    assert bool((hop1_targets >= 1).all())  # local id 0 is the seed


def test_no_blocks_is_an_error():
    with pytest.raises(ValueError, match="blocks"):
        nodewise_from_blocks([])
