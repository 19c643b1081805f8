"""PartitionBook: which worker owns which node, when every part owns one contiguous id range."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionBook:
    """Node ownership by contiguous ranges: part ``p`` owns global ids ``[offsets[p], offsets[p+1])``.

    Args:
        offsets: int64 [num_parts + 1], non-decreasing, ``offsets[0] == 0``, ``offsets[-1] == num_nodes``.
    """

    offsets: np.ndarray

    def __post_init__(self) -> None:
        o = self.offsets
        if not isinstance(o, np.ndarray) or o.dtype != np.int64 or o.ndim != 1 or o.shape[0] < 2:
            raise TypeError("offsets: expected an int64 array of length num_parts + 1 >= 2")
        if o[0] != 0 or np.any(np.diff(o) < 0):
            raise ValueError(f"offsets: expected non-decreasing values starting at 0, got {o.tolist()}")

    @property
    def num_parts(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    def node_range(self, part: int) -> tuple[int, int]:
        return int(self.offsets[part]), int(self.offsets[part + 1])

    def owner(self, node_ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Owning part of each node id (same type as the input): a range check, no lookup table."""
        if isinstance(node_ids, torch.Tensor):
            return torch.searchsorted(torch.from_numpy(self.offsets), node_ids, right=True) - 1
        return np.searchsorted(self.offsets, node_ids, side="right") - 1
