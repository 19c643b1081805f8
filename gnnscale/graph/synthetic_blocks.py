"""The synthetic model drawn block by block: what ``gnnscale generate`` writes chunk by chunk.

The same degree-corrected stochastic block model as :mod:`gnnscale.graph.synthetic`, for configs with
``streaming=True`` (the ``papers100M`` preset), with every random draw keyed by ``(seed, stream,
block)`` through a counter-based generator (Philox): the draws of a fixed block of nodes never depend
on how many blocks are processed together, so the chunk size of a streaming writer changes its memory,
never its output, and the in-memory build (``make_synthetic``) gives the same dataset.

Model, per node ``u`` (a Poisson form of the SBM, which needs no global pass over the edges):

* label uniform over the classes; propensity ``theta ~ Pareto(degree_exponent - 1) + 1``, capped so
  that no node expects more than ``num_nodes - 1`` neighbors;
* ``u`` draws ``Poisson(rate_u)`` edges with ``rate = theta * avg_degree * num_nodes / (2 * sum(theta))``;
  each picks a class (``u``'s own with probability ``homophily``, else a class drawn proportionally
  to its total theta) and a node ``v`` of that class proportionally to theta (Walker's alias tables:
  two arrays of one entry per node, one draw each); self loops are dropped;
* the graph is the symmetrised set of these edges with repeats removed. So ``avg_degree`` is the
  mean in-degree of the symmetrised graph *before* repeats are removed: the edge count is what is
  left after exact deduplication (no top-up draws), slightly below ``avg_degree * num_nodes``;
* features, observed labels and splits as in :mod:`gnnscale.graph.synthetic`, keyed the same way.

Memory: 26 bytes per node for the model's arrays (about 45 while its alias tables are built) plus
one block of draws.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
import numba
import numpy as np

from gnnscale.graph.csc import index_dtype
from gnnscale.graph.synthetic_config import SyntheticConfig

# Fixed block sizes: part of the model (changing one changes every dataset), not a memory setting.
SOURCE_BLOCK = 1024  # source nodes whose edges one generator draws (~15k draws at mean degree 29)
ROW_BLOCK = 1024  # nodes whose feature rows / observed labels one generator draws

# Streams: the first key word of every generator (the seed is the second).
_THETA, _LABELS, _EDGES, _FEATURES, _CENTROIDS, _LABEL_NOISE, _SPLIT = range(10, 17)


def block_rng(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    """The generator of ``block`` of ``stream``: Philox keyed by (stream, seed), its counter starting at
    ``block * 2**128``, so that blocks never share draws."""
    return np.random.Generator(np.random.Philox(key=(stream << 64) | seed, counter=block << 128))


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockModel:
    """The per-node arrays every draw reads.

    labels: int16 | int32 [num_nodes], the block (true class) of each node.
    rate: float64 [num_nodes], expected edges each node draws as a source.
    order: int32 | int64 [num_nodes], node ids grouped by class (ascending inside a class).
    class_start: int64 [num_classes + 1], class ``c`` is ``order[class_start[c]:class_start[c + 1]]``.
    node_prob, node_alias: float64 / int32 | int64 [num_nodes], alias tables over positions of
        ``order``, one table per class range.
    class_prob, class_alias: float64 / int64 [num_classes], alias table over classes, by total rate.
    """

    labels: np.ndarray
    rate: np.ndarray
    order: np.ndarray
    class_start: np.ndarray
    node_prob: np.ndarray
    node_alias: np.ndarray
    class_prob: np.ndarray
    class_alias: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_blocks(self) -> int:
        return -(-self.num_nodes // SOURCE_BLOCK)


def build_model(cfg: SyntheticConfig) -> BlockModel:
    n, classes = cfg.num_nodes, cfg.num_classes
    label_dtype = np.int16 if classes <= np.iinfo(np.int16).max else np.int32
    labels = block_rng(cfg.seed, _LABELS).integers(0, classes, size=n, dtype=label_dtype)
    theta = block_rng(cfg.seed, _THETA).pareto(cfg.degree_exponent - 1.0, size=n)
    theta += 1.0
    # A hub cannot have more distinct neighbors than there are nodes: cap its expected degree there.
    expected_degree = theta * (cfg.avg_degree * n / theta.sum())
    np.minimum(expected_degree, n - 1, out=expected_degree)
    del theta
    rate = expected_degree
    rate *= 0.5  # half of a node's expected degree comes from its own draws, half from others'
    ids = index_dtype(n)
    order = np.argsort(labels, kind="stable").astype(ids)
    class_start = np.zeros(classes + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=classes), out=class_start[1:])
    largest = int(np.diff(class_start).max())
    work = (np.empty(largest, dtype=np.float64), np.empty(largest, dtype=np.int64), np.empty(largest, dtype=np.int64))
    weights = rate[order]
    node_prob, node_alias = np.empty(n, dtype=np.float64), np.empty(n, dtype=ids)
    _fill_alias(weights, class_start, node_prob, node_alias, *work)
    del weights, work
    class_weight = np.bincount(labels, weights=rate, minlength=classes)
    class_prob, class_alias = np.empty(classes, dtype=np.float64), np.empty(classes, dtype=np.int64)
    _fill_alias(class_weight, np.array([0, classes], dtype=np.int64), class_prob, class_alias,
                np.empty(classes, dtype=np.float64), np.empty(classes, dtype=np.int64),
                np.empty(classes, dtype=np.int64))
    return BlockModel(labels=labels, rate=rate, order=order, class_start=class_start, node_prob=node_prob,
                      node_alias=node_alias, class_prob=class_prob, class_alias=class_alias)


@numba.njit(cache=True)
def _fill_alias(weights, starts, prob, alias, scaled, small, large):
    """Vose's alias tables, one per group: group ``g`` is positions ``starts[g]:starts[g + 1]``.

    A draw in group g: a uniform position ``i`` of the group, then ``i`` with probability ``prob[i]``,
    else ``alias[i]``; position ``i`` comes out with probability ``weights[i] / sum(group)``. The work
    arrays (at least the largest group long) come from the caller, so that every allocation is numpy's.
    """
    for g in range(starts.shape[0] - 1):
        lo, hi = starts[g], starts[g + 1]
        k = hi - lo
        total = 0.0
        for i in range(lo, hi):
            total += weights[i]
        num_small, num_large = 0, 0
        for i in range(k):
            p = weights[lo + i] * k / total if total > 0.0 else 1.0
            scaled[i] = p
            if p < 1.0:
                small[num_small] = i
                num_small += 1
            else:
                large[num_large] = i
                num_large += 1
        while num_small > 0 and num_large > 0:
            num_small -= 1
            s = small[num_small]
            big = large[num_large - 1]
            prob[lo + s] = scaled[s]
            alias[lo + s] = lo + big
            scaled[big] -= 1.0 - scaled[s]  # the share of big's column that s's column filled
            if scaled[big] < 1.0:
                num_large -= 1
                small[num_small] = big
                num_small += 1
        # Left over: full columns (and rounding residue of the last ones): each keeps itself.
        for j in range(num_large):
            prob[lo + large[j]] = 1.0
            alias[lo + large[j]] = lo + large[j]
        for j in range(num_small):
            prob[lo + small[j]] = 1.0
            alias[lo + small[j]] = lo + small[j]


def block_nodes(model: BlockModel, block: int) -> tuple[int, int]:
    return block * SOURCE_BLOCK, min((block + 1) * SOURCE_BLOCK, model.num_nodes)


def draw_block_edges(cfg: SyntheticConfig, model: BlockModel, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) int64 [m]: the undirected edges drawn by the source nodes of ``block`` (self loops dropped)."""
    lo, hi = block_nodes(model, block)
    rng = block_rng(cfg.seed, _EDGES, block)
    counts = rng.poisson(model.rate[lo:hi])
    u = np.repeat(np.arange(lo, hi, dtype=np.int64), counts)
    m = u.shape[0]
    inside = rng.random(m) < cfg.homophily
    # Every draw is made for every edge (used or not), so the stream never depends on branch outcomes.
    outside = _alias_draw(rng, m, np.zeros(m, dtype=np.int64), np.full(m, model.class_prob.shape[0]),
                          model.class_prob, model.class_alias)
    cls = np.where(inside, model.labels[u], outside)
    start = model.class_start[cls]
    pos = _alias_draw(rng, m, start, model.class_start[cls + 1] - start, model.node_prob, model.node_alias)
    v = model.order[pos].astype(np.int64)
    keep = u != v
    return u[keep], v[keep]


