"""PyG's ``Data`` and gnnscale's graph, both ways: the CSC topology a loader samples from what it is given
(a ``Data``, with or without edges, or a NodeDataset), and a NodeDataset as a ``Data``."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.graph.dataset import NodeDataset


def graph_of(data) -> tuple[CSCGraph, np.ndarray | None]:
    """The CSC topology of ``data`` and, for a PyG Data whose ``edge_index`` is not sorted by target,
    the ``edge_index`` column of each CSC position (None: CSC positions are the edge ids).

    A Data without ``edge_index`` is a graph without edges (PyG's loaders take one too)."""
    if isinstance(data, NodeDataset):
        return data.graph, None
    if not isinstance(data, Data):
        raise TypeError(f"data: expected a torch_geometric.data.Data or a gnnscale NodeDataset, got "
                        f"{type(data).__name__} (heterogeneous graphs and remote stores are not supported)")
    num_nodes = data.num_nodes
    if num_nodes is None:
        raise ValueError("data.num_nodes: expected the node count (num_nodes=, or node features to infer it "
                         "from), got none")
    num_nodes = int(num_nodes)
    edge_index = data.edge_index
    if edge_index is None and "adj_t" not in data:
        return CSCGraph(indptr=np.zeros(num_nodes + 1, dtype=np.int64),
                        indices=np.zeros(0, dtype=index_dtype(num_nodes)), num_nodes=num_nodes), None
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"data.edge_index: expected an int64 tensor [2, num_edges], got {type(edge_index).__name__}"
                        f" (a SparseTensor adj_t is not supported)")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point \
            or edge_index.dtype == torch.bool:
        raise ValueError(f"data.edge_index: expected an integer tensor [2, num_edges], got {edge_index.dtype} of "
                         f"shape {tuple(edge_index.shape)}")
    src, dst = edge_index.cpu().to(torch.int64).numpy()
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"data.edge_index: node ids must lie in [0, num_nodes = {num_nodes})")
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    if bool(np.all(dst[1:] >= dst[:-1])):  # already grouped by target (to_pyg_data's order): no permutation
        return CSCGraph(indptr=indptr, indices=src.astype(index_dtype(num_nodes)), num_nodes=num_nodes), None
    # Stable: a node's in-edges keep their edge_index order (what a fanout >= degree returns).
    perm = np.argsort(dst, kind="stable")
    return CSCGraph(indptr=indptr, indices=src[perm].astype(index_dtype(num_nodes)), num_nodes=num_nodes), perm


def to_pyg_data(dataset: NodeDataset) -> Data:
    """A gnnscale :class:`~gnnscale.graph.dataset.NodeDataset` as a PyG ``Data``: ``x`` (float32
    [num_nodes, dim], shares memory with writable in-memory features), ``y`` (int64 [num_nodes]),
    ``edge_index`` (int64 [2, num_edges], in CSC order: grouped by target) and bool
    ``train_mask``/``val_mask``/``test_mask`` [num_nodes]."""
    if not isinstance(dataset, NodeDataset):
        raise TypeError(f"dataset: expected a gnnscale NodeDataset, got {type(dataset).__name__}")
    graph, n = dataset.graph, dataset.graph.num_nodes
    masks = {}
    for split in ("train", "val", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(getattr(dataset, f"{split}_idx"))] = True
        masks[f"{split}_mask"] = mask
    # np.require copies only what torch cannot share: read-only (memory-mapped) or non-contiguous arrays.
    x, y = (torch.from_numpy(np.require(a, requirements=["C", "W"])) for a in (dataset.features, dataset.labels))
    return Data(x=x, y=y, edge_index=csc_edge_index(graph), num_nodes=n, **masks)


def csc_edge_index(graph: CSCGraph) -> Tensor:
    """int64 [2, num_edges]: the edges of ``graph`` in CSC order (source row 0, grouped by target), so that
    column ``i`` is the edge at CSC position ``i``."""
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.in_degrees())
    return torch.from_numpy(np.stack([np.asarray(graph.indices, dtype=np.int64), dst]))
