"""Synthetic node-classification graphs: a degree-corrected stochastic block model with power-law degrees.

The default dataset of the project: it needs no download, its size is a parameter (up to
ogbn-products scale and beyond) and its difficulty is controlled (homophily, feature noise), so a
GNN that aggregates neighbors must beat a model that reads node features alone.

Model (Karrer & Newman's degree-corrected SBM, with one block per class):

* labels are uniform over ``num_classes``; the block of a node is its label;
* every node gets a propensity ``theta ~ Pareto(degree_exponent - 1)`` (minimum 1), so expected degrees
  follow a power law ``P(k) ~ k^-degree_exponent``;
* each undirected edge picks ``u`` with probability proportional to ``theta``; with probability
  ``homophily`` it picks ``v`` proportionally to ``theta`` inside ``u``'s block, otherwise over all
  nodes. The measured edge homophily (fraction of same-label edges) is therefore about
  ``homophily + (1 - homophily) / num_classes``;
* features are ``feature_signal * centroid[block] + feature_noise * N(0, I)`` with random Gaussian
  class centroids; with ``informative_features < 1`` the centroids are zero outside a random subset of
  the dimensions, so that some dimensions carry class signal and the rest only noise (as in real
  feature sets, and what feature-level sampling such as DGS's exploits);
* with ``label_noise > 0`` each node's observed label is, with that probability, replaced by a uniform
  random class (the graph and the features still follow the true block), which caps the attainable
  accuracy at ``1 - label_noise * (1 - 1 / num_classes)``.

Drawing proportionally to ``theta`` uses a stub table: node ``i`` owns ``w_i`` consecutive slots
(``w_i`` is ``theta_i * STUBS_PER_UNIT`` rounded stochastically, so its expectation is exact) and a
draw is one uniform slot. The slots are ordered by block, so a draw inside block ``b`` is a uniform
slot in ``b``'s contiguous range. One gather per endpoint replaces a binary search over a CDF, which is
what makes 10^8 edges cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from gnnscale.graph.csc import _drop_repeats, csc_from_coo
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.synthetic_blocks import (build_model, centroids, draw_block_edges, feature_rows, observed_labels,
                                             row_blocks, split_ids)
from gnnscale.graph.synthetic_config import SyntheticConfig

# Stub slots per unit of theta (theta >= 1, so every node owns >= 4 slots; quantisation error is
# removed in expectation by stochastic rounding).
STUBS_PER_UNIT = 4
# Edges drawn per chunk: bounds the temporaries of edge generation (~10 arrays of this length).
EDGE_CHUNK = 1 << 23
# Rounds of top-up draws that replace edges lost to duplicate removal.
MAX_EDGE_ROUNDS = 5
# A round ends the loop once the deduplicated edge count is within this fraction of the target.
EDGE_COUNT_TOLERANCE = 0.005

# Seeds of the generators used only by the non-default options (a generator of their own each).
_STREAM_INFORMATIVE = 1
_STREAM_LABEL_NOISE = 2

# ogbn-products (OGB v1): 2,449,029 nodes, 123,718,280 directed edges, 100 features, 47 classes,
# sales-ranking split 196,615 / 39,323 / 2,213,091 nodes; edge homophily ~0.81.
PRODUCTS_NUM_NODES = 2_449_029
PRODUCTS_AVG_DEGREE = 123_718_280 / PRODUCTS_NUM_NODES

# hard_config: tuned so that default GraphSAGE lands between 60% and 85% test accuracy (README).
HARD_CLASSES = 16
HARD_AVG_DEGREE = 20.0
HARD_HOMOPHILY = 0.55
HARD_SIGNAL = 0.15

# ogbn-papers100M (OGB v1): 111,059,956 nodes, 1,615,685,872 directed edges (mean in-degree ~14.5 before
# symmetrising), 128 features, 172 classes, split 1,207,179 / 125,265 / 214,338 nodes.
PAPERS100M_NUM_NODES = 111_059_956
PAPERS100M_IN_DEGREE = 14.5
PAPERS100M_SPLIT = (1_207_179 / PAPERS100M_NUM_NODES, 125_265 / PAPERS100M_NUM_NODES, 214_338 / PAPERS100M_NUM_NODES)


def products_like_config(scale: float = 1.0, *, seed: int = 0) -> SyntheticConfig:
    """An ogbn-products-shaped config with ``round(2,449,029 * scale)`` nodes.

    Mean degree ~50.5, 100 features, 47 classes, ~8% / 2% / 90% split like products' sales-ranking
    split, homophily chosen so that the edge homophily is ~0.81 like products'. Degree exponent 3:
    real graphs truncate their tails, and at full scale this gives a maximum degree of a few 10^4
    (products: 17,481) where 2.5 would give ~2 * 10^5.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale: expected a number > 0, got {scale!r}")
    num_nodes = max(int(round(PRODUCTS_NUM_NODES * scale)), 2)
    return SyntheticConfig(
        num_nodes=num_nodes,
        avg_degree=min(PRODUCTS_AVG_DEGREE, (num_nodes - 1) / 2),
        num_classes=47,
        feature_dim=100,
        homophily=0.8,
        degree_exponent=3.0,
        feature_signal=0.15,
        feature_noise=1.0,
        train_fraction=0.08,
        val_fraction=0.02,
        test_fraction=0.90,
        seed=seed,
    )


