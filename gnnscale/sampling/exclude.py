"""Target-edge exclusion for link prediction: a batch's supervision edges never carry their own messages.

The rule is DGL's ``exclude="reverse_id"``: after the batch's blocks are sampled, every block edge
``u -> v`` whose pair ``(u, v)`` or ``(v, u)`` is one of the batch's positive pairs is removed (the nodes
stay), and each block's indptr is rebuilt. Filtering after the sampler's pass (rather than inside it)
keeps the one fused kernel for every task; a destination that lost a target edge has one sampled
neighbor fewer than its fanout, where DGL would have drawn a replacement.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from gnnscale.devices import host_copies
from gnnscale.sampling.block import Block


def pair_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """int64: ``src * num_nodes + dst`` (unique while ``num_nodes`` < 3 * 10**9)."""
    return src.to(torch.int64) * num_nodes + dst.to(torch.int64)


def excluded_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """int64, sorted: the keys of the pairs ``(src, dst)`` and their reverses (a repeat kept: membership needs no
    dedupe, and ``unique`` would make a GPU report its size to the host)."""
    return torch.cat([pair_keys(src, dst, num_nodes), pair_keys(dst, src, num_nodes)]).sort().values


def is_member(keys: Tensor, sorted_keys: Tensor) -> Tensor:
    """bool, like ``keys``: whether each key is in ``sorted_keys`` (one binary search each)."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, keys).clamp_(max=sorted_keys.numel() - 1)
    return sorted_keys.index_select(0, pos) == keys


def block_edges(block: Block) -> tuple[Tensor, Tensor]:
    """(source, destination) global ids of every edge of ``block``, in its CSC order."""
    return block.src_ids.index_select(0, block.indices), block.src_ids.index_select(0, block.dst_index())


def drop_edges(block: Block, drop: Tensor, num_kept: int) -> Block:
    """``block`` without the edges ``drop`` marks (bool [num_edges]; ``num_kept`` of them are not marked); nodes
    and edge order kept. No size is read on the device: the kept edges' positions come from their ranks (a
    cumsum and a scatter), and a row's new offset is the number of kept edges before its old one."""
    keep = ~drop
    kept_before = torch.zeros(block.num_edges + 1, dtype=torch.int64, device=keep.device)
    torch.cumsum(keep, 0, out=kept_before[1:])  # kept_before[e]: kept edges among the first e
    # Every kept edge to its rank's slot, every dropped one to the spare slot at the end.
    slot = torch.where(keep, kept_before[1:] - 1, num_kept)
    at = torch.empty(num_kept + 1, dtype=torch.int64, device=keep.device)
    at.scatter_(0, slot, torch.arange(block.num_edges, device=keep.device))
    at = at[:num_kept]
    weight = None if block.edge_weight is None else block.edge_weight.index_select(0, at)
    return replace(block, indptr=kept_before.index_select(0, block.indptr), indices=block.indices.index_select(0, at),
                   edge_weight=weight)


def exclude_target_edges(blocks: list[Block], src: Tensor, dst: Tensor, num_nodes: int) -> list[Block]:
    """``blocks`` without any edge between a pair ``(src[i], dst[i])``, in either direction (on the blocks'
    device: the device sampler's blocks stay on the GPU). The host reads one thing back, once for all the
    blocks: how many edges each keeps (the sizes of the new blocks)."""
    if not blocks:
        return []
    device = blocks[0].indptr.device
    keys = excluded_keys(src.to(device), dst.to(device), num_nodes)
    drops = [is_member(pair_keys(*block_edges(block), num_nodes), keys) for block in blocks]
    kept = torch.stack([drop.numel() - drop.sum() for drop in drops])
    counts = host_copies([kept])[0].tolist()  # host sync (device blocks): the kept edges of every block, at once
    return [drop_edges(block, drop, count) for block, drop, count in zip(blocks, drops, counts, strict=True)]
