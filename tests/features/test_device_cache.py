"""The GPU feature cache returns the store's rows, serves the highest in-degree nodes and asks the store
for the misses only (on the CPU here; the same code on a GPU in the gpu-marked test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.features.device_cache import DeviceFeatureCache, device_store


class CountingStore:
    """Rows of a dense array; records every gather's ids (the oracle of what the cache asked)."""

    def __init__(self, features: np.ndarray) -> None:
        self.features = torch.from_numpy(features)
        self.feature_dim = features.shape[1]
        self.asked: list[list[int]] = []

    def gather(self, node_ids: torch.Tensor) -> torch.Tensor:
        assert node_ids.device.type == "cpu"
        self.asked.append(node_ids.tolist())
        return self.features.index_select(0, node_ids)


def make_store(num_nodes: int = 50, dim: int = 3) -> CountingStore:
    return CountingStore(np.random.default_rng(0).standard_normal((num_nodes, dim)).astype(np.float32))


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_gather_equals_the_store_and_asks_only_for_misses(fraction):
    store = make_store()
    degrees = np.arange(50)[::-1].copy()  # node 0 is the hottest
    cache = DeviceFeatureCache(store, degrees, fraction, torch.device("cpu"))
    assert cache.cached_ids.tolist() == list(range(int(fraction * 50)))
    ids = torch.tensor([49, 0, 7, 14, 14, 33, 2])
    store.asked.clear()
    got = cache.gather(ids)
    torch.testing.assert_close(got, store.features[ids], rtol=0, atol=0)
    assert store.asked == [[i for i in ids.tolist() if i >= int(fraction * 50)]]
    assert cache.requests == 7 and cache.hits == sum(i < int(fraction * 50) for i in ids.tolist())


def test_fraction_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"gpu_cache_fraction: expected a fraction of all nodes in \[0, 1\]"):
        DeviceFeatureCache(make_store(), np.ones(50), 1.5, torch.device("cpu"))


@pytest.mark.gpu
def test_gpu_cache_serves_host_and_device_ids_alike():
    store = make_store()
    cache = DeviceFeatureCache(store, np.arange(50), 0.5, torch.device("cuda"))
    ids = torch.tensor([49, 0, 7, 14, 33, 2])
    for asked in (ids, ids.cuda()):
        got = cache.gather(asked)
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), store.features[ids], rtol=0, atol=0)


@pytest.mark.parametrize("fraction, sample_on_device, cached", [(0.0, False, False), (0.0, True, True),
                                                                (0.3, False, True), (0.3, True, True)])
def test_device_store_puts_the_cache_in_front_only_where_rows_or_sampling_are_on_the_device(
        fraction, sample_on_device, cached):
    store = make_store()
    got = device_store(store, np.arange(50), fraction, torch.device("cpu"), sample_on_device)
    if not cached:
        assert got is store
        return
    assert isinstance(got, DeviceFeatureCache) and got.store is store
    assert got.num_cached == int(fraction * 50)
