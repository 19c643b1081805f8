"""The dataset of a typed graph: a :class:`~gnnscale.graph.typed.TypedGraph`, features per node type, and labels
and a split on one node type, the *target type* (node classification on papers, say, in a graph of papers, authors
and fields).

**Ids.** The split ids are *global* ids (of the typed graph: type ``t``'s nodes are ``type_offsets[t]`` on), all of
the target type: what the samplers and partitioning take. ``labels`` holds one entry per node of the target type, by
*local* id (``labels[i]`` is the label of global id ``lo + i``, ``lo`` the target type's first id). PyG's
``HeteroData`` and its loaders speak local ids per type: :meth:`TypedDataset.local_ids` and
:meth:`TypedDataset.global_ids` convert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gnnscale.graph.typed import TypedGraph

SPLITS = ("train_idx", "val_idx", "test_idx")


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedDataset:
    """A typed graph with features per node type, labels on the target type and a train/val/test split.

    Args:
        name: a human-readable name, e.g. ``"ogbn-mag"``.
        graph: the typed topology.
        features: ``{node type: float32 [count, d_t] or None}`` (may be memory-mapped); a type not named, or named
            with None, has no features (a model learns an embedding per node). Stored with every type as a key, in
            the graph's type order.
        target_type: the node type that carries the labels and the split.
        labels: int64 [count of the target type], by local id: class ids in [0, num_classes), -1 for unlabeled.
        train_idx, val_idx, test_idx: int64 *global* ids of labeled target-type nodes, each sorted and unique.
        num_classes: number of classes (>= 1).
    """

    name: str
    graph: TypedGraph
    features: Mapping[str, np.ndarray | None]
    target_type: str
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if not isinstance(self.graph, TypedGraph):
            raise TypeError(f"graph: expected a TypedGraph, got {type(self.graph).__name__}")
        if not isinstance(self.features, Mapping):
            raise TypeError(f"features: expected a mapping {{node type: array or None}}, got "
                            f"{type(self.features).__name__}")
        for node_type in self.features:
            if node_type not in self.graph.node_types:
                raise ValueError(f"features: names node type {node_type!r}, not one of "
                                 f"{', '.join(self.graph.node_types)}")
        features = {t: self.features.get(t) for t in self.graph.node_types}
        for node_type, x in features.items():
            check_features(node_type, x, self.graph.count(node_type))
        object.__setattr__(self, "features", features)
        check_target_data(self.graph, self.target_type, self.labels,
                          tuple(getattr(self, split) for split in SPLITS), self.num_classes)

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={self.graph.count(t)}" for t in self.graph.node_types)
        return (f"TypedDataset(name={self.name!r}, nodes: {counts}; {len(self.graph.relations)} relations, "
                f"{self.graph.num_edges} edges; target {self.target_type!r}, num_classes={self.num_classes}, "
                f"train/val/test={self.train_idx.size}/{self.val_idx.size}/{self.test_idx.size})")

    @property
    def target_range(self) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of the target type."""
        return self.graph.node_range(self.target_type)

    @property
    def feature_dims(self) -> dict[str, int | None]:
        """``{node type: feature width, or None for a type without features}``, in type order."""
        return {t: None if x is None else int(x.shape[1]) for t, x in self.features.items()}

    def local_ids(self, ids: np.ndarray, node_type: str | None = None) -> np.ndarray:
        """int64: global ids of ``node_type`` (default: the target type) as local ids of that type (PyG's)."""
        lo, hi = self.graph.node_range(node_type or self.target_type)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < lo or ids.max() >= hi):
            raise ValueError(f"ids: expected global ids of node type {node_type or self.target_type!r} in "
                             f"[{lo}, {hi}), got range [{ids.min()}, {ids.max()}]")
        return ids - lo

    def global_ids(self, local: np.ndarray, node_type: str | None = None) -> np.ndarray:
        """int64: local ids of ``node_type`` (default: the target type) as global ids."""
        lo, hi = self.graph.node_range(node_type or self.target_type)
        local = np.asarray(local, dtype=np.int64)
        if local.size and (local.min() < 0 or local.max() >= hi - lo):
            raise ValueError(f"local: expected local ids of node type {node_type or self.target_type!r} in "
                             f"[0, {hi - lo}), got range [{local.min()}, {local.max()}]")
        return local + lo

    def summary(self) -> dict:
        """Counts and sizes behind ``gnnscale info``: per node type its count and feature width, per relation its
        edges and in-degrees (mean and largest over the destination type's nodes)."""
        g = self.graph
        topo = g.graph.nbytes() + int(g.rel_indptr.nbytes + g.type_offsets.nbytes)
        feat = sum(int(x.nbytes) for x in self.features.values() if x is not None)
        return {
            "name": self.name,
            "num_nodes": g.num_nodes,
            "num_edges": g.num_edges,
            "node_types": {t: {"nodes": g.count(t), "feature_dim": d} for t, d in self.feature_dims.items()},
            "relations": {str(rel): _relation_summary(g, r) for r, rel in enumerate(g.relations)},
            "target_type": self.target_type,
            "num_classes": self.num_classes,
            "labeled": int((self.labels >= 0).sum()),
            "train/val/test": [int(self.train_idx.size), int(self.val_idx.size), int(self.test_idx.size)],
            "topology_bytes": topo,
            "feature_bytes": feat,
            "feature_to_topology_ratio": feat / topo if topo else float("inf"),
        }


