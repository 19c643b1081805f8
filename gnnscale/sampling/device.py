"""Neighbor sampling in torch ops, on any device (CUDA included), bit for bit the fused CPU sampler's blocks.

:class:`DeviceNeighborSampler` keeps the topology as tensors on its device and samples every hop with a
handful of vectorised torch ops, so that batches for a GPU-resident model never leave the GPU. For the
same key it returns exactly the blocks of :func:`gnnscale.sampling.sample_blocks` (``method="fused"``):
the same ``indptr``, ``indices``, ``src_ids`` and ``num_dst``. That holds because each step computes the
same function of the same inputs as the CPU kernel (gnnscale/sampling/fused.py, choose.py), only
vectorised:

1. **Counts.** Destination ``v`` of degree ``d`` gets ``choose.num_chosen(d, fanout, replace)`` edges:
   0 when ``d == 0``, ``d`` for fanout -1, ``fanout`` with replacement, else ``min(fanout, d)``. Their
   prefix sum is the block's ``indptr``, as in ``count_and_offsets``.
2. **Choice**, slot ``q`` of ``v``'s edges (its CSC slot ``indptr[i] + q``), as ``choose_neighbors``:
   every neighbor in row order (``q``) for fanout -1 or ``d <= fanout`` without replacement; with
   replacement ``uniform_below(node_stream(key, hop, v), q, d)``; otherwise Robert Floyd's algorithm
   (``floyd_subset``), run as ``fanout`` sequential draws, each over every destination at once: draw
   ``c`` is ``t = uniform_below(state, c, d - fanout + c + 1)``, replaced by ``d - fanout + c`` when it
   equals one of the ``c`` earlier slots (a comparison over ``[num_dst, c]``). The draws come from
   :mod:`gnnscale.torch_keys`, bit-identical to the numba keys (tests/test_torch_keys.py).
3. **Relabel** by first appearance in edge order: the destinations keep local ids ``0 .. num_dst - 1``
   and each new source takes the next id when first met in CSC order, so every hop's sources extend the
   one node list. The CPU kernel walks the edges with a mapping array; here ``first[g]``, the first
   position of global id ``g`` in ``[destinations, chosen]``, comes from one ``scatter_reduce`` (amin);
   a position is new iff it is its id's first, and a cumulative sum over "new" numbers the new nodes in
   order of first appearance: the same ids the serial walk gives, with no sort.

Host syncs (each is a GPU round trip; all are sizes the blocks need as Python ints or tensor shapes):
one per batch to validate the seeds (range and uniqueness), and two per hop that samples edges: the
number of edges (sizes the edge arrays) and the number of sources (``num_src``). Nothing else crosses
between host and device per draw: the keys, fanouts and draw numbers stay Python ints, which torch takes
as scalar operands (tests/sampling/test_device_sampler.py counts them).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnscale.devices import resolve_device
from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling import BatchSampler, check_fanouts, check_key, check_seeds
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.torch_keys import node_stream, uniform_below

__all__ = ["DeviceNeighborSampler", "DeviceTopology"]

_UNSEEN = torch.iinfo(torch.int64).max  # "no position yet" in the first-position array (amin leaves it)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceTopology:
    """A CSC graph held as tensors on one device (see :class:`gnnscale.graph.csc.CSCGraph`).

    Args:
        indptr: int64 [num_nodes + 1]; in-edges of ``v`` are ``indices[indptr[v]:indptr[v + 1]]``.
        indices: int32 (when node ids fit, as the CPU graph stores them) or int64 [num_edges]; source ids.
        num_nodes: number of nodes.

    Only shapes, dtypes and devices are checked here (O(1), no sync); the ids are trusted as a
    :class:`CSCGraph`'s are after its validation.
    """

    indptr: Tensor
    indices: Tensor
    num_nodes: int

    def __post_init__(self) -> None:
        if not isinstance(self.indptr, Tensor) or self.indptr.dtype != torch.int64 or self.indptr.dim() != 1:
            raise TypeError(f"indptr: expected a 1-D int64 tensor, got {_describe(self.indptr)}")
        if (not isinstance(self.indices, Tensor) or self.indices.dtype not in (torch.int32, torch.int64)
                or self.indices.dim() != 1):
            raise TypeError(f"indices: expected a 1-D int32 or int64 tensor, got {_describe(self.indices)}")
        if isinstance(self.num_nodes, bool) or not isinstance(self.num_nodes, int) or self.num_nodes < 0:
            raise ValueError(f"num_nodes: expected an int >= 0, got {self.num_nodes!r}")
        if self.indptr.shape[0] != self.num_nodes + 1:
            raise ValueError(f"indptr: expected num_nodes + 1 = {self.num_nodes + 1} offsets, "
                             f"got {self.indptr.shape[0]}")
        if self.indices.device != self.indptr.device:
            raise ValueError(f"indices: expected the device of indptr ({self.indptr.device}), "
                             f"got {self.indices.device}")

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    @classmethod
    def from_graph(cls, graph: CSCGraph, device: torch.device) -> "DeviceTopology":
        """The graph's arrays on ``device``, dtypes kept (int32 indices stay int32: half the bytes)."""
        return cls(indptr=_tensor(graph.indptr).to(device), indices=_tensor(graph.indices).to(device),
                   num_nodes=int(graph.num_nodes))


