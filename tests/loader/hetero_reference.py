"""PyG's hetero ``NeighborLoader`` where this machine can run one, and otherwise its stand-in: PyG's own
``NodeLoader`` (its ``filter_hetero_data``, its batch fields) over a sampler written here in plain torch, by PyG's
law (pyg-lib's ``hetero_neighbor_sample``), independently of gnnscale's kernels.

PyG's ``NeighborLoader`` needs a compiled sampling backend (pyg-lib or torch-sparse); the registry has no wheel of
either for the installed torch (benchmarks/pyg_setup.sh compiles one). :func:`NeighborLoader` gives PyG's own
class when the backend is there, the stand-in otherwise, so a PyG script runs unchanged with either.

The law: a hop walks the edge types in the data's order; each samples, for every node of its destination type that
the previous hop added (the seeds at hop 0), in the order they were added, up to ``k`` of its in-edges by that type
uniformly without replacement (all of them for ``-1`` or a degree <= ``k``), each node's edges in CSC order (by
source id, then column), and appends the sources it has not seen to its source type's node list. Draws come from
``generator`` (torch's).
"""

from __future__ import annotations

import numpy as np
import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, HeteroSamplerOutput, NumNeighbors
from torch_geometric.sampler.neighbor_sampler import node_sample

HAS_PYG_BACKEND = torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE


class PlainTorchHeteroSampler(BaseSampler):
    """PyG's hetero node-wise sampling (see the module docstring), without replacement."""

    def __init__(self, data: HeteroData, num_neighbors, generator: torch.Generator | None = None) -> None:
        self.node_types, self.edge_types = data.metadata()
        self.fanouts = NumNeighbors(num_neighbors).get_values(self.edge_types)
        self.generator = generator
        self.csc = {}  # edge type -> (colptr, sources by (destination, source, column), their columns)
        for edge_type in self.edge_types:
            src, dst = data[edge_type].edge_index.numpy()
            order = np.lexsort((src, dst))
            colptr = np.zeros(data[edge_type[2]].num_nodes + 1, dtype=np.int64)
            np.cumsum(np.bincount(dst, minlength=data[edge_type[2]].num_nodes), out=colptr[1:])
            self.csc[edge_type] = (colptr, src[order], order)

    def sample_from_nodes(self, index, **kwargs) -> HeteroSamplerOutput:
        return node_sample(index, self._sample)

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError

    def _sample(self, seed: dict[str, Tensor], seed_time=None) -> HeteroSamplerOutput:
        nodes = {t: [] for t in self.node_types}
        seen = {t: {} for t in self.node_types}
        for t, ids in seed.items():
            for v in ids.tolist():
                seen[t][v] = len(nodes[t])
                nodes[t].append(v)
        counts = {t: [len(nodes[t])] for t in self.node_types}
        rows, cols, edges = ({e: [] for e in self.edge_types} for _ in range(3))
        num_edges = {e: [] for e in self.edge_types}
        bounds = {t: (0, len(nodes[t])) for t in self.node_types}
        for hop in range(len(next(iter(self.fanouts.values())))):
            for edge_type in self.edge_types:
                src_type, _, dst_type = edge_type
                lo, hi = bounds[dst_type]
                positions, targets = self._draw(edge_type, np.array(nodes[dst_type][lo:hi], dtype=np.int64),
                                                np.arange(lo, hi), self.fanouts[edge_type][hop])
                _, sources, columns = self.csc[edge_type]
                local = []
                for v in sources[positions].tolist():
                    if v not in seen[src_type]:
                        seen[src_type][v] = len(nodes[src_type])
                        nodes[src_type].append(v)
                    local.append(seen[src_type][v])
                rows[edge_type].append(np.array(local, dtype=np.int64))
                cols[edge_type].append(targets)
                edges[edge_type].append(columns[positions])
                num_edges[edge_type].append(int(positions.shape[0]))
            for t in self.node_types:
                bounds[t] = (bounds[t][1], len(nodes[t]))
                counts[t].append(bounds[t][1] - bounds[t][0])
        def joined(parts: dict) -> dict:
            return {e: torch.from_numpy(np.concatenate(v).astype(np.int64)) for e, v in parts.items()}

        return HeteroSamplerOutput(node={t: torch.tensor(v, dtype=torch.int64) for t, v in nodes.items()},
                                   row=joined(rows), col=joined(cols), edge=joined(edges), batch=None,
                                   num_sampled_nodes=counts, num_sampled_edges=num_edges)

    def _draw(self, edge_type, dst: np.ndarray, local: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """CSC positions of the in-edges drawn for every ``dst`` node (type-local ids), grouped by node in CSC
        order, and each one's destination (``local``: the node's position in its type's list). A node draws its
        ``k`` edges of lowest random key, a uniform subset without replacement. (numpy but for the keys: the
        small arrays of a test batch pay no thread start-up.)"""
        colptr = self.csc[edge_type][0]
        start, degree = colptr[dst], colptr[dst + 1] - colptr[dst]
        node = np.repeat(np.arange(dst.shape[0]), degree)  # each candidate edge's node
        first = np.cumsum(degree) - degree
        positions = start[node] + np.arange(node.shape[0]) - first[node]
        if k != -1:
            keys = torch.rand(node.shape[0], generator=self.generator, dtype=torch.float64).numpy()
            order = np.lexsort((keys, node))  # by node, in random order within one
            rank = np.empty_like(order)
            rank[order] = np.arange(order.shape[0]) - first[node[order]]
            keep = rank < k
            positions, node = positions[keep], node[keep]
        return positions, local[node]

    @property
    def edge_permutation(self):
        return None  # edges are named by their edge_index columns already


def NeighborLoader(data, num_neighbors, input_nodes=None, replace: bool = False, **loader_options):  # noqa: N802
    """PyG's ``NeighborLoader`` on a ``HeteroData`` where its backend runs, else the stand-in (see the module
    docstring), for the arguments a training script passes: ``num_neighbors``, ``input_nodes``, ``batch_size``,
    ``shuffle`` ..."""
    if HAS_PYG_BACKEND:
        from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
        return PyGNeighborLoader(data, num_neighbors, input_nodes=input_nodes, replace=replace, **loader_options)
    if replace:
        raise NotImplementedError("the plain-torch stand-in samples without replacement only")
    return NodeLoader(data, PlainTorchHeteroSampler(data, num_neighbors), input_nodes=input_nodes, **loader_options)
