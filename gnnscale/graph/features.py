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


def gather_rows(features: np.ndarray, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``features[ids]`` as a new C-contiguous array, or written into ``out``.

    Args:
        features: [num_nodes, dim] array (possibly memory-mapped). C-contiguous float32 or float64
            go through the kernel; anything else through numpy's fancy indexing.
        ids: int64 [n] row ids in [0, num_nodes) (checked).
        out: a C-contiguous [n, dim] array of ``features``' dtype to write into (pinned host memory, so that
            the rows go to a GPU without another host copy); None: a new array.

    Returns: [n, dim] array of ``features``' dtype (``out`` when given).
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D array of row ids, got shape {ids.shape}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= features.shape[0]):
        raise ValueError(f"ids: row ids must lie in [0, {features.shape[0]})")
    if out is not None and (out.shape != (ids.shape[0], features.shape[1]) or out.dtype != features.dtype
                            or not out.flags.c_contiguous):
        raise ValueError(f"out: expected a C-contiguous {features.dtype} array of shape {(ids.shape[0], features.shape[1])}, "
                         f"got {out.dtype} {out.shape}")
    if features.ndim != 2 or features.dtype not in (np.float32, np.float64) or not features.flags.c_contiguous:
        rows = np.ascontiguousarray(features[ids])
        if out is None:
            return rows
        out[...] = rows
        return out
    if out is None:
        out = np.empty((ids.shape[0], features.shape[1]), dtype=features.dtype)
    _gather(features, ids, out)
    return out


# Unsigned words a row can be copied as, widest first: one compiled kernel per word size serves
# every fixed-size dtype (bool masks, int labels, float16/32/64 features ...).
_WORDS = (np.uint64, np.uint32, np.uint16, np.uint8)


def take_rows(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``values[ids]`` (along axis 0) as a new C-contiguous array, for any C-contiguous array of a
    numeric or bool dtype and any number of dimensions, through the gather kernel.

    Each row is copied bit for bit as unsigned words of the widest size that divides it (a float32
    row of 100 features as 50 uint64 words, a bool mask entry as one byte), so the result equals
    numpy's fancy indexing exactly. Other arrays (non-contiguous, object dtypes) go through numpy.

    Args:
        values: [num_rows, ...] array (possibly memory-mapped or read-only).
        ids: int64 [n] row ids in [0, num_rows) (checked).

    Returns: [n, ...] array of ``values``' dtype.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D array of row ids, got shape {ids.shape}")
    if values.ndim == 0:
        raise ValueError("values: expected an array with at least one dimension, got a scalar")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= values.shape[0]):
        raise ValueError(f"ids: row ids must lie in [0, {values.shape[0]})")
    row_bytes = values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64))
    if values.dtype.kind not in "biufc" or not values.flags.c_contiguous or row_bytes == 0 or values.shape[0] == 0:
        return np.ascontiguousarray(values[ids])
    word = next(w for w in _WORDS if row_bytes % np.dtype(w).itemsize == 0)
    words = values.reshape(values.shape[0], -1).view(word)  # [num_rows, words per row], no copy
    out = np.empty((ids.shape[0], words.shape[1]), dtype=word)
    _gather(words, ids, out)
    return out.view(values.dtype).reshape((ids.shape[0],) + values.shape[1:])


@numba.njit(inline="always")
def _prefetch_row(flat, first, width, words_per_line):
    """Every cache line of the row of ``width`` words starting at ``flat[first]``."""
    for w in range(0, width, words_per_line):
        prefetch(flat, first + w)


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather_columns(values, ids, cols, out):
    n, width = ids.shape[0], values.shape[1]
    flat = values.reshape(values.shape[0] * width)
    words_per_line = max(1, 64 // values.itemsize)
    for piece in numba.prange((n + ROWS_PER_PIECE - 1) // ROWS_PER_PIECE):
        hi = min((piece + 1) * ROWS_PER_PIECE, n)
        for k in range(piece * ROWS_PER_PIECE, hi):
            # The whole row ahead, not just its first line: the kept columns are spread over all of it.
            if k + ROWS_AHEAD < hi:
                _prefetch_row(flat, ids[k + ROWS_AHEAD] * width, width, words_per_line)
            src = values[ids[k]]
            row = out[k]
            for j in range(cols.shape[0]):
                row[j] = src[cols[j]]


def take_columns(values: np.ndarray, ids: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``values[ids][:, cols]`` in one pass, without the [len(ids), d] intermediate: the columns DGS's
    feature sampling sends of the rows it was asked for.

    Args:
        values: [num_rows, d] C-contiguous array of a numeric dtype (possibly memory-mapped or
            read-only); copied bit for bit, as unsigned words of its item size.
        ids: int64 [n] row ids in [0, num_rows) (checked).
        cols: int64 [k] column ids in [0, d) (checked), in the order wanted.

    Returns: [n, k] array of ``values``' dtype.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    cols = np.ascontiguousarray(cols, dtype=np.int64)
    if values.ndim != 2 or values.dtype.kind not in "biuf" or not values.flags.c_contiguous:
        raise ValueError(f"values: expected a C-contiguous 2-D numeric array, got {values.dtype} of shape "
                         f"{values.shape}")
    for name, arr, bound in (("ids", ids, values.shape[0]), ("cols", cols, values.shape[1])):
        if arr.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= bound):
            raise ValueError(f"{name}: expected ids in [0, {bound})")
    word = np.dtype(f"u{values.dtype.itemsize}")
    out = np.empty((ids.shape[0], cols.shape[0]), dtype=word)
    if cols.size:
        _gather_columns(values.view(word), ids, cols, out)
    return out.view(values.dtype)
