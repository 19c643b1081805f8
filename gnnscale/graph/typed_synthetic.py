"""Synthetic typed graphs shaped like ogbn-mag and like IGB-H, whose labels depend on typed neighborhoods.

Model (:class:`TypedSyntheticConfig`; one degree-corrected block model per relation):

* every node has a class: a node of the target type its label (uniform over ``num_classes``), a node of any other
  type a *home class* (the classes dealt out evenly over its nodes);
* every node has a propensity ``theta ~ Pareto(degree_exponent - 1)`` (minimum 1), shared by all its relations (a
  prolific author writes many papers and has many affiliations);
* an edge of a relation picks its source proportionally to ``theta`` among the source type's nodes and, with
  probability ``homophily``, its destination proportionally to ``theta`` among the destination type's nodes of
  the source's class (when that class has some), otherwise among all of them. A paper's authors, fields, citing and
  cited papers are therefore of its class far more often than chance: about ``homophily + (1 - homophily) /
  num_classes`` of each relation's edges join nodes of one class;
* features (on the types the preset gives them) are ``centroid_t[c'] + N(0, I)``, ``c'`` the node's *feature
  class*: its own class with probability ``q``, else a uniform class, ``q`` set so that ``c'`` is the class with
  probability ``feature_accuracy``. The centroids (``N(0, I)``, one per class and type) lie far apart against the
  noise in dozens of dimensions, so the features tell ``c'`` and nothing more: no model that reads a paper's own
  features beats ``feature_accuracy`` (in expectation), and a model that reads its typed neighborhood can, by about
  :attr:`TypedSyntheticConfig.margin` (``homophily - feature_accuracy``) or more (a vote over several neighbors is
  right more often than one neighbor).

Drawing proportionally to ``theta`` uses a stub table per type (:mod:`gnnscale.graph.synthetic`'s: node ``i`` owns
about ``4 theta_i`` consecutive slots, ordered by class; a draw is one uniform slot). Repeated edges of a relation
are kept once and self loops dropped, so a relation ends with a little fewer edges than it drew. Deterministic from
``seed``: the topology from one generator, each block of feature rows from a generator keyed by (seed, type,
block), so that :func:`make_typed_synthetic` in memory and :func:`generate_typed_dataset` block by block give the
same arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import INT32_MAX
from gnnscale.graph.storage import check_target
from gnnscale.graph.typed import Relation, TypedGraph, parse_relation, typed_graph
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.graph.typed_storage import FeatureRows, Progress, WriteSummary, write_typed_dataset

STUBS_PER_UNIT = 4  # stub slots per unit of theta (theta >= 1: every node owns about 4 or more)
EDGE_CHUNK = 1 << 22  # draws per step: bounds the temporaries (about 10 arrays of this length)
ROW_BLOCK = 1 << 14  # feature rows per keyed block
# A class needs this many target nodes on average: smaller scales get fewer classes (at least MIN_CLASSES).
NODES_PER_CLASS = 200
MIN_CLASSES = 8

# Streams of the generators keyed by seed (the topology's comes from default_rng(seed) alone).
_STREAM_FEATURE_CLASS = 1
_STREAM_CENTROIDS = 2
_STREAM_FEATURES = 3
_STREAM_SPLIT = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTypeSpec:
    """A node type of a synthetic typed graph: its ``name``, node ``count`` (>= 1) and ``feature_dim`` (0: none)."""

    name: str
    count: int
    feature_dim: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RelationSpec:
    """A relation (``"src__name__dst"``) and the edges it draws (repeats removed afterwards)."""

    relation: str
    num_edges: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedSyntheticConfig:
    """Parameters of :func:`make_typed_synthetic` (see the module docstring for the model).

    Args:
        name: the dataset's name.
        node_types: the types in id order (the graph numbers them so), counts and feature widths.
        relations: the relations in id order and their edge draws.
        target_type: the type that carries labels and the split.
        num_classes: classes (= blocks), >= 2.
        homophily: probability in [0, 1] that an edge's destination is drawn in its source's class.
        feature_accuracy: probability that a node's feature class is its class, in [1 / num_classes, 1]: what a
            model of a node's own features reaches at best.
        degree_exponent: power-law exponent of the propensities, > 2.
        train_fraction, val_fraction, test_fraction: split sizes as fractions of the target type's nodes (each in
            [0, 1], summing to at most 1; at least one training node).
        reverse: add every relation's reverse (PyG's ``ToUndirected``: ``rev_<name>``, a relation within one
            type symmetrised), so that messages flow both ways.
        seed: seed of every draw (>= 0).
    """

    name: str
    node_types: tuple[NodeTypeSpec, ...]
    relations: tuple[RelationSpec, ...]
    target_type: str
    num_classes: int
    homophily: float = 0.5
    feature_accuracy: float = 0.3
    degree_exponent: float = 3.0
    train_fraction: float = 0.6
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    reverse: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_types", tuple(self.node_types))
        object.__setattr__(self, "relations", tuple(self.relations))
        names = [t.name for t in self.node_types]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"node_types: expected distinct type names, got {names}")
        for spec in self.node_types:
            _require(_is_int(spec.count) and spec.count >= 1, f"node_types: {spec.name}: count", ">= 1", spec.count)
            _require(_is_int(spec.feature_dim) and spec.feature_dim >= 0, f"node_types: {spec.name}: feature_dim",
                     ">= 0", spec.feature_dim)
        for spec in self.relations:
            rel = parse_relation(spec.relation)
            for end in (rel.src, rel.dst):
                if end not in names:
                    raise ValueError(f"relations: {rel} names node type {end!r}, not one of {', '.join(names)}")
            _require(_is_int(spec.num_edges) and spec.num_edges >= 0, f"relations: {rel}: num_edges", ">= 0",
                     spec.num_edges)
        if self.target_type not in names:
            raise ValueError(f"target_type: expected one of {', '.join(names)}, got {self.target_type!r}")
        _require(_is_int(self.num_classes) and self.num_classes >= 2, "num_classes", ">= 2", self.num_classes)
        _require(_is_int(self.seed) and self.seed >= 0, "seed", "an int >= 0", self.seed)
        _require(isinstance(self.reverse, (bool, np.bool_)), "reverse", "a bool", self.reverse)
        for name in ("homophily", "feature_accuracy", "degree_exponent", "train_fraction", "val_fraction",
                     "test_fraction"):
            value = getattr(self, name)
            _require(not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
                     and math.isfinite(value), name, "a finite number", value)
        _require(0.0 <= self.homophily <= 1.0, "homophily", "in [0, 1]", self.homophily)
        chance = 1.0 / self.num_classes
        _require(chance <= self.feature_accuracy <= 1.0, "feature_accuracy",
                 f"in [1 / num_classes = {chance:.3g}, 1]", self.feature_accuracy)
        _require(self.degree_exponent > 2.0, "degree_exponent", "> 2 (finite mean degree)", self.degree_exponent)
        for name in ("train_fraction", "val_fraction", "test_fraction"):
            _require(0.0 <= getattr(self, name) <= 1.0, name, "in [0, 1]", getattr(self, name))
        total = self.train_fraction + self.val_fraction + self.test_fraction
        _require(total <= 1.0 + 1e-9, "train_fraction + val_fraction + test_fraction", "<= 1", total)
        _require(int(self.train_fraction * self.count(self.target_type)) >= 1, "train_fraction",
                 f"at least one training node of {self.count(self.target_type)}", self.train_fraction)

    def count(self, node_type: str) -> int:
        return next(t.count for t in self.node_types if t.name == node_type)

    @property
    def margin(self) -> float:
        """``homophily - feature_accuracy``: how much a vote over a paper's typed neighbors beats its own features
        by at least (in expectation; see the module docstring)."""
        return self.homophily - self.feature_accuracy


# --- presets -------------------------------------------------------------------------------------

# ogbn-mag (OGB): 736,389 papers, 1,134,649 authors, 8,740 institutions, 59,965 fields of study; 128-d features on
# papers only; 349 venues; the time split 629,571 / 64,879 / 41,939 papers.
MAG_TYPES = (("paper", 736_389, 128), ("author", 1_134_649, 0), ("institution", 8_740, 0),
             ("field_of_study", 59_965, 0))
MAG_RELATIONS = (("author__affiliated_with__institution", 1_043_998), ("author__writes__paper", 7_145_660),
                 ("paper__cites__paper", 5_416_271), ("paper__has_topic__field_of_study", 7_505_078))
MAG_CLASSES = 349
MAG_SPLIT = (629_571 / 736_389, 64_879 / 736_389, 41_939 / 736_389)

# IGB-H "small" (IGB's heterogeneous dataset at 1M papers): 1024-d features on every type, 19 classes (IGB's
# coarse label set); IGB splits 60% / 20% / 20%.
IGBH_TYPES = (("paper", 1_000_000, 1024), ("author", 1_926_066, 1024), ("institute", 14_751, 1024),
              ("fos", 190_449, 1024))
IGBH_RELATIONS = (("paper__cites__paper", 12_070_502), ("paper__written_by__author", 4_553_516),
                  ("author__affiliated_to__institute", 1_630_476), ("paper__topic__fos", 7_234_122))
IGBH_CLASSES = 19
IGBH_SPLIT = (0.6, 0.2, 0.2)


def _scaled_config(name: str, types, relations, classes: int, split: tuple[float, float, float], scale: float,
                   seed: int) -> TypedSyntheticConfig:
    """A preset at ``scale``: every count and edge count times ``scale`` (at least one node per type), fewer
    classes where the target type has fewer than NODES_PER_CLASS nodes per class."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale: expected a finite number > 0, got {scale!r}")
    node_types = tuple(NodeTypeSpec(name=t, count=max(1, round(n * scale)), feature_dim=d) for t, n, d in types)
    target = node_types[0].count
    train, val, test = split
    return TypedSyntheticConfig(
        name=name, node_types=node_types,
        relations=tuple(RelationSpec(relation=r, num_edges=round(e * scale)) for r, e in relations),
        target_type=node_types[0].name, num_classes=min(classes, max(MIN_CLASSES, target // NODES_PER_CLASS)),
        train_fraction=train, val_fraction=val, test_fraction=test, seed=seed)


TYPED_PRESETS = {
    "mag": lambda scale, seed: _scaled_config("synthetic-mag", MAG_TYPES, MAG_RELATIONS, MAG_CLASSES, MAG_SPLIT,
                                              scale, seed),
    "igbh": lambda scale, seed: _scaled_config("synthetic-igbh", IGBH_TYPES, IGBH_RELATIONS, IGBH_CLASSES,
                                               IGBH_SPLIT, scale, seed),
}
# Fields a preset sets from its schema (not options): the rest may be overridden (-o homophily=0.4).
_SCHEMA_FIELDS = ("name", "node_types", "relations", "target_type")


def typed_preset_config(name: str, scale: float = 1.0, **overrides) -> TypedSyntheticConfig:
    """The typed preset ``name`` (``mag``: ogbn-mag's counts, ``igbh``: IGB-H small's, 1M papers, each times
    ``scale``), with any :class:`TypedSyntheticConfig` field but the schema overridden; ``feature_dim`` sets the
    width of every type that has features."""
    if name not in TYPED_PRESETS:
        raise ValueError(f"preset: expected one of {', '.join(TYPED_PRESETS)}, got {name!r}")
    valid = sorted({f.name for f in fields(TypedSyntheticConfig)} - set(_SCHEMA_FIELDS) | {"feature_dim"})
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(f"options: {unknown} are not settings of the typed preset {name!r}; valid: {valid}")
    overrides = dict(overrides)
    cfg = TYPED_PRESETS[name](scale, overrides.pop("seed", 0))
    if "feature_dim" in overrides:
        dim = overrides.pop("feature_dim")
        _require(_is_int(dim) and dim >= 1, "feature_dim", "an int >= 1", dim)
        overrides["node_types"] = tuple(replace(t, feature_dim=dim) if t.feature_dim else t for t in cfg.node_types)
    return replace(cfg, **overrides) if overrides else cfg


# --- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _StubTable:
    """Draws of one type's nodes proportionally to theta: ``slots`` int32/int64 [num_slots] (node ids, grouped by
    class), class ``c``'s slots from ``class_start[c]``, ``class_size[c]`` of them."""

    slots: np.ndarray
    class_start: np.ndarray
    class_size: np.ndarray

    def draw(self, rng: np.random.Generator, size: int, classes: np.ndarray | None = None,
             inside: np.ndarray | None = None) -> np.ndarray:
        """int32/int64 [size] node ids; where ``inside``, inside ``classes`` (when the class has nodes)."""
        r = rng.random(size)
        slot = (r * self.slots.shape[0]).astype(np.int64)
        if classes is not None:
            sizes = self.class_size[classes]
            use = inside & (sizes > 0)
            slot = np.where(use, self.class_start[classes] + (r * sizes).astype(np.int64), slot)
        return self.slots[slot]


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedModel:
    """The drawn per-node arrays: ``classes[t]`` int64 [count] (labels of the target type, home classes of the
    others) and ``tables[t]`` (:class:`_StubTable`)."""

    classes: dict[str, np.ndarray]
    tables: dict[str, _StubTable]


def build_model(cfg: TypedSyntheticConfig, rng: np.random.Generator) -> TypedModel:
    """Each type's classes and stub table, drawn from ``rng`` (types in order)."""
    classes, tables = {}, {}
    for spec in cfg.node_types:
        if spec.name == cfg.target_type:
            cls = rng.integers(0, cfg.num_classes, size=spec.count, dtype=np.int64)
        else:
            cls = rng.permutation(spec.count).astype(np.int64) % cfg.num_classes
        theta = rng.pareto(cfg.degree_exponent - 1.0, size=spec.count) + 1.0
        scaled = theta * STUBS_PER_UNIT
        weight = np.floor(scaled)
        weight += rng.random(spec.count) < (scaled - weight)
        order = np.argsort(cls, kind="stable")
        # int32 ids where they fit: a draw is a random gather from the table, half the bytes half the misses.
        slots = np.repeat(order.astype(np.int32 if spec.count <= INT32_MAX else np.int64),
                          weight.astype(np.int64)[order])
        size = np.bincount(cls, weights=weight, minlength=cfg.num_classes).astype(np.int64)
        start = np.zeros(cfg.num_classes, dtype=np.int64)
        np.cumsum(size[:-1], out=start[1:])
        classes[spec.name] = cls
        tables[spec.name] = _StubTable(slots=slots, class_start=start, class_size=size)
    return TypedModel(classes=classes, tables=tables)


def draw_edges(cfg: TypedSyntheticConfig, model: TypedModel,
               rng: np.random.Generator) -> dict[Relation, tuple[np.ndarray, np.ndarray]]:
    """``{relation: (src, dst)}`` local ids, each relation's draws in chunks of EDGE_CHUNK (self loops dropped)."""
    edges = {}
    for spec in cfg.relations:
        rel = parse_relation(spec.relation)
        src_table, dst_table = model.tables[rel.src], model.tables[rel.dst]
        src_parts, dst_parts = [], []
        for start in range(0, spec.num_edges, EDGE_CHUNK):
            size = min(EDGE_CHUNK, spec.num_edges - start)
            src = src_table.draw(rng, size)
            dst = dst_table.draw(rng, size, model.classes[rel.src][src], rng.random(size) < cfg.homophily)
            if rel.src == rel.dst:
                keep = src != dst
                src, dst = src[keep], dst[keep]
            src_parts.append(src)
            dst_parts.append(dst)
        edges[rel] = (np.concatenate(src_parts) if src_parts else np.zeros(0, np.int64),
                      np.concatenate(dst_parts) if dst_parts else np.zeros(0, np.int64))
    return edges


def build_graph(cfg: TypedSyntheticConfig) -> tuple[TypedGraph, TypedModel]:
    """The typed topology of ``cfg`` and the model it was drawn from."""
    rng = np.random.default_rng(cfg.seed)
    model = build_model(cfg, rng)
    edges = draw_edges(cfg, model, rng)
    graph = typed_graph({t.name: t.count for t in cfg.node_types}, edges, reverse=cfg.reverse)
    return graph, model


def feature_classes(cfg: TypedSyntheticConfig, model: TypedModel, t: int) -> np.ndarray:
    """int64 [count]: the feature class of each node of type ``t`` (its class with probability ``q``)."""
    spec = cfg.node_types[t]
    own = np.random.default_rng([cfg.seed, _STREAM_FEATURE_CLASS, t])
    chance = 1.0 / cfg.num_classes
    q = (cfg.feature_accuracy - chance) / (1.0 - chance)
    keep = own.random(spec.count) < q
    return np.where(keep, model.classes[spec.name], own.integers(0, cfg.num_classes, size=spec.count))


def feature_blocks(cfg: TypedSyntheticConfig, model: TypedModel, t: int) -> Iterator[np.ndarray]:
    """float32 row blocks (ROW_BLOCK rows) of type ``t``'s features, each from its own keyed generator."""
    spec = cfg.node_types[t]
    centroids = np.random.default_rng([cfg.seed, _STREAM_CENTROIDS, t]).standard_normal(
        (cfg.num_classes, spec.feature_dim), dtype=np.float32)
    fclass = feature_classes(cfg, model, t)
    for block, lo in enumerate(range(0, spec.count, ROW_BLOCK)):
        hi = min(lo + ROW_BLOCK, spec.count)
        rows = np.random.default_rng([cfg.seed, _STREAM_FEATURES, t, block]).standard_normal(
            (hi - lo, spec.feature_dim), dtype=np.float32)
        rows += centroids[fclass[lo:hi]]
        yield rows


def split_ids(cfg: TypedSyntheticConfig, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted int64 global ids (local + ``offset``) of the target type: the first fractions of one
    permutation."""
    n = cfg.count(cfg.target_type)
    perm = np.random.default_rng([cfg.seed, _STREAM_SPLIT]).permutation(n)
    n_train, n_val = int(cfg.train_fraction * n), int(cfg.val_fraction * n)
    n_test = min(int(cfg.test_fraction * n), n - n_train - n_val)
    parts = np.split(perm[:n_train + n_val + n_test], [n_train, n_train + n_val])
    return tuple(np.sort(p).astype(np.int64) + offset for p in parts)


# --- the dataset ---------------------------------------------------------------------------------


def make_typed_synthetic(cfg: TypedSyntheticConfig) -> TypedDataset:
    """The typed dataset of ``cfg``, in memory (every label observed; deterministic given ``cfg``)."""
    if not isinstance(cfg, TypedSyntheticConfig):
        raise TypeError(f"cfg: expected a TypedSyntheticConfig, got {type(cfg).__name__}")
    graph, model = build_graph(cfg)
    features = {}
    for t, spec in enumerate(cfg.node_types):
        if spec.feature_dim:
            x = np.empty((spec.count, spec.feature_dim), dtype=np.float32)
            for lo, rows in zip(range(0, spec.count, ROW_BLOCK), feature_blocks(cfg, model, t)):
                x[lo:lo + rows.shape[0]] = rows
            features[spec.name] = x
    train, val, test = split_ids(cfg, graph.node_range(cfg.target_type)[0])
    return TypedDataset(name=cfg.name, graph=graph, features=features, target_type=cfg.target_type,
                        labels=model.classes[cfg.target_type], train_idx=train, val_idx=val, test_idx=test,
                        num_classes=cfg.num_classes)


def generate_typed_dataset(cfg: TypedSyntheticConfig, out_dir: str | Path, *, overwrite: bool = False,
                           progress: Progress | None = None) -> WriteSummary:
    """Write the dataset of ``cfg`` to ``out_dir`` (a typed dataset directory): the topology built in memory, the
    features block by block (what :func:`make_typed_synthetic` returns, array for array, without holding the
    features: IGB-H's 1024-d rows on every type)."""
    if not isinstance(cfg, TypedSyntheticConfig):
        raise TypeError(f"cfg: expected a TypedSyntheticConfig, got {type(cfg).__name__}")
    check_target(Path(out_dir), overwrite, "out_dir")  # before the work, not after it
    graph, model = build_graph(cfg)
    features = {spec.name: FeatureRows(rows=spec.count, dim=spec.feature_dim, blocks=feature_blocks(cfg, model, t))
                for t, spec in enumerate(cfg.node_types) if spec.feature_dim}
    return write_typed_dataset(out_dir, name=cfg.name, graph=graph, features=features, target_type=cfg.target_type,
                               labels=model.classes[cfg.target_type],
                               splits=split_ids(cfg, graph.node_range(cfg.target_type)[0]),
                               num_classes=cfg.num_classes, overwrite=overwrite, progress=progress)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _require(ok: bool, name: str, expected: str, got) -> None:
    if not ok:
        raise ValueError(f"{name}: expected {expected}, got {got!r}")
