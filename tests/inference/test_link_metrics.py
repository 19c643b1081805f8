"""Link metrics against cases worked by hand (and OGB's tie rule for ranks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gnnscale.inference.link_metrics import (average_precision, check_link_metric, hits_at, link_score, mrr,
                                             positive_ranks)


def test_average_precision_by_hand():
    # Ranked: + (precision 1/1), -, + (precision 2/3), -: AP = (1 + 2/3) / 2.
    assert average_precision(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.7, 0.1])) == pytest.approx(5 / 6)
    # A tie between a positive and a negative enters at once: precision 1/2 at recall 1.
    assert average_precision(np.array([1, 0]), np.array([0.5, 0.5])) == pytest.approx(0.5)
    # Perfect ranking, and no positive at all.
    assert average_precision(np.array([0, 1, 1]), np.array([0.1, 0.2, 0.3])) == 1.0
    assert math.isnan(average_precision(np.array([0, 0]), np.array([0.1, 0.2])))


def test_ranks_count_ties_as_ogb_does():
    # One negative above (0.6), one tied (0.5): rank 1 + 1 + 0.5.
    ranks = positive_ranks(np.array([0.5, 0.9]), np.array([[0.6, 0.5, 0.1], [0.1, 0.2, 0.3]]))
    np.testing.assert_array_equal(ranks, [2.5, 1.0])
    assert mrr(np.array([0.5, 0.9]), np.array([[0.6, 0.5, 0.1], [0.1, 0.2, 0.3]])) == pytest.approx((0.4 + 1) / 2)
    assert hits_at(2, np.array([0.5, 0.9]), np.array([[0.6, 0.5, 0.1], [0.1, 0.2, 0.3]])) == 0.5
    assert hits_at(3, np.array([0.5, 0.9]), np.array([[0.6, 0.5, 0.1], [0.1, 0.2, 0.3]])) == 1.0


def test_link_score_pools_for_auc_and_ranks_per_positive_for_mrr():
    pos, neg = np.array([0.9, 0.2]), np.array([[0.1, 0.3], [0.5, 0.0]])
    # Pooled: 4 negatives; positive 0.9 beats 4, positive 0.2 beats 2 (0.1, 0.0): AUC 6 / 8.
    assert link_score("roc_auc", pos, neg) == pytest.approx(6 / 8)
    assert link_score("mrr", pos, neg) == pytest.approx((1 + 1 / 2) / 2)
    assert link_score("hits@1", pos, neg) == 0.5
    with pytest.raises(ValueError, match=r"neg_score: expected \[2, k\]"):
        positive_ranks(pos, np.zeros((3, 2)))


@pytest.mark.parametrize("bad", ["auc", "hits@0", "hits@", "hits@x", "accuracy"])
def test_unknown_link_metrics_are_refused(bad):
    with pytest.raises(ValueError, match="metric: expected roc_auc, ap, mrr or hits@K"):
        check_link_metric(bad)
