"""Metrics of scored node pairs (link prediction): ROC-AUC and average precision over labelled pairs,
MRR and Hits@K over each positive's own negatives (ogbl-citation2's protocol), in numpy.

Ties are scored the pessimistic-optimistic mean way OGB's evaluator does for MRR (a positive's rank is
1 + the negatives strictly above it + half the ties), and as average ranks for ROC-AUC.
"""

from __future__ import annotations

import re

import numpy as np

from gnnscale.inference.metrics import roc_auc

LINK_METRICS = ("roc_auc", "ap", "mrr", "hits@K")
_HITS = re.compile(r"hits@([1-9][0-9]*)")


def check_link_metric(metric: str) -> str:
    """``metric`` when it is a link metric (``hits@K`` with K >= 1 given as a number); else ValueError."""
    if metric in LINK_METRICS[:3] or _HITS.fullmatch(metric):
        return metric
    raise ValueError(f"metric: expected roc_auc, ap, mrr or hits@K (e.g. hits@50) for a link task, got {metric!r}")


def average_precision(labels: np.ndarray, score: np.ndarray) -> float:
    """Mean of the precision at each positive, pairs ranked by ``score`` descending (scikit-learn's
    ``average_precision_score``: tied scores enter together). NaN without positives."""
    labels = np.asarray(labels).astype(bool)
    if not labels.any():
        return float("nan")
    order = np.argsort(-np.asarray(score, dtype=np.float64), kind="stable")
    ranked_score, ranked = np.asarray(score, dtype=np.float64)[order], labels[order]
    # The last position of each run of tied scores: a threshold takes a whole run at once.
    last = np.r_[np.nonzero(np.diff(ranked_score))[0], ranked.size - 1]
    true_pos = np.cumsum(ranked)[last]
    precision = true_pos / (last + 1)
    recall_gain = np.diff(np.r_[0, true_pos]) / true_pos[-1]
    return float(np.sum(precision * recall_gain))


def positive_ranks(pos_score: np.ndarray, neg_score: np.ndarray) -> np.ndarray:
    """float [n]: each positive's rank among itself and its own negatives ``neg_score[i]`` ([n, k]): 1 +
    the negatives scored above it + half those scored the same."""
    pos = np.asarray(pos_score, dtype=np.float64).reshape(-1, 1)
    neg = np.asarray(neg_score, dtype=np.float64)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"neg_score: expected [{pos.shape[0]}, k] (each positive's own negatives), got shape "
                         f"{neg.shape}")
    return 1.0 + (neg > pos).sum(axis=1) + 0.5 * (neg == pos).sum(axis=1)


def rank_terms(metric: str, pos_score: np.ndarray, neg_score: np.ndarray) -> np.ndarray:
    """float64 [n]: each positive's term of the ranking ``metric``, whose mean is the metric: ``1 / rank``
    (mrr) or 1.0 where ``rank <= K``, else 0.0 (hits@K), its rank (:func:`positive_ranks`) among its own
    negatives. ``neg_score`` holds ``k`` per positive, positive ``i``'s at ``i * k .. (i + 1) * k - 1`` (the
    layout of evaluation's pairs), flat [n * k] or [n, k]. Training's metric sums these terms over every
    worker, ``predict``'s averages them (:func:`link_score`)."""
    hits = _HITS.fullmatch(metric)
    if metric != "mrr" and hits is None:
        raise ValueError(f"metric: expected a ranking metric (mrr or hits@K), got {metric!r}")
    pos = np.asarray(pos_score, dtype=np.float64).reshape(-1)
    neg = np.asarray(neg_score, dtype=np.float64)
    if pos.size == 0:
        return np.zeros(0)
    if neg.size % pos.size:
        raise ValueError(f"neg_score: expected k negatives for each of the {pos.size} positives, got {neg.size}")
    ranks = positive_ranks(pos, neg.reshape(pos.size, -1))
    return 1.0 / ranks if hits is None else (ranks <= int(hits.group(1))).astype(np.float64)


def link_score(metric: str, pos_score: np.ndarray, neg_score: np.ndarray) -> float:
    """``metric`` of positives ``pos_score`` [n] against negatives ``neg_score`` (each positive's own ``k``,
    [n * k] or [n, k], for mrr and hits@K: :func:`rank_terms`; pooled, for roc_auc and ap)."""
    check_link_metric(metric)
    pos, neg = np.asarray(pos_score).reshape(-1), np.asarray(neg_score).reshape(-1)
    if metric in ("roc_auc", "ap"):
        labels = np.r_[np.ones(pos.size), np.zeros(neg.size)]
        scores = np.r_[pos, neg]
        return roc_auc(labels, scores) if metric == "roc_auc" else average_precision(labels, scores)
    terms = rank_terms(metric, pos, neg)
    return float(np.mean(terms)) if terms.size else float("nan")
