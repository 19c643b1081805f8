"""``LinkNeighborLoader``: PyG's homogeneous link-prediction loader, sampled by gnnscale's kernels.

A PyG link-prediction script changes its import line and nothing else::

    from gnnscale.loader import LinkNeighborLoader   # was: from torch_geometric.loader import LinkNeighborLoader

    loader = LinkNeighborLoader(train_data, num_neighbors=[10, 10], edge_label_index=train_data.edge_label_index,
                                edge_label=train_data.edge_label, neg_sampling_ratio=1.0, batch_size=128,
                                shuffle=True)
    for batch in loader:
        z = model(batch.x, batch.edge_index)
        score = (z[batch.edge_label_index[0]] * z[batch.edge_label_index[1]]).sum(-1)
        loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)

A batch draws its pairs first: its seed edges, their negatives and the pairs' unique endpoints
(:func:`gnnscale.sampling.negatives.batch_pairs`). Then, as :class:`~gnnscale.loader.node.NeighborLoader`'s
batches, the endpoints are sampled, their attributes fetched, and the batch copied to ``device``. Every
random choice of a batch, neighbors and negatives, is keyed by ``(seed, epoch, step)``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import NegativeSampling

from gnnscale.graph.dataset import NodeDataset
from gnnscale.loader.data import csc_edge_index, graph_of
from gnnscale.loader.fetch import fetch_stage
from gnnscale.loader.options import check_pyg_options, stream_options
from gnnscale.loader.sample import SampleStage
from gnnscale.loader.stream import SeedLoader
from gnnscale.sampling.negatives import batch_pairs
from gnnscale.sampling.nodewise import NodewiseSampler

# PyG's two negative sampling modes and the law of gnnscale.sampling.negatives that draws each.
NEGATIVE_MODES = {"binary": "uniform", "triplet": "per_source"}


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkNegatives:
    """How a batch's negatives are drawn (PyG's ``NegativeSampling`` without node weights).

    Args:
        mode: ``"binary"`` (pairs labelled 0 beside the positives) or ``"triplet"`` (destinations for
            each positive's source).
        amount: negatives per positive: > 0, ``ceil(num_pos * amount)`` per batch for ``"binary"``;
            an int >= 1 for ``"triplet"``.
    """

    mode: str
    amount: float

    @property
    def law(self) -> str:
        """The law of :mod:`gnnscale.sampling.negatives` that draws them."""
        return NEGATIVE_MODES[self.mode]


def link_negatives(neg_sampling, neg_sampling_ratio) -> LinkNegatives | None:
    """PyG's reading of the two arguments: a non-zero ``neg_sampling_ratio`` means binary negatives at
    that ratio (and wins over ``neg_sampling``); ``neg_sampling`` is a ``NegativeSampling``, a mode name,
    a dict or a tuple of its arguments, or None (no negatives)."""
    if neg_sampling_ratio is not None:
        if isinstance(neg_sampling_ratio, bool) or not isinstance(neg_sampling_ratio, numbers.Real) \
                or not 0 <= neg_sampling_ratio < math.inf:
            raise ValueError(f"neg_sampling_ratio: expected a number > 0 (0 or None: no negatives), got "
                             f"{neg_sampling_ratio!r}")
        if neg_sampling_ratio != 0:
            neg_sampling = NegativeSampling("binary", neg_sampling_ratio)
    try:
        neg = NegativeSampling.cast(neg_sampling)
    except (TypeError, ValueError) as err:
        raise ValueError(f"neg_sampling: expected 'binary', 'triplet', a NegativeSampling or None ({err})") from None
    if neg is None:
        return None
    if neg.src_weight is not None or neg.dst_weight is not None:
        raise ValueError("neg_sampling: weighted negatives (src_weight, dst_weight) are not supported; gnnscale "
                         "draws them uniformly over the nodes")
    amount = neg.amount
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or not 0 < amount < math.inf:
        raise ValueError(f"neg_sampling: expected a finite amount > 0, got {amount!r}")
    return LinkNegatives(mode=neg.mode.value, amount=float(amount) if neg.is_binary() else int(amount))


def _edge_label_index(edge_label_index, data, num_nodes: int) -> Tensor:
    """The seed edges: int64 [2, num_seed_edges], every id in range; by default every edge of ``data``."""
    if edge_label_index is None:
        if isinstance(data, NodeDataset):
            return csc_edge_index(data.graph)
        if data.edge_index is None:
            raise ValueError("edge_label_index: expected the seed edges, an int tensor [2, num_edges]: data has no "
                             "edge_index to take them from")
        edge_label_index = data.edge_index
    if isinstance(edge_label_index, np.ndarray):
        edge_label_index = torch.from_numpy(edge_label_index)
    if not isinstance(edge_label_index, Tensor):
        raise TypeError(f"edge_label_index: expected an int tensor [2, num_edges] or None, got "
                        f"{type(edge_label_index).__name__} (edge types of heterogeneous graphs are not supported)")
    dtype = edge_label_index.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"edge_label_index: expected an integer tensor of node ids, got {dtype}")
    if edge_label_index.dim() != 2 or edge_label_index.shape[0] != 2 or edge_label_index.shape[1] == 0:
        raise ValueError(f"edge_label_index: expected shape [2, num_edges] with num_edges >= 1, got "
                         f"{tuple(edge_label_index.shape)}")
    edge_label_index = edge_label_index.cpu().to(torch.int64)
    lo, hi = int(edge_label_index.min()), int(edge_label_index.max())
    if lo < 0 or hi >= num_nodes:
        raise ValueError(f"edge_label_index: node ids must lie in [0, {num_nodes}), found {lo if lo < 0 else hi}")
    return edge_label_index


def _edge_label(edge_label, num_edges: int, negatives: LinkNegatives | None) -> Tensor | None:
    """The seed edges' labels, shifted by one for binary negatives when they start at 0 (PyG's rule: label 0
    is then a negative, 1..C the given classes)."""
    if edge_label is None:
        return None
    if not isinstance(edge_label, Tensor):
        raise TypeError(f"edge_label: expected a tensor [num_edges, ...] or None, got {type(edge_label).__name__}")
    if edge_label.dim() == 0 or edge_label.shape[0] != num_edges:
        raise ValueError(f"edge_label: expected one label per edge of edge_label_index ({num_edges}), got shape "
                         f"{tuple(edge_label.shape)}")
    if negatives is not None and negatives.mode == "triplet":
        raise ValueError("edge_label: must be None with neg_sampling='triplet' (the batch's src_index, "
                         "dst_pos_index and dst_neg_index tell positives from negatives), as in PyG")
    if negatives is not None and edge_label.min() == 0:
        edge_label = edge_label + 1
    return edge_label.cpu()


class LinkNeighborLoader(SeedLoader):
    """Mini-batches of seed edges with the sampled neighborhoods of their endpoints, as PyG ``Data``.

    Args:
        data: a ``torch_geometric.data.Data`` (``edge_index`` int [2, num_edges], source in row 0; a Data
            without one is a graph without edges, and its batches have no ``edge_index``, as PyG's) or a
            gnnscale :class:`~gnnscale.graph.dataset.NodeDataset`; the graph sampled from.
        num_neighbors: neighbors per node per hop, seeds outwards (as :class:`NeighborLoader`'s); ``[]``
            samples no hop (a batch holds its pairs' endpoints alone, as PyG's).
        edge_label_index: int tensor [2, num_seed_edges] (source row 0) of node ids, the seed edges;
            default None: every edge of ``data``.
        edge_label: tensor [num_seed_edges, ...] of labels or None (default).
        neg_sampling: ``"binary"``, ``"triplet"``, a PyG ``NegativeSampling`` (without node weights),
            a dict or tuple of its arguments, or None (default: no negatives).
        neg_sampling_ratio: binary negatives per positive (PyG's older argument; a non-zero value wins
            over ``neg_sampling``). Default None.
        batch_size, shuffle, drop_last: seed edges per batch and their order, as ``DataLoader``'s.
        device: where the yielded batches' tensors are: ``"cpu"`` (default), ``"cuda"``, ``"cuda:N"``,
            ``"auto"`` or a ``torch.device`` (:func:`~gnnscale.devices.resolve_device`). On CUDA the
            background thread copies each batch from pinned memory on a side stream (:class:`~gnnscale.devices.StreamCopy`).
        pin_memory: pin the batches' host memory (torch DataLoader's option; implied on CUDA). Without
            CUDA: one warning, no effect, as torch's DataLoader. Default False.
        replace, subgraph_type, transform, seed, prefetch, generator, worker options and PyG's options
        that gnnscale does not implement: as :class:`NeighborLoader`'s. ``edge_label_time``: None only.

    A batch holds :class:`NeighborLoader`'s fields (``x``, ``edge_index``, ``n_id``, ``e_id``,
    ``num_sampled_nodes``, ``num_sampled_edges``; no ``batch_size``) for the seed set of the unique
    endpoints of the batch's positive and negative pairs, sorted by node id (PyG's order): ``n_id``
    starts with them. Then, as PyG:

    * ``input_id``: int64 [num_pos], the positions of the batch's seed edges in ``edge_label_index``.
    * no negatives, or ``"binary"``: ``edge_label_index`` int64 [2, num_pos + num_neg] in local ids,
      the positives first, and ``edge_label`` (the given labels, or float ones for binary negatives;
      negatives 0). Without negatives and labels there is no ``edge_label``.
    * ``"triplet"``: ``src_index`` and ``dst_pos_index`` int64 [num_pos] and ``dst_neg_index`` int64
      [num_pos, amount] (squeezed to [num_pos] for one), in local ids.

    Negatives are uniform over all nodes and not checked against the graph (PyG's default too).
    """

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None, edge_label_time=None,
                 replace: bool = False, subgraph_type="directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None, neg_sampling_ratio=None, time_attr=None,
                 weight_attr=None, transform: Callable | None = None, transform_sampler_output=None,
                 is_sorted: bool = False, filter_per_worker=None, neighbor_sampler=None, directed: bool = True,
                 *, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False, seed: int | None = None,
                 prefetch: int = 1, generator: torch.Generator | None = None,
                 device: str | torch.device | None = None, pin_memory: bool = False, **loader_options) -> None:
        for name in ("input_nodes", "input_time"):  # NeighborLoader's own: seeds here are edges
            if name in loader_options:
                raise TypeError(f"LinkNeighborLoader: unexpected keyword argument {name!r} (the seeds are "
                                f"edge_label_index)")
        if edge_label_time is not None:
            raise ValueError("edge_label_time: gnnscale's LinkNeighborLoader supports only None (PyG's default; "
                             "temporal sampling is not implemented)")
        check_pyg_options("LinkNeighborLoader", dict(
            disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
            transform_sampler_output=transform_sampler_output, neighbor_sampler=neighbor_sampler,
            directed=directed), subgraph_type, loader_options)
        options = stream_options("LinkNeighborLoader", batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                 seed=seed, prefetch=prefetch, generator=generator, transform=transform,
                                 device=device, pin_memory=pin_memory)
        self.data = data
        graph, edge_ids = graph_of(data)
        self.fetch = fetch_stage(data)
        no_hop = isinstance(num_neighbors, (list, tuple)) and len(num_neighbors) == 0  # PyG's link loader takes []
        self.sample = SampleStage(None if no_hop else
                                  NodewiseSampler(graph, num_neighbors, replace=replace, edge_ids=edge_ids))
        self.num_nodes = graph.num_nodes
        self.neg_sampling = link_negatives(neg_sampling, neg_sampling_ratio)
        self.edge_label_index = _edge_label_index(edge_label_index, data, self.num_nodes)
        self.edge_label = _edge_label(edge_label, self.edge_label_index.shape[1], self.neg_sampling)
        super().__init__(self.edge_label_index.shape[1], options)

    @property
    def num_neighbors(self) -> tuple[int, ...]:
        return self.sample.fanouts

    def _batch(self, index: Tensor, key: int) -> Data:
        """The batch of the seed edges ``edge_label_index[:, index]`` sampled under ``key``."""
        src, dst = self.edge_label_index[:, index]
        neg = self.neg_sampling
        pairs = batch_pairs(src, dst, self.num_nodes, key, ratio=0 if neg is None else neg.amount,
                            law="uniform" if neg is None else neg.law)
        # PyG's seed set: the unique endpoints, sorted; the pairs become positions in it.
        data = self.fetch(self.sample(pairs.seeds, key))
        del data.batch_size  # not a field of PyG's link batches
        data.input_id = index
        data.batch = data.edge_label_time = None  # as PyG sets them (None: the data's own are dropped)
        num_pos, local = pairs.num_pos, pairs.local
        if neg is not None and neg.mode == "triplet":
            data.edge_label_index = data.seed_time = None
            data.src_index, data.dst_pos_index = local[0, :num_pos], local[1, :num_pos]
            data.dst_neg_index = local[1, num_pos:].view(num_pos, -1).squeeze(-1)
        else:
            data.edge_label_index = local
            data.edge_label = self._edge_label(index, local.shape[1] - num_pos)
        return data

    def _edge_label(self, index: Tensor, num_neg: int) -> Tensor | None:
        """The labels of a batch's pairs: the seed edges' (or ones, for binary negatives), then 0 per negative."""
        label = None if self.edge_label is None else self.edge_label[index]
        if self.neg_sampling is None:
            return label
        label = torch.ones(index.numel()) if label is None else label
        return torch.cat([label, label.new_zeros((num_neg,) + label.shape[1:])])

    def __repr__(self) -> str:
        neg = "None" if self.neg_sampling is None else f"{self.neg_sampling.mode}x{self.neg_sampling.amount:g}"
        return (f"LinkNeighborLoader(num_neighbors={list(self.num_neighbors)}, "
                f"edge_label_index={self.edge_label_index.shape[1]}, neg_sampling={neg}, "
                f"batch_size={self.batch_size}, shuffle={self.options.shuffle}, seed={self.seed})")
