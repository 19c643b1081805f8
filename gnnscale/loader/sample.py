"""The loaders' sample stage: the node-wise neighborhoods of a batch's seeds
(:class:`~gnnscale.sampling.nodewise.NodewiseSampler`, PyG's layout; on a typed graph
:class:`~gnnscale.sampling.typed_nodewise.TypedNodewiseSampler`), keyed by the batch."""

from __future__ import annotations

import threading

import numpy as np
import torch
from torch import Tensor

from gnnscale.sampling.nodewise import NodewiseSample, NodewiseSampler
from gnnscale.sampling.typed_nodewise import TypedNodewiseSample, TypedNodewiseSampler


class SampleStage:
    """Samples a batch's seeds in one graph, for every iterator of a loader.

    Args:
        sampler: the node-wise sampler over the graph (typed or not); None samples no hop (PyG's
            ``num_neighbors=[]``, which its link loader takes: a batch is then its seeds alone).
    """

    def __init__(self, sampler: NodewiseSampler | TypedNodewiseSampler | None) -> None:
        self.sampler = sampler
        self._lock = threading.Lock()

    @property
    def fanouts(self) -> tuple[int, ...] | np.ndarray:
        return () if self.sampler is None else self.sampler.fanouts

    def __call__(self, seeds: Tensor, key: int) -> NodewiseSample | TypedNodewiseSample:
        """The subgraph of ``seeds`` (unique int64 node ids) under ``key``."""
        if self.sampler is None:
            return _seeds_alone(seeds)
        with self._lock:  # one mapping array: iterators that are open at once take turns
            return self.sampler.sample(seeds, key)


def _seeds_alone(seeds: Tensor) -> NodewiseSample:
    """The subgraph of zero hops: the seeds and no edge."""
    edge_index = torch.zeros((2, 0), dtype=torch.int64)
    return NodewiseSample(nodes=seeds, edge_index=edge_index, row=edge_index[0], col=edge_index[1],
                          edge_pos=torch.zeros(0, dtype=torch.int64), num_sampled_nodes=[int(seeds.numel())],
                          num_sampled_edges=[])