def _alias_draw(rng: np.random.Generator, m: int, start: np.ndarray, size: np.ndarray, prob: np.ndarray,
                alias: np.ndarray) -> np.ndarray:
    """int64 [m]: one alias-table draw inside each range ``[start[i], start[i] + size[i])``."""
    pos = start + np.minimum((rng.random(m) * size).astype(np.int64), size - 1)
    return np.where(rng.random(m) < prob[pos], pos, alias[pos]).astype(np.int64)


def centroids(cfg: SyntheticConfig, informative: np.ndarray) -> np.ndarray:
    """float32 [num_classes, feature_dim]: scaled class centroids, zero outside the ``informative``
    dimensions (int64, sorted: :func:`gnnscale.graph.synthetic.informative_dimensions`)."""
    c = block_rng(cfg.seed, _CENTROIDS).standard_normal((cfg.num_classes, cfg.feature_dim), dtype=np.float32)
    c *= np.float32(cfg.feature_signal)
    if cfg.informative_features < 1.0:
        c[:, np.setdiff1d(np.arange(cfg.feature_dim), informative)] = 0.0
    return c


def row_blocks(num_nodes: int) -> Iterator[tuple[int, int, int]]:
    """(block, lo, hi) of the fixed row blocks that features and observed labels are drawn in."""
    for block, lo in enumerate(range(0, num_nodes, ROW_BLOCK)):
        yield block, lo, min(lo + ROW_BLOCK, num_nodes)


