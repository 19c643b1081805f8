"""The symmetric adjacency as a ParHIP binary graph file, written by streaming from CSC.

ParHIP's binary format (the input of KaMinPar and ParHIP), version 3 (64-bit ids, no weights), all
little-endian uint64::

    header   version = 3, n, m (directed edges: both directions of every undirected edge)
    offsets  [n + 1]: byte offset in the file of the first neighbor of each node (the last: end of file)
    edges    [m]: neighbor ids, node by node

The graph written is the one :func:`gnnscale.partition.assign.symmetric_adjacency` gives METIS:
both directions of every edge, no self loops, no repeats, each row sorted. Nodes are processed in
ranges whose in-plus-out degree sum is at most ``chunk_entries``; the out-neighbors of a range are
found by one scan over the CSC arrays (memory-mapped arrays are read, never copied). Peak memory is
``8 * chunk_entries`` bytes of staging plus ~5 int64 arrays of ``num_nodes + 1`` entries, whatever
the edge count (and the page cache of a memory-mapped graph, which the kernel can drop); the price is
one pass over the edges per range, and a scattered write of every edge into the staging.

Most graphs given to a partitioner are already symmetric (the generators' and ``convert
--symmetrize``'s, OGB's undirected ones): there a node's out-neighbors are its in-neighbors, and its
row is its CSC column deduplicated, copied in order. :func:`is_symmetric` finds that out in one
sequential pass. Products-shaped graph, full scale (123M edges, 2.4M nodes, one range): the scattered
out-neighbors took 5.4 s of a 12.6 s write.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.pages import release_pages
from gnnscale.partition.rows import compact_rows, dedupe_rows
from gnnscale.sampling.keys import GOLDEN, mix64

VERSION = 3
HEADER_BYTES = 24
# 2**25 staged int64 entries: 256 MiB, about 4 ranges (4 edge scans) for a products-sized graph.
CHUNK_ENTRIES = 1 << 25
# Entries per range of a symmetric graph, whose rows are copied in order: 32 MiB that stay cached
# and mapped (a fresh 1 GB staging cost 1.8 s of page faults on the products-shaped graph).
COLUMN_CHUNK_ENTRIES = 1 << 22


def write_parhip(graph: CSCGraph, path: str | Path, *, chunk_entries: int = CHUNK_ENTRIES) -> np.ndarray:
    """Write the symmetric adjacency of ``graph`` to ``path`` in ParHIP binary format.

    Args:
        graph: the topology; edge directions are ignored.
        path: the file to write (replaced if it exists).
        chunk_entries: int >= 1, staging entries per node range (default 2**25: 256 MiB). A node whose
            own in-plus-out degree exceeds it is processed alone. The file does not depend on it.

    Returns:
        xadj int64 [num_nodes + 1]: row ``v`` of the adjacency is edges ``xadj[v]:xadj[v + 1]`` of the
        file (what :func:`open_parhip` memory-maps).
    """
    if not isinstance(chunk_entries, (int, np.integer)) or isinstance(chunk_entries, bool) or chunk_entries < 1:
        raise ValueError(f"chunk_entries: expected an int >= 1, got {chunk_entries!r}")
    n = graph.num_nodes
    raw = np.diff(graph.indptr)  # row lengths before dedupe: in-degree plus out-degree
    for start in range(0, graph.num_edges, chunk_entries):
        # In chunks: np.bincount casts its input to int64, a copy of the whole array in one call.
        raw += np.bincount(graph.indices[start:start + chunk_entries], minlength=n)
        release_pages(graph.indices)
    symmetric = is_symmetric(graph, raw, chunk_entries=int(chunk_entries))
    if symmetric:  # a row is the node's column: small ranges into one reused buffer, read in order
        ranges = list(_node_ranges(np.diff(graph.indptr), min(int(chunk_entries), COLUMN_CHUNK_ENTRIES)))
        buffer = np.empty(max(int(graph.indptr[hi] - graph.indptr[lo]) for lo, hi in ranges), dtype=np.int64)
    else:  # every range scans all the edges for its out-neighbors, in the same pieces
        ranges = _node_ranges(raw, int(chunk_entries))
        scans = list(_node_ranges(np.diff(graph.indptr), int(chunk_entries)))
    xadj = np.zeros(n + 1, dtype=np.int64)
    edges_at = HEADER_BYTES + 8 * (n + 1)
    with open(path, "wb") as f:
        f.seek(edges_at)  # the offsets are known only once every row is deduplicated: written last
        for lo, hi in ranges:
            if symmetric:
                rows, degree = _column_rows(graph.indptr, graph.indices, lo, hi, buffer)
            else:
                rows, degree = _symmetric_rows(graph.indptr, graph.indices, lo, hi, raw[lo:hi], scans)
            release_pages(graph.indices)
            np.cumsum(degree, out=xadj[lo + 1:hi + 1])
            xadj[lo + 1:hi + 1] += xadj[lo]
            f.write(memoryview(np.ascontiguousarray(rows, dtype="<i8")))  # no copy on little-endian machines
            del rows
        f.seek(0)
        f.write(np.array([VERSION, n, xadj[-1]], dtype="<u8").tobytes())
        f.write((edges_at + 8 * xadj).astype("<u8").tobytes())
    return xadj


def open_parhip(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(xadj int64 [n + 1] in memory, adjncy int64 [m] memory-mapped, read-only) of a version-3 file."""
    header = np.fromfile(path, dtype="<u8", count=3)
    if header.shape[0] != 3 or int(header[0]) != VERSION:
        raise ValueError(f"path: {path} is not a ParHIP version-{VERSION} file (header {header.tolist()})")
    n, m = int(header[1]), int(header[2])
    offsets = np.fromfile(path, dtype="<u8", count=n + 1, offset=HEADER_BYTES)
    edges_at = HEADER_BYTES + 8 * (n + 1)
    xadj = (offsets.astype(np.int64) - edges_at) // 8
    adjncy = np.memmap(path, dtype="<i8", mode="r", offset=edges_at, shape=(m,)) if m else np.empty(0, np.int64)
    return xadj, adjncy