HARD_NUM_NODES = 100_000


def hard_config(scale: float = 1.0, *, seed: int = 0) -> SyntheticConfig:
    """A graph on which accuracy differences can show: ``round(100,000 * scale)`` nodes.

    Default GraphSAGE (fanouts 10,5, batch 512, hidden 128, 5 epochs) reaches 60-85% test accuracy on
    it, and a model that ignores the graph (an MLP on the features) far less: the measured figures are
    in the README. Against the default config: more classes (HARD_CLASSES), lower homophily, and only
    half the dimensions carry class signal, the other half is noise (so explaining which dimensions
    matter has an answer). 20% / 10% / 30% split.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale: expected a number > 0, got {scale!r}")
    return SyntheticConfig(
        num_nodes=max(int(round(HARD_NUM_NODES * scale)), 2),
        avg_degree=HARD_AVG_DEGREE,
        num_classes=HARD_CLASSES,
        feature_dim=100,
        homophily=HARD_HOMOPHILY,
        degree_exponent=2.5,
        feature_signal=HARD_SIGNAL,
        feature_noise=1.0,
        informative_features=0.5,
        train_fraction=0.2,
        val_fraction=0.1,
        test_fraction=0.3,
        seed=seed,
    )


# PubMed (Planetoid): 19,717 nodes, 88,648 directed edges, 500 TF-IDF features, 3 classes, edge
# homophily ~0.80.
PUBMED_NUM_NODES = 19_717
PUBMED_AVG_DEGREE = 88_648 / PUBMED_NUM_NODES
# pubmed_config: GraphSAGE (CLI defaults, 20 epochs) 0.797 test accuracy, an MLP on the features 0.615
# (benchmarks/synthetic_difficulty.py --preset pubmed --seeds 0 --epochs 20 --mlp-epochs 40).
PUBMED_SIGNAL = 0.15


def pubmed_config(scale: float = 1.0, *, seed: int = 0) -> SyntheticConfig:
    """A PubMed-shaped graph: ``round(19,717 * scale)`` nodes, mean degree 4.5, 500 features of which a
    fifth carry class signal (few words of a TF-IDF vocabulary tell the class), 3 classes, edge
    homophily ~0.8 like PubMed's. The split is 5% / 10% / 20% rather than Planetoid's 60 training
    nodes, so that each of a few parts has a few hundred training nodes to draw mini-batches from.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale: expected a number > 0, got {scale!r}")
    num_nodes = max(int(round(PUBMED_NUM_NODES * scale)), 2)
    return SyntheticConfig(num_nodes=num_nodes, avg_degree=min(PUBMED_AVG_DEGREE, (num_nodes - 1) / 2),
                           num_classes=3, feature_dim=500, homophily=0.7, degree_exponent=2.5,
                           feature_signal=PUBMED_SIGNAL, feature_noise=1.0, informative_features=0.2,
                           train_fraction=0.05, val_fraction=0.1, test_fraction=0.2, seed=seed)


