"""The GPU feature cache (``--gpu-cache-fraction``): the hottest feature rows held in device memory, in
front of whichever feature store a layout gathers from (the local rows of one process, or the partitioned
store of a distributed worker).

Which rows: the highest in-degree nodes of the whole graph (ties by lower id), ``fraction`` of all nodes,
as GSplit's GPU cache ranks them (a node's chance of being sampled as a neighbor grows with its in-degree;
the rule is :mod:`gnnscale.features.hot_set`'s). Every worker holds the same hot rows. A gather reads the
hits from device memory and asks the store underneath for the misses only, which it copies to the device
from pinned host memory; with fraction 1 every feature row lives on the device and a gather never leaves
it. The store's collective rounds are kept: a distributed store's gather is called once per batch on
every worker, with the misses only. :func:`device_store` says when a layout puts the cache in front of
its store.

On the CPU (``device="cpu"``) the cache is a copy of the hot rows in host memory, so that its
bookkeeping is tested where there is no GPU; it saves nothing there.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from gnnscale.features.hot_set import check_fraction, hot_nodes

_NO_IDS = torch.empty(0, dtype=torch.int64)


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

    Construction gathers the hot rows through ``store`` (collective where the store is). ``hits`` and
    ``requests`` count the rows served from the device and asked for, since :meth:`reset_counts`.
    """

    def __init__(self, store: RowStore, degrees: np.ndarray, fraction: float, device: torch.device) -> None:
        fraction = check_fraction(fraction, "gpu_cache_fraction")
        degrees = np.asarray(degrees)
        self.store, self.device, self.feature_dim = store, torch.device(device), int(store.feature_dim)
        hot = hot_nodes(degrees, int(fraction * degrees.shape[0]))
        self.cached_ids = torch.from_numpy(hot)
        # The hot rows, gathered once through the store (collective for a distributed one).
        self.rows = store.gather(self.cached_ids).to(self.device)
        # Dense position maps (int32: 4 bytes per node): on the host for ids sampled on the CPU, on the
        # device for ids sampled there, so that neither kind of id crosses over to find its slot.
        position = np.full(degrees.shape[0], -1, dtype=np.int32)
        position[hot] = np.arange(hot.shape[0], dtype=np.int32)
        self._position_host = torch.from_numpy(position)
        self._position_device = self._position_host.to(self.device)
        self.reset_counts()

    @property
    def num_cached(self) -> int:
        return int(self.cached_ids.numel())

    def reset_counts(self) -> None:
        self.hits = 0
        self.requests = 0

    def gather(self, node_ids: Tensor) -> Tensor:
        """float32 [len(node_ids), d] on the device: the rows of ``node_ids`` (on the host or the device),
        in their order; hits from device memory, the rest through the store (called exactly once)."""
        # Compared by type: "cuda" and "cuda:0" name one GPU, but torch.device compares them unequal.
        on_device = node_ids.device.type == self.device.type and self.device.type != "cpu"
        position = (self._position_device if on_device else self._position_host)[node_ids]
        self.requests += int(node_ids.shape[0])
        if self.num_cached == self._position_host.shape[0]:
            # Every row is held here: no hit mask, no sizes to read back (no host sync on a GPU).
            self.store.gather(_NO_IDS)  # still once per batch: a distributed store's gather is collective
            self.hits += int(node_ids.shape[0])
            return self.rows.index_select(0, position.to(self.device, non_blocking=True).long())
        hit = position >= 0
        # The misses' ids on the host, where the store reads: one transfer of ids for device-sampled ones.
        miss_ids = node_ids[~hit].cpu()
        missed = self.store.gather(miss_ids)  # once per batch even when every row hits: it may be collective
        out = torch.empty((node_ids.shape[0], self.feature_dim), dtype=self.rows.dtype, device=self.device)
        hit_device = hit.to(self.device, non_blocking=True)
        out[hit_device] = self.rows.index_select(0, position[hit].to(self.device, non_blocking=True).long())
        out[~hit_device] = to_device(missed, self.device)
        self.hits += int(node_ids.shape[0]) - int(miss_ids.shape[0])
        return out


def to_device(rows: Tensor, device: torch.device) -> Tensor:
    """``rows`` on ``device``: from pinned memory without blocking the host when it is a GPU (the copy is
    ordered on the current stream, before any kernel that later reads it there)."""
    if device.type == "cpu":
        return rows
    return rows.pin_memory().to(device, non_blocking=True)
