"""``NeighborLoader``: PyG's homogeneous node-classification loader, sampled by gnnscale's fused kernels.

A PyG training script changes its import line and nothing else::

    from gnnscale.loader import NeighborLoader   # was: from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=data.train_mask, batch_size=128,
                            shuffle=True)
    for batch in loader:
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])

Batches are PyG ``Data`` objects with PyG's conventions (see :class:`NeighborLoader`). They are
sampled by :class:`~gnnscale.sampling.nodewise.NodewiseSampler` (no PyG sampling backend needed)
and prepared ``prefetch`` batches ahead by a background thread (the trainer's
:class:`~gnnscale.prefetch.Prefetcher`). Every random choice is keyed by ``(seed, epoch,
step)``: the same seed gives the same batches whatever the thread count or prefetch depth.

With ``device="cuda"`` that thread also moves each batch to the GPU (:class:`~gnnscale.devices.StreamCopy`),
as PyG's ``PrefetchLoader`` does around a loader: pinned host memory, an asynchronous copy on a side
stream, and an event the training step's stream waits on, so the loop never blocks on a copy.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader.utils import filter_data

from gnnscale.devices import StreamCopy, resolve_device
from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.features import take_rows
from gnnscale.keys import STREAM_ORDER, derive_key
from gnnscale.prefetch import Prefetcher
from gnnscale.sampling.nodewise import NodewiseSample, NodewiseSampler
from gnnscale.sampling.pyg import describe_batch

# torch DataLoader options about worker processes: accepted, with one note, and ignored (sampling runs
# in numba threads of this process; the background stage is ``prefetch``). pin_memory_device is
# deprecated in torch (the current accelerator is used): pin_memory and device say it all.
IGNORED_LOADER_OPTIONS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory_device",
                          "worker_init_fn", "multiprocessing_context", "timeout", "in_order")
# PyG options gnnscale does not implement, with the only value it accepts (PyG's default).
_DEFAULT_ONLY = {"input_time": None, "disjoint": False, "temporal_strategy": "uniform", "time_attr": None,
                 "weight_attr": None, "transform_sampler_output": None, "neighbor_sampler": None, "directed": True}
_noted: set[str] = set()


def _note_ignored(names: list[str]) -> None:
    """One warning per process and option: a training script builds a loader per epoch or per split."""
    new = [n for n in names if n not in _noted]
    if new:
        _noted.update(new)
        warnings.warn(f"NeighborLoader: {', '.join(new)} ignored: gnnscale samples in numba threads of this "
                      f"process and prepares batches ahead with prefetch=<batches> instead of worker processes",
                      stacklevel=3)


def _note_no_pinning() -> None:
    """torch's DataLoader warns and goes on where pin_memory=True meets no accelerator; so does the loader
    (once per process): a script written for a GPU machine still runs on a CPU-only one, unchanged."""
    if "pin_memory" not in _noted:
        _noted.add("pin_memory")
        warnings.warn("NeighborLoader: pin_memory=True ignored: no CUDA device here, so batches stay in ordinary "
                      "memory (as torch's DataLoader does)", stacklevel=3)


class NeighborLoader:
    """Mini-batches of sampled neighborhoods of ``input_nodes``, as PyG ``Data`` objects.

    Args:
        data: a ``torch_geometric.data.Data`` (``edge_index`` int [2, num_edges], source in row 0) or
            a gnnscale :class:`~gnnscale.graph.dataset.NodeDataset`.
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
        given = dict(input_time=input_time, disjoint=disjoint, temporal_strategy=temporal_strategy,
                     time_attr=time_attr, weight_attr=weight_attr, transform_sampler_output=transform_sampler_output,
                     neighbor_sampler=neighbor_sampler, directed=directed)
        for name, default in _DEFAULT_ONLY.items():
            value = given[name]
            if value is not default and not (type(value) is type(default) and value == default):
                raise ValueError(f"{name}: gnnscale's NeighborLoader supports only {default!r} (PyG's default), "
                                 f"got {given[name]!r}")
        unknown = sorted(set(loader_options) - set(IGNORED_LOADER_OPTIONS))
        if unknown:
            raise TypeError(f"NeighborLoader: unexpected keyword arguments {unknown}")
        _note_ignored([n for n in IGNORED_LOADER_OPTIONS if n in loader_options])
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)  # PyG's SubgraphType enum or its name
        if subgraph_type != "directional":
            raise ValueError(f"subgraph_type: gnnscale's NeighborLoader supports only 'directional', "
                             f"got {subgraph_type!r}")
        for name, value, low in (("batch_size", batch_size, 1), ("prefetch", prefetch, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform: expected a callable or None, got {type(transform).__name__}")
        if not isinstance(pin_memory, bool):
            raise TypeError(f"pin_memory: expected True or False, got {pin_memory!r}")
        self.device = resolve_device(device)
        self.pin_memory = pin_memory
        if pin_memory and not torch.cuda.is_available():
            _note_no_pinning()

        self.data = data
        graph, edge_ids = _graph_of(data)
        self.attributes = batch_attributes(data)
        self.sampler = NodewiseSampler(graph, num_neighbors, replace=replace, edge_ids=edge_ids)
        self._sampler_lock = threading.Lock()
        self.input_nodes, self._input_id = _input_nodes(input_nodes, graph.num_nodes)
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.transform, self.prefetch = transform, prefetch
        self.seed = _resolve_seed(seed, generator)
        self.epoch = 0  # epochs started: each iteration over the loader is the next epoch

    @property
    def num_neighbors(self) -> tuple[int, ...]:
        return self.sampler.fanouts

    def __len__(self) -> int:
        n = self.input_nodes.numel()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        self.epoch += 1
        order = torch.arange(self.input_nodes.numel())
        if self.shuffle:
            gen = torch.Generator().manual_seed(derive_key(self.seed, epoch, 0, 0, STREAM_ORDER))
            order = torch.randperm(order.numel(), generator=gen)
        batches = order.split(self.batch_size)[: len(self)]
        return self._stream(batches, epoch)

    def _stream(self, batches: tuple[Tensor, ...], epoch: int) -> Iterator[Data]:
        # A generator, so that leaving the loop early closes the background stage.
        copy = StreamCopy(self.device, pin=self.pin_memory)

        def prepare(step: int):
            with copy.producing():
                return copy.send(self.batch(batches[step], derive_key(self.seed, epoch, step)), Data.apply)

        with Prefetcher(prepare, len(batches), self.prefetch) as items:
            for item in items:
                yield copy.receive(item)

    def batch(self, index: Tensor, key: int) -> Data:
        """The batch of ``input_nodes[index]`` sampled under ``key``, on the host (iterating moves it to
        ``device``)."""
        seeds = self.input_nodes[index]
        with self._sampler_lock:  # one mapping array: iterators that are open at once take turns
            out = self.sampler.sample(seeds, key)
        data = self._to_data(out, out.edge_pos)
        data.input_id = index if self._input_id is None else self._input_id[index]
        return data if self.transform is None else self.transform(data)

    def _to_data(self, out: NodewiseSample, e_id: Tensor) -> Data:
        return to_batch_data(self.attributes, out, e_id)

    def __repr__(self) -> str:
        return (f"NeighborLoader(num_neighbors={list(self.num_neighbors)}, input_nodes={self.input_nodes.numel()}, "
                f"batch_size={self.batch_size}, shuffle={self.shuffle}, seed={self.seed}, device={self.device})")


def _graph_of(data) -> tuple[CSCGraph, np.ndarray | None]:
    """The CSC topology of ``data`` and, for a PyG Data whose ``edge_index`` is not sorted by target,
    the ``edge_index`` column of each CSC position (None: CSC positions are the edge ids)."""
    if isinstance(data, NodeDataset):
        return data.graph, None
    if not isinstance(data, Data):
        raise TypeError(f"data: expected a torch_geometric.data.Data or a gnnscale NodeDataset, got "
                        f"{type(data).__name__} (heterogeneous graphs and remote stores are not supported)")
    edge_index = data.edge_index
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"data.edge_index: expected an int64 tensor [2, num_edges], got {type(edge_index).__name__}"
                        f" (a SparseTensor adj_t is not supported)")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point \
            or edge_index.dtype == torch.bool:
        raise ValueError(f"data.edge_index: expected an integer tensor [2, num_edges], got {edge_index.dtype} of "
                         f"shape {tuple(edge_index.shape)}")
    num_nodes = int(data.num_nodes)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchAttributes:
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
    """

    node: dict[str, np.ndarray]
    edge: dict[str, np.ndarray]
    shared: dict[str, object]
    rest: Data | None
    order: tuple[str, ...]
    num_nodes: bool


def _kernel_view(data: Data, key: str, value) -> np.ndarray | None:
    """``value`` as a numpy view the gather kernel can slice along its first dimension, or None."""
    if not isinstance(value, Tensor) or value.device.type != "cpu" or value.dim() == 0 or not value.is_contiguous() \
            or value.requires_grad or value.dtype in (torch.bfloat16,) or data.__cat_dim__(key, value) != 0:
        return None
    try:
        return value.numpy()
    except (TypeError, RuntimeError):  # a dtype numpy has no counterpart of: PyG's slicing takes it
        return None


def batch_attributes(data) -> BatchAttributes:
    """How the batches of ``data`` (a PyG ``Data`` or a NodeDataset) get their attributes."""
    if isinstance(data, NodeDataset):
        return BatchAttributes(node={"x": data.features, "y": data.labels}, edge={}, shared={}, rest=None,
                               order=("x", "y"), num_nodes=False)
    node, edge, shared, rest = {}, {}, {}, copy.copy(data)  # rest: a new store holding the same tensors
    leftover = False
    for key, value in data.items():
        if key in ("edge_index", "num_nodes"):
            continue
        kind = "node" if data.is_node_attr(key) else "edge" if data.is_edge_attr(key) else None
        view = None if kind is None else _kernel_view(data, key, value)
        if kind is None:
            shared[key] = value
        elif view is not None:
            (node if kind == "node" else edge)[key] = view
            del rest[key]
        else:
            leftover = True
    rest.num_nodes = data.num_nodes  # as the batches store theirs (filter_data sets each batch's own count)
    return BatchAttributes(node=node, edge=edge, shared=shared, rest=rest if leftover else None,
                           order=tuple(data.keys()), num_nodes=True)


def to_batch_data(attributes: BatchAttributes, out: NodewiseSample, e_id: Tensor) -> Data:
    """A PyG ``Data`` batch of the sampled subgraph ``out``: every node attribute sliced by
    ``out.nodes``, every edge attribute by ``e_id`` (int64 [num_edges], the edges' ids in the data),
    ``edge_index`` (local ids), ``n_id``, ``e_id``, ``batch_size`` (the seeds: the first
    ``out.num_sampled_nodes[0]`` nodes), ``num_sampled_nodes`` and ``num_sampled_edges``; graph-level
    attributes are shared with the data. ``input_id`` is the caller's."""
    ids, edges = out.nodes.numpy(), e_id.numpy()
    sliced = {key: torch.from_numpy(take_rows(values, ids)) for key, values in attributes.node.items()}
    sliced.update((key, torch.from_numpy(take_rows(values, edges))) for key, values in attributes.edge.items())
    sliced.update(attributes.shared)
    if attributes.rest is not None:
        # PyG's own slicing for what the kernel does not take (its edge_index stack is replaced below).
        sliced.update(filter_data(attributes.rest, out.nodes, out.row, out.col, e_id, None).items())
    data = Data()
    for key in attributes.order:
        if key in sliced:
            data[key] = sliced[key]
    data.edge_index = out.edge_index
    if attributes.num_nodes:
        data.num_nodes = out.nodes.numel()
    data.e_id = e_id
    return describe_batch(data, out)


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


def _resolve_seed(seed, generator) -> int:
    if seed is not None:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed: expected an int >= 0 or None, got {seed!r}")
        return int(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    # Drawn once: the loader's epochs then follow from it, as a DataLoader's from its generator.
    return int(torch.randint(0, 2**62, (), generator=generator))


def to_pyg_data(dataset: NodeDataset) -> Data:
    """A gnnscale :class:`~gnnscale.graph.dataset.NodeDataset` as a PyG ``Data``: ``x`` (float32
    [num_nodes, dim], shares memory with writable in-memory features), ``y`` (int64 [num_nodes]),
    ``edge_index`` (int64 [2, num_edges], in CSC order: grouped by target) and bool
    ``train_mask``/``val_mask``/``test_mask`` [num_nodes]."""
    if not isinstance(dataset, NodeDataset):
        raise TypeError(f"dataset: expected a gnnscale NodeDataset, got {type(dataset).__name__}")
    graph, n = dataset.graph, dataset.graph.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), graph.in_degrees())
    edge_index = torch.from_numpy(np.stack([np.asarray(graph.indices, dtype=np.int64), dst]))
    masks = {}
    for split in ("train", "val", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(getattr(dataset, f"{split}_idx"))] = True
        masks[f"{split}_mask"] = mask
    # np.require copies only what torch cannot share: read-only (memory-mapped) or non-contiguous arrays.
    x, y = (torch.from_numpy(np.require(a, requirements=["C", "W"])) for a in (dataset.features, dataset.labels))
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=n, **masks)


from gnnscale.link_loader import LinkNeighborLoader  # noqa: E402,F401  (PyG's other loader, same import)
