"""Metrics of full predictions: accuracy, macro F1 and (two classes) ROC-AUC, in numpy."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

METRICS = ("accuracy", "roc_auc", "f1_macro")


def check_metric(metric: str, num_classes: int) -> str:
    """``metric`` when it applies to ``num_classes`` classes; else ValueError naming it."""
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {METRICS}, got {metric!r}")
    if metric == "roc_auc" and num_classes != 2:
        raise ValueError(f"metric: roc_auc ranks the scores of two classes, but the dataset has {num_classes}; "
                         "use accuracy or f1_macro")
    return metric


def accuracy(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Share of nodes whose predicted class is their label; NaN for no nodes."""
    return float(np.mean(labels == predicted)) if labels.size else float("nan")


def f1_macro(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Unweighted mean of the per-class F1 ``2 TP / (2 TP + FP + FN)`` over every class that occurs in
    ``labels`` or ``predicted`` (scikit-learn's ``f1_score(average="macro")``); NaN for no nodes."""
    if not labels.size:
        return float("nan")
    classes = np.union1d(labels, predicted)
    scores = []
    for c in classes:
        tp = np.count_nonzero((predicted == c) & (labels == c))
        fp = np.count_nonzero((predicted == c) & (labels != c))
        fn = np.count_nonzero((predicted != c) & (labels == c))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def roc_auc(labels: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` (the positive class's probability or logit margin) for
    binary ``labels`` (0/1): the probability that a random positive outscores a random negative, ties
    counting half (the Mann-Whitney U statistic over average ranks). NaN when a class is missing."""
    positive = labels == 1
    num_pos, num_neg = int(positive.sum()), int((~positive).sum())
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    ranks = rankdata(score)  # average ranks: ties count half
    return float((ranks[positive].sum() - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


def score(metric: str, labels: np.ndarray, probabilities: np.ndarray) -> float:
    """``metric`` of the predictions ``probabilities`` (float [n, num_classes]) against ``labels`` (int [n])."""
    if metric == "roc_auc":
        return roc_auc(labels, probabilities[:, 1])
    predicted = probabilities.argmax(axis=1)
    return accuracy(labels, predicted) if metric == "accuracy" else f1_macro(labels, predicted)
