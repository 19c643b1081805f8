"""LADIES in torch ops, on any device (CUDA included): the device twin of
:class:`gnnscale.sampling.matrix.LadiesSampler`, the host's law, keys and blocks.

Per layer, for the whole stack:

1. probabilities ``row_normalize(R (S P ∘ S P))`` by an SpGEMM of torch CSR tensors (cuSPARSE on CUDA;
   :func:`~gnnscale.sampling.matrix.device_products.batch_probabilities`);
2. the draw: per batch the ``min(s, support)`` nodes of smallest ``E_j / p_j``, ``E_j`` the host's exponential
   variate of ``(batch key, layer, j)`` (two stable sorts: by priority, then by batch);
3. extraction, every stacked row at once: its row of ``S P`` expanded, each entry kept when its column is drawn
   in the row's batch (a ``searchsorted`` over the drawn ``(batch, node)`` keys), weighted ``P_ij / (s p_j)``,
   the exact self term first, each row normalised by its sum (``index_add_``, in edge order).

What is exact and what is within rounding (docs/matrix_sampling.md): the keys, ``P``'s values and every
integer step are the host's. Three floating-point results are not computed in the host's order: ``p`` (the
SpGEMM's sums and the row sums), the logarithm of ``E_j`` (torch's, not libm's) and, on CUDA, the row sums of
the weights (atomic adds). So the drawn nodes are the host's unless two priorities of a batch lie within a few
ulps of each other, and the weights (float32) are the host's within a float32 rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling import BatchSampler
from gnnscale.sampling.block import Block
from gnnscale.sampling.matrix.device_products import DeviceMatrix, DeviceRows, DeviceStack, RowSource, \
    batch_probabilities, check_stack_on, expand, stack_on_device
from gnnscale.sampling.matrix.device_sage import row_source
from gnnscale.sampling.matrix.ladies import LADIES_SALT, check_layer_sizes
from gnnscale.sampling.matrix.products import gcn_operator
from gnnscale.sampling.matrix.sage import check_bulk
from gnnscale.torch_keys import mix64, node_streams

_LOW53 = (1 << 53) - 1


def operator_on(graph: CSCGraph, device: torch.device, *, self_loops: bool) -> DeviceMatrix:
    """LADIES' operator (the host's ``gcn_operator``: the same values and order) held on ``device``."""
    return DeviceMatrix.from_scipy(gcn_operator(graph, self_loops=self_loops), device, with_values=True)


def operator_bytes(graph: CSCGraph) -> int:
    """Bytes :func:`operator_on` holds on a device (self loops included: the larger of the two operators)."""
    entries = graph.num_edges + graph.num_nodes
    return 8 * (graph.num_nodes + 1) + entries * (graph.indices.itemsize + 8)


class DeviceLadiesSampler(BatchSampler):
    """LADIES sampling of ``bulk`` batches at a time in torch ops on a device; the blocks of
    :class:`~gnnscale.sampling.matrix.LadiesSampler` for the same keys (see the module docstring for what is
    exact), every tensor on the device.

    Args:
        graph: a :class:`CSCGraph` (its operator built on the host, as the host sampler's, and copied to
            ``device``) or a row source of the operator's rows (the 1.5D layout; ``device`` None or its device).
        layer_sizes: nodes drawn per batch per layer, seeds outwards.
        bulk: batches per ``sample_many`` in the training loop. Default 1.
        self_loops: estimate ``D~^-1 (A + I)`` (GCN, the self term exact) rather than ``D^-1 A``. Default True.
        device: as :class:`~gnnscale.sampling.matrix.device_sage.DeviceMatrixSampler`'s.
    """

    def __init__(self, graph: CSCGraph | RowSource, layer_sizes: Sequence[int], *, bulk: int = 1,
                 self_loops: bool = True, device: torch.device | str | None = None) -> None:
        self.self_loops = bool(self_loops)
        self.rows = row_source(graph, device, lambda g, d: operator_on(g, d, self_loops=self.self_loops))
        self.num_nodes = self.rows.num_nodes
        self.layer_sizes = check_layer_sizes(layer_sizes)
        self.bulk = check_bulk(bulk)

    @property
    def device(self) -> torch.device:
        return self.rows.device

    def sample(self, seeds, key: int) -> list[Block]:
        """One batch's blocks in model order; the same as ``sample_many([seeds], [key])[0]``."""
        return self.sample_many([seeds], [key])[0]

    def sample_many(self, seeds_list, keys) -> list[list[Block]]:
        """Blocks of every batch of the stack (model order), on the device, one SpGEMM per layer for the stack."""
        nodes, batch_ptr, keys = check_stack_on(self.device, self.num_nodes, seeds_list, keys)
        blocks: list[list[Block]] = [[] for _ in range(len(batch_ptr) - 1)]
        for hop, size in enumerate(self.layer_sizes):
            stack = stack_on_device(nodes, batch_ptr)
            rows = self.rows.gather(stack.needed)
            drawn = draw_layer(batch_probabilities(rows, stack, self.num_nodes), keys, size, hop, self.num_nodes)
            layer = extract_layer(rows, stack, drawn, self.self_loops, self.num_nodes)
            for b, batch_blocks in enumerate(blocks):
                lo, hi = batch_ptr[b], batch_ptr[b + 1]
                edges = slice(layer.edge_ptr[b], layer.edge_ptr[b + 1])
                batch_blocks.append(Block(
                    indptr=layer.indptr[lo:hi + 1] - layer.edge_ptr[b], indices=layer.indices[edges],
                    src_ids=layer.nodes[layer.node_ptr[b]:layer.node_ptr[b + 1]], num_dst=hi - lo,
                    edge_weight=layer.weights[edges]))
            nodes, batch_ptr = layer.nodes, layer.node_ptr
        return [batch_blocks[::-1] for batch_blocks in blocks]