def _relation_summary(graph: TypedGraph, r: int) -> dict:
    rel = graph.relations[r]
    t = graph.type_id(rel.dst)
    layout = graph.row_layout()
    j = int(np.flatnonzero(graph.in_relations(t) == r)[0])
    count = graph.count(rel.dst)
    rows = layout.row_start[t] + np.arange(count, dtype=np.int64) * layout.rows_per_node(t) + j
    degrees = graph.rel_indptr[rows + 1] - graph.rel_indptr[rows]
    edges = int(degrees.sum())
    return {"edges": edges, "mean_in_degree": edges / count if count else 0.0,
            "max_in_degree": int(degrees.max()) if count else 0}


def check_features(node_type: str, x: np.ndarray | None, count: int) -> None:
    """ValueError/TypeError unless ``x`` is None or float32 [count, d >= 1]."""
    if x is None:
        return
    if not isinstance(x, np.ndarray):
        raise TypeError(f"features: {node_type}: expected a float32 array or None, got {type(x).__name__}")
    if x.ndim != 2 or x.shape[0] != count or x.shape[1] < 1:
        raise ValueError(f"features: {node_type}: expected shape [{count}, d] (one row per {node_type} node), got "
                         f"{list(x.shape)}")
    if x.dtype != np.float32:
        raise TypeError(f"features: {node_type}: expected dtype float32, got {x.dtype}")


def check_target_data(graph: TypedGraph, target_type: str, labels: np.ndarray,
                      splits: tuple[np.ndarray, np.ndarray, np.ndarray], num_classes: int) -> None:
    """The rules between the target type, its labels, the split and the class count (see :class:`TypedDataset`):
    one-line ValueError/TypeError naming the field."""
    if target_type not in graph.node_types:
        raise ValueError(f"target_type: expected one of {', '.join(graph.node_types)}, got {target_type!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"num_classes: expected an int >= 1, got {num_classes!r}")
    count = graph.count(target_type)
    if not isinstance(labels, np.ndarray) or labels.dtype != np.int64:
        raise TypeError(f"labels: expected an int64 array, got {getattr(labels, 'dtype', type(labels).__name__)}")
    if labels.shape != (count,):
        raise ValueError(f"labels: expected one per node of the target type {target_type!r} (shape [{count}]), got "
                         f"shape {list(labels.shape)}")
    if count and (labels.min() < -1 or labels.max() >= num_classes):
        raise ValueError(f"labels: expected class ids in [0, {num_classes}) or -1 (unlabeled), got range "
                         f"[{labels.min()}, {labels.max()}]")
    if not np.any(labels >= 0):
        raise ValueError(f"labels: the target type {target_type!r} has no labeled node")
    lo, hi = graph.node_range(target_type)
    for name, idx in zip(SPLITS, splits):
        if not isinstance(idx, np.ndarray) or idx.ndim != 1 or idx.dtype != np.int64:
            raise TypeError(f"{name}: expected a 1-D int64 array, got "
                            f"{getattr(idx, 'dtype', type(idx).__name__)} of shape {getattr(idx, 'shape', None)}")
        if idx.size and (idx[0] < lo or idx[-1] >= hi or np.any(np.diff(idx) <= 0)):
            raise ValueError(f"{name}: expected sorted unique global ids of the target type {target_type!r}, in "
                             f"[{lo}, {hi})")
        if idx.size and np.any(labels[idx - lo] < 0):
            raise ValueError(f"{name}: contains nodes without a label (-1)")