def _node_ranges(raw: np.ndarray, chunk_entries: int):
    """Consecutive [lo, hi) covering all nodes, each with ``sum(raw[lo:hi]) <= chunk_entries`` or one node."""
    cum = np.zeros(raw.shape[0] + 1, dtype=np.int64)
    np.cumsum(raw, out=cum[1:])
    lo, n = 0, raw.shape[0]
    while lo < n:
        hi = int(np.searchsorted(cum, cum[lo] + chunk_entries, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        yield lo, hi
        lo = hi


def is_symmetric(graph: CSCGraph, degree: np.ndarray, *, chunk_entries: int = CHUNK_ENTRIES) -> bool:
    """Whether every edge's reverse is an edge too, as often (the edge multiset equals its reverse).

    ``degree``: int64 [num_nodes], in-degree plus out-degree. Equal in- and out-degrees are checked
    first (free); then one pass, ``chunk_entries`` edges at a time (a memory-mapped graph's pages are
    handed back after each), compares the sums of a 64-bit hash of every edge and of its reverse, with
    two salts. Unequal multisets give equal sums with probability about 2**-64 per salt for a hash that
    behaves as a random function (SplitMix64's finaliser): a wrong "yes" would leave out the
    out-neighbors missing from a column.
    """
    in_degree = np.diff(graph.indptr)
    if not np.array_equal(degree, 2 * in_degree):
        return False
    sums = np.zeros(4, dtype=np.uint64)  # forward and backward, per salt; wrapping
    for lo, hi in _node_ranges(in_degree, chunk_entries):
        sums += _edge_hash_sums(graph.indptr, graph.indices, lo, hi)
        release_pages(graph.indices)
    return bool(sums[0] == sums[1] and sums[2] == sums[3])


@numba.njit(parallel=True, cache=True, nogil=True)
def _edge_hash_sums(indptr, indices, lo, hi):
    """uint64 [4]: over the in-edges u -> v of nodes [lo, hi), the sums of h(u, v) and of h(v, u), for
    two salts (wrapping)."""
    salt1, salt2 = np.uint64(0x2545F4914F6CDD1D), np.uint64(GOLDEN)
    f1 = np.uint64(0)
    b1 = np.uint64(0)
    f2 = np.uint64(0)
    b2 = np.uint64(0)
    for v in numba.prange(lo, hi):
        hv1, hv2 = mix64(np.uint64(v) ^ salt1), mix64(np.uint64(v) ^ salt2)
        hhv1, hhv2 = mix64(hv1), mix64(hv2)
        for e in range(indptr[v], indptr[v + 1]):
            hu1, hu2 = mix64(np.uint64(indices[e]) ^ salt1), mix64(np.uint64(indices[e]) ^ salt2)
            f1 += mix64(hu1 + hhv1)
            b1 += mix64(hv1 + mix64(hu1))
            f2 += mix64(hu2 + hhv2)
            b2 += mix64(hv2 + mix64(hu2))
    return np.array([f1, b1, f2, b2], dtype=np.uint64)


def _column_rows(indptr, indices, lo: int, hi: int, buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_symmetric_rows` of a symmetric graph: each row is the node's column, staged in ``buffer``."""
    first = int(indptr[lo])
    staged = buffer[:int(indptr[hi]) - first]
    staged[:] = indices[first:int(indptr[hi])]  # a copy: rows are sorted in place
    starts = indptr[lo:hi + 1] - first
    degree = dedupe_rows(staged, starts, lo)
    total = compact_rows(staged, starts, degree)
    return staged[:total], degree


def _symmetric_rows(indptr, indices, lo: int, hi: int, raw: np.ndarray,
                    scans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 rows of nodes [lo, hi) concatenated, int64 [hi - lo] their lengths). The out-neighbors
    are found by scanning every edge, one source range of ``scans`` at a time, handing a mapped
    graph's pages back after each."""
    starts = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(raw, out=starts[1:])
    staged = np.empty(starts[-1], dtype=np.int64)
    cursor = starts[:-1].copy()
    _gather_in(indptr, indices, lo, hi, staged, cursor)
    for a, b in scans:
        _gather_out(indptr, indices, a, b, lo, hi, staged, cursor)
        release_pages(indices)
    degree = dedupe_rows(staged, starts, lo)
    total = compact_rows(staged, starts, degree)
    return staged[:total], degree


@numba.njit(cache=True)
def _gather_in(indptr, indices, lo, hi, staged, cursor):
    """Row v - lo (from ``cursor[v - lo]`` on) starts with v's in-neighbors."""
    for v in range(lo, hi):
        for e in range(indptr[v], indptr[v + 1]):
            staged[cursor[v - lo]] = indices[e]
            cursor[v - lo] += 1


@numba.njit(cache=True)
def _gather_out(indptr, indices, a, b, lo, hi, staged, cursor):
    """Appends to the rows of [lo, hi) their out-neighbors among sources [a, b) (sequential: cursors are
    shared)."""
    for v in range(a, b):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if lo <= u < hi:
                staged[cursor[u - lo]] = v
                cursor[u - lo] += 1


@contextmanager
def temporary_parhip(graph: CSCGraph, *, chunk_entries: int = CHUNK_ENTRIES):
    """Context: ``(path, xadj, adjncy)`` of ``graph``'s ParHIP file in a fresh temporary folder (under
    ``$TMPDIR``), ``adjncy`` memory-mapped from it; the folder is removed on exit, also on error."""
    with tempfile.TemporaryDirectory(prefix="gnnscale-parhip-") as tmp:
        path = Path(tmp) / "graph.parhip"
        write_parhip(graph, path, chunk_entries=chunk_entries)
        xadj, adjncy = open_parhip(path)
        try:
            yield path, xadj, adjncy
        finally:
            del adjncy  # unmap before the file goes


# --- weighted files (the coarse graphs of gnnscale.partition.coarsen) -----------------------------

# ParHIP's version field is a bit field, least significant first: no edge weights, no vertex weights,
# 32-bit offsets, 32-bit ids, 32-bit vertex weights, 32-bit edge weights (KaGen's and KaMinPar's
# readers; ParHIP itself reads only version 3). 0: 64-bit everything, both weights, laid out as
# header, offsets [n + 1], edges [m], vertex weights [n], edge weights [m]. KaMinPar 3.7.3's
# ``load_graph(..., PARHIP)`` reads it (tests/partition/test_coarsen.py).
WEIGHTED_VERSION = 0


def open_weighted_parhip(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xadj int64 [n + 1], adjncy int64 [m] memory-mapped, vertex weights int64 [n] in memory, edge
    weights int64 [m] memory-mapped) of a version-0 file (:data:`WEIGHTED_VERSION`)."""
    header = np.fromfile(path, dtype="<u8", count=3)
    if header.shape[0] != 3 or int(header[0]) != WEIGHTED_VERSION:
        raise ValueError(f"path: {path} is not a weighted ParHIP version-{WEIGHTED_VERSION} file "
                         f"(header {header.tolist()})")
    n, m = int(header[1]), int(header[2])
    edges_at = HEADER_BYTES + 8 * (n + 1)
    xadj = (np.fromfile(path, dtype="<u8", count=n + 1, offset=HEADER_BYTES).astype(np.int64) - edges_at) // 8
    vwgt = np.fromfile(path, dtype="<i8", count=n, offset=edges_at + 8 * m).astype(np.int64, copy=False)
    if m == 0:
        return xadj, np.empty(0, np.int64), vwgt, np.empty(0, np.int64)
    adjncy = np.memmap(path, dtype="<i8", mode="r", offset=edges_at, shape=(m,))
    ewgt = np.memmap(path, dtype="<i8", mode="r", offset=edges_at + 8 * (m + n), shape=(m,))
    return xadj, adjncy, vwgt, ewgt
