"""Neighbor sampling of typed graphs: the fused kernel with a fanout per relation, its two-step per-relation
baseline, and the typed blocks a layer consumes relation by relation.

**Law.** At hop ``h`` every destination ``v`` draws, for each relation ``r`` whose destination type is ``v``'s,
``fanouts[h][r]`` of its in-neighbors by ``r`` (-1: all of them, 0: none) with the fused kernel's choice
(:func:`gnnscale.sampling.choose.choose_neighbors`) from the stream ``(key, h + r * RELATION_SLOT, v)``: relation
0's draws are the homogeneous kernel's, and a typed graph of one relation samples exactly as its plain graph.
The blocks are the fused kernel's: destinations first, new sources numbered by first appearance in edge order,
each destination's edges grouped by relation in relation-id order.

**Blocks.** A :class:`TypedBlock` holds, per relation, the CSC of that relation's edges over the block's
destinations of the relation's destination type (:class:`RelationBlock`), all sharing the block's source list:
what a per-relation layer (R-GCN, R-SAGE, R-GAT: one operator per relation, summed per destination) reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numba
import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.typed import TypedGraph, TypedSchema, parse_relation
from gnnscale.sampling import BatchSampler, check_fanouts, check_key, check_seeds
from gnnscale.sampling.choose import ALL_NEIGHBORS, choose_neighbors, num_chosen
from gnnscale.sampling.fused import SamplerWorkspace, expand_hops, grow_nodes, relabel_all
from gnnscale.sampling.reference import to_block_coo

# Streams of relation r at hop h: h + r * RELATION_SLOT (hops stay far below it).
RELATION_SLOT = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class RelationBlock:
    """One relation's edges in a typed block.

    Args:
        dst: int64 [n]: the block's destinations of the relation's destination type, as positions in the block's
            destination list, ascending.
        indptr: int64 [n + 1]: in-edges of ``dst[i]`` by the relation are ``indices[indptr[i]:indptr[i + 1]]``.
        indices: int64 [edges]: local source ids (positions in the block's ``src_ids``).
    """

    dst: Tensor
    indptr: Tensor
    indices: Tensor

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def moved(self, move) -> RelationBlock:
        """This block with ``move`` applied to each of its tensors (the copy stage's, or ``.to``)."""
        return RelationBlock(dst=move(self.dst), indptr=move(self.indptr), indices=move(self.indices))


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedBlock:
    """One layer's message-flow graph of a typed graph.

    Args:
        src_ids: int64 [num_src]: global ids of the sources; ``src_ids[:num_dst]`` are the destinations.
        num_dst: number of destinations.
        relations: one :class:`RelationBlock` per relation of the graph, in relation-id order.
    """

    src_ids: Tensor
    num_dst: int
    relations: tuple[RelationBlock, ...]

    @property
    def num_src(self) -> int:
        return int(self.src_ids.shape[0])

    @property
    def num_edges(self) -> int:
        return sum(r.num_edges for r in self.relations)

    @property
    def dst_ids(self) -> Tensor:
        return self.src_ids[: self.num_dst]

    def moved(self, move) -> TypedBlock:
        """This block with ``move`` applied to each of its tensors (the copy stage's, or ``.to``)."""
        return TypedBlock(src_ids=move(self.src_ids), num_dst=self.num_dst,
                          relations=tuple(r.moved(move) for r in self.relations))

    def to(self, device: torch.device | str) -> TypedBlock:
        return self.moved(lambda t: t.to(device))


class TypedNeighborSampler(BatchSampler):
    """Samples typed blocks for a fixed typed graph and per-relation fanouts, reusing one mapping array.

    Args:
        graph: the typed graph.
        fanouts: per relation and hop (:func:`typed_fanouts`: one list for all relations, a dict, or DGL's list).
        replace: draw with replacement.
        method: ``"fused"`` or ``"two_step"`` (the same blocks).
    """

    def __init__(self, graph: TypedGraph, fanouts, *, replace: bool = False, method: str = "fused") -> None:
        if method not in ("fused", "two_step"):
            raise ValueError(f"method: expected 'fused' or 'two_step', got {method!r}")
        self.graph, self.table, self.replace, self.method = graph, typed_fanouts(graph, fanouts), replace, method
        self.kernel = TypedKernel(graph)
        self.workspace = SamplerWorkspace(graph.num_nodes) if method == "fused" else None

    @property
    def fanouts(self) -> np.ndarray:
        """int64 [layers, relations]."""
        return self.table

    def sample(self, seeds, key: int) -> list[TypedBlock]:
        seeds = check_seeds(seeds, self.graph.num_nodes)
        key = check_key(key)
        if self.method == "fused":
            nodes, hops = typed_fused_hops(self.kernel, seeds, self.table, key, bool(self.replace), self.workspace)
        else:
            nodes, hops = typed_two_step_hops(self.kernel, seeds, self.table, key, bool(self.replace))
        return typed_blocks_from_hops(nodes, hops, self.graph)


def typed_fanouts(graph: TypedGraph | TypedSchema, fanouts) -> np.ndarray:
    """int64 [layers, relations]: the fanout of every relation at every hop, seeds outwards.

    ``fanouts`` is one list for every relation (``[15, 10]``), a ``{relation: [per hop]}`` mapping naming every
    relation (PyG's ``num_neighbors`` dict; a relation as ``"src__name__dst"``, a tuple or a Relation), or a list
    of ``{relation: fanout}`` per hop (DGL's). Fanouts follow the one rule of every sampler (-1: all, 0: none).
    """
    rels = len(graph.relations)
    if isinstance(fanouts, Mapping):
        per_relation = {graph.relation_id(rel): check_fanouts(list(hops), f"fanouts of {parse_relation(rel)}")
                        for rel, hops in fanouts.items()}
        missing = [str(graph.relations[r]) for r in range(rels) if r not in per_relation]
        if missing:
            raise ValueError(f"fanouts: expected a fanout list for every relation, missing {', '.join(missing)}")
        layers = {len(hops) for hops in per_relation.values()}
        if len(layers) != 1:
            raise ValueError(f"fanouts: expected the same number of hops for every relation, got {sorted(layers)}")
        return np.array([[per_relation[r][h] for r in range(rels)] for h in range(layers.pop())], dtype=np.int64)
    if isinstance(fanouts, Sequence) and fanouts and all(isinstance(f, Mapping) for f in fanouts):
        return np.stack([typed_fanouts(graph, {rel: [k] for rel, k in hop.items()})[0] for hop in fanouts])
    hops = check_fanouts(fanouts)
    return np.array([[k] * rels for k in hops], dtype=np.int64)


@numba.njit(inline="always")
def _rows_of(v, type_offsets, row_start, rel_start):
    """``(t, first row, rows)`` of node ``v``: its type, its first typed row and how many it has."""
    t = 0
    while v >= type_offsets[t + 1]:
        t += 1
    k = rel_start[t + 1] - rel_start[t]
    return t, row_start[t] + (v - type_offsets[t]) * k, k


@numba.njit(parallel=True, cache=True, nogil=True)
def _typed_offsets(rel_indptr, type_offsets, row_start, rel_start, rel_ids, nodes, fanouts, replace):
    """int64 [len(nodes) + 1]: prefix sums of every destination's draws over all its relations."""
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in numba.prange(n):
        t, first, k = _rows_of(nodes[i], type_offsets, row_start, rel_start)
        total = 0
        for j in range(k):
            row = first + j
            total += num_chosen(rel_indptr[row + 1] - rel_indptr[row], fanouts[rel_ids[rel_start[t] + j]], replace)
        offsets[i + 1] = total
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets


@numba.njit(parallel=True, cache=True, nogil=True)
def _typed_choose(rel_indptr, indices, type_offsets, row_start, rel_start, rel_ids, nodes, offsets, fanouts,
                  replace, key, hop):
    """(chosen global sources, relation of each) of every destination, in CSC order: a destination's draws by
    relation, in relation-id order."""
    chosen = np.empty(offsets[-1], dtype=np.int64)
    relation = np.empty(offsets[-1], dtype=np.int64)
    for i in numba.prange(nodes.shape[0]):
        v = nodes[i]
        t, first, k = _rows_of(v, type_offsets, row_start, rel_start)
        at = offsets[i]
        for j in range(k):
            row = first + j
            r = rel_ids[rel_start[t] + j]
            fanout = fanouts[r]
            got = num_chosen(rel_indptr[row + 1] - rel_indptr[row], fanout, replace)
            choose_neighbors(rel_indptr, indices, row, v, fanout, replace, key, hop + r * RELATION_SLOT, chosen, at)
            relation[at:at + got] = r
            at += got
    return chosen, relation


class TypedKernel:
    """What the typed kernels read of a :class:`TypedGraph`, gathered once per sampler."""

    def __init__(self, graph: TypedGraph) -> None:
        layout = graph.row_layout()
        self.graph = graph
        self.rel_indptr, self.indices = graph.rel_indptr, graph.graph.indices
        self.type_offsets = graph.type_offsets
        self.row_start, self.rel_start, self.rel_ids = layout.row_start, layout.rel_start, layout.rel_ids

    def offsets(self, nodes: np.ndarray, fanouts: np.ndarray, replace: bool) -> np.ndarray:
        return _typed_offsets(self.rel_indptr, self.type_offsets, self.row_start, self.rel_start, self.rel_ids, nodes,
                              fanouts, replace)

    def choose(self, nodes: np.ndarray, offsets: np.ndarray, fanouts: np.ndarray, replace: bool, key: int,
               hop: int) -> tuple[np.ndarray, np.ndarray]:
        return _typed_choose(self.rel_indptr, self.indices, self.type_offsets, self.row_start, self.rel_start,
                             self.rel_ids, nodes, offsets, fanouts, replace, key, hop)

    def draw(self, nodes: np.ndarray, fanouts: np.ndarray, replace: bool, key: int,
             hop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop of the fused kernel for destinations ``nodes``: ``(offsets, chosen, relation)``, the CSC
        offsets of their draws, the chosen global sources and the relation of each."""
        offsets = self.offsets(nodes, fanouts, replace)
        return offsets, *self.choose(nodes, offsets, fanouts, replace, key, hop)


def typed_fused_hops(kernel: TypedKernel, seeds: np.ndarray, fanouts: np.ndarray, key: int, replace: bool,
                     workspace: SamplerWorkspace):
    """Every hop with the fused kernel: ``(nodes, hops)`` as :func:`gnnscale.sampling.fused.expand_hops`, each
    hop's entry with the relation of every edge appended: ``(indptr, local sources, num_dst, num_src, relation)``.
    ``kernel``: anything that draws a hop as :meth:`TypedKernel.draw` does (the vanilla layout's asks the owners)."""
    relations = []

    def sample_hop(nodes, num_dst, num_known, _fanout, hop):
        offsets, chosen, relation = kernel.draw(nodes[:num_dst], fanouts[hop], replace, key, hop)
        nodes = grow_nodes(nodes, num_known, num_known + offsets[-1])
        num_known = relabel_all(chosen, workspace.node_map, nodes, num_known)
        relations.append(relation)
        return offsets, chosen, nodes, num_known

    nodes, hops = expand_hops(seeds, tuple(range(fanouts.shape[0])), workspace, sample_hop)
    return nodes, [(*hop, relation) for hop, relation in zip(hops, relations)]


def typed_two_step_hops(kernel: TypedKernel, seeds: np.ndarray, fanouts: np.ndarray, key: int, replace: bool):
    """The same hops the two-step way, relation by relation as DGL's ``sample_neighbors`` with a fanout dict and
    ``to_block`` do: per relation, its destinations' draws as COO; the relations' COO concatenated and ordered by
    destination (stable, so relation order stays within one); the local numbering; CSC. The baseline the fused
    kernel is measured against, and the same blocks."""
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise ValueError("seeds: expected unique node ids, found duplicates")
    graph = kernel.graph
    dst_nodes = seeds
    hops = []
    for hop in range(fanouts.shape[0]):
        dst_type = np.searchsorted(kernel.type_offsets, dst_nodes, side="right") - 1
        src_parts, dst_parts, rel_parts = [], [], []
        for r, rel in enumerate(graph.relations):
            t = graph.type_id(rel.dst)
            where = np.nonzero(dst_type == t)[0]
            sub = np.zeros(len(graph.relations), dtype=np.int64)  # this relation's fanout only
            sub[r] = fanouts[hop, r]
            offsets = kernel.offsets(dst_nodes[where], sub, replace)
            chosen, _ = kernel.choose(dst_nodes[where], offsets, sub, replace, key, hop)
            src_parts.append(chosen)
            dst_parts.append(np.repeat(where, np.diff(offsets)))
            rel_parts.append(np.full(chosen.shape[0], r, dtype=np.int64))
        src, dst_pos, rel = (np.concatenate(p) for p in (src_parts, dst_parts, rel_parts))
        order = np.argsort(dst_pos, kind="stable")  # by destination; relations in id order within one
        src, dst_pos, rel = src[order], dst_pos[order], rel[order]
        src_nodes, local_src, _ = to_block_coo(src, dst_nodes[dst_pos], dst_nodes)
        indptr = np.zeros(dst_nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst_pos, minlength=dst_nodes.shape[0]), out=indptr[1:])
        hops.append((indptr, local_src.astype(np.int64), dst_nodes.shape[0], src_nodes.shape[0], rel))
        dst_nodes = src_nodes
    return dst_nodes, hops


def relation_blocks(indptr: np.ndarray, local_src: np.ndarray, relation: np.ndarray, dst_types: np.ndarray,
                    graph: TypedGraph | TypedSchema) -> tuple[RelationBlock, ...]:
    """Split one hop's CSC (every relation's edges, grouped by relation within a destination) into one
    :class:`RelationBlock` per relation, over the destinations of its destination type."""
    num_dst = indptr.shape[0] - 1
    dst_of_edge = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(indptr))
    out = []
    for r, rel in enumerate(graph.relations):
        dst = np.nonzero(dst_types == graph.type_id(rel.dst))[0].astype(np.int64)
        mine = relation == r
        counts = np.bincount(dst_of_edge[mine], minlength=num_dst)[dst]
        rel_indptr = np.zeros(dst.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=rel_indptr[1:])
        out.append(RelationBlock(dst=torch.from_numpy(dst), indptr=torch.from_numpy(rel_indptr),
                                 indices=torch.from_numpy(np.ascontiguousarray(local_src[mine], dtype=np.int64))))
    return tuple(out)


def typed_blocks_from_hops(nodes: np.ndarray, hops: list, graph: TypedGraph | TypedSchema) -> list[TypedBlock]:
    """The hops (seeds outwards) as typed blocks in model order (input layer first); ``graph``: the typed graph, or
    its schema (all this reads of it)."""
    src_ids = torch.from_numpy(np.ascontiguousarray(nodes, dtype=np.int64))
    node_types = np.searchsorted(graph.type_offsets, nodes, side="right") - 1
    blocks = [TypedBlock(src_ids=src_ids[:num_src], num_dst=int(num_dst),
                         relations=relation_blocks(indptr, local, relation, node_types[:num_dst], graph))
              for indptr, local, num_dst, num_src, relation in hops]
    return blocks[::-1]


def sample_typed_blocks(graph: TypedGraph, seeds, fanouts, *, key: int, replace: bool = False,
                        method: str = "fused") -> list[TypedBlock]:
    """The typed blocks of ``seeds`` (global ids, unique), one per hop, in model order (input layer first).

    Args:
        graph: the typed graph.
        seeds: int global node ids (of any types).
        fanouts: per relation and hop (:func:`typed_fanouts`), seeds outwards.
        key: the batch's key (:func:`gnnscale.keys.derive_key`).
        replace: draw with replacement.
        method: ``"fused"`` (the kernel) or ``"two_step"`` (the per-relation baseline): the same blocks.
    """
    if not isinstance(graph, TypedGraph):
        raise TypeError(f"graph: expected a TypedGraph, got {type(graph).__name__}")
    return TypedNeighborSampler(graph, fanouts, replace=replace, method=method).sample(seeds, key)


__all__ = ["ALL_NEIGHBORS", "RELATION_SLOT", "RelationBlock", "TypedBlock", "TypedNeighborSampler", "sample_typed_blocks",
           "typed_fanouts"]
