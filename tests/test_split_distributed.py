"""Split parallelism on real processes (gloo on 127.0.0.1): SAGE, GCN and GAT, 2 and 3 layers, 2 and 4
workers, against the single-process model on the same mini-batch. The checks run inside the workers
(tests/split_workers.py): same logits and loss (< 1e-5), same summed gradients and parameters after
SGD steps (< 1e-4), every edge computed once, the designed number of shuffles, a worker that owns
no seed still joins every backward shuffle, clear errors. The same workers then check the feature cache
(tests/cache_workers.py)."""

from __future__ import annotations

import pytest

import cache_workers
import split_workers
from test_distributed import spawn_ok


@pytest.mark.parametrize("world_size", [2, 4])
def test_split_training_equals_single_process(world_size):
    totals = spawn_ok(split_workers.check_split_training, world_size)
    # Every shuffled byte is received by someone: the plans of all workers agree.
    sent = sum(t["shuffle"]["bytes_sent"] for t in totals)
    received = sum(t["shuffle"]["bytes_received"] for t in totals)
    assert sent == received > 0
    assert all(t["num_cached"] == cache_workers.FRACTION * 500 for t in totals)
