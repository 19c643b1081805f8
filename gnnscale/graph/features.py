"""Gathering feature rows: the input features of a mini-batch's source nodes.

A batch reads a few hundred thousand rows at random from a feature matrix that is larger than the
caches (in memory or memory-mapped). :func:`gather_rows` copies them with a numba kernel that
prefetches rows ahead, releases the GIL (the background loading stage gathers while the training
thread computes) and runs on the calling thread's numba thread count.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.intrinsics import prefetch

ROWS_AHEAD = 8  # rows prefetched ahead of the one being copied
ROWS_PER_PIECE = 1024  # rows per unit of parallel work


@numba.njit(cache=True, nogil=True)
def _copy_rows(features, ids, lo, hi, out):
    width = features.shape[1]
    flat = features.reshape(features.shape[0] * width)
    for k in range(lo, hi):
        if k + ROWS_AHEAD < hi:
            prefetch(flat, ids[k + ROWS_AHEAD] * width)
        row = out[k]
        src = features[ids[k]]
        for f in range(width):
            row[f] = src[f]


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather(features, ids, out):
    n = ids.shape[0]
    for piece in numba.prange((n + ROWS_PER_PIECE - 1) // ROWS_PER_PIECE):
        lo = piece * ROWS_PER_PIECE
        _copy_rows(features, ids, lo, min(lo + ROWS_PER_PIECE, n), out)


def gather_rows(features: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``features[ids]`` as a new C-contiguous array.

    Args:
        features: [num_nodes, dim] array (possibly memory-mapped). C-contiguous float32 or float64
            go through the kernel; anything else through numpy's fancy indexing.
        ids: int64 [n] row ids in [0, num_nodes) (checked).

    Returns: [n, dim] array of ``features``' dtype.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D array of row ids, got shape {ids.shape}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= features.shape[0]):
        raise ValueError(f"ids: row ids must lie in [0, {features.shape[0]})")
    if features.ndim != 2 or features.dtype not in (np.float32, np.float64) or not features.flags.c_contiguous:
        return np.ascontiguousarray(features[ids])
    out = np.empty((ids.shape[0], features.shape[1]), dtype=features.dtype)
    _gather(features, ids, out)
    return out