def papers100m_config(scale: float = 1.0, *, seed: int = 0) -> SyntheticConfig:
    """An ogbn-papers100M-shaped config with ``round(111,059,956 * scale)`` nodes, drawn by the block
    model (``streaming=True``: ``gnnscale generate`` writes it at any scale in bounded memory).

    Mean in-degree 14.5 before symmetrising (so ``avg_degree`` 29), 128 features, 172 classes, the
    official split's fractions (1.09% / 0.11% / 0.19%). Not trivially separable: homophily 0.6 and weak
    features, only half of the dimensions informative, so that GraphSAGE beats an MLP on the features
    (docs/training.md gives the measured accuracies). Degree exponent 3 as for ``products``.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale: expected a finite number > 0, got {scale!r}")
    num_nodes = max(int(round(PAPERS100M_NUM_NODES * scale)), 2)
    train, val, test = PAPERS100M_SPLIT
    return SyntheticConfig(
        num_nodes=num_nodes,
        avg_degree=min(2 * PAPERS100M_IN_DEGREE, (num_nodes - 1) / 2),
        num_classes=172,
        feature_dim=128,
        homophily=0.6,
        degree_exponent=3.0,
        feature_signal=0.3,
        feature_noise=1.0,
        informative_features=0.5,
        train_fraction=train,
        val_fraction=val,
        test_fraction=test,
        seed=seed,
        streaming=True,
    )


# Named starting points for ``load_dataset("synthetic", preset=..., scale=...)`` (CLI: ``-o preset=hard``).
PRESETS = {
    "default": lambda scale, seed: SyntheticConfig(num_nodes=max(int(round(30_000 * scale)), 2), seed=seed),
    "products": lambda scale, seed: products_like_config(scale, seed=seed),
    "hard": lambda scale, seed: hard_config(scale, seed=seed),
    "pubmed": lambda scale, seed: pubmed_config(scale, seed=seed),
    "papers100M": lambda scale, seed: papers100m_config(scale, seed=seed),
}


def preset_config(name: str, scale: float = 1.0, **overrides) -> SyntheticConfig:
    """The preset ``name`` at ``scale`` (``default``: 30,000 nodes, ``products``: 2,449,029, ``hard``:
    100,000, ``papers100M``: 111,059,956, each times ``scale``), with any SyntheticConfig field overridden."""
    if name not in PRESETS:
        raise ValueError(f"preset: expected one of {', '.join(PRESETS)}, got {name!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ValueError(f"scale: expected a finite number > 0, got {scale!r}")
    valid = {f.name for f in fields(SyntheticConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(f"options: {unknown} are not SyntheticConfig fields; valid fields: {sorted(valid)}")
    seed = overrides.pop("seed", 0)
    return replace(PRESETS[name](scale, seed), **overrides) if overrides else PRESETS[name](scale, seed)


def make_synthetic(cfg: SyntheticConfig | None = None) -> NodeDataset:
    """Build the dataset described by ``cfg`` (default: ``SyntheticConfig()``).

    Returns a NodeDataset named ``"synthetic"``: an undirected graph (both directions stored, no self
    loops, no duplicates), float32 features [num_nodes, feature_dim], int64 labels [num_nodes] (all
    labeled), random disjoint train/val/test splits. Deterministic given ``cfg``. With
    ``cfg.streaming``, the dataset ``gnnscale generate`` writes for ``cfg``, array for array.
    """
    cfg = SyntheticConfig() if cfg is None else cfg
    if not isinstance(cfg, SyntheticConfig):
        raise TypeError(f"cfg: expected a SyntheticConfig, got {type(cfg).__name__}")
    if cfg.streaming:
        return _make_streaming(cfg)
    rng = np.random.default_rng(cfg.seed)
    labels = rng.integers(0, cfg.num_classes, size=cfg.num_nodes, dtype=np.int64)
    stubs = _stub_table(cfg, labels, rng)
    src, dst = _draw_edges(cfg, labels, stubs, rng)
    graph = csc_from_coo(src, dst, cfg.num_nodes, symmetrize=True, remove_self_loops=True, remove_duplicates=True)
    del src, dst
    features = _features(cfg, labels, rng)
    train_idx, val_idx, test_idx = _split(cfg, rng)
    labels = _observed_labels(cfg, labels)
    return NodeDataset(name="synthetic", graph=graph, features=features, labels=labels, train_idx=train_idx,
                       val_idx=val_idx, test_idx=test_idx, num_classes=cfg.num_classes)


def _make_streaming(cfg: SyntheticConfig) -> NodeDataset:
    """The block model (:mod:`gnnscale.graph.synthetic_blocks`) in memory: every block's draws at once."""
    model = build_model(cfg)
    pairs = [draw_block_edges(cfg, model, block) for block in range(model.num_blocks)]
    u, v = np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])
    del pairs
    labels, n = model.labels, cfg.num_nodes
    del model
    graph = csc_from_coo(u, v, n, symmetrize=True, remove_self_loops=True, remove_duplicates=True)
    del u, v
    class_centroids = centroids(cfg, informative_dimensions(cfg))
    features = np.empty((n, cfg.feature_dim), dtype=np.float32)
    observed = np.empty(n, dtype=np.int64)
    for block, lo, hi in row_blocks(n):
        features[lo:hi] = feature_rows(cfg, labels, class_centroids, block)
        observed[lo:hi] = observed_labels(cfg, labels, block)
    train_idx, val_idx, test_idx = split_ids(cfg)
    return NodeDataset(name="synthetic", graph=graph, features=features, labels=observed, train_idx=train_idx,
                       val_idx=val_idx, test_idx=test_idx, num_classes=cfg.num_classes)