def _describe(value) -> str:
    return f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__


def _tensor(array: np.ndarray) -> Tensor:
    """A tensor over ``array``'s memory. A memory-mapped graph is read-only, which torch warns about; the
    sampler never writes to its topology, so the warning says nothing here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(array))


class DeviceNeighborSampler(BatchSampler):
    """Samples blocks with torch ops on ``device``; same blocks as the fused CPU sampler for the same key.

    Args:
        graph: the topology, a :class:`CSCGraph` (copied to ``device``) or a :class:`DeviceTopology`
            (used where it lies; ``device`` must then be None or its device).
        fanouts: neighbors per node per hop, seeds outwards; -1 every neighbor, 0 none (``check_fanouts``).
        replace: sample with replacement (as :func:`gnnscale.sampling.sample_blocks`).
        device: where the topology, the work and the returned blocks live: a name that
            :func:`gnnscale.devices.resolve_device` reads (``cpu``, ``cuda``, ``cuda:N``, ``auto``) or a
            ``torch.device``; None: the topology's device, the CPU for a :class:`CSCGraph`.

    Keeps an int64 [num_nodes] work array on the device (the first position of every node in a hop,
    reset after each hop), so one sampler must not be used by two threads at once.
    """

    def __init__(self, graph: CSCGraph | DeviceTopology, fanouts: Sequence[int], *, replace: bool = False,
                 device: torch.device | str | None = None) -> None:
        if device is not None:
            device = resolve_device(device)
        if isinstance(graph, CSCGraph):
            topology = DeviceTopology.from_graph(graph, torch.device("cpu") if device is None else device)
        elif isinstance(graph, DeviceTopology):
            if device is not None and device != graph.device:
                raise ValueError(f"device: the topology lies on {graph.device}, got {device!r}")
            topology = graph
        else:
            raise TypeError(f"graph: expected a CSCGraph or DeviceTopology, got {type(graph).__name__}")
        self.topology = topology
        self.fanouts = check_fanouts(fanouts)
        self.replace = bool(replace)
        self._first = torch.full((topology.num_nodes,), _UNSEEN, dtype=torch.int64, device=topology.device)

    @property
    def device(self) -> torch.device:
        return self.topology.device

    def sample(self, seeds, key: int) -> list[Block]:
        """Blocks in model order (input layer first), every tensor on the sampler's device.

        Args:
            seeds: int tensor (any device) or numpy array [batch]: unique node ids in [0, num_nodes).
            key: the batch's key (:func:`gnnscale.sampling.derive_key`).
        """
        nodes = self._seeds(seeds)  # seeds before key: sample_blocks' order, so both raise the same first error
        key = check_key(key)
        hops = []
        for hop, fanout in enumerate(self.fanouts):
            indptr, local, nodes = self._sample_hop(nodes, fanout, key, hop)
            hops.append((indptr, local, int(indptr.shape[0]) - 1, int(nodes.shape[0])))
        # One node list holds every hop's sources as a prefix (like blocks_from_hops on the CPU).
        blocks = [Block(indptr=indptr, indices=local, src_ids=nodes[:num_src], num_dst=num_dst)
                  for indptr, local, num_dst, num_src in hops]
        return blocks[::-1]

    def _seeds(self, seeds) -> Tensor:
        """int64 [batch] seeds on the device, validated with sample_blocks' errors."""
        if not isinstance(seeds, Tensor):
            seeds = torch.from_numpy(check_seeds(seeds, self.topology.num_nodes))  # type, shape, range
        elif seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
            raise TypeError(f"seeds: expected an integer tensor, got {seeds.dtype}")
        elif seeds.dim() != 1:
            raise ValueError(f"seeds: expected a 1-D array, got shape {tuple(seeds.shape)}")
        elif seeds.shape[0] == 0:
            raise ValueError("seeds: expected at least one seed node, got none")
        # A copy even when dtype and device match: the blocks' node list must not alias the caller's seeds.
        on_device = seeds.to(self.device, torch.int64, copy=True)
        ordered = on_device.sort().values
        bad = (ordered[0] < 0) | (ordered[-1] >= self.topology.num_nodes) | (ordered[1:] == ordered[:-1]).any()
        if bool(bad):  # host sync: one per batch, the validation's verdict
            host = check_seeds(seeds, self.topology.num_nodes)  # raises the range error, if that is it
            raise ValueError(f"seeds: expected unique node ids, node {_first_repeat(host)} appears twice")
        return on_device

    def _sample_hop(self, nodes: Tensor, fanout: int, key: int, hop: int) -> tuple[Tensor, Tensor, Tensor]:
        """One hop from the destinations ``nodes``: (indptr int64 [num_dst + 1], local source ids int64
        [num_edges], the node list extended by the new sources int64 [num_src])."""
        topo = self.topology
        start = topo.indptr.index_select(0, nodes)
        degree = topo.indptr.index_select(0, nodes + 1) - start
        counts = _num_chosen(degree, fanout, self.replace)
        indptr = torch.zeros(nodes.shape[0] + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        num_edges = int(indptr[-1])  # host sync: sizes this hop's edge arrays
        if num_edges == 0:
            return indptr, torch.empty(0, dtype=torch.int64, device=self.device), nodes
        row = torch.repeat_interleave(torch.arange(nodes.shape[0], device=self.device), counts,
                                      output_size=num_edges)  # destination index of every edge
        # q, the edge's slot in its row. (index_select rather than [] for gathers: on the CPU it is
        # several times faster than advanced indexing, the same kernel on CUDA.)
        slot = torch.arange(num_edges, device=self.device) - indptr.index_select(0, row)
        position = self._positions(nodes, degree, fanout, key, hop, row, slot)
        chosen = topo.indices.index_select(0, start.index_select(0, row) + position).to(torch.int64)
        local, nodes = self._relabel(nodes, chosen)
        return indptr, local, nodes

    def _positions(self, nodes: Tensor, degree: Tensor, fanout: int, key: int, hop: int, row: Tensor,
                   slot: Tensor) -> Tensor:
        """int64 [num_edges]: where in its destination's row each edge's source sits (choose_positions)."""
        if fanout == ALL_NEIGHBORS:
            return slot
        if self.replace:
            return uniform_below(node_stream(key, hop, nodes).index_select(0, row), slot, degree.index_select(0, row))
        # Rows with degree <= fanout take every neighbor in order; the others take Floyd's subset. Every
        # slot is below fanout here, so the gather from the [num_dst, fanout] subsets is in range.
        subsets = _floyd_subsets(node_stream(key, hop, nodes), fanout, degree)
        from_subset = subsets.view(-1).index_select(0, row * fanout + slot)  # subsets[row, slot]
        return torch.where(degree.index_select(0, row) > fanout, from_subset, slot)

    def _relabel(self, nodes: Tensor, chosen: Tensor) -> tuple[Tensor, Tensor]:
        """(local ids of ``chosen``, the node list extended by its new ids in order of first appearance)."""
        ids = torch.cat([nodes, chosen])
        position = torch.arange(ids.shape[0], device=self.device)
        first = self._first
        try:
            first.scatter_reduce_(0, ids, position, reduce="amin")
            first_position = first.index_select(0, ids)
        finally:
            first.index_fill_(0, ids, _UNSEEN)  # only the entries this hop touched: O(edges), not O(nodes)
        is_new = first_position == position  # the known nodes are distinct: all of them are new here
        local_at = torch.cumsum(is_new, 0) - 1  # at a first position: its id's local id
        num_src = int(local_at[-1]) + 1  # host sync: the block's num_src
        # Every new id to its local slot; repeats go to a spare slot past the end, dropped.
        extended = torch.empty(num_src + 1, dtype=torch.int64, device=self.device)
        extended.scatter_(0, torch.where(is_new, local_at, num_src), ids)
        return local_at.index_select(0, first_position[nodes.shape[0]:]), extended[:num_src]


def _num_chosen(degree: Tensor, fanout: int, replace: bool) -> Tensor:
    """int64 [n]: edges each destination gets (choose.num_chosen, elementwise)."""
    if fanout == ALL_NEIGHBORS:
        return degree
    if replace:
        return torch.where(degree > 0, fanout, 0)
    return degree.clamp(max=fanout)


def _floyd_subsets(state: Tensor, k: int, degree: Tensor) -> Tensor:
    """int64 [n, k]: row i is choose.floyd_subset(state[i], k, degree[i]), meaningful where degree > k.

    Floyd's draws are sequential within a row, so the loop runs over draws (k of them) and each draw
    over all rows at once; draw c compares against the row's c earlier slots. Rows with degree <= k get
    values never read (their bound is clamped to 1 so that every draw stays defined)."""
    out = torch.empty(state.shape[0], k, dtype=torch.int64, device=state.device)
    for c in range(k):
        j = degree - k + c
        t = uniform_below(state, c, (j + 1).clamp(min=1))
        taken = (out[:, :c] == t.unsqueeze(1)).any(dim=1)
        out[:, c] = torch.where(taken, j, t)
    return out


def _first_repeat(seeds: np.ndarray) -> int:
    """The first seed, in order, that an earlier one equals (what the fused sampler reports)."""
    _, first = np.unique(seeds, return_index=True)
    repeated = np.ones(seeds.shape[0], dtype=bool)
    repeated[first] = False
    return int(seeds[int(np.argmax(repeated))])
