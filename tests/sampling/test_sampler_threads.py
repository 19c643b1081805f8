"""Every sampler draws the same blocks whatever numba's thread count: one test over the samplers (the
fused and two-step neighbor samplers, the matrix and LADIES bulk samplers, explanation-guided sampling),
each drawing what its own test drew before they were folded into this one."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from gnnscale.sampling import derive_key, sample_blocks, set_sampler_threads
from gnnscale.sampling.dgs import sample_blocks_dgs
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from test_matrix_sampling import assert_weighted_blocks_equal, random_stack
from test_sampling_dgs import policy
from test_sampling_dgs import random_graph as dgs_graph


def neighbor(method: str, replace: bool):
    def draw(graph):
        seeds = torch.from_numpy(np.random.default_rng(5).choice(400, 200, replace=False))
        return [sample_blocks(graph, seeds, [5, 4], key=derive_key(42, 3, 17), replace=replace, method=method)]
    return draw


def matrix(graph):
    seeds, keys = random_stack(400, 6, 100, seed=4)
    return MatrixSampler(graph, [5, 4]).sample_many(seeds, keys)


def ladies(graph):
    seeds, keys = random_stack(400, 5, 30, seed=2)
    return LadiesSampler(graph, [20, 10]).sample_many(seeds, keys)


def dgs(_graph):
    # Its own 600-node graph, and a policy with 16 clusters of different weights: the remote draws count.
    pol = policy(600, 0, 300, weights=np.linspace(0.2, 2.0, 16))
    return [sample_blocks_dgs(dgs_graph(), np.arange(0, 120, 2), (8, 4, 2), key=11, policy=pol)]


# Which samplers draw weighted blocks.
WEIGHTED = {"ladies"}
SAMPLERS = {"fused-noreplace": neighbor("fused", False), "fused-replace": neighbor("fused", True),
            "two_step-noreplace": neighbor("two_step", False), "two_step-replace": neighbor("two_step", True),
            "matrix": matrix, "ladies": ladies, "dgs": dgs}
INT32, INT64 = np.dtype(np.int32), np.dtype(np.int64)
# LADIES works on scipy's arrays and DGS on its own graph: one index dtype each.
CASES = [*(pytest.param(name, dtype, id=f"{name}-{dtype}") for name in SAMPLERS if name not in ("ladies", "dgs")
           for dtype in (INT32, INT64)),
         pytest.param("ladies", INT32, id="ladies-int32"), pytest.param("dgs", INT32, id="dgs-int32")]


@pytest.mark.parametrize(("sampler", "idx_dtype"), CASES)
def test_same_key_same_blocks_any_thread_count(random_graph, sampler, restore_threads):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread")
    results = []
    for threads in (1, 2, 1, 2):
        set_sampler_threads(threads)
        assert numba.get_num_threads() == threads
        results.append(SAMPLERS[sampler](random_graph))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert_weighted_blocks_equal(a, b, weighted=sampler in WEIGHTED)
