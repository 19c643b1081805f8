"""Sampled batches as PyG ``Data``: the one conversion that gnnscale's ``NeighborLoader`` and the
trainer's PyG inputs (``fit(..., inputs="pyg")``) share.

Kept apart from the rest of :mod:`gnnscale.sampling` so that only the code paths that hand batches to
PyG import ``torch_geometric``.
"""

from __future__ import annotations

from torch import Tensor
from torch_geometric.data import Data

from gnnscale.sampling.nodewise import NodewiseSubgraph


def describe_batch(data: Data, sample: NodewiseSubgraph) -> Data:
    """Set PyG's batch attributes of ``sample`` on ``data`` (in place; returns it): ``n_id`` (global ids,
    seeds first), ``num_sampled_nodes``, ``num_sampled_edges`` and ``batch_size``."""
    data.n_id = sample.nodes
    data.num_sampled_nodes = sample.num_sampled_nodes
    data.num_sampled_edges = sample.num_sampled_edges
    data.batch_size = sample.batch_size
    return data


def to_data(sample: NodewiseSubgraph, x: Tensor, y: Tensor) -> Data:
    """The PyG batch of ``sample``: ``x`` [num_nodes, d] (rows in ``sample.nodes`` order), ``y`` (labels,
    sliced by the caller), ``edge_index`` int64 [2, num_edges] in local ids (source row 0, target row 1)
    and the attributes of :func:`describe_batch`."""
    return describe_batch(Data(x=x, y=y, edge_index=sample.edge_index), sample)
