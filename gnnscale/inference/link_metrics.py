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


def mrr(pos_score: np.ndarray, neg_score: np.ndarray) -> float:
    """Mean reciprocal rank of each positive among its own negatives; NaN without positives."""
    ranks = positive_ranks(pos_score, neg_score)
    return float(np.mean(1.0 / ranks)) if ranks.size else float("nan")


def hits_at(k: int, pos_score: np.ndarray, neg_score: np.ndarray) -> float:
    """Share of positives ranked within the top ``k`` among their own negatives; NaN without positives."""
    ranks = positive_ranks(pos_score, neg_score)
    return float(np.mean(ranks <= k)) if ranks.size else float("nan")


def link_score(metric: str, pos_score: np.ndarray, neg_score: np.ndarray) -> float:
    """``metric`` of positives ``pos_score`` [n] against negatives ``neg_score`` [n, k] (each positive's own,
    for mrr and hits@K; pooled, for roc_auc and ap)."""
    check_link_metric(metric)
    pos, neg = np.asarray(pos_score).reshape(-1), np.asarray(neg_score).reshape(-1)
    if metric in ("roc_auc", "ap"):
        labels = np.r_[np.ones(pos.size), np.zeros(neg.size)]
        scores = np.r_[pos, neg]
        return roc_auc(labels, scores) if metric == "roc_auc" else average_precision(labels, scores)
    neg = np.asarray(neg_score).reshape(pos.size, -1)
    if metric == "mrr":
        return mrr(pos, neg)
    return hits_at(int(_HITS.fullmatch(metric).group(1)), pos, neg)
