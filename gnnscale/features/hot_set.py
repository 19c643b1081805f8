"""Which feature rows a cache holds, and the one check of a cache's size.

The rule is GSplit's (and Quiver's, PaGraph's): a node's chance of being drawn as a neighbor grows with
its in-degree, so a cache holds the rows of the highest in-degree nodes. Ties go to the lower id (a
stable sort of the negated degrees), so every worker ranks the nodes alike without a word exchanged.
Both caches use it: the host cache of remote rows (:mod:`gnnscale.features.host_cache`, per worker,
skipping the worker's own range) and the device cache (:mod:`gnnscale.features.device_cache`).
"""

from __future__ import annotations

import numpy as np


def in_degree_order(degrees: np.ndarray) -> np.ndarray:
    """int64 [num_nodes]: every node id, highest in-degree first, ties by lower id.

    Args:
        degrees: int [num_nodes], every node's in-degree in the whole graph.
    """
    return np.argsort(-np.asarray(degrees, dtype=np.int64), kind="stable")


def hot_set(order: np.ndarray, num_rows: int, skip: tuple[int, int] | None = None) -> np.ndarray:
    """int64, sorted: the first ``num_rows`` nodes of ``order`` outside the id range ``skip`` (fewer when
    fewer are left).

    Args:
        order: int64 [num_nodes], :func:`in_degree_order` of the degrees (computed once, cut many times).
        num_rows: the cache's capacity in rows.
        skip: ``(lo, hi)``, ids ``lo <= v < hi`` never cached (a worker's own rows); None skips none.
    """
    if skip is not None:
        lo, hi = skip
        order = order[(order < lo) | (order >= hi)]
    return np.sort(order[:num_rows]).astype(np.int64)


def hot_nodes(degrees: np.ndarray, num_rows: int) -> np.ndarray:
    """int64 [min(num_rows, num_nodes)], sorted: the ``num_rows`` highest in-degree nodes, ties by lower id."""
    return hot_set(in_degree_order(degrees), num_rows)


def check_fraction(fraction: float, name: str) -> float:
    """``fraction`` as a float, or ValueError naming the setting ``name`` (``cache_fraction``,
    ``gpu_cache_fraction``): a cache's size is a share of ALL nodes' rows, in [0, 1]."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{name}: expected a fraction of all nodes in [0, 1], got {fraction!r}")
    return float(fraction)
