"""The symmetric adjacency as a ParHIP binary graph file, written by streaming from CSC.

ParHIP's binary format (the input of KaMinPar and ParHIP), little-endian::

    header   uint64 version, n, m (directed edges: both directions of every undirected edge)
    offsets  uint64 [n + 1]: byte offset in the file of the first neighbor of each node
    edges    [m]: neighbor ids, node by node
    (weighted files: then node weights [n], then edge weights [m])

The version is a bit field (:class:`Layout`): which weights are absent and which fields are 32 bits
wide. Ids are written with 32 bits wherever the node count allows (every graph below 2**31 nodes):
half the bytes of 64-bit ids, 12.9 GB instead of 25.8 GB for the 3.2B directed edges of a
papers100M-sized graph, which is what lets that graph and its coarse levels fit a 70 GB disk.
KaMinPar reads every layout written here (tests/partition/test_coarsen.py); ParHIP itself reads only
version 3 (64-bit ids, no weights).

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
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.pages import release_pages
from gnnscale.keys import GOLDEN, mix64
from gnnscale.partition.rows import compact_rows, dedupe_rows

HEADER_BYTES = 24
# 2**25 staged int64 entries: 256 MiB, about 4 ranges (4 edge scans) for a products-sized graph.
CHUNK_ENTRIES = 1 << 25
# Entries per range of a symmetric graph, whose rows are copied in order: 32 MiB that stay cached
# and mapped (a fresh 1 GB staging cost 1.8 s of page faults on the products-shaped graph).
COLUMN_CHUNK_ENTRIES = 1 << 22


@dataclass(frozen=True, slots=True)
class Layout:
    """What a ParHIP file holds and how wide each field is (offsets are always 64-bit: byte positions
    in files of more than 4 GB).

    Args:
        weighted: node and edge weights follow the edges (the coarse graphs of
            :mod:`gnnscale.partition.coarsen`); unweighted files have neither.
        id_bytes, node_weight_bytes, edge_weight_bytes: 4 or 8.
    """

    weighted: bool
    id_bytes: int = 8
    node_weight_bytes: int = 8
    edge_weight_bytes: int = 8

    @property
    def version(self) -> int:
        """The header's bit field, least significant bit first: no edge weights, no node weights,
        32-bit offsets, 32-bit ids, 32-bit node weights, 32-bit edge weights (KaMinPar's reader)."""
        return ((0 if self.weighted else 3) | (self.id_bytes == 4) << 3 | (self.node_weight_bytes == 4) << 4
                | (self.edge_weight_bytes == 4) << 5)

    @staticmethod
    def of_version(version: int) -> Layout | None:
        """The layout of a header's version, None for one this module does not read (32-bit offsets,
        one weight kind without the other, unknown bits)."""
        if version >> 6 or version & 4 or (version & 3) not in (0, 3):
            return None
        return Layout(weighted=version & 3 == 0, id_bytes=4 if version & 8 else 8,
                      node_weight_bytes=4 if version & 16 else 8, edge_weight_bytes=4 if version & 32 else 8)

    @property
    def id_dtype(self) -> np.dtype:
        return np.dtype(f"<i{self.id_bytes}")


def id_bytes_for(num_nodes: int) -> int:
    """4 where every id of ``num_nodes`` nodes fits a signed 32-bit int, else 8."""
    return 4 if num_nodes <= np.iinfo(np.int32).max else 8


def read_header(path: str | Path, *, weighted: bool) -> tuple[Layout, int, int]:
    """(layout, n, m) of a ParHIP file; ValueError naming the file unless it holds ``weighted`` data
    in a layout :class:`Layout` reads and is at least as long as its header says."""
    path = Path(path)
    header = np.fromfile(path, dtype="<u8", count=3)
    layout = Layout.of_version(int(header[0])) if header.shape[0] == 3 else None
    kind = "weighted" if weighted else "unweighted"
    if layout is None or layout.weighted != weighted:
        raise ValueError(f"path: {path} is not an {kind} ParHIP file with 64-bit offsets (header {header.tolist()})")
    n, m = int(header[1]), int(header[2])
    size = HEADER_BYTES + 8 * (n + 1) + layout.id_bytes * m
    if weighted:
        size += layout.node_weight_bytes * n + layout.edge_weight_bytes * m
    if path.stat().st_size < size:
        raise ValueError(f"path: {path} is shorter ({path.stat().st_size:,} bytes) than its header says ({size:,}): "
                         "a partial file")
    return layout, n, m


def write_parhip(graph: CSCGraph, path: str | Path, *, chunk_entries: int = CHUNK_ENTRIES) -> np.ndarray:
    """Write the symmetric adjacency of ``graph`` to ``path`` in ParHIP binary format.

    Args:
        graph: the topology; edge directions are ignored.
        path: the file to write (replaced if it exists).
        chunk_entries: int >= 1, staging entries per node range (default 2**25: 256 MiB). A node whose
            own in-plus-out degree exceeds it is processed alone. The file does not depend on it.

    Returns:
        xadj int64 [num_nodes + 1]: row ``v`` of the adjacency is edges ``xadj[v]:xadj[v + 1]`` of the
        file (what :func:`open_parhip` memory-maps). Ids are 32-bit where ``num_nodes`` allows.
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
    layout = Layout(weighted=False, id_bytes=id_bytes_for(n))
    if symmetric:  # a row is the node's column: small ranges into one reused buffer, read in order
        ranges = list(_node_ranges(np.diff(graph.indptr), min(int(chunk_entries), COLUMN_CHUNK_ENTRIES)))
        buffer = np.empty(max(int(graph.indptr[hi] - graph.indptr[lo]) for lo, hi in ranges), dtype=layout.id_dtype)
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
            f.write(memoryview(rows.astype(layout.id_dtype, copy=False)))  # a copy only from int64 staging
            del rows
        write_header(f, layout, n, xadj)
    return xadj


def write_header(f, layout: Layout, n: int, xadj: np.ndarray) -> None:
    """The header and offsets of a file whose edges start after them (``f`` open for writing; its
    position is left after the offsets)."""
    f.seek(0)
    f.write(np.array([layout.version, n, xadj[-1]], dtype="<u8").tobytes())
    f.write((HEADER_BYTES + 8 * (n + 1) + layout.id_bytes * xadj).astype("<u8").tobytes())


def _offsets(path: Path, layout: Layout, n: int) -> np.ndarray:
    """xadj int64 [n + 1] from the file's byte offsets."""
    offsets = np.fromfile(path, dtype="<u8", count=n + 1, offset=HEADER_BYTES).astype(np.int64)
    return (offsets - (HEADER_BYTES + 8 * (n + 1))) // layout.id_bytes


def open_parhip(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(xadj int64 [n + 1] in memory, adjncy [m] memory-mapped, read-only, int32 or int64 as stored) of
    an unweighted file."""
    layout, n, m = read_header(path, weighted=False)
    edges_at = HEADER_BYTES + 8 * (n + 1)
    adjncy = np.memmap(path, dtype=layout.id_dtype, mode="r", offset=edges_at, shape=(m,)) if m \
        else np.empty(0, layout.id_dtype)
    return _offsets(Path(path), layout, n), adjncy


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

def open_weighted_parhip(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xadj int64 [n + 1], adjncy [m] memory-mapped, node weights int64 [n] in memory, edge weights [m]
    memory-mapped; ids and edge weights int32 or int64 as stored) of a weighted file."""
    path = Path(path)
    layout, n, m = read_header(path, weighted=True)
    edges_at = HEADER_BYTES + 8 * (n + 1)
    weights_at = edges_at + layout.id_bytes * m
    vwgt = np.fromfile(path, dtype=f"<i{layout.node_weight_bytes}", count=n, offset=weights_at).astype(np.int64)
    ew_dtype = np.dtype(f"<i{layout.edge_weight_bytes}")
    if m == 0:
        return _offsets(path, layout, n), np.empty(0, layout.id_dtype), vwgt, np.empty(0, ew_dtype)
    adjncy = np.memmap(path, dtype=layout.id_dtype, mode="r", offset=edges_at, shape=(m,))
    ewgt = np.memmap(path, dtype=ew_dtype, mode="r", offset=weights_at + layout.node_weight_bytes * n, shape=(m,))
    return _offsets(path, layout, n), adjncy, vwgt, ewgt
