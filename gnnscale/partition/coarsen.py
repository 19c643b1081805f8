"""Streaming coarsening in front of KaMinPar, for graphs whose KaMinPar footprint exceeds the memory budget.

KaMinPar holds its own copy of the graph, about 14-22 bytes per directed edge (measured below), so
a papers100M-sized graph (3.2B directed edges) needs far more than a 20 GB machine has. This module
is one multilevel step of our own that never holds the edges: it reads the symmetric adjacency
memory-mapped from its ParHIP file (:mod:`gnnscale.partition.parhip`) and keeps a few arrays of one
entry per node.

1. **Size-constrained label propagation** (:func:`label_propagation`): every node starts in its own
   cluster and joins the cluster most of its (edge-weighted) neighbors are in, if that cluster stays
   within ``max_weight`` fine nodes; a few passes. Nodes are visited in blocks of
   :data:`BLOCK_NODES` consecutive ids, ascending inside a block (so rows are read sequentially from
   the file), the blocks in an order drawn from ``seed`` afresh each pass; ties between candidate
   clusters go to the heavier one, then to the highest hash of ``(seed, pass, node, cluster)``. Same
   inputs and seed, same clusters. Why the heavier: on a graph without locality (ids in no order of
   the communities, as the papers100M-shaped generator's) a node's neighbors start in as many
   singleton clusters, every rating is 1, and a random choice keeps clusters tiny for many passes:
   at scale 0.1 (11.1M nodes, 322M directed edges, 16 parts) four passes left 2.05M clusters holding
   18% of the edges inside, and the first level's file kept most edges. Preferring the heavier lets a
   growing cluster gather its community: 33,756 clusters, 32.5% of the edges inside (and 58 s for the
   passes instead of 95 s); the whole coarsening there took 112 s instead of 184 s and 2 levels
   instead of 5, and the 16-part cut was 39.2% instead of 40.4%. Isolated nodes are then grouped into clusters of up to ``max_weight`` (they cut nothing).
2. **Contraction** (:func:`contract`): the weighted cluster graph (node weight: fine nodes in the
   cluster; edge weight: fine edges between two clusters; no self loops), built cluster by cluster
   from the fine nodes sorted by cluster (one argsort of ``n`` entries) with an accumulator of one
   entry per cluster, and written in chunks as a weighted ParHIP file, which KaMinPar reads.
3. Repeated (a level at a time, each reading the previous level's file) until a level no longer
   shrinks the graph (the clusters have reached their bound); where KaMinPar's estimated footprint
   on the coarse graph (:func:`kaminpar_bytes`) fits the budget, KaMinPar partitions it,
   the assignment is projected back (``part[v] = coarse_part[cluster[v]]``) and refined by streaming
   label propagation over the fine graph (:func:`refine_parts`) under a node-count bound, before
   :func:`gnnscale.partition.assign.balance_counts` makes the counts exact.

Memory: ``8 * chunk_entries * 2`` bytes of output staging plus about :data:`COARSEN_NODE_BYTES` per
fine node (xadj, labels, cluster weights, the rating accumulator and its touched list, the argsort),
never a multiple of the edge count; the file's pages are handed back after every chunk read in order,
and rows read out of order (contraction) are read with ``pread``, not through the mapping.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from gnnscale.graph.pages import punch_hole, read_entries, release_pages, unmapped_reads
from gnnscale.partition.kaminpar_parts import COMPRESS_ABOVE_EDGES
from gnnscale.partition.parhip import HEADER_BYTES, Layout, id_bytes_for, open_weighted_parhip, write_header

# KaMinPar 3.7.3's peak resident bytes above the interpreter's, 1 thread, 8 parts, measured on the
# products-shaped graph (ParHIP files from write_parhip): scale 0.01 (1.24M directed edges) 22.5
# bytes per edge plain, 15.6 compressed; scale 0.05 (6.2M) 19.1 and 14.0; the probe at scale
# 1.0 (123M) ~16 and ~11. Rounded up, so that the estimate errs towards coarsening.
KAMINPAR_EDGE_BYTES = 20
KAMINPAR_COMPRESSED_EDGE_BYTES = 16
# Edge weights: a weighted coarse graph of the scale-0.05 one (26,937 nodes, 4.84M directed edges)
# took 32.2 bytes per edge plain and 18.7 compressed, against 19.1 and 14.0 unweighted.
KAMINPAR_EDGE_WEIGHT_BYTES = 14
KAMINPAR_COMPRESSED_EDGE_WEIGHT_BYTES = 6
KAMINPAR_NODE_BYTES = 100
KAMINPAR_FIXED_BYTES = 32 << 20
# Held by the caller while KaMinPar runs: the fine xadj, the cluster map, the training mask (bytes/node).
HELD_NODE_BYTES = 24
# The coarsening's own arrays per fine node (see the module docstring), rounded up.
COARSEN_NODE_BYTES = 80
BLOCK_NODES = 1 << 12
PASSES = 4
REFINE_PASSES = 2
MAX_LEVELS = 8
# Every part should be made of many clusters, or KaMinPar cannot balance them: the largest cluster
# holds at most total / (MIN_CLUSTERS_PER_PART * num_parts) fine nodes.
MIN_CLUSTERS_PER_PART = 16
# A level that removes fewer than this fraction of the nodes is not worth another pass.
MIN_SHRINK = 0.9
# Output staging entries per contraction chunk: 2**22 neighbors and as many weights, 64 MiB.
CHUNK_ENTRIES = 1 << 22
# _contract_range's "entries staged" when a row could not be read from the file.
UNREADABLE = -(1 << 62)
# _append frees the copied part of the weights file every 64 MiB.
PUNCH_BYTES = 64 << 20
# Node-count imbalance the refinement may create (balance_counts removes it afterwards).
REFINE_EPSILON = 0.03


@dataclass(frozen=True, slots=True, kw_only=True)
class CoarseningReport:
    """What the coarsening did: levels run, the graph KaMinPar got, and why.

    Args:
        levels: contraction levels run (>= 1).
        num_nodes: nodes of the coarse graph KaMinPar partitioned.
        num_edges: its directed edges.
        estimate_bytes: KaMinPar's estimated footprint on the whole graph, which exceeded the budget.
        budget_bytes: the memory budget.
    """

    levels: int
    num_nodes: int
    num_edges: int
    estimate_bytes: int
    budget_bytes: int

    def to_dict(self) -> dict:
        return {"levels": self.levels, "num_nodes": self.num_nodes, "num_edges": self.num_edges,
                "estimate_bytes": self.estimate_bytes, "budget_bytes": self.budget_bytes}


# --- the memory model ----------------------------------------------------------------------------


def kaminpar_bytes(num_nodes: int, num_edges: int, *, weighted: bool = False, compress: bool | None = None) -> int:
    """KaMinPar's estimated peak bytes on a graph of ``num_nodes`` nodes and ``num_edges`` directed edges.

    ``compress`` defaults to what :func:`gnnscale.partition.kaminpar_parts.kaminpar_parts` chooses.
    """
    if compress is None:
        compress = num_edges > COMPRESS_ABOVE_EDGES
    if compress:
        per_edge = KAMINPAR_COMPRESSED_EDGE_BYTES + (KAMINPAR_COMPRESSED_EDGE_WEIGHT_BYTES if weighted else 0)
    else:
        per_edge = KAMINPAR_EDGE_BYTES + (KAMINPAR_EDGE_WEIGHT_BYTES if weighted else 0)
    return KAMINPAR_FIXED_BYTES + per_edge * int(num_edges) + KAMINPAR_NODE_BYTES * int(num_nodes)


def whole_graph_bytes(num_nodes: int, num_edges: int) -> int:
    """Peak bytes of partitioning the whole graph with KaMinPar: its estimate plus what the caller holds."""
    return kaminpar_bytes(num_nodes, num_edges) + HELD_NODE_BYTES * int(num_nodes)


def coarsening_bytes(num_nodes: int, chunk_entries: int = CHUNK_ENTRIES) -> int:
    """The coarsening's own peak bytes on a graph of ``num_nodes`` nodes (per-node arrays and staging)."""
    return COARSEN_NODE_BYTES * int(num_nodes) + 16 * int(chunk_entries)


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (what the kernel can give without swapping), in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemAvailable line; pass memory_gb explicitly")


