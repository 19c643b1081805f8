"""The node-classification dataset every loader returns: topology plus per-node data beside it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.pages import release_pages


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


# Labels of the summaries' keys (NodeDataset's, TypedDataset's) in `gnnscale info`; a key missing here shows
# under its own name, its underscores as spaces.
SUMMARY_LABELS = {
    "name": "dataset", "num_nodes": "nodes", "num_edges": "edges", "feature_dim": "feature dim",
    "num_classes": "classes", "train/val/test": "train / val / test", "in_degree": "in-degree",
    "topology_bytes": "topology", "feature_bytes": "features", "feature_to_topology_ratio": "features / topology",
    "node_types": "node types", "target_type": "target type", "mean_in_degree": "mean in-degree",
    "max_in_degree": "max in-degree",
}
_BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def describe_summary(summary: dict) -> str:
    """``summary`` (:meth:`NodeDataset.summary`, :meth:`~gnnscale.graph.typed_dataset.TypedDataset.summary`) as
    aligned ``label  value`` lines for a person to read: counts with thousands separators, floats to 3 significant
    digits, byte counts in kB/MB/GB. A table (a value whose entries are all mappings, such as the node types) gets
    a heading line and one indented line per entry."""
    rows = []
    for key, value in summary.items():
        label = _label(key)
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            rows.append((label, ""))
            rows.extend((f"  {name}", _format_value(name, entry)) for name, entry in value.items())
        else:
            rows.append((label, _format_value(key, value)))
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join(f"{label:<{width}}  {value}".rstrip() for label, value in rows)


def _label(key: str) -> str:
    return SUMMARY_LABELS.get(key, key.replace("_", " "))


def _format_value(key: str, value: object) -> str:
    if value is None:
        return "none"
    if key.endswith("_bytes") and isinstance(value, int):
        return format_bytes(value)
    if isinstance(value, dict):
        return ", ".join(f"{_label(k)} {_format_value(k, v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " / ".join(_format_value(key, v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else format_float(value)


def format_float(value: float) -> str:
    """3 significant digits (``3.90``, ``15.0``, ``0.00123``); from 1,000 on, a whole number with
    separators instead of an exponent (``15,002``)."""
    if not math.isfinite(value):
        return str(value)
    if abs(float(f"{value:.3g}")) >= 1000:  # rounded first: 999.96 is "1,000", not "1.00e+03"
        return f"{value:,.0f}"
    text = f"{value:#.3g}"
    return text.rstrip(".") if "e" not in text else f"{value:.3g}"


def format_bytes(count: int) -> str:
    """Decimal units, 3 significant digits: ``340 kB``, ``1.28 MB``, ``2.45 GB`` (``512 B`` below 1 kB)."""
    rounded = float(f"{count:.3g}")  # 999,999,999 bytes is "1.00 GB", not "1,000 MB"
    for size, unit in _BYTE_UNITS:
        if rounded >= size:
            return f"{format_float(count / size)} {unit}"
    return f"{count} B"


def mask_to_index(mask: np.ndarray) -> np.ndarray:
    """Boolean mask [num_nodes] -> sorted int64 node ids."""
    return np.flatnonzero(np.asarray(mask, dtype=bool)).astype(np.int64)


def check_finite_features(features: np.ndarray, chunk_rows: int = 1 << 16) -> None:
    """ValueError naming the first rows that hold NaN or Inf: such a row trains a NaN model that still
    prints a plausible accuracy. Read in chunks of ``chunk_rows`` rows, so a memory-mapped matrix is
    scanned once without being held in memory."""
    count, shown = flagged_rows(features, lambda rows: ~np.isfinite(rows).all(axis=1), chunk_rows)
    if count:
        raise ValueError(f"features: {count} rows hold NaN or Inf (rows {shown}); clean or drop them (e.g. "
                         "numpy.nan_to_num) before training")


def flagged_rows(features: np.ndarray, flag, chunk_rows: int) -> tuple[int, str]:
    """(how many rows ``flag(rows)`` marks, the first five of them as text), ``chunk_rows`` rows at a time."""
    bad: list[int] = []
    count = 0
    for start in range(0, features.shape[0], chunk_rows):
        rows = np.flatnonzero(flag(features[start:start + chunk_rows])) + start
        release_pages(features)  # a scan, not a load: a mapped matrix must not stay resident
        count += rows.size
        bad.extend(rows[:max(0, 5 - len(bad))].tolist())
    return count, ", ".join(map(str, bad)) + (", ..." if count > len(bad) else "")
