"""Arrays and graphs larger than memory, written piece by piece.

* :class:`NpyWriter` writes a ``.npy`` file sequentially, one piece at a time, byte for byte what
  ``np.save`` writes for the whole array. Plain writes rather than a writable memory map: the pages of
  a mapped file count in the writer's resident size until the kernel writes them back, pages written
  with ``write(2)`` only in the page cache, which the kernel drops at will.
* :class:`EdgeBuckets` builds CSC from a stream of directed edges by an external bucket sort by
  destination range: each batch of edges is appended to one temporary file per destination range;
  then each range is read back alone, sorted by (destination, source), deduplicated, and appended to
  the CSC files. Memory: one batch or one range of edges, never the edge count.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import _drop_repeats, index_dtype

# Keys are dst * num_nodes + src in an int64: node counts up to floor(sqrt(2**63 - 1)).
MAX_KEYED_NODES = 3_037_000_499


class NpyWriter:
    """A ``.npy`` file written in pieces along its first axis.

    Args:
        path: the file (created or truncated).
        dtype: the array's dtype.
        shape: the array's shape; ``shape[0] = None`` when the length is known only at the end: the
            header is then rewritten on :meth:`close` (numpy pads every header so that its first
            dimension can grow in place, so the header keeps its length).

    :meth:`close` checks that the pieces filled ``shape`` and makes the file durable (fsync).
    """

    def __init__(self, path: str | Path, dtype, shape: tuple) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.rows = 0
        self._file = open(self.path, "wb")
        self._header_bytes = self._file.write(self._header(self.shape[0] or 0))

    def _header(self, rows: int) -> bytes:
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                   "fortran_order": False, "shape": (rows, *self.shape[1:])})
        return buf.getvalue()

    def write(self, piece: np.ndarray) -> None:
        piece = np.ascontiguousarray(piece, dtype=self.dtype)
        if piece.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path}: expected pieces of shape [rows, {list(self.shape[1:])}], got {piece.shape}")
        self._file.write(memoryview(piece).cast("B"))
        self.rows += piece.shape[0]

    def close(self) -> int:
        """Finish the file; returns its number of rows."""
        try:
            if self.shape[0] is None:
                header = self._header(self.rows)
                if len(header) != self._header_bytes:  # the header was sized for growth when the file opened
                    raise RuntimeError(f"{self.path}: numpy no longer pads .npy headers for growth "
                                       f"({len(header)} bytes, {self._header_bytes} reserved)")
                self._file.seek(0)
                self._file.write(header)
            elif self.rows != self.shape[0]:
                raise ValueError(f"{self.path}: expected {self.shape[0]} rows, {self.rows} were written")
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()
        return self.rows

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._file.close()  # the caller's staging folder goes, and the file with it


def bucket_bounds(expected_in_edges: np.ndarray, per_bucket: int) -> np.ndarray:
    """int64 [k + 1]: destination ranges ``[b[i], b[i + 1])`` from 0 to num_nodes, each expected to
    receive fewer than ``per_bucket`` edges plus those of its first node (a node that alone expects
    more than ``per_bucket`` shares its range with light nodes only).

    Args:
        expected_in_edges: float or int [num_nodes], in-edges expected (or counted) per node.
        per_bucket: int >= 1.
    """
    n = expected_in_edges.shape[0]
    cum = np.cumsum(expected_in_edges, dtype=np.float64)
    total = float(cum[-1]) if n else 0.0
    marks = np.arange(1, int(total // per_bucket) + 1, dtype=np.float64) * per_bucket
    # A bucket ends after the last node whose running total stays within the mark.
    inner = np.searchsorted(cum, marks, side="right")
    bounds = np.unique(np.concatenate([[0], inner, [n]]).astype(np.int64))
    return bounds


class EdgeBuckets:
    """Directed edges gathered in temporary files by destination range, read back as CSC.

    Args:
        folder: where the bucket files go (created; empty once :meth:`write_csc` has run). Put it on
            the disk of the output: it holds 8 bytes per edge added until the CSC is written.
        bounds: int64 [k + 1], destination ranges from 0 to num_nodes (:func:`bucket_bounds`).
        num_nodes: node count, at most :data:`MAX_KEYED_NODES`.
    """

    def __init__(self, folder: Path, bounds: np.ndarray, num_nodes: int) -> None:
        if num_nodes > MAX_KEYED_NODES:
            raise ValueError(f"num_nodes: edge keys dst * num_nodes + src need num_nodes <= {MAX_KEYED_NODES}, "
                             f"got {num_nodes}")
        if bounds[0] != 0 or bounds[-1] != num_nodes or np.any(np.diff(bounds) <= 0):
            raise ValueError(f"bounds: expected increasing ranges from 0 to {num_nodes}")
        self.folder = Path(folder)
        self.folder.mkdir()
        self.bounds = bounds
        self.num_nodes = num_nodes
        self.edges_added = 0

    def _path(self, bucket: int) -> Path:
        return self.folder / f"{bucket}.bin"

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Append the edges ``src[i] -> dst[i]`` (int arrays of node ids) to their buckets."""
        self.edges_added += src.shape[0]
        keys = dst.astype(np.int64) * self.num_nodes
        keys += src
        # Sorted keys are grouped by destination, hence by bucket; repeats in one batch go early.
        keys.sort()
        keys = _drop_repeats(keys)
        cuts = np.searchsorted(keys, self.bounds * self.num_nodes)
        for bucket in np.flatnonzero(np.diff(cuts)):
            with open(self._path(int(bucket)), "ab") as f:
                f.write(memoryview(keys[cuts[bucket]:cuts[bucket + 1]]).cast("B"))

    def write_csc(self, indptr: NpyWriter, indices: NpyWriter,
                  progress: Callable[[int, int], None] | None = None) -> int:
        """Append the CSC of every bucket, in destination order, to ``indptr`` (int64 [num_nodes + 1])
        and ``indices`` (node ids): in-edges sorted by source, repeats dropped. Each bucket file is
        removed once read; ``progress(done, total)`` is called after each bucket. Returns the edge count."""
        n = self.num_nodes
        written = 0
        indptr.write(np.zeros(1, dtype=np.int64))
        for bucket in range(self.bounds.shape[0] - 1):
            lo, hi = int(self.bounds[bucket]), int(self.bounds[bucket + 1])
            path = self._path(bucket)
            if path.exists():
                keys = np.fromfile(path, dtype=np.int64)
                path.unlink()  # consumed: its disk space is free before the next bucket is read
            else:
                keys = np.empty(0, dtype=np.int64)
            keys.sort()
            keys = _drop_repeats(keys)
            dst, src = np.divmod(keys, n)
            del keys
            dst -= lo
            offsets = np.cumsum(np.bincount(dst, minlength=hi - lo), dtype=np.int64)
            offsets += written
            indptr.write(offsets)
            indices.write(src.astype(index_dtype(n)))
            written += src.shape[0]
            if progress is not None:
                progress(bucket + 1, self.bounds.shape[0] - 1)
        self.folder.rmdir()
        return written
