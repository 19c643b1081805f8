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

from gnnscale.graph.csc import index_dtype
from gnnscale.graph.typed import SEPARATOR, Relation, TypedGraph, TypedSchema, parse_relation
from gnnscale.sampling import BatchSampler, check_fanouts, check_key, check_seeds
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.sampling.fused import (SamplerWorkspace, claimed_nodes, expand_hops, grow_nodes, pipeline_chunks,
                                     relabel_all)
from gnnscale.sampling.reference import to_block_coo
from gnnscale.sampling.typed_kernels import (RELATION_SLOT, relation_layout, typed_choose_all,
                                             typed_choose_and_relabel, typed_counts)


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


class TypedWorkspace:
    """The fused typed sampler's arrays, reused across batches (not safe to share between threads).

    ``node_map`` maps global node ``v`` to local id ``node_map[v] - base`` where that is >= 0
    (:func:`~gnnscale.sampling.fused.relabel_into`). Each batch takes ``base`` past the previous batch's ids, so no
    entry needs a reset between batches (the homogeneous workspace resets every entry a batch touched, one random
    write per node); the array is refilled only when ``base`` would leave its dtype. ``chosen`` holds one hop's
    draws before they are relabelled, grown as needed.
    """

    def __init__(self, num_nodes: int, chosen_dtype: np.dtype) -> None:
        self.node_map = np.full(num_nodes, -1, dtype=index_dtype(num_nodes))
        self.base = 0
        self.chosen = np.empty(0, dtype=chosen_dtype)

    def begin(self) -> int:
        """The base of a new batch (local ids below the graph's node count never pass the dtype's maximum)."""
        if self.base > np.iinfo(self.node_map.dtype).max - self.node_map.shape[0]:
            self.node_map.fill(-1)
            self.base = 0
        return self.base

    def end(self, num_known: int) -> None:
        """Retire the ids of a batch that knew at most ``num_known`` nodes."""
        self.base += min(num_known, self.node_map.shape[0])

    def chosen_buffer(self, size: int) -> np.ndarray:
        """The draws' buffer, with room for at least ``size`` ids."""
        if self.chosen.shape[0] < size:
            self.chosen = np.empty(max(size, 2 * self.chosen.shape[0]), dtype=self.chosen.dtype)
        return self.chosen


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
        self.workspace = TypedWorkspace(graph.num_nodes, self.kernel.chosen_dtype) if method == "fused" else None

    @property
    def fanouts(self) -> np.ndarray:
        """int64 [layers, relations]."""
        return self.table

    def sample(self, seeds, key: int) -> list[TypedBlock]:
        seeds = check_seeds(seeds, self.graph.num_nodes)
        key = check_key(key)
        if self.method == "fused":
            return typed_fused_blocks(self.kernel, seeds, self.table, key, bool(self.replace), self.workspace)
        return typed_two_step_blocks(self.kernel, seeds, self.table, key, bool(self.replace))


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


def find_relation(graph: TypedGraph | TypedSchema, text: str, name: str = "relation") -> Relation:
    """The relation of ``graph`` that ``text`` names: ``"src__name__dst"``, or the relation's name alone where no
    other relation has it (``"cites"``, as DGL and GraphStorm accept an edge type's name). ``name``: what the error
    calls the setting."""
    if SEPARATOR in text:
        try:
            rel = parse_relation(text)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        if rel in graph.relations:
            return rel
        raise ValueError(f"{name}: the graph has no relation {rel}; it has {', '.join(map(str, graph.relations))}")
    named = [rel for rel in graph.relations if rel.name == text]
    if len(named) == 1:
        return named[0]
    if named:
        raise ValueError(f"{name}: {len(named)} relations are named {text!r} ({', '.join(map(str, named))}); name "
                         f"one as src{SEPARATOR}name{SEPARATOR}dst")
    raise ValueError(f"{name}: the graph has no relation named {text!r}; it has "
                     f"{', '.join(map(str, graph.relations))}")


def with_relation_fanouts(graph: TypedGraph | TypedSchema, fanouts: Sequence[int],
                          own: Mapping[str, Sequence[int]]) -> Sequence[int] | dict[Relation, tuple[int, ...]]:
    """``fanouts`` for every relation of ``graph`` but those ``own`` names (:func:`find_relation`), which take their
    own (per hop, seeds outwards; one value: every hop), as :func:`typed_fanouts` reads it: ``fanouts`` itself when
    ``own`` is empty, else ``{relation: fanouts per hop}`` naming every relation. What ``--relation-fanouts`` sets,
    GraphStorm's ``writes:10@cites:5`` with a default for the relations it leaves out."""
    if not own:
        return fanouts
    hops = check_fanouts(fanouts)
    table, named = dict.fromkeys(graph.relations, hops), set()
    for text, per_hop in own.items():
        rel = find_relation(graph, text, "relation_fanouts")
        if rel in named:
            raise ValueError(f"relation_fanouts: {rel} is named twice")
        named.add(rel)
        per_hop = check_fanouts(list(per_hop), f"relation_fanouts: {rel}")
        if len(per_hop) not in (1, len(hops)):
            raise ValueError(f"relation_fanouts: {rel} has {len(per_hop)} fanouts, expected 1 (every hop) or "
                             f"{len(hops)} (one per hop, as fanouts {list(hops)})")
        table[rel] = per_hop * len(hops) if len(per_hop) == 1 else per_hop
    return table


