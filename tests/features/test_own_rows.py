"""A split worker's own rows (GSplit's per-GPU cache): the part's rows by local id, the hottest of its OWN
nodes held on the device, as many as the budget (a share of all nodes) allows (on the CPU here; the same code
on a GPU in the gpu-marked test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.features.device_cache import DeviceFeatureCache
from gnnscale.features.local import LocalFeatureStore
from gnnscale.features.own_rows import own_rows_store, share_of

# A part of 6 rows of a 20-node graph; the whole graph's in-degrees of its nodes, by local row:
#   row:     0  1  2  3  4  5
#   degree:  2  9  0  9  5  1      -> hottest first: 1, 3 (tie: lower row), 4, 0, 5, 2
DEGREES = np.array([2, 9, 0, 9, 5, 1])
FEATURES = np.arange(6 * 3, dtype=np.float32).reshape(6, 3)


@pytest.mark.parametrize(("fraction", "cached"), [(0.1, [1, 3]), (0.15, [1, 3, 4]), (0.25, [0, 1, 3, 4, 5]),
                                                  (0.5, [0, 1, 2, 3, 4, 5]), (1.0, [0, 1, 2, 3, 4, 5])])
def test_the_hottest_own_rows_of_a_budget_of_all_nodes_are_cached(fraction, cached):
    store = own_rows_store(FEATURES, DEGREES, 20, fraction, torch.device("cpu"))
    assert isinstance(store, DeviceFeatureCache)
    assert store.cached_ids.tolist() == cached  # int(fraction x 20) rows, at most the part's 6
    ids = torch.tensor([5, 1, 2, 2, 0, 3])
    got = store.gather(ids)
    assert torch.equal(got, torch.from_numpy(FEATURES)[ids])
    assert (store.requests, store.hits) == (6, sum(i in cached for i in ids.tolist()))


def test_no_budget_reads_the_part_in_host_memory():
    store = own_rows_store(FEATURES, DEGREES, 20, 0.0, torch.device("cpu"))
    assert isinstance(store, LocalFeatureStore)
    assert torch.equal(store.gather(torch.tensor([4, 0])), torch.from_numpy(FEATURES[[4, 0]]))


def test_the_share_counts_exactly_the_rows_asked_for():
    # rows / n alone falls short: (29 / 100) * 100 = 28.999..., which the cache's int() makes 28 rows.
    assert int((29 / 100) * 100) == 28 and int(share_of(29, 100) * 100) == 29
    for n in range(1, 120):
        assert [int(share_of(r, n) * n) for r in range(n + 1)] == list(range(n + 1))


def test_bad_arguments_are_one_line_naming_them():
    with pytest.raises(ValueError, match=r"gpu_cache_fraction: expected a fraction of all nodes in \[0, 1\], got 2"):
        own_rows_store(FEATURES, DEGREES, 20, 2, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"degrees: expected one in-degree per row of the part, 6, got shape \(5,\)"):
        own_rows_store(FEATURES, DEGREES[:5], 20, 0.5, torch.device("cpu"))


@pytest.mark.gpu
def test_the_own_rows_cache_returns_rows_on_the_gpu():
    store = own_rows_store(FEATURES, DEGREES, 20, 0.1, torch.device("cuda", 0), pinned=True)
    ids = torch.tensor([5, 1, 2, 3])
    got = store.gather(ids)
    assert got.device.type == "cuda" and torch.equal(got.cpu(), torch.from_numpy(FEATURES)[ids])
