"""``NeighborLoader``: PyG's homogeneous node-classification loader, sampled by gnnscale's fused kernels.

A PyG training script changes its import line and nothing else::

    from gnnscale.loader import NeighborLoader   # was: from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=data.train_mask, batch_size=128,
                            shuffle=True)
    for batch in loader:
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])

A batch is its seeds' sample (:class:`~gnnscale.loader.sample.SampleStage`: the node-wise sampler, no PyG
sampling backend needed), then the fetch of their attributes (:class:`~gnnscale.loader.fetch.FetchStage`),
then the copy to ``device`` (:class:`~gnnscale.loader.stream.SeedLoader`, ``prefetch`` batches ahead in a
background thread). Every random choice is keyed by ``(seed, epoch, step)``: the same seed gives the same
batches whatever the thread count or prefetch depth.

With ``device="cuda"`` that thread also moves each batch to the GPU (:class:`~gnnscale.devices.StreamCopy`),
as PyG's ``PrefetchLoader`` does around a loader: pinned host memory, an asynchronous copy on a side
stream, and an event the training step's stream waits on, so the loop never blocks on a copy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnscale.loader.data import graph_of
from gnnscale.loader.fetch import fetch_stage
from gnnscale.loader.options import check_pyg_options, stream_options
from gnnscale.loader.sample import SampleStage
from gnnscale.loader.stream import SeedLoader
from gnnscale.sampling.nodewise import NodewiseSampler


class NeighborLoader(SeedLoader):
    """Mini-batches of sampled neighborhoods of ``input_nodes``, as PyG ``Data`` objects.

    Args:
        data: a ``torch_geometric.data.Data`` (``edge_index`` int [2, num_edges], source in row 0; a Data
            without one is a graph without edges, and its batches have no ``edge_index``, as PyG's) or a
            gnnscale :class:`~gnnscale.graph.dataset.NodeDataset`.
        num_neighbors: neighbors sampled per node per hop, seeds outwards; -1 takes every neighbor, 0 none
            (:func:`gnnscale.sampling.check_fanouts`, the rule of TrainConfig's fanouts too).
            Hop ``k`` samples only the nodes hop ``k - 1`` added (PyG's node-wise sampling).
        input_nodes: the seed nodes: int64 tensor/array of unique ids, a bool mask [num_nodes], or
            None for every node (default).
        replace: sample with replacement (default False).
        subgraph_type: ``"directional"`` only (the sampled edges, pointing to the node they were
            sampled for); other types raise ``ValueError``.
        transform: applied to every batch (default None).
        batch_size, shuffle, drop_last: as in ``torch.utils.data.DataLoader`` (defaults 1, False, False).
        seed: int; fixes every random choice. Default None: drawn once from ``generator`` if given,
            else from torch's global generator (so ``torch.manual_seed`` fixes it too).
        prefetch: batches prepared ahead by a background thread (default 1; 0 = on the calling thread).
        generator: a ``torch.Generator`` to draw ``seed`` from (as DataLoader's).
        device: where the yielded batches' tensors are: ``"cpu"`` (default), ``"cuda"``, ``"cuda:N"``,
            ``"auto"`` or a ``torch.device`` (:func:`~gnnscale.devices.resolve_device`). On CUDA the
            background thread copies each batch from pinned memory on a side stream (:class:`~gnnscale.devices.StreamCopy`).
        pin_memory: pin the batches' host memory (torch DataLoader's option; implied on CUDA). Without
            CUDA: one warning, no effect, as torch's DataLoader. Default False.
        is_sorted, filter_per_worker: accepted, no effect. Worker-process options (``num_workers`` ...):
            accepted, one warning, no effect. PyG's temporal, weighted and disjoint options: only their
            defaults. Anything else: ``TypeError``.

    Every batch holds the node attributes of ``data`` (``x``, ``y``, masks ...) sliced by ``n_id``,
    its edge attributes sliced by ``e_id``, and ``edge_index`` (int64 [2, num_edges], local ids,
    source row 0, target row 1; hop after hop, within a hop grouped by target), ``n_id`` (global ids,
    the ``batch_size`` seeds first), ``e_id`` (edge positions in ``data.edge_index``; for a
    NodeDataset, in its CSC), ``batch_size``, ``input_id`` (positions in ``input_nodes``; for a mask,
    node ids, as PyG), ``num_sampled_nodes`` (``len(num_neighbors) + 1`` ints, seeds first) and
    ``num_sampled_edges`` (one int per hop). A NodeDataset gives ``x`` and ``y`` only.
    """

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None, replace: bool = False,
                 subgraph_type="directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr=None, weight_attr=None, transform: Callable | None = None,
                 transform_sampler_output=None, is_sorted: bool = False, filter_per_worker=None,
                 neighbor_sampler=None, directed: bool = True, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None, prefetch: int = 1,
                 generator: torch.Generator | None = None, device: str | torch.device | None = None,
                 pin_memory: bool = False, **loader_options) -> None:
        check_pyg_options("NeighborLoader", dict(
            input_time=input_time, disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr,
            weight_attr=weight_attr, transform_sampler_output=transform_sampler_output,
            neighbor_sampler=neighbor_sampler, directed=directed), subgraph_type, loader_options)
        options = stream_options("NeighborLoader", batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                 seed=seed, prefetch=prefetch, generator=generator, transform=transform,
                                 device=device, pin_memory=pin_memory)
        self.data = data
        graph, edge_ids = graph_of(data)
        self.fetch = fetch_stage(data)
        self.sample = SampleStage(NodewiseSampler(graph, num_neighbors, replace=replace, edge_ids=edge_ids))
        self.input_nodes, self._input_id = _input_nodes(input_nodes, graph.num_nodes)
        super().__init__(self.input_nodes.numel(), options)

    @property
    def num_neighbors(self) -> tuple[int, ...]:
        return self.sample.fanouts

    @property
    def sampler(self) -> NodewiseSampler:
        return self.sample.sampler

    def _batch(self, index: Tensor, key: int) -> Data:
        data = self.fetch(self.sample(self.input_nodes[index], key))
        data.input_id = index if self._input_id is None else self._input_id[index]
        return data

    def __repr__(self) -> str:
        return (f"NeighborLoader(num_neighbors={list(self.num_neighbors)}, input_nodes={self.input_nodes.numel()}, "
                f"batch_size={self.batch_size}, shuffle={self.options.shuffle}, seed={self.seed}, "
                f"device={self.device})")


def _input_nodes(input_nodes, num_nodes: int) -> tuple[Tensor, Tensor | None]:
    """The seed ids (int64, unique, in range) and, for a mask, PyG's ``input_id`` source (node ids)."""
    if input_nodes is None:
        return torch.arange(num_nodes), None
    if isinstance(input_nodes, np.ndarray):
        input_nodes = torch.from_numpy(input_nodes)
    elif not isinstance(input_nodes, Tensor):
        input_nodes = torch.as_tensor(input_nodes)
    if input_nodes.dim() != 1:
        raise ValueError(f"input_nodes: expected a 1-D tensor, got shape {tuple(input_nodes.shape)}")
    mask = input_nodes.dtype == torch.bool
    if mask:
        if input_nodes.numel() != num_nodes:
            raise ValueError(f"input_nodes: a bool mask needs one entry per node ({num_nodes}), got {input_nodes.numel()}")
        input_nodes = input_nodes.nonzero().view(-1)
    elif input_nodes.dtype.is_floating_point or input_nodes.dtype.is_complex:
        raise TypeError(f"input_nodes: expected an integer tensor of node ids or a bool mask, got {input_nodes.dtype}")
    input_nodes = input_nodes.cpu().to(torch.int64)
    if input_nodes.numel() == 0:
        raise ValueError("input_nodes: expected at least one node, got none" + (" (the mask is all False)" if mask else ""))
    lo, hi = int(input_nodes.min()), int(input_nodes.max())
    if lo < 0 or hi >= num_nodes:
        raise ValueError(f"input_nodes: node ids must lie in [0, {num_nodes}), found {lo if lo < 0 else hi}")
    if torch.unique(input_nodes).numel() != input_nodes.numel():
        raise ValueError("input_nodes: expected unique node ids (a batch samples its seeds as one set), got repeats")
    return input_nodes, input_nodes if mask else None
