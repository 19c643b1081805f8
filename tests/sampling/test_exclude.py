"""Target-edge exclusion (DGL's reverse_id rule), against a case worked by hand and a per-edge loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.block import Block
from gnnscale.sampling.exclude import block_edges, exclude_target_edges
from host_syncs import HostSyncs


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


def test_the_host_reads_back_one_list_of_kept_counts_for_all_the_blocks():
    """What exclusion costs a GPU in host round trips, counted on the CPU (tests/host_syncs.py): one read of every
    block's kept-edge count, at once; no unique, bool mask, bincount or repeat_interleave sized by the data
    (before: one per call and five per block)."""
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 80, 600), rng.integers(0, 80, 600)
    g = csc_from_coo(src, dst, 80, symmetrize=True, remove_self_loops=True)
    pos = torch.from_numpy(np.stack([src[:20], dst[:20]]))
    blocks = sample_blocks(g, torch.cat([pos[0], pos[1]]).unique().numpy(), (5, 4, 3), key=2)
    with HostSyncs() as syncs:
        out = exclude_target_edges(blocks, pos[0], pos[1], 80)
    assert dict(syncs.counts) == {"read": 1}
    assert sum(b.num_edges for b in out) < sum(b.num_edges for b in blocks)  # something was excluded


@pytest.mark.gpu
def test_on_cuda_the_host_waits_once_and_the_blocks_are_the_cpu_ones():
    import warnings

    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 80, 600), rng.integers(0, 80, 600)
    g = csc_from_coo(src, dst, 80, symmetrize=True, remove_self_loops=True)
    pos = torch.from_numpy(np.stack([src[:20], dst[:20]]))
    blocks = sample_blocks(g, torch.cat([pos[0], pos[1]]).unique().numpy(), (5, 4, 3), key=2)
    on_cpu = exclude_target_edges(blocks, pos[0], pos[1], 80)
    cuda_blocks = [b.to("cuda") for b in blocks]
    pos = pos.cuda()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            on_gpu = exclude_target_edges(cuda_blocks, pos[0], pos[1], 80)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len([w for w in caught if "synchroniz" in str(w.message)]) <= 1
    for a, b in zip(on_gpu, on_cpu, strict=True):
        assert torch.equal(a.indptr.cpu(), b.indptr) and torch.equal(a.indices.cpu(), b.indices)
