"""The loader's fetch stage on a typed graph: a sampled subgraph
(:class:`~gnnscale.sampling.typed_nodewise.TypedNodewiseSample`) becomes a PyG ``HeteroData`` batch, each node
store's attributes sliced by its ``n_id`` and each edge store's by its ``e_id`` (gnnscale's gather kernel where it
can, PyG's ``index_select`` for the rest), the batch PyG's ``NodeLoader`` builds with ``filter_hetero_data``."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.data.storage import BaseStorage
from torch_geometric.loader.utils import index_select

from gnnscale.graph.features import take_rows
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.loader.fetch import kernel_view
from gnnscale.loader.hetero import EdgeType, HeteroTopology
from gnnscale.sampling.typed_nodewise import TypedNodewiseSample


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSlices:
    """How the attributes of one node or edge store are sliced, decided once per loader.

    Args:
        kernel: name -> array [num_rows, ...]: sliced with the gather kernel (numpy views of the data's CPU
            tensors, or a TypedDataset's features and labels).
        rest: name -> the dimension PyG concatenates it along: sliced by PyG's ``index_select`` (tensors the
            kernel cannot take: on a GPU, not contiguous, requiring grad ...).
    """

    kernel: dict[str, np.ndarray]
    rest: dict[str, int]

    def slice_into(self, store: BaseStorage, source: BaseStorage, index: Tensor) -> None:
        """Set every attribute of ``source`` this names on ``store``, sliced by ``index`` (int64, CPU)."""
        rows = index.numpy()
        for key, values in self.kernel.items():
            store[key] = torch.from_numpy(take_rows(values, rows))
        for key, dim in self.rest.items():
            value = source[key]
            store[key] = index_select(value, index.to(value.device) if isinstance(value, Tensor) else index, dim=dim)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeteroFetchStage:
    """What a batch of a typed graph holds besides its sampled topology.

    Args:
        template: the batches' skeleton, copied store by store for every batch (shallow: each store keeps its
            attributes in their order, graph-level attributes are shared): the ``HeteroData`` itself, or for a
            TypedDataset a ``HeteroData`` of empty stores.
        node_types: in the graph's order; ``type_offsets`` their first global ids.
        edge_types: PyG's edge types, in relation order.
        edge_ids: per relation, its ``edge_index`` columns by CSC rank, or None where they are the ranks
            (:class:`~gnnscale.loader.hetero.HeteroTopology`).
        nodes, edges: per node type and per relation, how its attributes are sliced.
    """

    template: HeteroData
    node_types: tuple[str, ...]
    type_offsets: tuple[int, ...]
    edge_types: tuple[EdgeType, ...]
    edge_ids: tuple[np.ndarray | None, ...]
    nodes: tuple[StoreSlices, ...]
    edges: tuple[StoreSlices, ...]

    def __call__(self, out: TypedNodewiseSample) -> HeteroData:
        """The ``HeteroData`` batch of ``out``: per node type its attributes sliced by ``n_id`` (int64 local ids of
        the type: ``out.nodes`` less the type's first global id), ``n_id`` and ``num_sampled_nodes``; per edge
        type ``edge_index`` (local ids), its attributes sliced by ``e_id`` (int64 ``edge_index`` columns),
        ``e_id`` and ``num_sampled_edges``. ``input_id`` and ``batch_size`` are the caller's."""
        batch = copy.copy(self.template)
        for t, node_type in enumerate(self.node_types):
            n_id = out.nodes[t] - self.type_offsets[t]
            store = batch[node_type]
            self.nodes[t].slice_into(store, self.template[node_type], n_id)
            if "num_nodes" in store:
                store.num_nodes = n_id.numel()
            store.n_id = n_id
            store.num_sampled_nodes = out.num_sampled_nodes[t]
        for r, edge_type in enumerate(self.edge_types):
            ids = self.edge_ids[r]
            rank = out.edge_rank[r]
            e_id = rank if ids is None else torch.from_numpy(np.take(ids, rank.numpy()))
            store = batch[edge_type]
            store.edge_index = out.edge_index[r]
            self.edges[r].slice_into(store, self.template[edge_type], e_id)
            store.e_id = e_id
            store.num_sampled_edges = out.num_sampled_edges[r]
        return batch


def hetero_fetch_stage(data: HeteroData | TypedDataset, topology: HeteroTopology) -> HeteroFetchStage:
    """How the batches of ``data`` get their attributes: every node and edge attribute of a ``HeteroData``; a
    TypedDataset's features (``x``, on the types that have them) and labels (``y``, on the target type)."""
    graph = topology.graph
    if isinstance(data, TypedDataset):
        template = HeteroData()  # empty stores: batches hold no num_nodes, as a NodeDataset's
        nodes = []
        for node_type in graph.node_types:
            template.get_node_store(node_type)
            kernel = {} if data.features[node_type] is None else {"x": data.features[node_type]}
            if node_type == data.target_type:
                kernel["y"] = data.labels
            nodes.append(StoreSlices(kernel=kernel, rest={}))
        for edge_type in topology.edge_types:
            template.get_edge_store(*edge_type)
        edges = [StoreSlices(kernel={}, rest={}) for _ in topology.edge_types]
    else:
        template = data
        nodes = [_store_slices(data, data[t], data[t].is_node_attr, ("num_nodes",)) for t in graph.node_types]
        edges = [_store_slices(data, data[e], data[e].is_edge_attr, ("edge_index",)) for e in topology.edge_types]
    return HeteroFetchStage(template=template, node_types=graph.node_types,
                            type_offsets=tuple(int(o) for o in graph.type_offsets[:-1]),
                            edge_types=topology.edge_types, edge_ids=topology.edge_ids, nodes=tuple(nodes),
                            edges=tuple(edges))


def _store_slices(data: HeteroData, store: BaseStorage, sliced, skip: tuple[str, ...]) -> StoreSlices:
    """The :class:`StoreSlices` of one store of ``data``: the attributes ``sliced(key)`` names (node or edge
    attributes; the others stay as they are, as PyG's ``filter_hetero_data`` leaves them), ``skip`` aside."""
    kernel, rest = {}, {}
    for key, value in store.items():
        if key in skip or not sliced(key):
            continue
        dim = data.__cat_dim__(key, value, store)
        view = kernel_view(value, dim)
        if view is not None:
            kernel[key] = view
        else:
            rest[key] = dim
    return StoreSlices(kernel=kernel, rest=rest)
