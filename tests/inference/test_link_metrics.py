"""Link metrics against cases worked by hand (and OGB's tie rule for ranks): the ranking terms that training's
and predict's metrics both sum, and the pooled metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gnnscale.inference.link_metrics import average_precision, check_link_metric, link_score, positive_ranks, rank_terms

# Three sources, three negatives each, laid out as evaluation lays them (positive i's at 3i .. 3i + 2):
#   positive 0.5 against 0.6 (above), 0.5 (tie), 0.1   -> rank 1 + 1 + 1/2 = 2.5
#   positive 0.9 against 0.95 (above), 0.2, 0.3        -> rank 2
#   positive 0.1 against 0.0, 0.05, 0.1 (tie)          -> rank 1.5
# Ranked against another source's negatives (0.6, 0.95, 0.0 for the first), the ranks would differ.
BY_HAND_POS = np.array([0.5, 0.9, 0.1])
BY_HAND_NEG = np.array([0.6, 0.5, 0.1, 0.95, 0.2, 0.3, 0.0, 0.05, 0.1])
BY_HAND = {
    "mrr": (1 / 2.5 + 1 / 2 + 1 / 1.5) / 3,
    "hits@1": 0.0,
    "hits@2": 2 / 3,  # rank 2 counts (rank <= K), rank 2.5 does not
    "hits@3": 1.0,
    # Pooled over all 9 negatives: 0.5 beats 6 and ties 1 (6.5), 0.9 beats 8, 0.1 beats 2 and ties 2 (3).
    "roc_auc": (6.5 + 8 + 3) / 27,
}


def test_average_precision_by_hand():
    # Ranked: + (precision 1/1), -, + (precision 2/3), -: AP = (1 + 2/3) / 2.
    assert average_precision(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.7, 0.1])) == pytest.approx(5 / 6)
    # A tie between a positive and a negative enters at once: precision 1/2 at recall 1.
    assert average_precision(np.array([1, 0]), np.array([0.5, 0.5])) == pytest.approx(0.5)
    # Perfect ranking, and no positive at all.
    assert average_precision(np.array([0, 1, 1]), np.array([0.1, 0.2, 0.3])) == 1.0
    assert math.isnan(average_precision(np.array([0, 0]), np.array([0.1, 0.2])))


def test_ranks_count_ties_as_ogb_does():
    ranks = positive_ranks(BY_HAND_POS, BY_HAND_NEG.reshape(3, 3))
    np.testing.assert_array_equal(ranks, [2.5, 2.0, 1.5])


@pytest.mark.parametrize("shape", ["flat", "rows"])
def test_rank_terms_rank_each_positive_against_its_own_negatives(shape):
    neg = BY_HAND_NEG if shape == "flat" else BY_HAND_NEG.reshape(3, 3)
    np.testing.assert_allclose(rank_terms("mrr", BY_HAND_POS, neg), [1 / 2.5, 1 / 2, 1 / 1.5])
    np.testing.assert_array_equal(rank_terms("hits@2", BY_HAND_POS, neg), [0.0, 1.0, 1.0])
    assert rank_terms("mrr", np.zeros(0), np.zeros(0)).shape == (0,)
    with pytest.raises(ValueError, match=r"^neg_score: expected k negatives for each of the 3 positives, got 8$"):
        rank_terms("mrr", BY_HAND_POS, BY_HAND_NEG[:8])
    with pytest.raises(ValueError, match=r"^metric: expected a ranking metric \(mrr or hits@K\), got 'ap'$"):
        rank_terms("ap", BY_HAND_POS, neg)


@pytest.mark.parametrize("metric", sorted(BY_HAND))
def test_link_score_the_predict_metric_is_the_hand_ranking(metric):
    assert link_score(metric, BY_HAND_POS, BY_HAND_NEG) == pytest.approx(BY_HAND[metric], abs=1e-12)


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
