"""The feature cache (gnnscale/features/host_cache.py) on real processes: the highest-degree remote
rows, filled in one round, rows identical to the uncached store's, exactly 2 feature rounds per fetch,
fewer bytes, hits counted. Run inside the spawned workers of tests/distributed/test_split_distributed.py (spawning
costs seconds, so the distributed checks share one process group)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dist_workers import make_book, make_features, make_graph
from gnnscale.distributed import Comm
from gnnscale.features.host_cache import CachedFeatureStore, cached_nodes, global_in_degrees
from gnnscale.features.partitioned import PartitionedFeatureStore

FRACTION = 0.1  # 50 of the 500 nodes' rows per worker


def check_cache(comm: Comm) -> int:
    """All checks on this worker; returns how many rows it cached."""
    rank, world_size = comm.rank, comm.world_size
    comm.stats.snapshot_and_reset()
    graph, book, x = make_graph(), make_book(world_size), make_features()
    lo, hi = book.node_range(rank)
    degrees = np.diff(graph.indptr)
    # The vanilla layout's way to every node's in-degree: each worker knows its own part's.
    assert np.array_equal(global_in_degrees(degrees[lo:hi], book, comm), degrees)
    plain = PartitionedFeatureStore(book, rank, x[lo:hi], comm)
    comm.stats.snapshot_and_reset()
    cached = CachedFeatureStore(book, rank, x[lo:hi], comm, degrees=degrees, fraction=FRACTION)
    setup = comm.stats.snapshot_and_reset()["setup"]
    assert setup["rounds"] == 2  # the store's width check, then the one round that fills every cache
    _check_choice(cached, degrees, lo, hi, book)
    assert torch.equal(cached.cached_rows, torch.from_numpy(x[cached.cached_ids.numpy()]))
    rng = np.random.default_rng(rank)
    totals = {"plain": 0, "cached": 0}
    for ids in (rng.integers(0, graph.num_nodes, 300), cached.cached_ids.numpy(), np.arange(lo, hi),
                np.zeros(0, dtype=np.int64)):
        ids = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
        cached.reset_counts()
        for name, store in (("plain", plain), ("cached", cached)):
            got = store.gather(ids)
            counts = comm.stats.snapshot_and_reset()["feature"]
            assert torch.equal(got, torch.from_numpy(x[ids.numpy()]))
            assert counts["rounds"] == 2, (name, counts)  # exactly 2, whatever the cache serves
            totals[name] += counts["bytes_received"]
        remote = (ids < lo) | (ids >= hi)
        assert cached.remote_requests == int(remote.sum())
        assert cached.hits == int(np.isin(ids.numpy(), cached.cached_ids.numpy()).sum())
    assert totals["cached"] < totals["plain"]
    _check_errors(book, rank, x[lo:hi], comm, degrees)
    return cached.num_cached


def _check_choice(cached: CachedFeatureStore, degrees: np.ndarray, lo: int, hi: int, book) -> None:
    """The cache holds the highest-degree remote nodes, ties by lower id, the same choice on every worker."""
    ids = cached.cached_ids.numpy()
    assert ids.shape[0] == int(FRACTION * book.num_nodes) and np.all(np.diff(ids) > 0)
    assert not np.any((ids >= lo) & (ids < hi))
    remote = np.setdiff1d(np.concatenate([np.arange(0, lo), np.arange(hi, book.num_nodes)]), ids)
    weakest = min(ids, key=lambda v: (degrees[v], -v))
    assert all((degrees[v], -v) < (degrees[weakest], -weakest) for v in remote)
    assert np.array_equal(cached_nodes(degrees, book, ids.shape[0])[cached.rank], ids)


def _check_errors(book, rank, local, comm, degrees) -> None:
    for fraction in (1.5, -0.1, True):
        with pytest.raises(ValueError, match=r"cache_fraction: expected a fraction of all nodes in \[0, 1\], got "):
            CachedFeatureStore(book, rank, local, comm, degrees=degrees, fraction=fraction)
    with pytest.raises(ValueError, match=r"degrees: expected one in-degree per node of the book's graph, got shape \[3\]"):
        CachedFeatureStore(book, rank, local, comm, degrees=degrees[:3], fraction=0.1)
    assert comm.stats.snapshot_and_reset()["setup"]["rounds"] == 0  # rejected before any collective
