"""The node-classification dataset every loader returns: topology plus per-node data beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnscale.graph.csc import CSCGraph


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDataset:
    """A graph with node features, labels and a train/val/test split.

    Args:
        name: a human-readable name, e.g. ``"cora"`` or ``"synthetic"``.
        graph: the topology (in-edges per node, CSC).
        features: float32 [num_nodes, feature_dim]; may be memory-mapped.
        labels: int64 [num_nodes]; class ids in [0, num_classes), or -1 for unlabeled nodes.
        train_idx, val_idx, test_idx: int64 node ids, each sorted and unique.
        num_classes: number of classes.
    """

    name: str
    graph: CSCGraph
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    def __repr__(self) -> str:
        # The sizes, not the arrays.
        return (f"NodeDataset(name={self.name!r}, num_nodes={self.graph.num_nodes}, num_edges={self.graph.num_edges}, "
                f"feature_dim={self.features.shape[1]}, num_classes={self.num_classes}, "
                f"train/val/test={self.train_idx.size}/{self.val_idx.size}/{self.test_idx.size})")

    def __post_init__(self) -> None:
        n = self.graph.num_nodes
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise ValueError(f"features: expected shape [{n}, feature_dim], got {self.features.shape}")
        if self.features.dtype != np.float32:
            raise TypeError(f"features: expected dtype float32, got {self.features.dtype}")
        if self.labels.shape != (n,):
            raise ValueError(f"labels: expected shape [{n}], got {self.labels.shape}")
        if self.labels.dtype != np.int64:
            raise TypeError(f"labels: expected dtype int64, got {self.labels.dtype}")
        if self.num_classes < 1:
            raise ValueError(f"num_classes: expected >= 1, got {self.num_classes}")
        for split in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(self, split)
            if idx.ndim != 1 or idx.dtype != np.int64:
                raise TypeError(f"{split}: expected a 1-D int64 array, got {idx.dtype} with shape {idx.shape}")
            if idx.size and (idx[0] < 0 or idx[-1] >= n or np.any(np.diff(idx) <= 0)):
                raise ValueError(f"{split}: expected sorted unique node ids in [0, {n})")
            if idx.size and np.any(self.labels[idx] < 0):
                raise ValueError(f"{split}: contains nodes without a label (-1)")
            if idx.size and np.any(self.labels[idx] >= self.num_classes):
                raise ValueError(f"{split}: contains labels >= num_classes = {self.num_classes}")

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    def summary(self) -> dict:
        """Counts and sizes behind ``gnnscale info`` (the topology/feature ratio motivates hybrid partitioning)."""
        deg = self.graph.in_degrees()
        topo = self.graph.nbytes()
        feat = int(self.features.nbytes)
        return {
            "name": self.name,
            "num_nodes": self.graph.num_nodes,
            "num_edges": self.graph.num_edges,
            "feature_dim": self.feature_dim,
            "num_classes": self.num_classes,
            "train/val/test": [int(self.train_idx.size), int(self.val_idx.size), int(self.test_idx.size)],
            "in_degree": {
                "mean": float(deg.mean()) if deg.size else 0.0,
                "median": float(np.median(deg)) if deg.size else 0.0,
                "max": int(deg.max()) if deg.size else 0,
                "p99": float(np.percentile(deg, 99)) if deg.size else 0.0,
                "isolated": int((deg == 0).sum()),
            },
            "topology_bytes": topo,
            "feature_bytes": feat,
            "feature_to_topology_ratio": feat / topo if topo else float("inf"),
        }


def mask_to_index(mask: np.ndarray) -> np.ndarray:
    """Boolean mask [num_nodes] -> sorted int64 node ids."""
    return np.flatnonzero(np.asarray(mask, dtype=bool)).astype(np.int64)
