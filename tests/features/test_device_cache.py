"""The GPU feature cache returns the store's rows, serves the highest in-degree nodes and asks the store
for the misses only (on the CPU here; the same code on a GPU in the gpu-marked test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.devices import StagedUpload
from gnnscale.features import device_cache
from gnnscale.features.device_cache import DeviceFeatureCache, device_store
from host_syncs import HostSyncs


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


# Nodes 0 .. 14 are held (fraction 0.3 of 50, node 0 the hottest); every pattern of ids a batch may bring.
ID_PATTERNS = {
    "hits and misses": [49, 0, 7, 14, 15, 33, 2],
    "repeats": [3, 40, 3, 40, 40, 0],
    "all hit": [14, 0, 5, 5],
    "none hit": [15, 49, 20, 15],
    "one": [30],
    "none": [],
}


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("pattern", ID_PATTERNS, ids=str)
def test_gather_equals_the_store_for_every_pattern_of_ids(fraction, pattern):
    store = make_store()
    cache = DeviceFeatureCache(store, np.arange(50)[::-1].copy(), fraction, torch.device("cpu"))
    ids = torch.tensor(ID_PATTERNS[pattern], dtype=torch.int64)
    held = int(fraction * 50)
    for _ in range(2):  # a second batch through the same buffers
        store.asked.clear()
        got = cache.gather(ids)
        assert got.shape == (len(ids), 3) and got.dtype == torch.float32
        assert torch.equal(got, store.features[ids])
        assert store.asked == [[i for i in ids.tolist() if i >= held]]
    assert cache.requests == 2 * len(ids) and cache.hits == 2 * sum(i < held for i in ids.tolist())


@pytest.mark.parametrize(("fraction", "expected"), [(0.3, {"read": 1}), (0.0, {"read": 1}), (1.0, {})])
def test_a_gather_reads_back_only_its_misses_count(fraction, expected):
    """What a gather costs a GPU in host round trips, counted on the CPU (tests/host_syncs.py): the misses' count
    (with their ids, in one copy) and nothing else: no bool-mask indexing, whose size the host must wait for.
    Every row held: nothing at all. (Before: five per gather, four bool masks and a copy of the misses' ids.)"""
    store = make_store()
    store.gather = lambda node_ids: store.features.index_select(0, node_ids)  # reads nothing back itself
    cache = DeviceFeatureCache(store, np.arange(50)[::-1].copy(), fraction, torch.device("cpu"))
    ids = torch.tensor(ID_PATTERNS["hits and misses"])
    with HostSyncs() as syncs:
        cache.gather(ids)
    assert dict(syncs.counts) == expected


def test_the_hot_rows_travel_in_chunks_of_bounded_bytes(monkeypatch):
    """The hot rows reach the device a chunk at a time (a pinned host gather of the whole hot set would stay in
    torch's pinned-memory cache for the run): 15 rows of 3 floats in chunks of 4 rows, in order."""
    monkeypatch.setattr(device_cache, "HOT_CHUNK_BYTES", 4 * 3 * 4)
    store = make_store()
    cache = DeviceFeatureCache(store, np.arange(50)[::-1].copy(), 0.3, torch.device("cpu"))
    assert store.asked == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14]]
    assert torch.equal(cache.rows, store.features[:15])
    empty = DeviceFeatureCache(store, np.arange(50), 0.0, torch.device("cpu"))
    assert store.asked[-1] == [] and empty.rows.shape == (0, 3)  # still one gather: the store's may be collective


def test_staged_uploads_on_the_cpu_send_nothing():
    t = torch.arange(6.0)
    assert StagedUpload(torch.device("cpu"))(t) is t


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


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ID_PATTERNS, ids=str)
def test_gpu_cache_gathers_every_pattern_with_at_most_one_wait_per_batch(pattern):
    """ids sampled on the GPU: the rows are the store's; torch's sync debug mode sees at most the one wait for the
    misses' count and ids, and the staging buffer's wait for the previous batch's copy (long done)."""
    import warnings

    store = make_store()
    cache = DeviceFeatureCache(store, np.arange(50)[::-1].copy(), 0.3, torch.device("cuda"))
    ids = torch.tensor(ID_PATTERNS[pattern], dtype=torch.int64)
    for batch in range(3):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = cache.gather(ids.cuda())
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert len([w for w in caught if "synchroniz" in str(w.message)]) <= 2
        assert got.is_cuda and torch.equal(got.cpu(), store.features[ids])


@pytest.mark.gpu
def test_staged_uploads_reuse_one_pinned_buffer_and_send_the_values():
    send = StagedUpload(torch.device("cuda"))
    sizes = [1000, 10, 700, 1000, 3]
    for i, n in enumerate(sizes):
        t = torch.arange(n, dtype=torch.float32) + i
        assert torch.equal(send(t).cpu(), t)
    assert send._buffer.numel() == 4000 and send._buffer.is_pinned()
    pinned = torch.ones(5).pin_memory()
    assert torch.equal(send(pinned).cpu(), pinned)


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