def exponential_draws(keys: Tensor, hop: int, nodes: Tensor) -> Tensor:
    """float64: the host's ``exponential_draw(keys[i], hop, nodes[i])`` (Exp(1) of the LADIES stream), up to
    the last bits of torch's logarithm."""
    x = mix64(node_streams(keys.bitwise_xor(LADIES_SALT), hop, nodes))
    uniform = (((x >> 11) & _LOW53).to(torch.float64) + 0.5) * 2.0**-53  # the logical shift of the uint64 bits
    return -torch.log(uniform)


@dataclass(frozen=True, slots=True, kw_only=True)
class DrawnNodes:
    """Every batch's drawn nodes, ascending per batch.

    Args:
        nodes: int64 [total].
        p: float64 [total], their probabilities.
        batch: int64 [total], the batch of each.
        ptr: int64 [k + 1]; batch ``b``'s are ``ptr[b]:ptr[b + 1]``.
    """

    nodes: Tensor
    p: Tensor
    batch: Tensor
    ptr: Tensor


def draw_layer(probs: Tensor, keys: Tensor, size: int, hop: int, num_nodes: int) -> DrawnNodes:
    """Per batch (a row of the CSR ``probs``), the ``min(size, support)`` nodes of smallest ``E_j / p_j``
    (the host's ``draw_layer``). One host sync: how many are kept."""
    # int64 whatever the SpGEMM returned (torch's cuSPARSE path narrows the product's indices to int32).
    crow, columns, p = probs.crow_indices().long(), probs.col_indices().long(), probs.values()
    k = crow.shape[0] - 1
    support = crow[1:] - crow[:-1]
    batch = torch.repeat_interleave(torch.arange(k, device=p.device), support, output_size=p.shape[0])
    priority = exponential_draws(keys.index_select(0, batch), hop, columns) / p
    order = torch.sort(priority, stable=True).indices
    order = order.index_select(0, torch.sort(batch.index_select(0, order), stable=True).indices)
    rank = torch.arange(p.shape[0], device=p.device) - crow.index_select(0, batch.index_select(0, order))
    take = support.clamp(max=size)
    kept = order[rank < take.index_select(0, batch.index_select(0, order))]  # host sync: the count kept
    kept = kept.index_select(0, torch.argsort(batch.index_select(0, kept) * num_nodes + columns.index_select(0, kept)))
    ptr = torch.zeros(k + 1, dtype=torch.int64, device=p.device)
    torch.cumsum(take, 0, out=ptr[1:])
    return DrawnNodes(nodes=columns.index_select(0, kept), p=p.index_select(0, kept),
                      batch=batch.index_select(0, kept), ptr=ptr)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """One layer's blocks for the stack: batch ``b``'s block has indptr ``indptr[batch_ptr[b]:batch_ptr[b + 1] + 1]
    - edge_ptr[b]``, the edges ``edge_ptr[b]:edge_ptr[b + 1]`` and the sources ``nodes[node_ptr[b]:node_ptr[b + 1]]``.

    Args:
        indptr: int64 [rows + 1], every stacked row's edges.
        indices: int64 [edges], local source ids.
        weights: float32 [edges].
        edge_ptr: k + 1 host ints.
        nodes: int64, every batch's sources: its destinations, then its drawn nodes that are not destinations
            (ascending).
        node_ptr: k + 1 host ints.
    """

    indptr: Tensor
    indices: Tensor
    weights: Tensor
    edge_ptr: list[int]
    nodes: Tensor
    node_ptr: list[int]


