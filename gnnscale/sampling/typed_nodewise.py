"""Node-wise sampling of typed graphs in PyG's layout: what PyG's ``NeighborLoader`` draws on a ``HeteroData``.

:class:`~gnnscale.sampling.nodewise.NodewiseSampler` is the homogeneous version: hop ``h`` samples only the
*frontier*, the nodes hop ``h - 1`` added. On a typed graph PyG (pyg-lib's ``hetero_neighbor_sample``) keeps one
node list per type and one edge list per relation, and walks a hop relation by relation, in relation order: each
relation samples the frontier of its destination type, and appends the sources it reaches to its source type's
list in order of first appearance. The frontiers are fixed when the hop starts: a node a relation adds joins the
frontier at the next hop, whichever relation comes later in the same hop.

**Why a node-wise kernel**, and not the typed blocks reduced to node-wise (as
:func:`~gnnscale.sampling.nodewise.nodewise_from_blocks` cuts the homogeneous trainer's blocks): the typed blocks
resample at hop ``h`` every node known so far, so they draw more edges than a batch keeps, more with every hop,
and they name each edge by its source only, where a PyG batch needs each edge's id (``e_id``). This kernel draws
the frontier alone and chooses *positions* in each typed row (:func:`~gnnscale.sampling.choose.choose_positions`),
so every edge knows its place among its relation's edges.

**Draws.** Node ``v``'s neighbors by relation ``r`` at hop ``h`` come from the typed fused kernel's stream
``(key, h + r * RELATION_SLOT, v)`` (:mod:`gnnscale.sampling.typed`): hop 0 is the first typed block's hop, edge
for edge, and a graph of one relation samples exactly as :class:`~gnnscale.sampling.nodewise.NodewiseSampler`.

The tiny example: papers ``P0 P1 P2``, authors ``A0 A1``; relations, in order, 0 ``author writes paper``
(``A0->P0, A1->P0, A1->P1``), 1 ``paper cites paper`` (``P1->P0, P2->P1``), 2 ``paper rev_writes author``
(``P0->A0, P0->A1, P1->A1``); seed ``P0``, every neighbor, two hops::

    hop 0: frontier paper [P0], author []
           writes:     A0->P0, A1->P0     authors [A0, A1]
           cites:      P1->P0             papers  [P0, P1]
           rev_writes: (no author in the frontier)
    hop 1: frontier paper [P1], author [A0, A1]
           writes:     A1->P1
           cites:      P2->P1             papers  [P0, P1, P2]
           rev_writes: P0->A0, P0->A1, P1->A1

    num_sampled_nodes  paper [1, 1, 1]  author [0, 2, 0]
    num_sampled_edges  writes [2, 1]  cites [1, 1]  rev_writes [0, 3]
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.typed import TypedGraph
from gnnscale.sampling import check_key, check_seeds
# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import PIECE_NODES, choose_positions, num_chosen, prefetch_ahead
from gnnscale.sampling.fused import SamplerWorkspace, grow_nodes, relabel_all, relabel_range
from gnnscale.sampling.typed import RELATION_SLOT, typed_fanouts


@numba.njit(parallel=True, cache=True, nogil=True)
def _sample_hop(rel_indptr, indices, row_rank, rows, frontier, targets, relation, fanouts, replace, key, hop):
    """One hop of every relation: choose the in-edges of typed row ``rows[i]`` (node ``frontier[i]``, local id
    ``targets[i]``, by relation ``relation[i]`` with fanout ``fanouts[relation[i]]``), each row's draws after the
    previous row's.

    Returns ``offsets`` (int64 [len(rows) + 1]: row ``i``'s edges are ``offsets[i]:offsets[i + 1]``) and int64 arrays
    [offsets[-1]]: the chosen edges' sources (global ids), their destinations (``targets[i]``) and their ranks among
    their relation's edges in CSC order (``row_rank[row]`` plus the position in the row). One call per hop, for
    every relation at once: a parallel region costs a wake-up of every thread, which a call per relation would pay
    several times over. The positions are drawn into the rank slots (the typed kernel's draws, from the stream
    ``hop + r * RELATION_SLOT`` of ``key``), then each slot becomes its source and rank while the row is in cache.
    """
    n = rows.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        row = rows[i]
        offsets[i + 1] = num_chosen(rel_indptr[row + 1] - rel_indptr[row], fanouts[relation[i]], replace)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    num_edges = offsets[-1]
    sources = np.empty(num_edges, dtype=np.int64)
    destinations = np.empty(num_edges, dtype=np.int64)
    ranks = np.empty(num_edges, dtype=np.int64)
    for piece in numba.prange((n + PIECE_NODES - 1) // PIECE_NODES):
        lo = piece * PIECE_NODES
        hi = min(lo + PIECE_NODES, n)
        for i in range(lo, hi):
            prefetch_ahead(rel_indptr, indices, rows, i, hi)
            row, r = rows[i], relation[i]
            first, last = offsets[i], offsets[i + 1]
            choose_positions(rel_indptr, row, frontier[i], fanouts[r], replace, key, hop + r * RELATION_SLOT, ranks,
                             first)
            start, base = rel_indptr[row], row_rank[row]
            for q in range(first, last):
                position = ranks[q]
                sources[q] = indices[start + position]
                destinations[q] = targets[i]
                ranks[q] = base + position
    return offsets, sources, destinations, ranks


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedNodewiseSample:
    """The sampled subgraph of one batch of a typed graph, in PyG's node-wise layout.

    Args:
        nodes: per node type (the graph's order): int64 [n_t] global ids: the seeds of the type first (in the
            order given), then the nodes each hop added, in order of first appearance (relation by relation).
        edge_index: per relation (the graph's order): int64 [2, e_r]; row 0 the local id (into ``nodes`` of the
            relation's source type) of each edge's source, the sampled neighbor; row 1 the local id (into
            ``nodes`` of its destination type) of the node it was sampled for. Hop after hop; within a hop,
            grouped by destination in frontier order.
        edge_rank: per relation: int64 [e_r]; each edge's position among the relation's edges in CSC order
            (:meth:`~gnnscale.graph.typed.TypedGraph.edges` order).
        num_sampled_nodes: per node type, ``hops + 1`` ints: the seeds of the type, then the nodes each hop added.
        num_sampled_edges: per relation, ``hops`` ints: the edges of each hop.
    """

    nodes: tuple[Tensor, ...]
    edge_index: tuple[Tensor, ...]
    edge_rank: tuple[Tensor, ...]
    num_sampled_nodes: tuple[list[int], ...]
    num_sampled_edges: tuple[list[int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _RelationRows:
    """Where relation ``r``'s typed rows are: node ``v`` of type ``dst`` has its row at
    ``first_row + (v - dst_offset) * per_node``; its sources are of type ``src``."""

    src: int
    dst: int
    dst_offset: int
    first_row: int
    per_node: int


class TypedNodewiseSampler:
    """Samples :class:`TypedNodewiseSample` subgraphs of one typed graph, reusing the fused sampler's mapping array.

    Args:
        graph: the typed graph.
        fanouts: per relation and hop, seeds outwards (:func:`~gnnscale.sampling.typed.typed_fanouts`: one list for
            every relation, a ``{relation: [per hop]}`` mapping naming every relation, or DGL's list of dicts); -1
            keeps every in-edge, 0 none.
        replace: sample with replacement (hops with fanout -1 still take every in-edge once).

    Not safe to share between threads (the mapping array is reused by every call).
    """

    def __init__(self, graph: TypedGraph, fanouts, *, replace: bool = False) -> None:
        if not isinstance(graph, TypedGraph):
            raise TypeError(f"graph: expected a TypedGraph, got {type(graph).__name__}")
        self.graph = graph
        self.table = typed_fanouts(graph, fanouts)
        self.replace = bool(replace)
        self.rows = _relation_rows(graph)
        self.row_rank = relation_row_ranks(graph)
        self.workspace = SamplerWorkspace(graph.num_nodes)

    @property
    def fanouts(self) -> np.ndarray:
        """int64 [hops, relations]."""
        return self.table

    def sample(self, seeds, key: int) -> TypedNodewiseSample:
        """The subgraph of ``seeds`` (unique int global ids of any types, tensor or numpy array) under ``key``."""
        graph = self.graph
        seeds = check_seeds(seeds, graph.num_nodes)
        key = check_key(key)
        num_types = len(graph.node_types)
        seed_types = np.searchsorted(graph.type_offsets, seeds, side="right") - 1
        nodes = [np.empty(16, dtype=np.int64) for _ in range(num_types)]
        counts = [0] * num_types
        node_map = self.workspace.node_map
        try:
            for t in range(num_types):
                mine = seeds[seed_types == t]
                nodes[t] = grow_nodes(nodes[t], 0, 2 * mine.shape[0])
                counts[t] = relabel_all(mine.copy(), node_map, nodes[t], 0)  # the seeds take local ids 0, 1, ...
                if counts[t] != mine.shape[0]:
                    raise ValueError("seeds: expected unique node ids, got repeats")
            known = [list(counts)]  # nodes of each type known after the seeds, then after each hop
            hops = []
            for hop in range(self.table.shape[0]):
                hops.append(self._hop(hop, nodes, counts, known[-2] if hop else [0] * num_types, known[-1], key))
                known.append(list(counts))
        finally:
            for t in range(num_types):  # reset only what the batch touched
                node_map[nodes[t][:counts[t]]] = -1
        num_sampled_nodes = tuple([known[0][t]] + [b[t] - a[t] for a, b in zip(known, known[1:])]
                                  for t in range(num_types))
        return _sample_of(nodes, counts, hops, num_sampled_nodes)

    def _hop(self, hop: int, nodes: list[np.ndarray], counts: list[int], lo: list[int], hi: list[int],
             key: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Hop ``hop`` of every relation, from the frontiers ``nodes[t][lo[t]:hi[t]]``; grows ``nodes`` and ``counts``
        in place. Returns per relation ``(sources, targets, ranks)``: local ids of its types, CSC ranks."""
        parts = []  # per relation: (typed rows, frontier, local ids of the frontier, relation id)
        for r, rel in enumerate(self.rows):
            frontier = nodes[rel.dst][lo[rel.dst]:hi[rel.dst]]
            if self.table[hop, r] == 0:
                frontier = frontier[:0]
            rows = rel.first_row + (frontier - rel.dst_offset) * rel.per_node
            parts.append((rows, frontier, np.arange(lo[rel.dst], lo[rel.dst] + frontier.shape[0]),
                          np.full(frontier.shape[0], r)))
        if not parts:  # a graph without relations: nothing to draw
            return []
        rows, frontier, targets, relation = (np.concatenate(column).astype(np.int64, copy=False)
                                             for column in zip(*parts))
        offsets, sources, targets, ranks = _sample_hop(self.graph.rel_indptr, self.graph.graph.indices, self.row_rank,
                                                       rows, frontier, targets, relation, self.table[hop],
                                                       self.replace, key, hop)
        bounds = offsets[np.cumsum([0] + [p[0].shape[0] for p in parts])]  # each relation's edges, in order
        edges = []
        for r, rel in enumerate(self.rows):
            first, last = int(bounds[r]), int(bounds[r + 1])
            nodes[rel.src] = grow_nodes(nodes[rel.src], counts[rel.src], counts[rel.src] + last - first)
            # In place: the sources become local ids of their type, new ones appended in order of first appearance.
            counts[rel.src] = int(relabel_range(sources, first, last, self.workspace.node_map, nodes[rel.src],
                                                counts[rel.src]))
            edges.append((sources[first:last], targets[first:last], ranks[first:last]))
        return edges


def _sample_of(nodes: list[np.ndarray], counts: list[int], hops: list[list[tuple]],
               num_sampled_nodes: tuple[list[int], ...]) -> TypedNodewiseSample:
    """The :class:`TypedNodewiseSample` of the node lists and every hop's edges (per hop, per relation)."""
    edge_index, edge_rank, num_sampled_edges = [], [], []
    for r in range(len(hops[0])):
        parts = [hop[r] for hop in hops]
        sizes = [int(p[0].shape[0]) for p in parts]
        # One [2, e] array written in place: a PyG batch's edge_index without a stack's copy.
        pair = np.empty((2, sum(sizes)), dtype=np.int64)
        np.concatenate([p[0] for p in parts], out=pair[0])
        np.concatenate([p[1] for p in parts], out=pair[1])
        edge_index.append(torch.from_numpy(pair))
        edge_rank.append(torch.from_numpy(np.concatenate([p[2] for p in parts])))
        num_sampled_edges.append(sizes)
    return TypedNodewiseSample(nodes=tuple(torch.from_numpy(nodes[t][:c]) for t, c in enumerate(counts)),
                               edge_index=tuple(edge_index), edge_rank=tuple(edge_rank),
                               num_sampled_nodes=num_sampled_nodes, num_sampled_edges=tuple(num_sampled_edges))


def _relation_rows(graph: TypedGraph) -> tuple[_RelationRows, ...]:
    """Where each relation's typed rows are (:class:`_RelationRows`), in relation order."""
    layout = graph.row_layout()
    out = []
    for r, rel in enumerate(graph.relations):
        t = graph.type_id(rel.dst)
        j = int(np.flatnonzero(graph.in_relations(t) == r)[0])
        out.append(_RelationRows(src=graph.type_id(rel.src), dst=t, dst_offset=int(graph.type_offsets[t]),
                                 first_row=int(layout.row_start[t]) + j, per_node=layout.rows_per_node(t)))
    return tuple(out)


def relation_row_ranks(graph: TypedGraph) -> np.ndarray:
    """int64 [num_rows]: the rank of each typed row's first edge among its relation's edges in CSC order (the
    order of :meth:`~gnnscale.graph.typed.TypedGraph.edges`), so that the edge at position ``p`` of row ``row``
    is its relation's edge ``row_ranks[row] + p``."""
    ranks = np.zeros(graph.num_rows, dtype=np.int64)
    for rel in _relation_rows(graph):
        count = graph.count(graph.node_types[rel.dst])
        rows = rel.first_row + np.arange(count, dtype=np.int64) * rel.per_node
        sizes = graph.rel_indptr[rows + 1] - graph.rel_indptr[rows]
        ranks[rows] = np.cumsum(sizes) - sizes
    return ranks
