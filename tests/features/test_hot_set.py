"""Which rows the caches hold: highest in-degree, ties towards the lower id."""

from __future__ import annotations

import numpy as np

from gnnscale.features.hot_set import hot_nodes


def test_hot_nodes_rank_by_in_degree_then_id():
    degrees = np.array([1, 5, 5, 0, 7, 2])
    assert hot_nodes(degrees, 3).tolist() == [1, 2, 4]
    assert hot_nodes(degrees, 0).tolist() == []
    assert hot_nodes(degrees, 10).tolist() == [0, 1, 2, 3, 4, 5]