def budget_bytes(memory_gb: float | None) -> int:
    """The memory budget in bytes: ``memory_gb`` GB (10**9 bytes), or :func:`available_bytes` for None."""
    if memory_gb is None:
        return available_bytes()
    if isinstance(memory_gb, bool) or not isinstance(memory_gb, (int, float, np.integer, np.floating)) \
            or not math.isfinite(memory_gb) or memory_gb <= 0:
        raise ValueError(f"memory_gb: expected a number of GB > 0, got {memory_gb!r}")
    return int(memory_gb * 1e9)


# --- label propagation ---------------------------------------------------------------------------


def label_propagation(xadj: np.ndarray, adjncy: np.ndarray, max_weight: int, *, node_weight: np.ndarray | None = None,
                      edge_weight: np.ndarray | None = None, passes: int = PASSES, seed: int = 0,
                      chunk_entries: int = CHUNK_ENTRIES) -> np.ndarray:
    """Size-constrained label propagation (see the module docstring for the order and the ties).

    Args:
        xadj, adjncy: the symmetric adjacency; ``adjncy`` may be memory-mapped (its pages are handed
            back after every ``chunk_entries`` edges read).
        max_weight: int >= 1, the most (node-weighted) nodes a cluster may hold. A node heavier than it
            stays alone.
        node_weight: int64 [n] (default: 1 each); edge_weight: int64 [m], >= 1 (default: 1 each).
        passes: sweeps over all nodes; seed: the block order and the ties.

    Returns:
        int64 [n]: the cluster of every node, named by one of its nodes' ids (not compact: see
        :func:`compact_clusters`).
    """
    n = xadj.shape[0] - 1
    vwgt = np.empty(0, np.int64) if node_weight is None else np.asarray(node_weight, dtype=np.int64)
    ewgt = np.empty(0, np.int64) if edge_weight is None else edge_weight
    label = np.arange(n, dtype=np.int64)
    cweight = np.ones(n, dtype=np.int64) if node_weight is None else vwgt.copy()
    rating = np.zeros(n, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    num_blocks = -(-n // BLOCK_NODES)
    starts = np.arange(num_blocks) * BLOCK_NODES
    block_edges = xadj[np.minimum(starts + BLOCK_NODES, n)] - xadj[starts]
    rng = np.random.default_rng(seed)
    for p in range(passes):
        order = rng.permutation(num_blocks)
        moved = 0
        for group in _groups(block_edges[order], chunk_entries):
            moved += _lp_blocks(xadj, adjncy, vwgt, ewgt, label, cweight, rating, touched, order[group[0]:group[1]],
                                BLOCK_NODES, max_weight, seed, p)
            release_pages(adjncy)
            release_pages(ewgt)
        if moved == 0:
            break
    _group_isolated(xadj, label, cweight, vwgt, max_weight)
    return label


def _groups(edges: np.ndarray, chunk_entries: int):
    """Consecutive [lo, hi) of ``edges``' entries, each summing to at most ``chunk_entries`` or one entry."""
    cum = np.zeros(edges.shape[0] + 1, dtype=np.int64)
    np.cumsum(edges, out=cum[1:])
    lo = 0
    while lo < edges.shape[0]:
        hi = int(np.searchsorted(cum, cum[lo] + chunk_entries, side="right")) - 1
        hi = min(max(hi, lo + 1), edges.shape[0])
        yield lo, hi
        lo = hi


@numba.njit(cache=True, nogil=True)
def _mix(seed, p, v, c):
    """A 63-bit hash of (seed, pass, node, cluster) for tie-breaking (splitmix64's finaliser)."""
    x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(p) * np.uint64(0xD1B54A32D192ED03)
    x ^= np.uint64(v) * np.uint64(0xBF58476D1CE4E5B9)
    x += np.uint64(c) * np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return np.int64(x >> np.uint64(1))


@numba.njit(cache=True, nogil=True)
def _lp_blocks(xadj, adjncy, vwgt, ewgt, label, cweight, rating, touched, blocks, block_nodes, max_weight, seed, p):
    """One label-propagation sweep over ``blocks``; returns the number of nodes that changed cluster."""
    n = label.shape[0]
    unit_v = vwgt.shape[0] == 0
    unit_e = ewgt.shape[0] == 0
    moved = 0
    for b in blocks:
        for v in range(b * block_nodes, min(n, (b + 1) * block_nodes)):
            wv = 1 if unit_v else vwgt[v]
            nt = 0
            for e in range(xadj[v], xadj[v + 1]):
                c = label[adjncy[e]]
                if rating[c] == 0:  # edge weights are >= 1: zero means not yet touched
                    touched[nt] = c
                    nt += 1
                rating[c] += 1 if unit_e else ewgt[e]
            own = label[v]
            best, best_rating, best_weight, best_hash = own, rating[own], np.int64(-1), np.int64(-1)
            for i in range(nt):
                c = touched[i]
                if c == own or cweight[c] + wv > max_weight:
                    continue
                r = rating[c]
                if r < best_rating:
                    continue
                h = _mix(seed, p, v, c)
                # Strictly better than staying; among equals, the heaviest cluster, then the highest hash
                # (own never loses a tie).
                if r > best_rating or (best != own and (cweight[c] > best_weight
                                                        or (cweight[c] == best_weight and h > best_hash))):
                    best, best_rating, best_weight, best_hash = c, r, cweight[c], h
            for i in range(nt):
                rating[touched[i]] = 0
            if best != own:
                cweight[own] -= wv
                cweight[best] += wv
                label[v] = best
                moved += 1
    return moved


def _group_isolated(xadj: np.ndarray, label: np.ndarray, cweight: np.ndarray, vwgt: np.ndarray,
                    max_weight: int) -> None:
    """Isolated nodes (no neighbors: label propagation leaves them alone) grouped, in id order, into
    clusters of at most ``max_weight``: they cut nothing wherever they go, but as singletons they
    would keep the coarse graph from shrinking."""
    isolated = np.flatnonzero(xadj[1:] == xadj[:-1])
    if isolated.shape[0] < 2:
        return
    weight = np.ones(isolated.shape[0], np.int64) if vwgt.shape[0] == 0 else vwgt[isolated]
    group = _fill_groups(weight, max_weight)
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    label[isolated] = isolated[first][group]
    cweight[isolated] = 0
    np.add.at(cweight, label[isolated], weight)


@numba.njit(cache=True, nogil=True)
def _fill_groups(weight, max_weight):
    """Group number of each entry: consecutive entries share a group while its weight stays <= max_weight."""
    group = np.empty(weight.shape[0], dtype=np.int64)
    g, total = 0, 0
    for i in range(weight.shape[0]):
        if total > 0 and total + weight[i] > max_weight:
            g += 1
            total = 0
        total += weight[i]
        group[i] = g
    return group


def compact_clusters(label: np.ndarray) -> tuple[np.ndarray, int]:
    """(int64 [n] cluster ids in [0, num_clusters), num_clusters), numbered in order of first
    appearance by node id, so that coarse ids keep the fine graph's locality."""
    return _compact(label)


@numba.njit(cache=True, nogil=True)
def _compact(label):
    new = np.full(label.shape[0], -1, dtype=np.int64)
    out = np.empty(label.shape[0], dtype=np.int64)
    c = 0
    for v in range(label.shape[0]):
        if new[label[v]] < 0:
            new[label[v]] = c
            c += 1
        out[v] = new[label[v]]
    return out, c


# --- contraction ---------------------------------------------------------------------------------


def contract(xadj: np.ndarray, adjncy: np.ndarray, cluster: np.ndarray, num_clusters: int, path: str | Path, *,
             node_weight: np.ndarray | None = None, edge_weight: np.ndarray | None = None,
             chunk_entries: int = CHUNK_ENTRIES) -> tuple[int, int]:
    """Write the cluster graph of ``cluster`` to ``path`` as a weighted ParHIP file.

    Args:
        xadj, adjncy: the symmetric adjacency (``adjncy`` may be memory-mapped: a cluster's rows lie
            all over it, so they are read with ``pread``, :func:`~gnnscale.graph.pages.read_entries`,
            and none of its pages is mapped).
        cluster: int64 [n], values in [0, num_clusters) (:func:`compact_clusters`).
        node_weight, edge_weight: the fine graph's weights (default: 1 each; ``edge_weight`` may be
            memory-mapped too).
        chunk_entries: int >= 1, coarse edges staged per write (a cluster with more is staged alone).

    Returns:
        (num_clusters, coarse directed edges). Each coarse row is sorted; its weight is the number
        (sum of weights) of fine edges between the two clusters, so the edge weights sum to the fine
        edges (weights) between different clusters, and the node weights to the fine total.
    """
    if isinstance(chunk_entries, bool) or not isinstance(chunk_entries, (int, np.integer)) or chunk_entries < 1:
        raise ValueError(f"chunk_entries: expected an int >= 1, got {chunk_entries!r}")
    vwgt = np.empty(0, np.int64) if node_weight is None else np.asarray(node_weight, dtype=np.int64)
    ewgt = np.empty(0, np.int64) if edge_weight is None else edge_weight
    c = int(num_clusters)
    cstart = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(cluster, minlength=c), out=cstart[1:])
    order = np.argsort(cluster, kind="stable")
    coarse_vwgt = np.bincount(cluster, weights=vwgt if vwgt.shape[0] else None, minlength=c).astype(np.int64)
    layout = _coarse_layout(xadj, ewgt, cluster, c, coarse_vwgt, chunk_entries)
    cxadj = np.zeros(c + 1, dtype=np.int64)
    acc = np.zeros(c, dtype=np.int64)
    touched = np.empty(c, dtype=np.int64)
    size = int(chunk_entries)
    out_adj, out_w = np.empty(size, layout.id_dtype), np.empty(size, f"<i{layout.edge_weight_bytes}")
    longest = _longest_row(xadj)
    row_adj, row_w = np.empty(longest, adjncy.dtype), np.empty(longest if ewgt.shape[0] else 0, ewgt.dtype)
    weights_path = Path(str(path) + ".weights")
    try:
        with (open(path, "wb") as f, open(weights_path, "wb") as fw, unmapped_reads(adjncy) as (fd, at),
              unmapped_reads(ewgt) as (wfd, wat)):
            f.seek(HEADER_BYTES + 8 * (c + 1))
            lo = 0
            while lo < c:
                hi, used = _contract_range(xadj, (fd, at, adjncy, row_adj), (wfd, wat, ewgt, row_w), cluster, order,
                                           cstart, lo, acc, touched, out_adj, out_w, cxadj)
                if used == UNREADABLE:
                    raise OSError(f"{getattr(adjncy, 'filename', 'adjncy')}: could not read the rows of cluster {hi}: "
                                  "the file is shorter than its offsets say, or unreadable")
                if used < 0:  # one cluster has more coarse neighbors than the staging holds: grow it
                    size = -used
                    out_adj, out_w = np.empty(size, out_adj.dtype), np.empty(size, out_w.dtype)
                    continue
                f.write(memoryview(out_adj[:used]))
                fw.write(memoryview(out_w[:used]))
                lo = hi
            m = int(cxadj[-1])
            del order, acc, touched
            f.write(memoryview(coarse_vwgt.astype(f"<i{layout.node_weight_bytes}")))
            fw.flush()
            _append(f, weights_path)
            write_header(f, layout, c, cxadj)
    finally:
        weights_path.unlink(missing_ok=True)
    return c, m


def _coarse_layout(xadj: np.ndarray, ewgt: np.ndarray, cluster: np.ndarray, num_clusters: int,
                   coarse_vwgt: np.ndarray, chunk_entries: int) -> Layout:
    """The narrowest fields that hold the cluster graph: 32-bit ids below 2**31 clusters, 32-bit node
    weights below 2**31 in all, 32-bit edge weights where no cluster's volume (the summed weights of
    its members' edges, a bound on every weight of its row) reaches 2**31."""
    limit = np.iinfo(np.int32).max
    volume = np.bincount(cluster, weights=_weighted_degrees(xadj, ewgt, chunk_entries), minlength=num_clusters)
    return Layout(weighted=True, id_bytes=id_bytes_for(num_clusters),
                  node_weight_bytes=4 if int(coarse_vwgt.sum()) <= limit else 8,
                  edge_weight_bytes=4 if volume.max(initial=0) <= limit else 8)


def _weighted_degrees(xadj: np.ndarray, ewgt: np.ndarray, chunk_entries: int) -> np.ndarray:
    """float64 [n]: each node's summed edge weights (its degree for unit weights); a mapped ``ewgt`` is
    read in order, its pages handed back every ``chunk_entries`` entries. (float64 is exact to 2**53.)"""
    degree = np.diff(xadj).astype(np.float64)
    if ewgt.shape[0] == 0:
        return degree
    for lo, hi in _groups(degree, chunk_entries):
        _row_sums(xadj, ewgt, lo, hi, degree)
        release_pages(ewgt)
    return degree


@numba.njit(cache=True, nogil=True)
def _row_sums(xadj, ewgt, lo, hi, out):
    for v in range(lo, hi):
        total = 0.0
        for e in range(xadj[v], xadj[v + 1]):
            total += ewgt[e]
        out[v] = total


def _longest_row(xadj: np.ndarray) -> int:
    """The largest ``xadj[v + 1] - xadj[v]``, in pieces (no second array of ``n`` entries)."""
    step = 1 << 20
    return max((int(np.max(np.diff(xadj[lo:lo + step + 1]))) for lo in range(0, xadj.shape[0] - 1, step)), default=0)


def _append(f, source: Path) -> None:
    """Move ``source`` onto the end of the open file ``f``: copied in 1 MiB pieces, the blocks of every
    :data:`PUNCH_BYTES` copied freed in ``source`` at once, so that the disk holds the weights once,
    not twice (a full-size papers100M-shaped graph's first level, with random ties, had passed 5.5 GB
    of weights and was still growing). Where the file system cannot free a range, the copy goes on
    and ``source`` is freed when removed."""
    punched, punch = 0, True
    with open(source, "r+b") as src:  # writable: fallocate needs it
        while piece := src.read(1 << 20):
            f.write(piece)
            copied = src.tell()
            if punch and (copied - punched >= PUNCH_BYTES or len(piece) < 1 << 20):
                f.flush()  # the copy is in the page cache before its source goes
                punch = punch_hole(src.fileno(), punched, copied - punched)
                punched = copied


@numba.njit(cache=True, nogil=True)
def _contract_range(xadj, rows, weights, cluster, order, cstart, lo, acc, touched, out_adj, out_w, cxadj):
    """Rows of clusters lo, lo + 1, ... into out_adj / out_w while they fit; sets cxadj[c + 1] of each.

    ``rows`` and ``weights`` are (fd, offset, array, row buffer) for :func:`read_entries` (``weights``'
    array empty: weight 1 each). Returns (first cluster not staged, entries staged), (lo, -degree) when
    cluster lo alone does not fit, or (the cluster, :data:`UNREADABLE`) when a row cannot be read.
    """
    fd, at, adjncy, row = rows
    wfd, wat, ewgt, row_w = weights
    unit_e = ewgt.shape[0] == 0
    num_clusters = cstart.shape[0] - 1
    limit = out_adj.shape[0]
    pos = 0
    c = lo
    while c < num_clusters:
        nt = 0
        for i in range(cstart[c], cstart[c + 1]):
            v = order[i]
            degree = xadj[v + 1] - xadj[v]
            if not read_entries(fd, at, adjncy, xadj[v], xadj[v + 1], row):
                return c, UNREADABLE
            if not unit_e and not read_entries(wfd, wat, ewgt, xadj[v], xadj[v + 1], row_w):
                return c, UNREADABLE
            for j in range(degree):
                d = cluster[row[j]]
                if d == c:
                    continue  # no self loops
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                acc[d] += 1 if unit_e else row_w[j]
        if pos + nt > limit:
            for i in range(nt):
                acc[touched[i]] = 0
            if c == lo:
                return lo, -nt
            break
        out = np.sort(touched[:nt])
        for i in range(nt):
            d = out[i]
            out_adj[pos + i] = d
            out_w[pos + i] = acc[d]
            acc[d] = 0
        pos += nt
        cxadj[c + 1] = cxadj[c] + nt
        c += 1
    return c, pos


# --- the multilevel step -------------------------------------------------------------------------


def coarsen(xadj: np.ndarray, adjncy: np.ndarray, workdir: str | Path, *, num_parts: int, kaminpar_budget: int,
            seed: int = 0, passes: int = PASSES, chunk_entries: int = CHUNK_ENTRIES
            ) -> tuple[np.ndarray, Path, int, int, int]:
    """Coarsen the (unweighted) symmetric adjacency until a level stops shrinking it; the coarse graph
    must then fit KaMinPar in ``kaminpar_budget`` bytes.

    Every level bounds clusters by the same weight, the most that keeps every part made of at least
    :data:`MIN_CLUSTERS_PER_PART` clusters (KaMinPar's own coarsening bounds clusters by the part
    weight too). Levels run until one removes under 10% of the nodes, not only until the estimate
    fits: KaMinPar given the many small clusters of an early level cuts more than given the few large
    ones of later levels, which the refinement then corrects (papers100M-shaped, scale 0.04, 8 parts,
    1 GB: 2 levels, 165 nodes, cut 35.8%, where KaMinPar on the whole graph cut 36.5%; with random
    ties, stopping once it fit, 1 level, had cut 42.8% and 3 levels 37.8%). Why not a smaller bound,
    sized to what the budget needs: on the products-shaped graph (scale 0.05, 8 parts, 0.1 GB) small
    first-level clusters (4 nodes) mixed communities: 93% of the fine edges ran between clusters after
    4 levels and the projected cut was 0.34 (0.197 after refinement), against 70%, 0.189 and 0.189
    with this bound (1 level, 1,296 coarse nodes), where KaMinPar on the whole graph cut 0.189. (Run
    to the last level, with ties to the heavier cluster, that graph coarsens to 136 nodes in 2 levels
    and cuts 0.200.)

    Returns:
        (cluster int64 [n]: the coarse node of every fine node, path of the coarse weighted ParHIP file
        under ``workdir``, coarse nodes, coarse directed edges, levels). ValueError (naming memory_gb)
        when the coarsening stalls above the budget.
    """
    n = xadj.shape[0] - 1
    cap = max(1, n // (MIN_CLUSTERS_PER_PART * num_parts))
    cluster = np.arange(n, dtype=np.int64)
    level_xadj, level_adj, vwgt, ewgt = xadj, adjncy, None, None
    cur_n, cur_m, path = n, int(xadj[-1]), None
    levels = 0
    while levels < MAX_LEVELS:
        label = label_propagation(level_xadj, level_adj, cap, node_weight=vwgt, edge_weight=ewgt,
                                  passes=passes, seed=seed + levels, chunk_entries=chunk_entries)
        level_cluster, next_n = compact_clusters(label)
        del label
        stalled = next_n > MIN_SHRINK * cur_n
        if stalled and levels > 0:  # this level's clusters are nearly the previous level's nodes
            break
        levels += 1
        next_path = Path(workdir) / f"coarse{levels}.parhip"
        _, next_m = contract(level_xadj, level_adj, level_cluster, next_n, next_path, node_weight=vwgt,
                             edge_weight=ewgt, chunk_entries=chunk_entries)
        cluster = level_cluster[cluster]
        del level_cluster, level_adj, ewgt  # unmap the previous level's file before removing it
        if path is not None:
            os.remove(path)
        path = next_path
        level_xadj, level_adj, vwgt, ewgt = open_weighted_parhip(path)
        cur_n, cur_m = next_n, next_m
        if stalled:
            break
    estimate = kaminpar_bytes(cur_n, cur_m, weighted=True)
    if estimate > kaminpar_budget:
        raise ValueError(f"memory_gb: too small: coarsening stopped at {cur_n:,} nodes and {cur_m:,} edges "
                         f"(clusters of at most {cap:,} nodes keep every part made of many), where KaMinPar "
                         f"needs an estimated {estimate / 1e9:.2f} GB, over the {kaminpar_budget / 1e9:.2f} GB "
                         "left for it; give more memory or fewer parts")
    return cluster, path, cur_n, cur_m, levels


# --- refinement ----------------------------------------------------------------------------------


def refine_parts(part: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, *,
                 passes: int = REFINE_PASSES, epsilon: float = REFINE_EPSILON,
                 chunk_entries: int = CHUNK_ENTRIES) -> int:
    """Move nodes (in place) to the part holding most of their neighbors, by streaming label propagation.

    Nodes are visited in id order (rows read sequentially); a node moves only if strictly more of its
    neighbors lie in the target part than in its own, and only while the target stays within
    ``(1 + epsilon) * n / num_parts`` nodes and the source above ``(1 - epsilon) * n / num_parts``.
    Every move lowers the edge cut. Returns the number of moves.
    """
    n = part.shape[0]
    sizes = np.bincount(part, minlength=num_parts).astype(np.int64)
    max_size = math.ceil((1 + epsilon) * n / num_parts)
    min_size = math.floor((1 - epsilon) * n / num_parts)
    counts = np.zeros(num_parts, dtype=np.int64)
    touched = np.empty(num_parts, dtype=np.int64)
    total = 0
    for _ in range(passes):
        moved = 0
        for lo, hi in _groups(np.diff(xadj), chunk_entries) if n else ():
            moved += _refine_range(xadj, adjncy, part, sizes, max_size, min_size, counts, touched, lo, hi)
            release_pages(adjncy)
        total += moved
        if moved == 0:
            break
    return total


@numba.njit(cache=True, nogil=True)
def _refine_range(xadj, adjncy, part, sizes, max_size, min_size, counts, touched, lo, hi):
    moved = 0
    for v in range(lo, hi):
        nt = 0
        for e in range(xadj[v], xadj[v + 1]):
            q = part[adjncy[e]]
            if counts[q] == 0:
                touched[nt] = q
                nt += 1
            counts[q] += 1
        own = part[v]
        best, best_count = own, counts[own]
        if sizes[own] > min_size:
            for i in range(nt):
                q = touched[i]
                if counts[q] > best_count and sizes[q] < max_size:
                    best, best_count = q, counts[q]
        for i in range(nt):
            counts[touched[i]] = 0
        if best != own:
            part[v] = best
            sizes[own] -= 1
            sizes[best] += 1
            moved += 1
    return moved
