"""Block: one message-flow graph, the input of one GNN layer, in CSC over its destination nodes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


class SourcePrefixBlock:
    """What every CSC block form derives alike from its fields ``src_ids`` (sources, destinations
    first), ``num_dst`` and ``indices`` (one entry per edge): :class:`Block` and the split layout's
    :class:`~gnnscale.distributed.split.SplitBlock` (whose fields mean the same for one worker's share).
    One definition, so the two forms cannot drift apart. No fields of its own (empty ``__slots__``, so
    the slotted dataclasses stay slotted)."""

    __slots__ = ()
    src_ids: Tensor
    num_dst: int
    indices: Tensor

    @property
    def num_src(self) -> int:
        return int(self.src_ids.shape[0])

    @property
    def num_edges(self) -> int:
        """Edges of the block (of a split: the edges this worker computes)."""
        return int(self.indices.shape[0])

    @property
    def dst_ids(self) -> Tensor:
        return self.src_ids[: self.num_dst]


@dataclass(frozen=True, slots=True, kw_only=True)
class Block(SourcePrefixBlock):
    """A bipartite message-flow graph from ``num_src`` source nodes to ``num_dst`` destination nodes.

    Args:
        indptr: int64 [num_dst + 1]; in-edges of destination ``i`` are ``indices[indptr[i]:indptr[i+1]]``.
        indices: int64 [num_edges]; local source ids in [0, num_src).
        src_ids: int64 [num_src]; global node ids. ``src_ids[:num_dst]`` are the destination nodes in
            the same order (DGL's block convention; PyG's bipartite ``(x_src, x_dst)`` with
            ``x_dst = x_src[:num_dst]``).
        num_dst: number of destination nodes.
        edge_weight: float32 [num_edges] or None (the default). None: every edge weighs one and the
            layer normalises (neighbor mean, GCN norm). Given: the aggregation is the weighted sum
            ``sum_e edge_weight[e] x_src[indices[e]]`` and the weights are the whole normalisation
            (LADIES' importance-weighted, row-normalised adjacency, self loops included as edges).
    """

    indptr: Tensor
    indices: Tensor
    src_ids: Tensor
    num_dst: int
    edge_weight: Tensor | None = None

    def __post_init__(self) -> None:
        """The shape checks every block passes when it is made (O(1): blocks are made per batch and layer);
        :meth:`validate` adds the ones that read every edge."""
        for name in ("indptr", "indices", "src_ids"):
            t = getattr(self, name)
            if not isinstance(t, Tensor) or t.dtype != torch.int64 or t.dim() != 1:
                got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
                raise TypeError(f"{name}: expected a 1-D int64 tensor, got {got}")
        if isinstance(self.num_dst, bool) or not isinstance(self.num_dst, int) or not 0 <= self.num_dst <= self.num_src:
            raise ValueError(f"num_dst: expected an int in [0, num_src = {self.num_src}], got {self.num_dst!r}")
        if self.indptr.shape[0] != self.num_dst + 1:
            raise ValueError(f"indptr: expected num_dst + 1 = {self.num_dst + 1} offsets, got {self.indptr.shape[0]}")
        if self.edge_weight is not None and tuple(self.edge_weight.shape) != (self.num_edges,):
            raise ValueError(f"edge_weight: expected one weight per edge ({self.num_edges}), got shape "
                             f"{tuple(self.edge_weight.shape)}")

    def validate(self) -> "Block":
        """The CSC invariants kernels index by without bounds checks (O(num_edges), vectorised): offsets
        from 0 to num_edges, non-decreasing, and source ids in [0, num_src). Returns the block."""
        indptr, indices = self.indptr, self.indices
        if int(indptr[0]) != 0 or int(indptr[-1]) != self.num_edges or bool((indptr.diff() < 0).any()):
            raise ValueError(f"indptr: expected {self.num_dst + 1} non-decreasing offsets from 0 to num_edges = "
                             f"{self.num_edges}, got a malformed block")
        if self.num_edges and (int(indices.min()) < 0 or int(indices.max()) >= self.num_src):
            raise ValueError(f"indices: expected source ids in [0, num_src = {self.num_src}), got range "
                             f"[{int(indices.min())}, {int(indices.max())}]")
        return self

    def __repr__(self) -> str:
        # The sizes, not the tensors: a block of a real batch holds millions of ids.
        return (f"Block(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges}, "
                f"device={self.indices.device})")

    def in_degrees(self) -> Tensor:
        """int64 [num_dst]: sampled in-degree of every destination node."""
        return self.indptr[1:] - self.indptr[:-1]

    def dst_index(self) -> Tensor:
        """int64 [num_edges]: local destination id of every edge (the CSC column expanded).

        Equivalent to ``torch.repeat_interleave(torch.arange(num_dst), in_degrees())``.
        """
        return torch.repeat_interleave(torch.arange(self.num_dst, device=self.indptr.device), self.in_degrees(),
                                       output_size=self.num_edges)

    def to_pyg(self) -> tuple[Tensor, tuple[int, int]]:
        """PyG form: ``edge_index`` int64 [2, num_edges] (row 0 local source, row 1 local destination)
        and ``size = (num_src, num_dst)``, for a conv called as ``conv((x_src, x_dst), edge_index, size)``.
        """
        return torch.stack([self.indices, self.dst_index()]), (self.num_src, self.num_dst)

    def to(self, device: torch.device | str) -> "Block":
        weight = None if self.edge_weight is None else self.edge_weight.to(device)
        return Block(indptr=self.indptr.to(device), indices=self.indices.to(device),
                     src_ids=self.src_ids.to(device), num_dst=self.num_dst, edge_weight=weight)