class TypedKernel:
    """What the typed kernels (:mod:`gnnscale.sampling.typed_kernels`) read of a :class:`TypedGraph`, gathered once
    per sampler."""

    def __init__(self, graph: TypedGraph) -> None:
        layout = graph.row_layout()
        self.graph = graph
        self.rel_indptr, self.indices = graph.rel_indptr, graph.graph.indices
        self.type_offsets = graph.type_offsets
        self.row_start, self.rel_start, self.rel_ids = layout.row_start, layout.rel_start, layout.rel_ids
        # The draws' buffer holds node ids and, mid-draw, positions within a row.
        self.chosen_dtype = index_dtype(max(graph.num_nodes, self.indices.shape[0]))
        self.rel_dst_types = tuple(graph.type_id(rel.dst) for rel in graph.relations)

    def counts(self, nodes: np.ndarray, fanouts: np.ndarray, replace: bool) -> tuple[np.ndarray, ...]:
        """``(types, row_base, counts, offsets)`` of destinations ``nodes`` (:func:`typed_counts`)."""
        return typed_counts(self.rel_indptr, self.type_offsets, self.row_start, self.rel_start, self.rel_ids, nodes,
                            fanouts, replace)

    def choose(self, nodes: np.ndarray, shape: tuple[np.ndarray, ...], fanouts: np.ndarray, replace: bool, key: int,
               hop: int) -> np.ndarray:
        """int64: the chosen global sources of destinations ``nodes`` in CSC order; ``shape`` is their
        :meth:`counts`."""
        return typed_choose_all(self.rel_indptr, self.indices, self.type_offsets, self.row_start, self.rel_start,
                                self.rel_ids, nodes, *shape, fanouts, replace, key, hop, numba.get_num_threads())

    def choose_and_relabel(self, nodes: np.ndarray, num_dst: int, shape: tuple[np.ndarray, ...],
                           row_slot: np.ndarray, fanouts: np.ndarray, replace: bool, key: int, hop: int,
                           workspace: TypedWorkspace, base: int, num_known: int) -> tuple[np.ndarray, int]:
        """(local ids in relation-major order, new number of known nodes) of destinations ``nodes[:num_dst]``,
        new sources appended to ``nodes`` (:func:`typed_choose_and_relabel`) with the batch's ``base``."""
        threads = numba.get_num_threads()
        local, known = typed_choose_and_relabel(self.rel_indptr, self.indices, self.type_offsets, self.row_start,
                                                self.rel_start, self.rel_ids, nodes, num_dst, *shape, row_slot,
                                                pipeline_chunks(shape[3], threads), fanouts, replace, key, hop,
                                                workspace.node_map, base, num_known, threads,
                                                workspace.chosen_buffer(int(shape[3][-1])))
        return local, int(known)

    def draw(self, nodes: np.ndarray, fanouts: np.ndarray, replace: bool, key: int,
             hop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop's draws for destinations ``nodes``, not relabelled: ``(offsets, chosen, relation)``, the CSC
        offsets of their draws, the chosen global sources and the relation of each (what an owner sends back in
        the vanilla layout, :mod:`gnnscale.distributed.typed_sampling`). The same streams as the fused kernel."""
        shape = self.counts(nodes, fanouts, replace)
        types, row_base, counts, offsets = shape
        # Row p belongs to destination dest[p]; its relation is that type's (p - row_base[dest[p]])-th.
        dest = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), np.diff(row_base))
        row_relation = self.rel_ids[self.rel_start[types[dest]] + np.arange(row_base[-1]) - row_base[dest]]
        return offsets, self.choose(nodes, shape, fanouts, replace, key, hop), np.repeat(row_relation, counts)


def typed_fused_blocks(kernel: TypedKernel, seeds: np.ndarray, fanouts: np.ndarray, key: int, replace: bool,
                       workspace: TypedWorkspace) -> list[TypedBlock]:
    """Every hop with the fused kernel, as typed blocks in model order (input layer first)."""
    base = workspace.begin()
    nodes = claimed_nodes(seeds, workspace.node_map, base)
    num_known = seeds.shape[0]
    hops = []
    try:
        for hop in range(fanouts.shape[0]):
            num_dst = num_known
            shape = kernel.counts(nodes[:num_dst], fanouts[hop], replace)
            by_type, type_bounds, indptrs, indptr_bounds, edge_bounds, row_slot = relation_layout(
                *shape[:3], kernel.rel_start, kernel.rel_ids)
            nodes = grow_nodes(nodes, num_known, num_known + shape[3][-1])
            local, num_known = kernel.choose_and_relabel(nodes, num_dst, shape, row_slot, fanouts[hop], replace, key,
                                                         hop, workspace, base, num_known)
            hops.append((num_dst, num_known, (by_type, type_bounds, indptrs, indptr_bounds, local, edge_bounds)))
    finally:
        workspace.end(nodes.shape[0])  # what a hop that raised may have mapped: at most the node list's room
    src_ids = torch.from_numpy(nodes[:num_known])
    blocks = [TypedBlock(src_ids=src_ids[:num_src], num_dst=int(num_dst),
                         relations=split_relation_blocks(split, kernel.rel_dst_types))
              for num_dst, num_src, split in hops]
    return blocks[::-1]


def split_relation_blocks(split: tuple[np.ndarray, ...], dst_types: tuple[int, ...]) -> tuple[RelationBlock, ...]:
    """The :class:`RelationBlock` of every relation (views, no copies) from a hop's :func:`relation_layout` and its
    relation-major local ids: ``(by_type, type_bounds, indptrs, indptr_bounds, local ids, edge_bounds)``;
    ``dst_types``: each relation's destination type."""
    by_type, indptrs, indices = (torch.from_numpy(split[i]) for i in (0, 2, 4))
    type_bounds, indptr_bounds, edge_bounds = (split[i].tolist() for i in (1, 3, 5))  # Python ints slice fastest
    out = []
    for r, t in enumerate(dst_types):
        out.append(RelationBlock(dst=by_type[type_bounds[t]:type_bounds[t + 1]],
                                 indptr=indptrs[indptr_bounds[r]:indptr_bounds[r + 1]],
                                 indices=indices[edge_bounds[r]:edge_bounds[r + 1]]))
    return tuple(out)


def typed_two_step_blocks(kernel: TypedKernel, seeds: np.ndarray, fanouts: np.ndarray, key: int, replace: bool
                          ) -> list[TypedBlock]:
    """The same blocks the two-step way, relation by relation as DGL's ``sample_neighbors`` with a fanout dict and
    ``to_block`` do: per relation, its destinations' draws as COO; the relations' COO concatenated and ordered by
    destination (stable, so relation order stays within one); the local numbering; CSC; one block per relation.
    The baseline the fused kernel is measured against."""
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise ValueError("seeds: expected unique node ids, found duplicates")
    graph = kernel.graph
    dst_nodes = seeds
    blocks = []
    for hop in range(fanouts.shape[0]):
        dst_type = np.searchsorted(kernel.type_offsets, dst_nodes, side="right") - 1
        src_parts, dst_parts, rel_parts = [], [], []
        for r, rel in enumerate(graph.relations):
            t = graph.type_id(rel.dst)
            where = np.nonzero(dst_type == t)[0]
            sub = np.zeros(len(graph.relations), dtype=np.int64)  # this relation's fanout only
            sub[r] = fanouts[hop, r]
            shape = kernel.counts(dst_nodes[where], sub, replace)
            src_parts.append(kernel.choose(dst_nodes[where], shape, sub, replace, key, hop))
            dst_parts.append(np.repeat(where, np.diff(shape[3])))
            rel_parts.append(np.full(src_parts[-1].shape[0], r, dtype=np.int64))
        src, dst_pos, rel = (np.concatenate(p) for p in (src_parts, dst_parts, rel_parts))
        order = np.argsort(dst_pos, kind="stable")  # by destination; relations in id order within one
        src, dst_pos, rel = src[order], dst_pos[order], rel[order]
        src_nodes, local_src, _ = to_block_coo(src, dst_nodes[dst_pos], dst_nodes)
        indptr = np.zeros(dst_nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst_pos, minlength=dst_nodes.shape[0]), out=indptr[1:])
        blocks.append(TypedBlock(src_ids=torch.from_numpy(np.ascontiguousarray(src_nodes, dtype=np.int64)),
                                 num_dst=dst_nodes.shape[0],
                                 relations=relation_blocks(indptr, local_src.astype(np.int64), rel, dst_type, graph)))
        dst_nodes = src_nodes
    return blocks[::-1]


def relation_blocks(indptr: np.ndarray, local_src: np.ndarray, relation: np.ndarray, dst_types: np.ndarray,
                    graph: TypedGraph | TypedSchema) -> tuple[RelationBlock, ...]:
    """Split one hop's CSC (every relation's edges, grouped by relation within a destination) into one
    :class:`RelationBlock` per relation, over the destinations of its destination type, from each edge's relation
    (the two-step baseline's way)."""
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


__all__ = ["ALL_NEIGHBORS", "RELATION_SLOT", "RelationBlock", "TypedBlock", "TypedNeighborSampler", "find_relation",
           "sample_typed_blocks", "typed_fanouts", "with_relation_fanouts"]
