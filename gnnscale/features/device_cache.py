"""The GPU feature cache (``--gpu-cache-fraction``): the hottest feature rows held in device memory, in
front of whichever feature store a layout gathers from (the local rows of one process, or the partitioned
store of a distributed worker).

Which rows: the highest in-degree nodes of the whole graph (ties by lower id), ``fraction`` of all nodes,
as GSplit's GPU cache ranks them (a node's chance of being sampled as a neighbor grows with its in-degree;
the rule is :mod:`gnnscale.features.hot_set`'s). Every worker holds the same hot rows. A gather reads the
hits from device memory and asks the store underneath for the misses only, which it copies to the device
from pinned host memory; with fraction 1 every feature row lives on the device and a gather never leaves
it. The store's collective rounds are kept: a distributed store's gather is called once per batch on
every worker, with the misses only. Per batch, the host waits once, for ids sampled on the device: to
read how many of them missed, with their ids. :func:`device_store` says when a layout puts the cache in
front of its store.

On the CPU (``device="cpu"``) the cache is a copy of the hot rows in host memory, so that its
bookkeeping is tested where there is no GPU; it saves nothing there.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from gnnscale.devices import StagedUpload, host_copies
from gnnscale.features.hot_set import check_fraction, hot_nodes

_NO_IDS = torch.empty(0, dtype=torch.int64)
# The hot rows travel to the device in chunks of this many bytes (a pinned host chunk at a time).
HOT_CHUNK_BYTES = 1 << 26


class RowStore(Protocol):
    """What the cache needs of a feature store: float32 rows of global node ids, in the order asked."""

    feature_dim: int

    def gather(self, node_ids: Tensor) -> Tensor: ...


def device_store(store: RowStore, degrees: np.ndarray, fraction: float, device: torch.device,
                 sample_on_device: bool) -> RowStore:
    """``store``, or in front of it the device's feature cache: when rows are held there (``fraction`` > 0)
    or the sampler runs there (``sample_on_device``: its ids are gathered through the cache, which asks
    ``store`` for the rows it does not hold).

    Args:
        store: the store underneath.
        degrees: int [num_nodes], every node's in-degree in the whole graph.
        fraction: share of all nodes whose rows the device holds (``--gpu-cache-fraction``), in [0, 1].
        device: the training device.
        sample_on_device: whether the training sampler runs on ``device``.
    """
    if fraction == 0 and not sample_on_device:
        return store
    return DeviceFeatureCache(store, degrees, fraction, device)


class DeviceFeatureCache:
    """A feature store whose hottest ``fraction`` of rows is held on ``device``; ``gather`` returns rows on
    ``device``.

    Args:
        store: the store underneath (its ``gather`` may be collective: the cache is built, and gathers,
            on every worker alike).
        degrees: int [num_nodes], every node's in-degree in the whole graph (the same on every worker).
        fraction: share of all nodes whose rows the device holds, in [0, 1].
        device: where rows are returned and the hot rows kept.

    Construction gathers the hot rows through ``store`` (collective where the store is), in chunks of
    :data:`HOT_CHUNK_BYTES`. ``hits`` and ``requests`` count the rows served from the device and asked for,
    since :meth:`reset_counts`.
    """

    def __init__(self, store: RowStore, degrees: np.ndarray, fraction: float, device: torch.device) -> None:
        fraction = check_fraction(fraction, "gpu_cache_fraction")
        degrees = np.asarray(degrees)
        self.store, self.device, self.feature_dim = store, torch.device(device), int(store.feature_dim)
        hot = hot_nodes(degrees, int(fraction * degrees.shape[0]))
        self.cached_ids = torch.from_numpy(hot)
        self.num_nodes = int(degrees.shape[0])
        self.rows = hot_rows(store, self.cached_ids, self.device)
        # Dense position maps (int32: 4 bytes per node): on the host for ids sampled on the CPU, on the
        # device for ids sampled there, so that neither kind of id crosses over to find its slot.
        position = np.full(degrees.shape[0], -1, dtype=np.int32)
        position[hot] = np.arange(hot.shape[0], dtype=np.int32)
        self._position_host = torch.from_numpy(position)
        self._position_device = self._position_host.to(self.device)
        # What a gather sends to the device, each through a pinned buffer of its own (host ids' positions, the
        # misses' slots, their rows).
        self._send_positions, self._send_slots, self._send_rows = (StagedUpload(self.device) for _ in range(3))
        self.reset_counts()

    @property
    def num_cached(self) -> int:
        return int(self.cached_ids.numel())

    def reset_counts(self) -> None:
        self.hits = 0
        self.requests = 0

    def gather(self, node_ids: Tensor) -> Tensor:
        """float32 [len(node_ids), d] on the device: the rows of ``node_ids`` (on the host or the device),
        in their order; hits from device memory, the rest through the store (called exactly once).

        The misses are found where the ids are, and only their count and ids come to the host: one wait for
        ids on the device, none for ids on the host. The hits are gathered for every id (a miss reads row 0),
        then the misses' rows, copied from pinned memory, overwrite their slots."""
        n = int(node_ids.shape[0])
        self.requests += n
        # Compared by type: "cuda" and "cuda:0" name one GPU, but torch.device compares them unequal.
        on_device = node_ids.device.type == self.device.type
        position = (self._position_device if on_device else self._position_host).index_select(0, node_ids)
        if self.num_cached == self.num_nodes or n == 0:
            # Every row is held here (or none is asked): no misses to find, no sizes to read back.
            self.store.gather(_NO_IDS)  # still once per batch: a distributed store's gather is collective
            self.hits += n
            return self.rows.index_select(0, self._send_positions(position))
        count_and_ids, slots = misses_first(node_ids, position)
        count_and_ids = host_copies([count_and_ids])[0]  # host sync for device ids: their misses' count and ids
        count = int(count_and_ids[0])  # read on the host, from the copy
        missed = self.store.gather(count_and_ids[1:1 + count])  # once per batch, even with no miss: maybe collective
        if self.num_cached:
            out = self.rows.index_select(0, self._send_positions(position.clamp(min=0)))
        else:  # nothing held (the device sampler's ids, gathered through the cache): every row is a miss
            out = torch.empty((n, self.feature_dim), dtype=self.rows.dtype, device=self.device)
        if count:
            out.index_copy_(0, self._send_slots(slots[:count]), self._send_rows(missed))
        self.hits += n - count
        return out


