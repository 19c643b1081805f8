"""Target-edge exclusion (DGL's reverse_id rule), against a case worked by hand and a per-edge loop."""

from __future__ import annotations

import numpy as np
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.block import Block
from gnnscale.sampling.exclude import block_edges, exclude_target_edges


def test_a_hand_worked_block_loses_the_pair_in_both_directions_and_keeps_its_nodes():
    # Destinations 10 and 11; sources 10, 11, 12, 13 (destinations first).
    #   10 <- 11, 10 <- 12, 11 <- 10, 11 <- 13
    block = Block(indptr=torch.tensor([0, 2, 4]), indices=torch.tensor([1, 2, 0, 3]),
                  src_ids=torch.tensor([10, 11, 12, 13]), num_dst=2)
    # The target pair (10, 11): both 11 -> 10 and 10 -> 11 go; (12, 13) is no edge here.
    [out] = exclude_target_edges([block], torch.tensor([10, 12]), torch.tensor([11, 13]), num_nodes=20)
    assert out.indptr.tolist() == [0, 1, 2] and out.indices.tolist() == [2, 3]
    assert out.src_ids.tolist() == [10, 11, 12, 13] and out.num_dst == 2
    out.validate()


def test_sampled_blocks_lose_exactly_the_target_pairs_edges():
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 60, 400), rng.integers(0, 60, 400)
    g = csc_from_coo(src, dst, 60, symmetrize=True, remove_self_loops=True)
    pos = torch.from_numpy(np.stack([src[:15], dst[:15]]))
    seeds = torch.cat([pos[0], pos[1]]).unique()
    blocks = sample_blocks(g, seeds.numpy(), (-1, 4), key=7)
    targets = {(int(u), int(v)) for u, v in pos.T} | {(int(v), int(u)) for u, v in pos.T}
    for before, after in zip(blocks, exclude_target_edges(blocks, pos[0], pos[1], 60)):
        kept = list(zip(*(t.tolist() for t in block_edges(before))))
        oracle = [e for e in kept if e not in targets]  # the per-edge rule, in CSC order
        assert list(zip(*(t.tolist() for t in block_edges(after)))) == oracle
        assert after.num_edges < before.num_edges or not any(e in targets for e in kept)
        after.validate()