def extract_layer(rows: DeviceRows, stack: DeviceStack, drawn: DrawnNodes, self_loops: bool, num_nodes: int) -> Layer:
    """Every batch's block between its destinations and its drawn nodes (the host's ``extract_layer``)."""
    device = stack.nodes.device
    batch_ptr = stack.batch_ptr_tensor()
    local_of, nodes, node_ptr = _sources(stack, drawn, num_nodes)
    # Every stacked row's entries of S P, in row order: column j, value P_ij.
    entry_ptr, entry_row, slot = expand(rows.length.index_select(0, stack.inverse))
    at = rows.start.index_select(0, stack.inverse).index_select(0, entry_row) + slot
    column, value = rows.indices.index_select(0, at).long(), rows.values.index_select(0, at)
    entry_batch = stack.row_batch.index_select(0, entry_row)
    drawn_key = drawn.batch * num_nodes + drawn.nodes  # ascending: batches ascending, nodes ascending in each
    entry_key = entry_batch * num_nodes + column
    t = torch.searchsorted(drawn_key, entry_key).clamp_(max=max(drawn_key.shape[0] - 1, 0))
    member = drawn_key.index_select(0, t) == entry_key if drawn_key.shape[0] else torch.zeros_like(column, dtype=torch.bool)
    is_self = column == stack.nodes.index_select(0, entry_row)
    if self_loops:
        member &= ~is_self
    # Row r's edges: its self term (with self loops), then its member entries in row order.
    before = torch.zeros(column.shape[0] + 1, dtype=torch.int64, device=device)  # member entries before each
    torch.cumsum(member, 0, out=before[1:])
    edges_per_row = before.index_select(0, entry_ptr[1:]) - before.index_select(0, entry_ptr[:-1]) + int(self_loops)
    indptr = torch.zeros(stack.nodes.shape[0] + 1, dtype=torch.int64, device=device)
    torch.cumsum(edges_per_row, 0, out=indptr[1:])
    edge_ptr = indptr.index_select(0, batch_ptr).tolist()  # host sync: the batches' edge counts
    total = edge_ptr[-1]
    where = (indptr.index_select(0, entry_row) + int(self_loops) + before[:-1]
             - before.index_select(0, entry_ptr.index_select(0, entry_row)))
    where = torch.where(member, where, total)  # entries that are not edges go to a spare slot, dropped
    num_drawn = (drawn.ptr[1:] - drawn.ptr[:-1]).index_select(0, entry_batch)
    indices = torch.empty(total + 1, dtype=torch.int64, device=device)
    indices.scatter_(0, where, local_of.index_select(0, t) if drawn_key.shape[0] else where)
    weights = torch.empty(total + 1, dtype=torch.float64, device=device)
    if drawn_key.shape[0]:
        weights.scatter_(0, where, value / (num_drawn * drawn.p.index_select(0, t)))
    if self_loops:  # the exact self term: its entries summed in row order (the host's, from 0.0)
        own = indptr[:-1]
        indices[own] = torch.arange(stack.nodes.shape[0], device=device) - batch_ptr.index_select(0, stack.row_batch)
        weights[own] = torch.zeros(stack.nodes.shape[0], dtype=torch.float64, device=device).index_add_(
            0, entry_row, torch.where(is_self, value, 0.0))
    weights = _normalized(weights[:total], indptr, edges_per_row)
    return Layer(indptr=indptr, indices=indices[:total], weights=weights, edge_ptr=edge_ptr, nodes=nodes,
                 node_ptr=node_ptr)


