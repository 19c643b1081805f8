"""``NeighborLoader``: PyG's node-classification loader, homogeneous and typed, sampled by gnnscale's fused kernels.

A PyG training script changes its import line and nothing else::

    from gnnscale.loader import NeighborLoader   # was: from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=data.train_mask, batch_size=128,
                            shuffle=True)
    for batch in loader:
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])

A typed graph (a PyG ``HeteroData`` or a gnnscale TypedDataset) too, as a ``to_hetero`` script writes it::

    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=("paper", data["paper"].train_mask),
                            batch_size=128, shuffle=True)
    for batch in loader:
        out = model(batch.x_dict, batch.edge_index_dict)["paper"][:batch["paper"].batch_size]

A batch is its seeds' sample (:class:`~gnnscale.loader.sample.SampleStage`: the node-wise sampler, or on a typed
graph the typed node-wise sampler; no PyG sampling backend needed), then the fetch of their attributes
(:class:`~gnnscale.loader.fetch.FetchStage`, :class:`~gnnscale.loader.hetero_fetch.HeteroFetchStage`), then
the copy to ``device`` (:class:`~gnnscale.loader.stream.SeedLoader`, ``prefetch`` batches ahead in a background
thread). Every random choice is keyed by ``(seed, epoch, step)``: the same seed gives the same
batches whatever the thread count or prefetch depth.

With ``device="cuda"`` that thread also moves each batch to the GPU (:class:`~gnnscale.devices.StreamCopy`),
as PyG's ``PrefetchLoader`` does around a loader: pinned host memory, an asynchronous copy on a side
stream, and an event the training step's stream waits on, so the loop never blocks on a copy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from gnnscale.loader.data import graph_of
from gnnscale.loader.fetch import fetch_stage
from gnnscale.loader.hetero import hetero_fanouts, hetero_input_nodes, hetero_topology, is_hetero
from gnnscale.loader.hetero_fetch import hetero_fetch_stage
from gnnscale.loader.options import check_pyg_options, input_node_ids, stream_options
from gnnscale.loader.sample import SampleStage
from gnnscale.loader.stream import SeedLoader
from gnnscale.sampling.nodewise import NodewiseSampler
from gnnscale.sampling.typed_nodewise import TypedNodewiseSampler


class NeighborLoader(SeedLoader):
    """Mini-batches of sampled neighborhoods of ``input_nodes``, as PyG ``Data`` (or ``HeteroData``) objects.

    Args:
        data: a ``torch_geometric.data.Data`` (``edge_index`` int [2, num_edges], source in row 0; a Data
            without one is a graph without edges, and its batches have no ``edge_index``, as PyG's) or a
            gnnscale :class:`~gnnscale.graph.dataset.NodeDataset`; or a typed graph: a
            ``torch_geometric.data.HeteroData`` (every node type's count known, every edge type an
            ``edge_index`` of local ids) or a gnnscale :class:`~gnnscale.graph.typed_dataset.TypedDataset`.
        num_neighbors: neighbors sampled per node per hop, seeds outwards; -1 takes every neighbor, 0 none
            (:func:`gnnscale.sampling.check_fanouts`, the rule of TrainConfig's fanouts too).
            Hop ``k`` samples only the nodes hop ``k - 1`` added (PyG's node-wise sampling). On a typed
            graph, one list for every edge type or PyG's dict ``{edge_type: [per hop]}`` naming every edge
            type (``(src, rel, dst)`` or ``"src__rel__dst"``).
        input_nodes: the seed nodes: int64 tensor/array of unique ids, a bool mask [num_nodes], or
            None for every node (default). On a typed graph ``(node_type, ids or mask or None)`` or
            ``node_type``, ids local to the type (PyG's); None: a TypedDataset's target type.
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

    A typed graph's batch is a ``HeteroData`` with the same fields per store, as PyG's: every node type its
    attributes, ``n_id`` (ids of the type, the input type's ``batch_size`` seeds first) and
    ``num_sampled_nodes``; every edge type its attributes, ``edge_index`` (row 0 local to the source type's
    nodes, row 1 to the destination type's), ``e_id`` (columns of its ``edge_index``; for a TypedDataset, of
    :func:`~gnnscale.loader.to_pyg_hetero_data`'s) and ``num_sampled_edges``; the input type ``input_id`` and
    ``batch_size``. A hop walks the edge types in the data's order, each sampling the nodes of its
    destination type the previous hop added (:mod:`gnnscale.sampling.typed_nodewise`). A TypedDataset gives
    ``x`` (the types with features) and ``y`` (the target type) only.
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
        if is_hetero(data):
            topology = hetero_topology(data)
            fanouts = hetero_fanouts(topology, num_neighbors)
            self.fetch = hetero_fetch_stage(data, topology)
            self.sample = SampleStage(TypedNodewiseSampler(topology.graph, fanouts, replace=replace))
            self.input_type, self.input_nodes, self._input_id = hetero_input_nodes(input_nodes, data, topology.graph)
            self._seeds = self.input_nodes + topology.graph.node_range(self.input_type)[0]  # the sampler's global ids
            self._num_neighbors = {edge_type: list(fanouts[rel]) for edge_type, rel
                                   in zip(topology.edge_types, topology.graph.relations)}
        else:
            graph, edge_ids = graph_of(data)
            self.fetch = fetch_stage(data)
            self.sample = SampleStage(NodewiseSampler(graph, num_neighbors, replace=replace, edge_ids=edge_ids))
            self.input_type = None
            self.input_nodes, self._input_id = input_node_ids(input_nodes, graph.num_nodes)
            self._seeds = self.input_nodes
            self._num_neighbors = self.sample.fanouts
        super().__init__(self.input_nodes.numel(), options)

    @property
    def num_neighbors(self) -> tuple[int, ...] | dict[tuple[str, str, str], list[int]]:
        """Neighbors per hop; on a typed graph per edge type (PyG's ``{edge_type: [per hop]}``)."""
        return self._num_neighbors

    @property
    def sampler(self) -> NodewiseSampler | TypedNodewiseSampler:
        return self.sample.sampler

    def _batch(self, index: Tensor, key: int) -> Data | HeteroData:
        data = self.fetch(self.sample(self._seeds[index], key))
        input_id = index if self._input_id is None else self._input_id[index]
        if self.input_type is None:
            data.input_id = input_id
        else:  # PyG's NodeLoader sets both on the input type's store, after the sampled counts
            data[self.input_type].input_id = input_id
            data[self.input_type].batch_size = int(index.numel())
        return data

    def __repr__(self) -> str:
        if self.input_type is None:
            fanouts, seeds = list(self.num_neighbors), self.input_nodes.numel()
        else:
            fanouts, seeds = self.num_neighbors, (self.input_type, self.input_nodes.numel())
        return (f"NeighborLoader(num_neighbors={fanouts}, input_nodes={seeds}, "
                f"batch_size={self.batch_size}, shuffle={self.options.shuffle}, seed={self.seed}, "
                f"device={self.device})")
