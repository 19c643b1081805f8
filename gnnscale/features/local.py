"""Every feature row in this process: the store of a run in one process (and of a one-worker partition)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.feature_dtype import decode
from gnnscale.graph.features import gather_rows


class LocalFeatureStore:
    """Every feature row in this process: a gather, no communication.

    Args:
        features: float32 [num_nodes, d], numpy (possibly memory-mapped).
        pinned: gather float32 rows straight into pinned host memory (training on a GPU: the copy stage
            then sends them without pinning them in another host copy, the largest tensor of a batch).
    """

    def __init__(self, features: np.ndarray, pinned: bool = False) -> None:
        self.features = features
        self.feature_dim = int(features.shape[1])
        self.pinned = pinned and features.dtype == np.float32 and features.flags.c_contiguous

    def gather(self, node_ids: Tensor) -> Tensor:
        """float32 [len(node_ids), d]: the rows of ``node_ids`` (a numba kernel that releases the GIL)."""
        if self.pinned:
            rows = torch.empty((node_ids.shape[0], self.feature_dim), dtype=torch.float32, pin_memory=True)
            gather_rows(self.features, node_ids.numpy(), out=rows.numpy())
            return rows
        return decode(gather_rows(self.features, node_ids.numpy()))
