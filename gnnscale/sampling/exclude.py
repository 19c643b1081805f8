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

from gnnscale.sampling.block import Block


def pair_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """int64: ``src * num_nodes + dst`` (unique while ``num_nodes`` < 3 * 10**9)."""
    return src.to(torch.int64) * num_nodes + dst.to(torch.int64)


def excluded_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """int64, sorted: the keys of the pairs ``(src, dst)`` and their reverses."""
    return torch.cat([pair_keys(src, dst, num_nodes), pair_keys(dst, src, num_nodes)]).unique()


def is_member(keys: Tensor, sorted_keys: Tensor) -> Tensor:
    """bool, like ``keys``: whether each key is in ``sorted_keys`` (one binary search each)."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, keys).clamp_(max=sorted_keys.numel() - 1)
    return sorted_keys[pos] == keys


def block_edges(block: Block) -> tuple[Tensor, Tensor]:
    """(source, destination) global ids of every edge of ``block``, in its CSC order."""
    rows = torch.repeat_interleave(torch.arange(block.num_dst, device=block.indptr.device), block.indptr.diff())
    return block.src_ids[block.indices], block.src_ids[rows]


def drop_edges(block: Block, drop: Tensor) -> Block:
    """``block`` without the edges ``drop`` marks (bool [num_edges]); nodes and edge order kept."""
    keep = ~drop
    rows = torch.repeat_interleave(torch.arange(block.num_dst, device=block.indptr.device), block.indptr.diff())
    indptr = torch.zeros_like(block.indptr)
    torch.cumsum(torch.bincount(rows[keep], minlength=block.num_dst), 0, out=indptr[1:])
    weight = None if block.edge_weight is None else block.edge_weight[keep]
    return replace(block, indptr=indptr, indices=block.indices[keep], edge_weight=weight)


def exclude_target_edges(blocks: list[Block], src: Tensor, dst: Tensor, num_nodes: int) -> list[Block]:
    """``blocks`` without any edge between a pair ``(src[i], dst[i])``, in either direction (on the blocks'
    device: the device sampler's blocks stay on the GPU)."""
    if not blocks:
        return []
    device = blocks[0].indptr.device
    keys = excluded_keys(src.to(device), dst.to(device), num_nodes)
    out = []
    for block in blocks:
        e_src, e_dst = block_edges(block)
        out.append(drop_edges(block, is_member(pair_keys(e_src, e_dst, num_nodes), keys)))
    return out
