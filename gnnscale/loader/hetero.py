"""PyG's ``HeteroData`` and gnnscale's typed graph, both ways, and the arguments the loader reads of a typed graph
(PyG's rules): the typed topology a loader samples (:func:`hetero_topology`, of a ``HeteroData`` or a
:class:`~gnnscale.graph.typed_dataset.TypedDataset`), ``num_neighbors`` per edge type (:func:`hetero_fanouts`), the
seeds' type and ids (:func:`hetero_input_nodes`), and a TypedDataset as a ``HeteroData`` (:func:`to_pyg_hetero_data`).

**Ids.** PyG numbers the nodes of each type from 0 (gnnscale's *local* ids); the sampler takes global ids
(:mod:`gnnscale.graph.typed`). An edge's id (``e_id``) is its column in its edge type's ``edge_index``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.graph.typed import Relation, TypedGraph, parse_relation, row_layout
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.loader.options import input_node_ids
from gnnscale.sampling import check_fanouts

EdgeType = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class HeteroTopology:
    """The typed graph a loader samples, and how its edges are named in the data.

    Args:
        graph: every edge type's edges over global ids, each node's in-edges grouped by edge type (in the data's
            order) and sorted by source; repeated edges kept (each has its own id).
        edge_types: PyG's edge types, in relation order.
        edge_ids: per relation: int64 [num_edges of the relation], the ``edge_index`` column of the relation's
            edge at each rank (CSC order); None where the ranks are the columns (an ``edge_index`` already
            sorted by destination, then source: :func:`to_pyg_hetero_data`'s).
    """

    graph: TypedGraph
    edge_types: tuple[EdgeType, ...]
    edge_ids: tuple[np.ndarray | None, ...]


def is_hetero(data) -> bool:
    """Whether ``data`` is a typed graph the loader reads: a PyG ``HeteroData`` or a gnnscale TypedDataset."""
    return isinstance(data, (HeteroData, TypedDataset))


def hetero_topology(data: HeteroData | TypedDataset) -> HeteroTopology:
    """The :class:`HeteroTopology` of ``data``; every problem with its types, counts or edges is one line."""
    if not (data.graph.relations if isinstance(data, TypedDataset) else data.edge_types):
        raise ValueError("data: expected at least one edge type, got none")
    if isinstance(data, TypedDataset):
        relations = data.graph.relations
        return HeteroTopology(graph=data.graph, edge_types=tuple((r.src, r.name, r.dst) for r in relations),
                              edge_ids=(None,) * len(relations))
    node_types, edge_types = data.metadata()
    counts = {}
    for node_type in node_types:
        count = data[node_type].num_nodes
        if count is None:
            raise _no_count(node_type)
        counts[node_type] = int(count)
    relations = []
    for edge_type in edge_types:
        try:
            relations.append(Relation(*edge_type))
        except ValueError as err:
            raise ValueError(f"data: edge type {edge_type}: {err}") from None
    edges = [_edge_index(data, edge_type, counts) for edge_type in edge_types]
    graph, edge_ids = _typed_csc(node_types, counts, tuple(relations), edges)
    return HeteroTopology(graph=graph, edge_types=tuple(edge_types), edge_ids=edge_ids)


def _edge_index(data: HeteroData, edge_type: EdgeType, counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 local ids of ``data[edge_type].edge_index``, checked against the types' counts."""
    store = data[edge_type]
    edge_index = store.get("edge_index")
    if not isinstance(edge_index, Tensor):
        extra = " (a SparseTensor adj_t is not supported)" if "adj_t" in store else ""
        raise TypeError(f"data[{edge_type}].edge_index: expected an int64 tensor [2, num_edges], got "
                        f"{type(edge_index).__name__}{extra}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point \
            or edge_index.dtype == torch.bool:
        raise ValueError(f"data[{edge_type}].edge_index: expected an integer tensor [2, num_edges], got "
                         f"{edge_index.dtype} of shape {tuple(edge_index.shape)}")
    src, dst = edge_index.cpu().to(torch.int64).numpy()
    for end, ids in ((edge_type[0], src), (edge_type[2], dst)):
        if end not in counts:  # an edge type's end without a node store of its own
            raise _no_count(end)
        n = counts[end]
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"data[{edge_type}].edge_index: {end} ids must lie in [0, {n}) (the {end} nodes), "
                             f"found {bad}")
    return src, dst


def _no_count(node_type: str) -> ValueError:
    return ValueError(f"data[{node_type!r}].num_nodes: expected the node count (num_nodes=, or node features to infer "
                      f"it from), got none")


def _typed_csc(node_types: Sequence[str], counts: dict[str, int], relations: tuple[Relation, ...],
               edges: list[tuple[np.ndarray, np.ndarray]]) -> tuple[TypedGraph, tuple[np.ndarray | None, ...]]:
    """The :class:`TypedGraph` of every relation's edges (local ids), repeats kept, and each relation's
    ``edge_index`` column per CSC rank (None where they agree)."""
    types = tuple(node_types)
    offsets = np.zeros(len(types) + 1, dtype=np.int64)
    np.cumsum([counts[t] for t in types], out=offsets[1:])
    num_nodes = int(offsets[-1])
    layout = row_layout(types, offsets, relations)
    rows, sources, edge_ids = [], [], []
    in_degrees = np.zeros(num_nodes, dtype=np.int64)
    for r, (rel, (src, dst)) in enumerate(zip(relations, edges)):
        order = np.lexsort((src, dst))  # by destination, then source; stable, so repeats keep their column order
        edge_ids.append(None if bool(np.all(order == np.arange(order.shape[0]))) else order)
        t, s = types.index(rel.dst), types.index(rel.src)
        j = int(np.flatnonzero(layout.rel_ids[layout.rel_start[t]:layout.rel_start[t + 1]] == r)[0])
        dst = dst[order]
        rows.append(layout.row_start[t] + dst * layout.rows_per_node(t) + j)  # each edge's typed row
        sources.append(src[order] + offsets[s])
        in_degrees[offsets[t]:offsets[t + 1]] += np.bincount(dst, minlength=counts[rel.dst])
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    # Stable: within a typed row (one destination, one relation) the edges keep their order, by source.
    order = np.argsort(row, kind="stable")
    indices = (np.concatenate(sources) if sources else row)[order].astype(index_dtype(num_nodes))
    rel_indptr = np.zeros(layout.num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=layout.num_rows), out=rel_indptr[1:])
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(in_degrees, out=indptr[1:])
    graph = TypedGraph(node_types=types, type_offsets=offsets, relations=relations,
                       graph=CSCGraph(indptr=indptr, indices=indices, num_nodes=num_nodes), rel_indptr=rel_indptr)
    return graph, tuple(edge_ids)


