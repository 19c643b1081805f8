"""Node-wise neighbor sampling in PyG's layout: each hop samples only the nodes the previous hop added.

The block sampler (:func:`gnnscale.sampling.sample_blocks`) samples, at hop ``h``, every node known
so far, because a layered model needs every destination of a layer to be a source of the next one.
PyG's ``NeighborLoader`` instead samples at hop ``h`` only the *frontier*: the nodes that hop
``h - 1`` added (the seeds at hop 0), and returns one edge list for all hops. This module draws that
layout with the fused sampler's kernels and keys: the neighbors of node ``v`` at hop ``h`` depend only
on ``(key, h, v)``, so hop 0 is exactly the block sampler's first hop for the same key.

Neighbors are chosen as *positions* in the CSC ``indices`` array (the same random draws as the fused
kernel's: a draw depends only on the key, the node and its degree), so that every sampled edge knows
where it sits in the graph (its edge id, or an id looked up from the position); its source is then
``indices[position]``. One parallel pass per hop chooses, looks up sources and ids and writes the
destinations; the relabel to local ids is the one serial pass.

The tiny example, in-edges ``0: [2]  1: [0, 3, 4]  2: [1]  3: [0]  4: [2]`` and seed 1, all neighbors::

    hop 0: frontier [1]        -> edges 0->1, 3->1, 4->1   nodes [1, 0, 3, 4]
    hop 1: frontier [0, 3, 4]  -> edges 2->0, 0->3, 2->4   nodes [1, 0, 3, 4, 2]

    num_sampled_nodes [1, 3, 1], num_sampled_edges [3, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling import check_fanouts, check_key, check_seeds
from gnnscale.sampling.block import Block
# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import PIECE_NODES, choose_positions, count_and_offsets, prefetch_ahead
from gnnscale.sampling.fused import SamplerWorkspace, expand_hops, grow_nodes, relabel_all

@numba.njit(parallel=True, cache=True, nogil=True)
def _sample_frontier(indptr, indices, edge_ids, frontier, first_local, offsets, fanout, replace, key, hop):
    """One hop: choose the in-edges of every ``frontier`` node into its slots ``offsets[i]:offsets[i + 1]``.

    Returns int64 arrays [offsets[-1]]: the chosen edges' sources (global ids), their destinations
    (local ids: ``first_local + i`` for ``frontier[i]``) and their edge ids (``edge_ids[position]``,
    or the CSC position itself when ``edge_ids`` is None). One parallel pass: the positions are drawn
    into the edge-id slots (:func:`choose_positions`, the fused kernel's draws), then each slot is
    turned into its source and edge id while the node's neighborhood is still in cache.
    """
    num_edges = offsets[-1]
    sources = np.empty(num_edges, dtype=np.int64)
    targets = np.empty(num_edges, dtype=np.int64)
    ids = np.empty(num_edges, dtype=np.int64)
    n = frontier.shape[0]
    for piece in numba.prange((n + PIECE_NODES - 1) // PIECE_NODES):
        lo = piece * PIECE_NODES
        hi = min(lo + PIECE_NODES, n)
        for i in range(lo, hi):
            prefetch_ahead(indptr, indices, frontier, i, hi)
            v = frontier[i]
            first, last = offsets[i], offsets[i + 1]
            choose_positions(indptr, v, v, fanout, replace, key, hop, ids, first)
            start = indptr[v]
            for k in range(first, last):
                position = start + ids[k]
                sources[k] = indices[position]
                targets[k] = first_local + i
                if edge_ids is None:
                    ids[k] = position
                else:
                    ids[k] = edge_ids[position]
    return sources, targets, ids


@dataclass(frozen=True, slots=True, kw_only=True)
class NodewiseSubgraph:
    """The sampled subgraph of one batch, in PyG's node-wise layout.

    Args:
        nodes: int64 [num_nodes]; global ids: the seeds first (same order), then the nodes each hop
            added, in order of first appearance (PyG's ``n_id``).
        edge_index: int64 [2, num_edges]; row 0 the local id (into ``nodes``) of each edge's source,
            the sampled neighbor; row 1 the local id of its destination, the node it was sampled for.
            Edges come hop after hop; within a hop, grouped by destination in frontier order.
        row, col: int64 [num_edges]; ``edge_index[0]`` and ``edge_index[1]`` (views).
        num_sampled_nodes: ``len(fanouts) + 1`` ints; the seeds, then the nodes each hop added.
        num_sampled_edges: ``len(fanouts)`` ints; the edges of each hop.
    """

    nodes: Tensor
    edge_index: Tensor
    row: Tensor
    col: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]

    @property
    def batch_size(self) -> int:
        return self.num_sampled_nodes[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodewiseSample(NodewiseSubgraph):
    """A :class:`NodewiseSubgraph` drawn from the graph itself, which knows where its edges sit.

    Args:
        edge_pos: int64 [num_edges]; each edge's position in the graph's CSC ``indices``, or, for a
            sampler given ``edge_ids``, ``edge_ids[position]``.
    """

    edge_pos: Tensor


class NodewiseSampler:
    """Samples :class:`NodewiseSample` subgraphs of one graph, reusing the fused sampler's mapping array.

    Args:
        graph: the topology (in-edges per node).
        fanouts: neighbors per frontier node per hop, seeds outwards; -1 keeps every in-edge, 0 none
            (:func:`gnnscale.sampling.check_fanouts`).
        replace: sample with replacement (hops with fanout -1 still take every in-edge once).
        edge_ids: optional int64 array [num_edges]: the id to report for the edge at each CSC position
            (e.g. its column in a PyG ``edge_index`` that is not sorted by target). Default None: the
            position itself.

    Not safe to share between threads (the mapping array is reused by every call).
    """

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int], *, replace: bool = False,
                 edge_ids: np.ndarray | None = None) -> None:
        if not isinstance(graph, CSCGraph):
            raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
        if edge_ids is not None and (not isinstance(edge_ids, np.ndarray) or edge_ids.dtype != np.int64
                                     or edge_ids.shape != (graph.num_edges,)):
            raise ValueError(f"edge_ids: expected an int64 array [num_edges = {graph.num_edges}] or None, got "
                             f"{getattr(edge_ids, 'dtype', type(edge_ids).__name__)} of shape "
                             f"{getattr(edge_ids, 'shape', None)}")
        self.graph = graph
        self.fanouts = check_fanouts(fanouts, "num_neighbors")
        self.replace = bool(replace)
        self.edge_ids = edge_ids
        self.workspace = SamplerWorkspace(graph.num_nodes)

    def sample(self, seeds, key: int) -> NodewiseSample:
        """The subgraph of ``seeds`` (unique int node ids, tensor or numpy array) under ``key``."""
        seeds = check_seeds(seeds, self.graph.num_nodes)
        key = check_key(key)
        indptr, indices = self.graph.indptr, self.graph.indices
        frontier_start = [0]  # where the current hop's frontier begins in the node list
        targets, ids = [], []

        def sample_hop(nodes, num_dst, num_known, fanout, hop):
            first = frontier_start[0]
            frontier = nodes[first:num_dst]
            offsets = count_and_offsets(indptr, frontier, 0, fanout, self.replace)
            sources, hop_targets, hop_ids = _sample_frontier(indptr, indices, self.edge_ids, frontier, first, offsets,
                                                             fanout, self.replace, key, hop)
            nodes = grow_nodes(nodes, num_known, num_known + sources.shape[0])
            num_known = relabel_all(sources, self.workspace.node_map, nodes, num_known)  # in place: local ids
            frontier_start[0] = num_dst
            targets.append(hop_targets)
            ids.append(hop_ids)
            return offsets, sources, nodes, num_known

        nodes, hops = expand_hops(seeds, self.fanouts, self.workspace, sample_hop)
        num_sampled_edges = [int(local.shape[0]) for _, local, _, _ in hops]
        # One [2, num_edges] array, written in place: a PyG batch's edge_index without a stack's copy.
        edge_index = np.empty((2, sum(num_sampled_edges)), dtype=np.int64)
        np.concatenate([local for _, local, _, _ in hops], out=edge_index[0])
        np.concatenate(targets, out=edge_index[1])
        edge_index = torch.from_numpy(edge_index)
        num_sampled_nodes = [int(seeds.shape[0])] + [int(num_src - num_dst) for _, _, num_dst, num_src in hops]
        return NodewiseSample(nodes=torch.from_numpy(nodes), edge_index=edge_index, row=edge_index[0],
                              col=edge_index[1], edge_pos=torch.from_numpy(np.concatenate(ids)),
                              num_sampled_nodes=num_sampled_nodes, num_sampled_edges=num_sampled_edges)


@numba.njit(parallel=True, cache=True, nogil=True)
def _frontier_sources(indptr, indices, frontier, offsets):
    """int64 [offsets[-1]]: the sources (local ids) of the in-edges of every ``frontier`` destination,
    in frontier order, each destination's edges in block order."""
    out = np.empty(offsets[-1], dtype=np.int64)
    for i in numba.prange(frontier.shape[0]):
        lo, f = offsets[i], frontier[i]
        for p in range(indptr[f], indptr[f + 1]):
            out[lo + p - indptr[f]] = indices[p]
    return out


def nodewise_from_blocks(blocks: Sequence[Block]) -> tuple[NodewiseSubgraph, Tensor]:
    """The node-wise subgraph inside a batch's layered blocks, and where its nodes sit among the
    blocks' sources.

    The blocks of :func:`~gnnscale.sampling.sample_blocks` (model order, input layer first) sample at hop
    ``h`` every node known so far; PyG's layout samples only the frontier (the nodes hop ``h - 1``
    added). A node's neighbors at hop ``h`` depend only on ``(key, h, node)``, so the frontier's edges
    are all in the blocks: this keeps them (and the nodes they reach) and drops the rest. For blocks of
    the fused kernel (or any sampler drawing the same blocks: hybrid, vanilla, matrix) the result is
    exactly :meth:`NodewiseSampler.sample` with the same seeds and key (``edge_pos`` aside).

    Returns:
        the subgraph (``nodes`` global ids), and ``rows``: int64 [num_nodes], the position of every
        node of the subgraph among ``blocks[0].src_ids`` (the rows of the blocks' input features).
    """
    if len(blocks) == 0:
        raise ValueError("blocks: expected at least one block, got none")
    all_ids = blocks[0].src_ids
    num_seeds = blocks[-1].num_dst
    node_map = np.full(all_ids.shape[0], -1, dtype=np.int64)  # block-local id -> node-wise id
    order = np.empty(all_ids.shape[0], dtype=np.int64)  # node-wise id -> block-local id
    order[:num_seeds] = np.arange(num_seeds)
    node_map[:num_seeds] = order[:num_seeds]  # the seeds lead both orders
    lo, num_known = 0, num_seeds
    rows, cols, counts = [], [], [num_seeds]
    for block in reversed(blocks):  # seeds outwards
        indptr = block.indptr.numpy()
        frontier = order[lo:num_known]
        degrees = indptr[frontier + 1] - indptr[frontier]
        offsets = np.zeros(frontier.shape[0] + 1, dtype=np.int64)
        np.cumsum(degrees, out=offsets[1:])
        src = _frontier_sources(indptr, block.indices.numpy(), frontier, offsets)
        hi = relabel_all(src, node_map, order, num_known)  # first appearance, as the node-wise sampler's
        rows.append(src)
        cols.append(np.repeat(np.arange(lo, num_known, dtype=np.int64), degrees))
        counts.append(hi - num_known)
        lo, num_known = num_known, hi
    positions = torch.from_numpy(order[:num_known])
    edge_index = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]))
    sub = NodewiseSubgraph(nodes=all_ids[positions], edge_index=edge_index, row=edge_index[0], col=edge_index[1],
                           num_sampled_nodes=counts, num_sampled_edges=[int(r.shape[0]) for r in rows])
    return sub, positions
