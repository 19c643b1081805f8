"""The graph topology in CSC form, its builders and its validation.

In-edges of node ``v`` are ``indices[indptr[v]:indptr[v + 1]]``: a row of the CSC matrix is the list
of source nodes of the edges that point at ``v``. Samplers read exactly this slice, so CSC (not CSR)
is the layout that makes neighbor sampling one contiguous read per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnscale.graph.pages import release_pages

INT32_MAX = np.iinfo(np.int32).max
INT64_MAX = np.iinfo(np.int64).max
ID_CHUNK = 1 << 24  # entries per step of the id check: 64-128 MB of a mapped file at a time


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 when every node id fits (halves the bytes the sampler touches), else int64."""
    return np.dtype(np.int32) if num_nodes <= INT32_MAX else np.dtype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class CSCGraph:
    """A directed graph in CSC layout.

    Args:
        indptr: int64 [num_nodes + 1], non-decreasing, starts at 0, ends at num_edges.
        indices: int32 or int64 [num_edges], source node of each in-edge, in [0, num_nodes).
        num_nodes: number of nodes.

    Arrays may be memory-mapped (``np.memmap``); nothing here copies them.
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_nodes: int

    def __post_init__(self) -> None:
        validate_csc(self.indptr, self.indices, self.num_nodes)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def __repr__(self) -> str:
        # The sizes, not the arrays (which may be gigabytes, memory-mapped).
        return f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, indices={self.indices.dtype})"

    def in_degrees(self) -> np.ndarray:
        """int64 [num_nodes]: number of in-edges of each node."""
        return np.diff(self.indptr)

    def nbytes(self) -> int:
        """Bytes of the topology arrays (what hybrid partitioning replicates on every worker)."""
        return int(self.indptr.nbytes + self.indices.nbytes)


def validate_csc(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, *, check_ids: bool = True) -> None:
    """Raise ``TypeError``/``ValueError`` naming the argument when the arrays are not a valid CSC graph.

    ``check_ids`` scans ``indices`` once (O(num_edges)); callers that have just built the arrays
    themselves may skip it.
    """
    if not isinstance(num_nodes, (int, np.integer)) or isinstance(num_nodes, bool):
        raise TypeError(f"num_nodes: expected an int, got {type(num_nodes).__name__}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes: expected >= 0, got {num_nodes}")
    for name, arr in (("indptr", indptr), ("indices", indices)):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array, got {type(arr).__name__}")
        if arr.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if indptr.dtype != np.int64:
        raise TypeError(f"indptr: expected dtype int64, got {indptr.dtype}")
    if indices.dtype not in (np.int32, np.int64):
        raise TypeError(f"indices: expected dtype int32 or int64, got {indices.dtype}")
    if indices.dtype == np.int32 and num_nodes > INT32_MAX + 1:
        raise TypeError(f"indices: int32 cannot hold ids of {num_nodes} nodes; use int64")
    if indptr.shape[0] != num_nodes + 1:
        raise ValueError(f"indptr: expected length num_nodes + 1 = {num_nodes + 1}, got {indptr.shape[0]}")
    if indptr[0] != 0:
        raise ValueError(f"indptr: expected indptr[0] == 0, got {indptr[0]}")
    if indptr[-1] != indices.shape[0]:
        raise ValueError(
            f"indptr: expected to end at the edge count len(indices) = {indices.shape[0]}, got {indptr[-1]}"
        )
    if num_nodes > 0 and np.any(indptr[1:] < indptr[:-1]):
        first = int(np.argmax(indptr[1:] < indptr[:-1]))
        raise ValueError(f"indptr: expected non-decreasing values, but indptr[{first + 1}] < indptr[{first}]")
    if check_ids and indices.shape[0] > 0:
        lo, hi = id_range(indices)
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"indices: node ids must lie in [0, {num_nodes}), found {bad}")


def id_range(indices: np.ndarray) -> tuple[int, int]:
    """(min, max) of ``indices``, read ``ID_CHUNK`` entries at a time; a memory-mapped array's pages are
    handed back after each, so that checking a file's ids does not hold the file in the resident set
    (12.9 GB for the full-size papers100M topology)."""
    lo, hi = int(INT64_MAX), -1 - int(INT64_MAX)
    for start in range(0, indices.shape[0], ID_CHUNK):
        piece = indices[start:start + ID_CHUNK]
        lo, hi = min(lo, int(piece.min())), max(hi, int(piece.max()))
        release_pages(indices)
    return lo, hi


def csc_from_coo(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    *,
    symmetrize: bool = False,
    remove_self_loops: bool = False,
    remove_duplicates: bool = True,
) -> CSCGraph:
    """Build a CSCGraph from a COO edge list ``src[i] -> dst[i]``.

    Args:
        src, dst: integer arrays [num_edges] of node ids in [0, num_nodes).
        num_nodes: number of nodes (isolated nodes allowed).
        symmetrize: also add ``dst -> src`` for every edge (an undirected graph).
        remove_self_loops: drop edges ``v -> v``.
        remove_duplicates: keep one copy of repeated ``(src, dst)`` pairs (default True; sampling
            without replacement from a neighborhood assumes distinct neighbors).

    In-edges of each node come out sorted by source id.
    """
    src = _as_id_array("src", src, num_nodes)
    dst = _as_id_array("dst", dst, num_nodes)
    if src.shape != dst.shape:
        raise ValueError(f"src, dst: expected the same length, got {src.shape[0]} and {dst.shape[0]}")
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if remove_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    # One sort by (dst, src) gives CSC order; duplicates become neighbors and drop in one pass.
    key = dst.astype(np.int64) * max(num_nodes, 1) + src
    key.sort()
    if remove_duplicates:
        key = _drop_repeats(key)
    n = max(num_nodes, 1)
    dst_sorted, src_sorted = np.divmod(key, n)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_sorted, minlength=num_nodes), out=indptr[1:])
    return CSCGraph(indptr=indptr, indices=src_sorted.astype(index_dtype(num_nodes)), num_nodes=num_nodes)


def _drop_repeats(sorted_keys: np.ndarray) -> np.ndarray:
    """Unique values of an already sorted array.

    Equivalent to ``np.unique(sorted_keys)``; numpy >= 2.3 routes ``np.unique`` through a hash table
    that is ~15x slower than this one comparison pass on 10^7-10^8 int64 keys.
    """
    if sorted_keys.size == 0:
        return sorted_keys
    keep = np.empty(sorted_keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=keep[1:])
    return sorted_keys[keep]


def _as_id_array(name: str, arr, num_nodes: int) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.size == 0:
        arr = arr.astype(np.int64)  # numpy reads an empty list as float64
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= num_nodes):
        raise ValueError(f"{name}: node ids must lie in [0, {num_nodes}), got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64, copy=False)
