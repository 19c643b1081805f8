"""Split parallelism on real processes (gloo on 127.0.0.1): SAGE, GCN and GAT, 2 and 3 layers, 2 and 4
workers, against the single-process model on the same mini-batch. The checks run inside the workers
(tests/split_workers.py): same logits and loss (< 1e-5), same summed gradients and parameters after
SGD steps (< 1e-4), every edge computed once, the designed number of shuffles, a worker that owns
no seed still joins every backward shuffle, clear errors. The same workers then check the feature cache
(tests/cache_workers.py)."""

from __future__ import annotations

import pytest

import cache_workers
import owner_split_workers
import split_workers
from test_distributed import spawn_ok


@pytest.mark.parametrize("world_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_split_training_equals_single_process(world_size):
    totals = spawn_ok(split_workers.check_split_training, world_size)
    # Every shuffled byte is received by someone: the plans of all workers agree.
    sent = sum(t["shuffle"]["bytes_sent"] for t in totals)
    received = sum(t["shuffle"]["bytes_received"] for t in totals)
    assert sent == received > 0
    assert all(t["num_cached"] == cache_workers.FRACTION * 500 for t in totals)


@pytest.mark.slow  # the default tier's split proof: test_split_training_equals_single_process[2]
@pytest.mark.parametrize("world_size", [2, 4])
def test_owner_driven_splits_equal_the_whole_minibatch_split(world_size):
    """Each worker samples only its own destinations (owner_split_blocks): the same splits as split_blocks
    on the whole mini-batch up to row order, 2 and 3 layers, with and without replacement, both kinds; the
    same logits, loss and gradients for SAGE, GCN and GAT; clear errors before any collective."""
    totals = spawn_ok(owner_split_workers.check_owner_split, world_size)
    sent = sum(t["sample"]["bytes_sent"] for t in totals)
    assert sent == sum(t["sample"]["bytes_received"] for t in totals) > 0
