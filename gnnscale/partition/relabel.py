"""New node ids that give every part one contiguous range, and the cut/balance numbers of a partition.

After relabelling, ownership is a range check (:class:`PartitionBook`) and a part's local id is its
global id minus the part's offset: no lookup tables on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.partition.book import PartitionBook


@dataclass(frozen=True, slots=True, kw_only=True)
class NewIds:
    """The new node ids of a partition, and the relabelled graph's ``indptr`` (its rows are written
    chunk by chunk by :func:`relabelled_rows`, so the relabelled edges never need to be in memory).

    Args:
        new_to_old: int64 [num_nodes], old id of each new id.
        old_to_new: int64 [num_nodes], the inverse permutation.
        indptr: int64 [num_nodes + 1], the relabelled graph's indptr: new node ``v`` keeps the in-degree
            of old node ``new_to_old[v]``.
        book: part ``p`` owns new ids ``[book.offsets[p], book.offsets[p + 1])``.
    """

    new_to_old: np.ndarray
    old_to_new: np.ndarray
    indptr: np.ndarray
    book: PartitionBook

    def map_ids(self, old_ids: np.ndarray) -> np.ndarray:
        """int64: new ids of ``old_ids``, sorted (split indices are sorted sets)."""
        return np.sort(self.old_to_new[np.asarray(old_ids, dtype=np.int64)])


@dataclass(frozen=True, slots=True, kw_only=True)
class Relabeling:
    """A graph with its nodes renumbered part by part.

    Args:
        graph: the relabelled topology. Node ``v`` (new id) is old node ``new_to_old[v]``; its in-edges
            are the old node's in-edges, source ids mapped to new ids and sorted increasingly (see
            :func:`relabel`).
        new_to_old: int64 [num_nodes], old id of each new id.
        old_to_new: int64 [num_nodes], the inverse permutation.
        book: part ``p`` owns new ids ``[book.offsets[p], book.offsets[p + 1])``.
    """

    graph: CSCGraph
    new_to_old: np.ndarray
    old_to_new: np.ndarray
    book: PartitionBook

    def map_ids(self, old_ids: np.ndarray) -> np.ndarray:
        """int64: new ids of ``old_ids``, sorted (split indices are sorted sets)."""
        return np.sort(self.old_to_new[np.asarray(old_ids, dtype=np.int64)])


def relabel(graph: CSCGraph, part: np.ndarray, num_parts: int) -> Relabeling:
    """Renumber nodes by ``(part, old id)``: part 0's nodes first, each part in old-id order.

    The in-edges of every node are re-sorted by new source id. Row order in the input therefore does
    not matter: the result depends only on the edge multiset and ``part``, so every worker and every
    layout built from it agree, and each row lists the sources of one part contiguously (local
    neighbors of a part are adjacent in memory).

    Holds the whole relabelled graph in memory; :func:`new_ids` and :func:`relabelled_rows` give the
    same graph a range of rows at a time.

    Args:
        graph: the topology.
        part: int [num_nodes], part of each node, in [0, num_parts).
        num_parts: number of parts (parts may be empty).
    """
    ids = new_ids(graph, part, num_parts)
    indices = relabelled_rows(graph, ids, 0, graph.num_nodes)
    new_graph = CSCGraph(indptr=ids.indptr, indices=indices, num_nodes=graph.num_nodes)
    return Relabeling(graph=new_graph, new_to_old=ids.new_to_old, old_to_new=ids.old_to_new, book=ids.book)


def new_ids(graph: CSCGraph, part: np.ndarray, num_parts: int) -> NewIds:
    """The ids of :func:`relabel` and the relabelled ``indptr``; memory: a few arrays of one entry per
    node (``graph`` may be memory-mapped: only its ``indptr`` is read)."""
    n = graph.num_nodes
    part = np.asarray(part)
    if part.shape != (n,) or not np.issubdtype(part.dtype, np.integer):
        raise ValueError(f"part: expected an integer array of shape [{n}], got {part.dtype} {part.shape}")
    if n and (part.min() < 0 or part.max() >= num_parts):
        raise ValueError(f"part: expected values in [0, num_parts = {num_parts}), got range "
                         f"[{part.min()}, {part.max()}]")
    new_to_old = np.argsort(part, kind="stable").astype(np.int64, copy=False)
    old_to_new = np.empty(n, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(n, dtype=np.int64)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(part, minlength=num_parts), out=offsets[1:])
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(graph.indptr)[new_to_old], out=new_indptr[1:])
    return NewIds(new_to_old=new_to_old, old_to_new=old_to_new, indptr=new_indptr,
                  book=PartitionBook(offsets=offsets))


def relabelled_rows(graph: CSCGraph, ids: NewIds, lo: int, hi: int) -> np.ndarray:
    """The in-edges of new nodes ``[lo, hi)`` of the relabelled graph, end to end: its ``indices[
    ids.indptr[lo]:ids.indptr[hi]]``, each row sorted; dtype :func:`index_dtype` of the node count.

    Reads the old rows of those nodes only (``graph`` may be memory-mapped).
    """
    return mapped_rows(graph.indptr, graph.indices, ids.new_to_old[lo:hi], ids.old_to_new, ids.indptr[lo:hi + 1],
                       index_dtype(graph.num_nodes))


def mapped_rows(indptr: np.ndarray, indices: np.ndarray, old_rows: np.ndarray, old_to_new: np.ndarray,
                new_indptr: np.ndarray, dtype) -> np.ndarray:
    """Rows ``old_rows`` of the CSC ``(indptr, indices)``, end to end, their ids mapped through ``old_to_new`` and
    each row sorted: the rows of a relabelled graph whose bounds are ``new_indptr`` (int64 [len(old_rows) + 1], any
    start; row ``i`` keeps old row ``old_rows[i]``'s length). ``dtype``: of the output ids."""
    base = int(new_indptr[0])
    out = np.empty(int(new_indptr[-1]) - base, dtype=dtype)
    _relabel_rows(indptr, indices, old_rows, old_to_new, new_indptr - base, out)
    return out


@numba.njit(parallel=True, cache=True)
def _relabel_rows(indptr, indices, new_to_old, old_to_new, new_indptr, out):
    for v in numba.prange(new_to_old.shape[0]):
        start = indptr[new_to_old[v]]
        t = new_indptr[v]
        d = new_indptr[v + 1] - t
        for j in range(d):
            out[t + j] = old_to_new[indices[start + j]]
        out[t:t + d].sort()


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSummary:
    """Edge cut and per-part sizes of a partition.

    Args:
        method: how the parts were assigned (``"metis"`` or ``"random"``).
        num_edges: edges of the (directed) graph.
        edge_cut: edges whose source and destination lie in different parts.
        nodes: per part, the nodes it owns.
        edges: per part, the in-edges of its nodes (what it stores in the vanilla layout).
        train_nodes: per part, its training nodes.
        coarsening: what the streaming coarsening in front of KaMinPar did
            (:meth:`gnnscale.partition.coarsen.CoarseningReport.to_dict`), None where it did not run
            (default); stored in the manifest only where it ran, so other manifests are unchanged.
    """

    method: str
    num_edges: int
    edge_cut: int
    nodes: tuple[int, ...]
    edges: tuple[int, ...]
    train_nodes: tuple[int, ...]
    coarsening: dict | None = None

    @property
    def num_parts(self) -> int:
        return len(self.nodes)

    @property
    def edge_cut_fraction(self) -> float:
        return self.edge_cut / self.num_edges if self.num_edges else 0.0

    @property
    def node_balance(self) -> float:
        return _balance(self.nodes)

    @property
    def edge_balance(self) -> float:
        return _balance(self.edges)

    @property
    def train_balance(self) -> float:
        return _balance(self.train_nodes)

    def to_dict(self) -> dict:
        """JSON-ready form (the manifest's ``summary``)."""
        return {
            "method": self.method, "num_parts": self.num_parts, "num_edges": self.num_edges,
            "edge_cut": self.edge_cut, "edge_cut_fraction": self.edge_cut_fraction,
            "nodes": list(self.nodes), "edges": list(self.edges), "train_nodes": list(self.train_nodes),
            "balance": {"nodes": self.node_balance, "edges": self.edge_balance, "train_nodes": self.train_balance},
            **({} if self.coarsening is None else {"coarsening": self.coarsening}),
        }

    def describe(self) -> str:
        """Two human-readable lines: cut, then balance (max/mean; 1.0 is perfect); a third where the graph
        was coarsened first."""
        lines = (f"{self.method}, {self.num_parts} parts: edge cut {self.edge_cut:,} of {self.num_edges:,} edges "
                 f"({self.edge_cut_fraction:.2%})\n"
                 f"balance (max/mean): nodes {self.node_balance:.4f}, in-edges {self.edge_balance:.4f}, "
                 f"training nodes {self.train_balance:.4f}")
        if self.coarsening is not None:
            c = self.coarsening
            levels = f"{c['levels']} level{'s' if c['levels'] != 1 else ''}"
            lines += (f"\ncoarsened first ({levels}) to {c['num_nodes']:,} nodes and {c['num_edges']:,} "
                      f"edges: KaMinPar on the whole graph was estimated at {c['estimate_bytes'] / 1e9:.2f} GB, over "
                      f"the {c['budget_bytes'] / 1e9:.2f} GB budget")
        return lines


def _balance(counts: tuple[int, ...]) -> float:
    """max / mean of the per-part counts (1.0 = perfectly even; 1.0 when all are zero)."""
    total = sum(counts)
    return max(counts) * len(counts) / total if total else 1.0


def summarize(relabeling: Relabeling, train_idx: np.ndarray, method: str) -> PartitionSummary:
    """Cut and sizes of a relabelled partition.

    Args:
        relabeling: from :func:`relabel`.
        train_idx: int64, training nodes as NEW ids, sorted.
        method: recorded as is.
    """
    graph, offsets = relabeling.graph, relabeling.book.offsets
    cut = 0
    for p in range(relabeling.book.num_parts):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        # Sources of the in-edges of part p's nodes (one contiguous slice): cut when outside [lo, hi).
        sources = graph.indices[graph.indptr[lo]:graph.indptr[hi]]
        cut += int(np.count_nonzero((sources < lo) | (sources >= hi)))
    edges = np.diff(graph.indptr[offsets])
    train = np.diff(np.searchsorted(train_idx, offsets))
    return PartitionSummary(method=method, num_edges=graph.num_edges, edge_cut=cut,
                            nodes=tuple(int(x) for x in np.diff(offsets)), edges=tuple(int(x) for x in edges),
                            train_nodes=tuple(int(x) for x in train))
