"""A worker's own feature rows, for split parallelism: each worker computes layer 0 for the vertices it owns
only (GSplit, section 3.2), so it reads its own part and nothing else, with the hottest of its rows held on
the training device (``--gpu-cache-fraction``).

This is GSplit's cache (section 4, "Partitioning and caching policy"): every GPU caches the highest degree
vertices of its own partition. Because the online split gives each layer-0 vertex to its owner, a row is
read by exactly one worker, so the per-worker caches never overlap and together form one distributed cache
of P times a worker's budget; a row no worker caches is copied from host memory to its owner's GPU only
(a data-parallel worker, which reads every row its micro-batch touches, would copy it to several). The
budget is a share of all nodes, as for every other cache: with P workers, ``1 / P`` holds every row of
balanced parts on the GPUs, GSplit's "full caching" at 25% on 4 GPUs. No row ever crosses between
workers, cached or not.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gnnscale.features.device_cache import DeviceFeatureCache, RowStore
from gnnscale.features.hot_set import check_fraction
from gnnscale.features.local import LocalFeatureStore


def own_rows_store(features: np.ndarray, degrees: np.ndarray, num_nodes: int, fraction: float,
                   device: torch.device, *, pinned: bool = False) -> RowStore:
    """The store a split worker reads its layer-0 rows from, by LOCAL row id (global id - the part's offset).

    Args:
        features: [n_p, d], this worker's part of the features (float32, float16 or bfloat16 bits).
        degrees: int [n_p], the in-degree of each of its nodes in the whole graph (the cache's order).
        num_nodes: nodes of the whole graph: ``fraction`` is a share of them.
        fraction: ``--gpu-cache-fraction``, in [0, 1]: this worker's device holds the rows of its
            ``min(n_p, fraction x num_nodes)`` highest in-degree nodes (ties by lower id); 0: no cache.
        device: the training device (on the CPU the "cache" is a second host copy: how it is tested).
        pinned: gather host rows into pinned memory (training on a GPU: the copy stage sends them as they are).

    Returns:
        The local rows, or a :class:`~gnnscale.features.device_cache.DeviceFeatureCache` in front of them whose
        ``gather`` returns rows on ``device``.
    """
    fraction = check_fraction(fraction, "gpu_cache_fraction")
    degrees = np.asarray(degrees)
    if degrees.shape != (features.shape[0],):
        raise ValueError(f"degrees: expected one in-degree per row of the part, {features.shape[0]}, got shape "
                         f"{degrees.shape}")
    store = LocalFeatureStore(features, pinned=pinned)
    if fraction == 0 or features.shape[0] == 0:
        return store
    rows = min(int(fraction * num_nodes), features.shape[0])
    return DeviceFeatureCache(store, degrees, share_of(rows, features.shape[0]), device)


def share_of(rows: int, n: int) -> float:
    """The share ``f`` of ``n`` rows with ``int(f * n) == rows`` (how the device cache counts its rows):
    ``rows / n``, raised by the ulp that ``(rows / n) * n`` may fall short of ``rows`` (e.g. 0.29 x 100)."""
    share = rows / n
    while int(share * n) < rows:
        share = math.nextafter(share, math.inf)
    return share
