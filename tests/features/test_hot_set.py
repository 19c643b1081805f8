"""Which rows the caches hold (highest in-degree, ties towards the lower id) and the one fraction check,
against rankings written by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.features.device_cache import DeviceFeatureCache
from gnnscale.features.host_cache import CachedFeatureStore, cached_nodes
from gnnscale.features.hot_set import check_fraction, hot_nodes, hot_set, in_degree_order
from gnnscale.partition.book import PartitionBook
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.data_parallel import CacheOptions

# Four nodes tie at degree 5, so any cut inside them is decided by the tie rule:
#
#     id       0  1  2  3  4  5
#     degree   3  5  5  5  1  5
#
#     ranking  1 2 3 5 | 0 | 4     (ties towards the lower id; towards the higher: 5 3 2 1 | 0 | 4)
#
# Three workers own two ids each: [0, 2) | [2, 4) | [4, 6).
TIED = np.array([3, 5, 5, 5, 1, 5])
THREE_WORKERS = PartitionBook(offsets=np.array([0, 2, 4, 6], dtype=np.int64))


def test_in_degree_order_breaks_ties_towards_the_lower_id():
    assert in_degree_order(TIED).tolist() == [1, 2, 3, 5, 0, 4]


@pytest.mark.parametrize("num_rows, expected", [
    (1, [1]),              # higher-id ties would give [5]
    (2, [1, 2]),           # [3, 5]
    (3, [1, 2, 3]),        # [2, 3, 5]
    (4, [1, 2, 3, 5]),     # the whole tie: the same either way
    (5, [0, 1, 2, 3, 5]),
    (9, [0, 1, 2, 3, 4, 5]),
    (0, []),
])
def test_hot_nodes_with_ties_at_the_cut_off(num_rows, expected):
    got = hot_nodes(TIED, num_rows)
    assert got.dtype == np.int64 and got.tolist() == expected


# Per worker, its own ids skipped (the ranking without them, then the cut):
#   worker 0 skips 0 1:  2 3 5 | 4      worker 1 skips 2 3:  1 5 | 0 | 4      worker 2 skips 4 5:  1 2 3 | 0
@pytest.mark.parametrize("num_rows, expected", [
    (1, [[2], [1], [1]]),                 # higher-id ties: [[5], [5], [3]]
    (2, [[2, 3], [1, 5], [1, 2]]),        # [[3, 5], [1, 5], [2, 3]]
    (3, [[2, 3, 5], [0, 1, 5], [1, 2, 3]]),
    (9, [[2, 3, 4, 5], [0, 1, 4, 5], [0, 1, 2, 3]]),  # fewer when fewer are remote
])
def test_each_worker_caches_the_hottest_remote_rows_with_ties_at_the_cut_off(num_rows, expected):
    got = cached_nodes(TIED, THREE_WORKERS, num_rows)
    assert [ids.tolist() for ids in got] == expected
    assert all(ids.dtype == np.int64 for ids in got)
    order = in_degree_order(TIED)
    assert [hot_set(order, num_rows, skip=THREE_WORKERS.node_range(q)).tolist() for q in range(3)] == expected


def test_hot_nodes_rank_by_in_degree_then_id():
    degrees = np.array([1, 5, 5, 0, 7, 2])
    assert hot_nodes(degrees, 3).tolist() == [1, 2, 4]
    assert hot_nodes(degrees, 0).tolist() == []
    assert hot_nodes(degrees, 10).tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("value", [0, 0.25, 1, 1.0])
def test_a_fraction_in_the_unit_interval_is_taken_as_a_float(value):
    got = check_fraction(value, "cache_fraction")
    assert type(got) is float and got == value


@pytest.mark.parametrize("name", ["cache_fraction", "gpu_cache_fraction"])
@pytest.mark.parametrize("value, shown", [(1.5, "1.5"), (-0.1, "-0.1"), (True, "True"), ("0.5", "'0.5'"),
                                          (None, "None"), (float("nan"), "nan")])
def test_a_bad_fraction_is_refused_naming_its_setting(name, value, shown):
    with pytest.raises(ValueError, match=rf"^{name}: expected a fraction of all nodes in \[0, 1\], got {shown}$"):
        check_fraction(value, name)


class _Rows:
    feature_dim = 1

    def gather(self, node_ids):
        return torch.zeros(node_ids.shape[0], 1)


@pytest.mark.parametrize("name, build", [
    ("cache_fraction", lambda: CacheOptions(cache_fraction=1.5)),
    ("cache_fraction", lambda: CachedFeatureStore(THREE_WORKERS, 0, np.zeros((2, 1), np.float32), None,
                                                  degrees=TIED, fraction=1.5)),
    ("gpu_cache_fraction", lambda: TrainConfig(gpu_cache_fraction=1.5)),
    ("gpu_cache_fraction", lambda: DeviceFeatureCache(_Rows(), TIED, 1.5, torch.device("cpu"))),
], ids=["CacheOptions", "CachedFeatureStore", "TrainConfig", "DeviceFeatureCache"])
def test_every_cache_setting_is_checked_by_the_one_check(name, build):
    # The host cache checks before its first collective, so no Comm is needed to see it refuse.
    with pytest.raises(ValueError, match=rf"^{name}: expected a fraction of all nodes in \[0, 1\], got 1.5$"):
        build()
