"""The loaders' fetch stage: a sampled subgraph becomes a PyG ``Data`` batch holding the data's attributes
sliced by its nodes and edges (with gnnscale's gather kernel where it can, PyG's ``filter_data`` for the
rest), on the host."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader.utils import filter_data

from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.features import take_rows
from gnnscale.sampling.nodewise import NodewiseSample
from gnnscale.sampling.pyg import describe_batch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStage:
    """What a batch of a loader holds besides its sampled topology, decided once per loader.

    Args:
        node: name -> array [num_nodes, ...]: the node attributes sliced by ``n_id`` with the gather
            kernel (numpy views of the data's CPU tensors, or a NodeDataset's features and labels).
        edge: name -> array [num_edges, ...]: the edge attributes sliced by ``e_id`` the same way.
        shared: name -> value: graph-level attributes, shared by every batch as they are.
        rest: the data's other attributes with its ``edge_index``, sliced by PyG's ``filter_data``
            (tensors the kernel cannot take: on a GPU, not contiguous, requiring grad ...); None
            when there are none.
        order: every attribute name of the data, in its order (the batch keeps it).
        num_nodes: whether batches store ``num_nodes`` (from a PyG Data: PyG infers the count from the
            features otherwise, and a data without node features would give a wrong one).
        edge_index: whether batches hold ``edge_index``: not for a Data without one (a graph without
            edges), as PyG's batches.
    """

    node: dict[str, np.ndarray]
    edge: dict[str, np.ndarray]
    shared: dict[str, object]
    rest: Data | None
    order: tuple[str, ...]
    num_nodes: bool
    edge_index: bool

    def __call__(self, out: NodewiseSample) -> Data:
        """A PyG ``Data`` batch of the sampled subgraph ``out``: every node attribute sliced by
        ``out.nodes``, every edge attribute by ``e_id = out.edge_pos`` (int64 [num_edges], the edges' ids in
        the data), ``edge_index`` (local ids), ``n_id``, ``e_id``, ``batch_size`` (the seeds: the first
        ``out.num_sampled_nodes[0]`` nodes), ``num_sampled_nodes`` and ``num_sampled_edges``; graph-level
        attributes are shared with the data. ``input_id`` is the caller's."""
        e_id = out.edge_pos
        ids, edges = out.nodes.numpy(), e_id.numpy()
        sliced = {key: torch.from_numpy(take_rows(values, ids)) for key, values in self.node.items()}
        sliced.update((key, torch.from_numpy(take_rows(values, edges))) for key, values in self.edge.items())
        sliced.update(self.shared)
        if self.rest is not None:
            # PyG's own slicing for what the kernel does not take (its edge_index stack is replaced below).
            sliced.update(filter_data(self.rest, out.nodes, out.row, out.col, e_id, None).items())
        data = Data()
        for key in self.order:
            if key in sliced:
                data[key] = sliced[key]
        if self.edge_index:
            data.edge_index = out.edge_index
        if self.num_nodes:
            data.num_nodes = out.nodes.numel()
        data.e_id = e_id
        return describe_batch(data, out)


def kernel_view(value, cat_dim: int) -> np.ndarray | None:
    """``value`` (an attribute PyG concatenates along ``cat_dim``) as a numpy view the gather kernel can slice
    along its first dimension, or None."""
    if not isinstance(value, Tensor) or value.device.type != "cpu" or value.dim() == 0 or not value.is_contiguous() \
            or value.requires_grad or value.dtype in (torch.bfloat16,) or cat_dim != 0:
        return None
    try:
        return value.numpy()
    except (TypeError, RuntimeError):  # a dtype numpy has no counterpart of: PyG's slicing takes it
        return None


def fetch_stage(data) -> FetchStage:
    """How the batches of ``data`` (a PyG ``Data`` or a NodeDataset) get their attributes."""
    if isinstance(data, NodeDataset):
        return FetchStage(node={"x": data.features, "y": data.labels}, edge={}, shared={}, rest=None,
                          order=("x", "y"), num_nodes=False, edge_index=True)
    node, edge, shared, rest = {}, {}, {}, copy.copy(data)  # rest: a new store holding the same tensors
    leftover = False
    for key, value in data.items():
        if key in ("edge_index", "num_nodes"):
            continue
        kind = "node" if data.is_node_attr(key) else "edge" if data.is_edge_attr(key) else None
        view = None if kind is None else kernel_view(value, data.__cat_dim__(key, value))
        if kind is None:
            shared[key] = value
        elif view is not None:
            (node if kind == "node" else edge)[key] = view
            del rest[key]
        else:
            leftover = True
    rest.num_nodes = data.num_nodes  # as the batches store theirs (filter_data sets each batch's own count)
    return FetchStage(node=node, edge=edge, shared=shared, rest=rest if leftover else None,
                      order=tuple(data.keys()), num_nodes=True, edge_index=data.edge_index is not None)