@dataclass(frozen=True, slots=True, kw_only=True)
class _StubTable:
    """Slots for drawing nodes proportionally to theta.

    slots: int32/int64 [num_slots], node id owning each slot, nodes grouped by block.
    block_start: int64 [num_classes], first slot of each block.
    block_size: int64 [num_classes], number of slots of each block.
    """

    slots: np.ndarray
    block_start: np.ndarray
    block_size: np.ndarray


def _stub_table(cfg: SyntheticConfig, labels: np.ndarray, rng: np.random.Generator) -> _StubTable:
    # Pareto with minimum 1 and tail index a = exponent - 1: P(theta > x) = x^-a, hence P(k) ~ k^-exponent.
    theta = rng.pareto(cfg.degree_exponent - 1.0, size=cfg.num_nodes) + 1.0
    # A hub cannot have more distinct neighbors than there are nodes: cap its share of the draws there.
    total = theta.sum()
    expected_degree = theta / total * (cfg.avg_degree * cfg.num_nodes)
    theta *= np.minimum(1.0, (cfg.num_nodes - 1) / np.maximum(expected_degree, 1e-300))
    scaled = theta * STUBS_PER_UNIT
    weight = np.floor(scaled)
    weight += rng.random(cfg.num_nodes) < (scaled - weight)
    weight = weight.astype(np.int64)
    order = np.argsort(labels, kind="stable")
    node_dtype = np.int32 if cfg.num_nodes <= np.iinfo(np.int32).max else np.int64
    slots = np.repeat(order.astype(node_dtype), weight[order])
    block_size = np.bincount(labels, weights=weight, minlength=cfg.num_classes).astype(np.int64)
    block_start = np.zeros(cfg.num_classes, dtype=np.int64)
    np.cumsum(block_size[:-1], out=block_start[1:])
    return _StubTable(slots=slots, block_start=block_start, block_size=block_size)