def feature_rows(cfg: SyntheticConfig, labels: np.ndarray, class_centroids: np.ndarray, block: int) -> np.ndarray:
    """float32 [rows, feature_dim]: the features of row block ``block`` (``labels``: the true classes)."""
    lo, hi = block * ROW_BLOCK, min((block + 1) * ROW_BLOCK, labels.shape[0])
    rows = block_rng(cfg.seed, _FEATURES, block).standard_normal((hi - lo, cfg.feature_dim), dtype=np.float32)
    rows *= np.float32(cfg.feature_noise)
    rows += class_centroids[labels[lo:hi]]
    return rows


def observed_labels(cfg: SyntheticConfig, labels: np.ndarray, block: int) -> np.ndarray:
    """int64 [rows]: row block ``block``'s labels, each replaced with probability ``label_noise`` by a
    uniform class."""
    lo, hi = block * ROW_BLOCK, min((block + 1) * ROW_BLOCK, labels.shape[0])
    observed = labels[lo:hi].astype(np.int64)
    if cfg.label_noise > 0.0:
        rng = block_rng(cfg.seed, _LABEL_NOISE, block)
        flip = rng.random(hi - lo) < cfg.label_noise
        noise = rng.integers(0, cfg.num_classes, size=hi - lo, dtype=np.int64)
        observed[flip] = noise[flip]
    return observed


def split_ids(cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted int64 node ids of train, val and test: one draw without replacement (memory of
    the order of the split sizes when they are small, as numpy picks by hashing then)."""
    n = cfg.num_nodes
    n_train, n_val = int(cfg.train_fraction * n), int(cfg.val_fraction * n)
    n_test = min(int(cfg.test_fraction * n), n - n_train - n_val)
    chosen = block_rng(cfg.seed, _SPLIT).choice(n, size=n_train + n_val + n_test, replace=False)
    return tuple(np.sort(p).astype(np.int64) for p in np.split(chosen, [n_train, n_train + n_val]))