def _sources(stack: DeviceStack, drawn: DrawnNodes, num_nodes: int) -> tuple[Tensor, Tensor, list[int]]:
    """``(local id of every drawn node in its batch's sources, the batches' sources, their k + 1 host offsets)``:
    a batch's sources are its destinations, then its drawn nodes that are not destinations (ascending).
    One host sync (the counts)."""
    device = stack.nodes.device
    batch_ptr = stack.batch_ptr_tensor()
    num_dst = batch_ptr[1:] - batch_ptr[:-1]
    dst_key, dst_row = torch.sort(stack.row_batch * num_nodes + stack.nodes)  # distinct: a batch's nodes are
    drawn_key = drawn.batch * num_nodes + drawn.nodes
    t = torch.searchsorted(dst_key, drawn_key).clamp_(max=dst_key.shape[0] - 1)
    is_dst = dst_key.index_select(0, t) == drawn_key
    outside = torch.zeros(drawn_key.shape[0] + 1, dtype=torch.int64, device=device)  # non-destinations before
    torch.cumsum(~is_dst, 0, out=outside[1:])
    rank = outside[:-1] - outside.index_select(0, drawn.ptr.index_select(0, drawn.batch))
    dst_local = dst_row.index_select(0, t) - batch_ptr.index_select(0, drawn.batch)
    local_of = torch.where(is_dst, dst_local, num_dst.index_select(0, drawn.batch) + rank)
    node_ptr = torch.zeros_like(batch_ptr)
    torch.cumsum(num_dst + outside.index_select(0, drawn.ptr[1:]) - outside.index_select(0, drawn.ptr[:-1]), 0,
                 out=node_ptr[1:])
    offsets = node_ptr.tolist()  # host sync: the batches' source counts
    total = offsets[-1]
    at_dst = node_ptr.index_select(0, stack.row_batch) + torch.arange(stack.nodes.shape[0], device=device) \
        - batch_ptr.index_select(0, stack.row_batch)
    at_drawn = torch.where(is_dst, total, node_ptr.index_select(0, drawn.batch) + local_of)
    nodes = torch.empty(total + 1, dtype=torch.int64, device=device)
    nodes.index_copy_(0, at_dst, stack.nodes).scatter_(0, at_drawn, drawn.nodes)
    return local_of, nodes[:total], offsets


def _normalized(weights: Tensor, indptr: Tensor, edges_per_row: Tensor) -> Tensor:
    """float32: every row's weights divided by their sum where it is positive (summed in edge order by
    ``index_add_``: the host's order on the CPU)."""
    row = torch.repeat_interleave(torch.arange(edges_per_row.shape[0], device=weights.device), edges_per_row,
                                  output_size=weights.shape[0])
    total = torch.zeros(edges_per_row.shape[0], dtype=torch.float64, device=weights.device).index_add_(0, row, weights)
    total = total.index_select(0, row)
    return torch.where(total > 0, weights / total, weights).to(torch.float32)