def _draw_edges(cfg: SyntheticConfig, labels: np.ndarray, stubs: _StubTable,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Distinct undirected edges ``src[i] < dst[i]`` (int64), about ``avg_degree * num_nodes / 2`` of them.

    Duplicates and self loops are dropped after each round and the shortfall is drawn again, with the
    round size scaled by the yield of the previous round (hubs produce more duplicates).
    """
    n = cfg.num_nodes
    target = max(int(round(cfg.avg_degree * n / 2)), 1)
    keys = np.empty(0, dtype=np.int64)
    draws = target
    for _ in range(MAX_EDGE_ROUNDS):
        before = keys.shape[0]
        fresh = np.concatenate([_draw_chunk(min(EDGE_CHUNK, draws - start), n, cfg.homophily, labels, stubs, rng)
                                for start in range(0, draws, EDGE_CHUNK)])
        keys = np.concatenate([keys, fresh])
        del fresh
        keys.sort()
        keys = _drop_repeats(keys)
        missing = target - keys.shape[0]
        if missing <= EDGE_COUNT_TOLERANCE * target:
            break
        yield_rate = max((keys.shape[0] - before) / draws, 0.05)
        draws = int(math.ceil(missing / yield_rate))
    return np.divmod(keys, n)


def _draw_chunk(size: int, n: int, homophily: float, labels: np.ndarray, stubs: _StubTable,
                rng: np.random.Generator) -> np.ndarray:
    """int64 [<= size]: keys ``lo * n + hi`` (lo < hi) of ``size`` edge draws, self loops dropped."""
    u = stubs.slots[rng.integers(0, stubs.slots.shape[0], size=size)]
    block = labels[u]
    inside = rng.random(size) < homophily
    r = rng.random(size)
    # Inside u's block: a uniform slot of that block's range; otherwise a uniform slot overall.
    slot = np.where(inside, stubs.block_start[block] + (r * stubs.block_size[block]).astype(np.int64),
                    (r * stubs.slots.shape[0]).astype(np.int64))
    v = stubs.slots[slot]
    lo = np.minimum(u, v).astype(np.int64)
    hi = np.maximum(u, v).astype(np.int64)
    keep = lo != hi
    return lo[keep] * n + hi[keep]


def _features(cfg: SyntheticConfig, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float32 [num_nodes, feature_dim]: scaled class centroid plus Gaussian noise, built in row chunks."""
    centroids = rng.standard_normal((cfg.num_classes, cfg.feature_dim), dtype=np.float32)
    centroids *= np.float32(cfg.feature_signal)
    if cfg.informative_features < 1.0:
        noise_only = np.setdiff1d(np.arange(cfg.feature_dim), informative_dimensions(cfg))
        centroids[:, noise_only] = 0.0
    features = np.empty((cfg.num_nodes, cfg.feature_dim), dtype=np.float32)
    rows = max(EDGE_CHUNK // cfg.feature_dim, 1)
    for start in range(0, cfg.num_nodes, rows):
        block = features[start:start + rows]
        rng.standard_normal(out=block, dtype=np.float32)
        block *= np.float32(cfg.feature_noise)
        block += centroids[labels[start:start + rows]]
    return features


def informative_dimensions(cfg: SyntheticConfig) -> np.ndarray:
    """int64, sorted: the dimensions that carry class signal (all when ``informative_features`` is 1)."""
    if cfg.informative_features >= 1.0:
        return np.arange(cfg.feature_dim, dtype=np.int64)
    # A generator of its own: the main stream (and so every dataset with the default 1.0) is unchanged.
    own = np.random.default_rng([cfg.seed, _STREAM_INFORMATIVE])
    keep = max(1, int(round(cfg.informative_features * cfg.feature_dim)))
    return np.sort(own.permutation(cfg.feature_dim)[:keep]).astype(np.int64)


def _observed_labels(cfg: SyntheticConfig, blocks: np.ndarray) -> np.ndarray:
    """int64 [num_nodes]: the block of each node, or with probability ``label_noise`` a uniform class."""
    if cfg.label_noise == 0.0:
        return blocks
    own = np.random.default_rng([cfg.seed, _STREAM_LABEL_NOISE])  # the main stream stays unchanged
    flip = own.random(cfg.num_nodes) < cfg.label_noise
    labels = blocks.copy()
    labels[flip] = own.integers(0, cfg.num_classes, size=int(flip.sum()), dtype=np.int64)
    return labels


def _split(cfg: SyntheticConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted int64 node ids: the first fractions of one random permutation."""
    perm = rng.permutation(cfg.num_nodes)
    n_train = int(cfg.train_fraction * cfg.num_nodes)
    n_val = int(cfg.val_fraction * cfg.num_nodes)
    n_test = min(int(cfg.test_fraction * cfg.num_nodes), cfg.num_nodes - n_train - n_val)
    parts = np.split(perm[:n_train + n_val + n_test], [n_train, n_train + n_val])
    return tuple(np.sort(p).astype(np.int64) for p in parts)