def misses_first(node_ids: Tensor, position: Tensor) -> tuple[Tensor, Tensor]:
    """Where ``node_ids`` lie, without reading a size back: ``count_and_ids`` int64 [1 + n], the number of
    misses (``position`` < 0) then their ids in order (zeros after them), and ``slots`` int64 [n + 1], where in
    ``node_ids`` each miss sits (in order; zeros after them, and the last entry a spare)."""
    n = node_ids.shape[0]
    miss = position < 0
    rank = torch.cumsum(miss, 0)  # a miss's rank among the misses, from 1
    # Every miss to its rank's slot, every hit to the spare one at the end.
    slot = torch.where(miss, rank - 1, n)
    slots = torch.zeros(n + 1, dtype=torch.int64, device=node_ids.device)
    slots.scatter_(0, slot, torch.arange(n, device=node_ids.device))
    ids = node_ids.to(torch.int64).index_select(0, slots[:n])
    return torch.cat([rank[-1:], ids]), slots


def hot_rows(store: RowStore, ids: Tensor, device: torch.device) -> Tensor:
    """float32 [len(ids), d] on ``device``: the rows of ``ids``, gathered through ``store`` and copied over in
    chunks of :data:`HOT_CHUNK_BYTES`, so that the host holds one chunk at a time (a pinned gather of the whole
    hot set would keep its size, rounded up to a power of two, in torch's pinned-memory cache for the run).
    Calls ``store.gather`` ``max(1, ceil(len(ids) / chunk))`` times: the same on every worker, which hold the
    same hot set, as a collective store needs."""
    rows = torch.empty((ids.shape[0], int(store.feature_dim)), dtype=torch.float32, device=device)
    chunk = max(1, HOT_CHUNK_BYTES // (4 * max(1, int(store.feature_dim))))
    for lo in range(0, max(1, ids.shape[0]), chunk):
        rows[lo:lo + chunk].copy_(store.gather(ids[lo:lo + chunk]))
    return rows