def hetero_fanouts(topology: HeteroTopology, num_neighbors) -> dict[Relation, tuple[int, ...]]:
    """``{relation: fanouts per hop}`` of PyG's ``num_neighbors``: one list for every edge type, or a dict naming
    each edge type (a ``(src, rel, dst)`` tuple or ``"src__rel__dst"``) with its list, every list as long."""
    relations = topology.graph.relations
    if not isinstance(num_neighbors, Mapping):
        hops = check_fanouts(num_neighbors, "num_neighbors")
        return {rel: hops for rel in relations}
    given = {}
    for key, hops in num_neighbors.items():
        rel = _relation_key(key, topology)
        given[rel] = check_fanouts(hops, f"num_neighbors[{key!r}]")
    missing = [t for rel, t in zip(relations, topology.edge_types) if rel not in given]
    if missing:
        raise ValueError(f"num_neighbors: expected a list for every edge type (PyG's rule), missing "
                         f"{', '.join(map(str, missing))}")
    lengths = sorted({len(hops) for hops in given.values()})
    if len(lengths) != 1:
        raise ValueError(f"num_neighbors: expected the same number of hops for every edge type, got {lengths}")
    return {rel: given[rel] for rel in relations}


def _relation_key(key, topology: HeteroTopology) -> Relation:
    """The relation a ``num_neighbors`` key names, or a ValueError naming the graph's edge types."""
    try:
        rel = parse_relation(key if isinstance(key, (str, Relation)) else tuple(key))
    except (TypeError, ValueError):
        rel = None
    if rel not in topology.graph.relations:
        raise ValueError(f"num_neighbors: {key!r} is not an edge type of the data; expected one of "
                         f"{', '.join(map(str, topology.edge_types))}")
    return rel


def hetero_input_nodes(input_nodes, data, graph: TypedGraph) -> tuple[str, Tensor, Tensor | None]:
    """PyG's ``input_nodes`` of a typed graph: ``(node type, local ids (int64, unique, in range), input_id source
    for a mask (node ids) or None)``.

    ``input_nodes`` is a node type (every node of it), ``(node type, ids or bool mask or None)``, or None: the
    target type's nodes for a TypedDataset (a ``HeteroData`` has no default type: PyG asks for one)."""
    if input_nodes is None and isinstance(data, TypedDataset):
        node_type, ids = data.target_type, None
    elif isinstance(input_nodes, str):
        node_type, ids = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        node_type, ids = input_nodes
    else:
        raise ValueError(f"input_nodes: a heterogeneous graph takes a node type or (node type, ids), got "
                         f"{type(input_nodes).__name__}")
    if node_type not in graph.node_types:
        raise ValueError(f"input_nodes: node type {node_type!r} is not one of {', '.join(graph.node_types)}")
    ids, input_id = input_node_ids(ids, graph.count(node_type), f"the {node_type} nodes")
    return node_type, ids, input_id


def to_pyg_hetero_data(dataset: TypedDataset) -> HeteroData:
    """A gnnscale :class:`~gnnscale.graph.typed_dataset.TypedDataset` as a PyG ``HeteroData``: per node type
    ``x`` (float32 [count, d], for the types with features; shares memory with writable in-memory features) and
    ``num_nodes``; on the target type ``y`` (int64 [count], -1 unlabeled) and bool ``train_mask``/``val_mask``/
    ``test_mask``; per relation ``(src, name, dst)`` its ``edge_index`` (int64 [2, num_edges], local ids, in CSC
    order: :meth:`~gnnscale.graph.typed.TypedGraph.edges`)."""
    if not isinstance(dataset, TypedDataset):
        raise TypeError(f"dataset: expected a gnnscale TypedDataset, got {type(dataset).__name__}")
    graph, data = dataset.graph, HeteroData()
    for node_type in graph.node_types:
        x = dataset.features[node_type]
        if x is not None:  # np.require copies only what torch cannot share: read-only or non-contiguous arrays
            data[node_type].x = torch.from_numpy(np.require(x, requirements=["C", "W"]))
        data[node_type].num_nodes = graph.count(node_type)
    target = data[dataset.target_type]
    target.y = torch.from_numpy(np.require(dataset.labels, requirements=["C", "W"]))
    for split in ("train", "val", "test"):
        mask = torch.zeros(graph.count(dataset.target_type), dtype=torch.bool)
        mask[torch.from_numpy(dataset.local_ids(getattr(dataset, f"{split}_idx")))] = True
        target[f"{split}_mask"] = mask
    for rel in graph.relations:
        data[rel.src, rel.name, rel.dst].edge_index = torch.from_numpy(np.stack(graph.edges(rel)))
    return data
