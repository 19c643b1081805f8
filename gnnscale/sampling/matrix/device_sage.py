"""GraphSAGE matrix sampling in torch ops, on any device (CUDA included): the device twin of
:class:`gnnscale.sampling.matrix.MatrixSampler`, the same blocks bit for bit for the same keys.

Per hop, for the whole stack, the host's steps in vectorised form:

1. factor the stack (``torch.unique``: the host's ``needed`` and ``inverse``);
2. ``S A`` from the row source (:class:`~gnnscale.sampling.matrix.device_products.RowSource`): where each
   needed row lies, no copy on one device; the 1.5D layout's rows come from its process column;
3. the draw: every row's count (``min(fanout, degree)``, ...), and the positions in its row, from the fused
   kernel's per-node stream of ``(keys[batch of the row], hop, node)`` (Floyd's algorithm, or uniform
   positions with replacement: the device neighbor sampler's draws, each row under its batch's key);
4. extraction, per batch: destinations keep their local ids, new sources take the next ids by first
   appearance in CSC order. The batch and the node form one key (``batch * num_nodes + node``); its first
   position (one ``torch.unique`` and one ``scatter_reduce``) says which occurrences are new, and a cumulative
   sum numbers them: the ids the host's serial walk gives, every batch at once.

Integer ops only, so the blocks equal the host sampler's (and the fused kernel's) exactly, on every device.
Host syncs per hop: the number of sampled edges, and the batches' edge and node counts (one transfer).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from gnnscale.devices import resolve_device
from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling import BatchSampler, check_fanouts
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.sampling.device import _floyd_subsets, _num_chosen
from gnnscale.sampling.matrix.device_products import DeviceMatrix, DeviceStack, RowSource, check_stack_on, expand, \
    stack_on_device
from gnnscale.sampling.matrix.sage import check_bulk
from gnnscale.torch_keys import node_streams, uniform_below

_UNSEEN = torch.iinfo(torch.int64).max  # "no position yet" (amin leaves it)


def row_source(graph: CSCGraph | RowSource, device: torch.device | str | None, make) -> RowSource:
    """A device sampler's rows: ``make(graph, device)`` for a :class:`CSCGraph` (held on ``device``, default the
    CPU), or a row source used where it lies (``device`` must then be None or its device)."""
    if device is not None:
        device = resolve_device(device)
    if isinstance(graph, CSCGraph):
        return make(graph, torch.device("cpu") if device is None else device)
    if isinstance(graph, RowSource):
        if device is not None and device != graph.device:
            raise ValueError(f"device: the rows lie on {graph.device}, got {device!r}")
        return graph
    raise TypeError(f"graph: expected a CSCGraph or a row source, got {type(graph).__name__}")


class DeviceMatrixSampler(BatchSampler):
    """GraphSAGE sampling of ``bulk`` batches at a time in torch ops on a device; the blocks of
    :class:`~gnnscale.sampling.matrix.MatrixSampler` for the same keys, every tensor on the device.

    Args:
        graph: a :class:`CSCGraph` (its ``A`` copied to ``device``) or a row source (``S A`` fetched per hop,
            the 1.5D layout; ``device`` None or its device).
        fanouts: neighbors per node per hop, seeds outwards (as the host sampler).
        bulk: batches per ``sample_many`` in the training loop. Default 1.
        replace: sample with replacement. Default False.
        device: where the topology, the work and the blocks live (a name ``resolve_device`` reads, or a
            ``torch.device``); None: the row source's, the CPU for a :class:`CSCGraph`.
    """

    def __init__(self, graph: CSCGraph | RowSource, fanouts: Sequence[int], *, bulk: int = 1, replace: bool = False,
                 device: torch.device | str | None = None) -> None:
        self.rows = row_source(graph, device, DeviceMatrix.pattern)
        self.num_nodes = self.rows.num_nodes
        self.fanouts = check_fanouts(fanouts)
        self.bulk = check_bulk(bulk)
        self.replace = bool(replace)

    @property
    def device(self) -> torch.device:
        return self.rows.device

    def sample(self, seeds, key: int) -> list[Block]:
        """One batch's blocks in model order; the same as ``sample_many([seeds], [key])[0]``."""
        return self.sample_many([seeds], [key])[0]

    def sample_many(self, seeds_list, keys) -> list[list[Block]]:
        """Blocks of every batch of the stack (model order), on the device; batch ``b``'s depend only on
        ``(seeds_list[b], keys[b])``. Validation as the host sampler's (on the host: seeds are planned there)."""
        nodes, batch_ptr, keys = check_stack_on(self.device, self.num_nodes, seeds_list, keys)
        hops: list[list[tuple]] = [[] for _ in range(len(batch_ptr) - 1)]
        for hop, fanout in enumerate(self.fanouts):
            stack = stack_on_device(nodes, batch_ptr)
            offsets, edge_row, chosen = self._draw(stack, keys, fanout, hop)
            local, nodes, edge_ptr, new_ptr = relabel_stack(stack, offsets, edge_row, chosen, self.num_nodes)
            for b, batch_hops in enumerate(hops):
                lo, hi = batch_ptr[b], batch_ptr[b + 1]
                batch_hops.append((offsets[lo:hi + 1] - edge_ptr[b], local[edge_ptr[b]:edge_ptr[b + 1]], hi - lo,
                                   new_ptr[b + 1] - new_ptr[b]))
            batch_ptr = new_ptr
        out = []
        for b, batch_hops in enumerate(hops):
            final = nodes[batch_ptr[b]:batch_ptr[b + 1]]  # every hop's sources are a prefix of it
            blocks = [Block(indptr=indptr, indices=indices, src_ids=final[:num_src], num_dst=num_dst)
                      for indptr, indices, num_dst, num_src in batch_hops]
            out.append(blocks[::-1])
        return out

    def _draw(self, stack: DeviceStack, keys: Tensor, fanout: int, hop: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(offsets int64 [rows + 1], the row of every edge int64 [edges], chosen global ids int64 [edges])``:
        every stacked row's neighbors in CSC order, row ``r`` drawn from row ``inverse[r]`` of ``S A`` with the
        stream of ``(its batch's key, hop, node)``."""
        rows = self.rows.gather(stack.needed)
        start = rows.start.index_select(0, stack.inverse)
        degree = rows.length.index_select(0, stack.inverse)
        offsets, edge_row, slot = expand(_num_chosen(degree, fanout, self.replace))
        if edge_row.shape[0] == 0:
            return offsets, edge_row, edge_row
        if fanout == ALL_NEIGHBORS:
            position = slot
        else:
            streams = node_streams(keys.index_select(0, stack.row_batch), hop, stack.nodes)
            position = _positions(streams, degree, fanout, self.replace, edge_row, slot)
        chosen = rows.indices.index_select(0, start.index_select(0, edge_row) + position).long()
        return offsets, edge_row, chosen


def _positions(streams: Tensor, degree: Tensor, fanout: int, replace: bool, edge_row: Tensor, slot: Tensor) -> Tensor:
    """int64 [edges]: where in its row each edge's source sits (choose.choose_positions, every row at once)."""
    if replace:
        return uniform_below(streams.index_select(0, edge_row), slot, degree.index_select(0, edge_row))
    # Rows of degree <= fanout take every neighbor in order; the others Floyd's subset (slot < fanout here).
    subsets = _floyd_subsets(streams, fanout, degree)
    from_subset = subsets.view(-1).index_select(0, edge_row * fanout + slot)
    return torch.where(degree.index_select(0, edge_row) > fanout, from_subset, slot)


def relabel_stack(stack: DeviceStack, offsets: Tensor, edge_row: Tensor, chosen: Tensor,
                  num_nodes: int) -> tuple[Tensor, Tensor, list[int], list[int]]:
    """Every batch's chosen ids to its local ids (the host's ``relabel_batches``).

    Batch ``b`` knows its rows' nodes (local ids ``0, 1, ...``) and owns the edges
    ``offsets[batch_ptr[b]]:offsets[batch_ptr[b + 1]]`` (``edge_row``: the row of every edge); its new nodes take
    the next ids by first appearance.
    Returns ``(local int64 [edges], the batches' extended node lists int64 (old nodes first), edge_ptr and
    new_ptr as k + 1 host ints)``. One host sync (the counts), besides ``torch.unique``'s own.
    """
    device, nodes = chosen.device, stack.nodes
    batch_ptr = stack.batch_ptr_tensor()
    edge_ptr = offsets.index_select(0, batch_ptr)
    edge_batch = stack.row_batch.index_select(0, edge_row)
    # Batch by batch, its known nodes then its chosen ids: batch b's run starts at batch_ptr[b] + edge_ptr[b].
    at_node = torch.arange(nodes.shape[0], device=device) + edge_ptr.index_select(0, stack.row_batch)
    at_edge = torch.arange(chosen.shape[0], device=device) + batch_ptr.index_select(0, edge_batch + 1)
    size = nodes.shape[0] + chosen.shape[0]
    ids = torch.empty(size, dtype=torch.int64, device=device)
    ids.index_copy_(0, at_node, nodes).index_copy_(0, at_edge, chosen)
    batch = torch.empty(size, dtype=torch.int64, device=device)
    batch.index_copy_(0, at_node, stack.row_batch).index_copy_(0, at_edge, edge_batch)
    distinct, key = torch.unique(batch * num_nodes + ids, return_inverse=True)
    position = torch.arange(size, device=device)
    first = torch.full((distinct.shape[0],), _UNSEEN, dtype=torch.int64, device=device)
    first_position = first.scatter_reduce_(0, key, position, reduce="amin").index_select(0, key)
    is_new = first_position == position
    numbered = torch.zeros(size + 1, dtype=torch.int64, device=device)  # new positions before each position
    torch.cumsum(is_new, 0, out=numbered[1:])
    new_ptr = numbered.index_select(0, batch_ptr + edge_ptr)
    local = (numbered.index_select(0, first_position.index_select(0, at_edge))
             - new_ptr.index_select(0, edge_batch))
    counts = torch.cat([edge_ptr, new_ptr]).tolist()  # host sync: every batch's edge and node counts
    k1 = batch_ptr.shape[0]
    total = counts[-1]
    extended = torch.empty(total + 1, dtype=torch.int64, device=device)
    extended.scatter_(0, torch.where(is_new, numbered[:-1], total), ids)  # repeats to a spare slot, dropped
    return local, extended[:total], counts[:k1], counts[k1:]
