"""The settings of a link-prediction run (``gnnscale train --task link``, ``fit(..., task=LinkConfig())``)."""

from __future__ import annotations

from dataclasses import dataclass

from gnnscale.graph.link_split import check_edge_split
from gnnscale.inference.link_metrics import check_link_metric
from gnnscale.nn.link import DECODERS
from gnnscale.sampling.negatives import NEGATIVE_LAWS
from gnnscale.settings import setting

LINK_LOSSES = ("bce", "softmax")
RANKING_METRICS = ("mrr", "hits@")
# Evaluation negatives per positive when not given: one uniform pair (ROC-AUC, AP: GAE's protocol) or
# 100 per-source destinations (MRR, Hits@K: ogbl-citation2 ranks against 1,000).
DEFAULT_EVAL_NEGATIVES = {"pooled": 1, "ranking": 100}


def is_ranking(metric: str) -> bool:
    """Whether ``metric`` ranks each positive against its own negatives (mrr, hits@K)."""
    return metric.startswith(RANKING_METRICS)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """How a link-prediction run splits, samples, scores and evaluates edges.

    Args:
        edge_split: train, val and test fractions of a random edge split (each undirected pair falls in
            one, keyed by ``--seed``; :mod:`gnnscale.graph.link_split`).
        link_split: a directory holding the dataset's own split in OGB's link layout (``train``, ``valid``,
            ``test`` as .npz or .pt), used instead of ``edge_split``; one process only.
        neg_ratio: negatives per positive training edge.
        neg_sampling: ``"uniform"`` pairs or ``"per_source"`` destinations (:mod:`gnnscale.sampling.negatives`).
        decoder: ``"dot"`` or ``"mlp"`` (:mod:`gnnscale.nn.link`).
        link_loss: ``"bce"`` (binary cross-entropy over positives and negatives) or ``"softmax"``
            (cross-entropy of each positive against its own ``per_source`` negatives).
        metric: the per-epoch validation/test score: roc_auc, ap, mrr or hits@K (``--metric``).
        eval_negatives: evaluation negatives per positive, drawn once from the seed (None: 1 uniform pair
            for roc_auc/ap, 100 per-source destinations for mrr/hits@K; a split file's
            ``target_node_neg`` is used as given).
    """

    edge_split: tuple[float, ...] = setting((0.85, 0.05, 0.10), "--task link: train,val,test fractions of a "
                                                                "random edge split keyed by --seed",
                                            metavar="F,F,F")
    link_split: str | None = setting(None, "--task link: a directory with the dataset's own split in OGB's link "
                                           "layout ({train,valid,test}.npz or .pt: source_node, target_node, "
                                           "optional target_node_neg), instead of --edge-split", metavar="DIR")
    neg_ratio: int = setting(1, "--task link: negatives per positive training edge")
    neg_sampling: str = setting("uniform", "--task link: uniform node pairs, or per_source destinations paired "
                                           "with each positive's source", choices=NEGATIVE_LAWS)
    decoder: str = setting("dot", "--task link: dot product of the two embeddings, or an MLP over their "
                                  "Hadamard product", choices=DECODERS)
    link_loss: str = setting("bce", "--task link: bce (binary cross-entropy) or softmax (each positive against "
                                    "its own --neg-sampling per_source negatives)", choices=LINK_LOSSES)
    metric: str = "roc_auc"
    eval_negatives: int | None = setting(None, "--task link: evaluation negatives per positive, drawn once from "
                                               "--seed", default_text="1 for roc_auc/ap, 100 for mrr/hits@K")

    def __post_init__(self) -> None:
        object.__setattr__(self, "edge_split", check_edge_split(self.edge_split))
        if not isinstance(self.neg_ratio, int) or isinstance(self.neg_ratio, bool) or self.neg_ratio < 1:
            raise ValueError(f"neg_ratio: expected an int >= 1 negatives per positive, got {self.neg_ratio!r}")
        for name, allowed in (("neg_sampling", NEGATIVE_LAWS), ("decoder", DECODERS), ("link_loss", LINK_LOSSES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {getattr(self, name)!r}")
        check_link_metric(self.metric)
        if self.link_loss == "softmax" and self.neg_sampling != "per_source":
            raise ValueError("link_loss: softmax ranks each positive against its own negatives; add "
                             "--neg-sampling per_source")
        if self.eval_negatives is not None and (not isinstance(self.eval_negatives, int) or
                                                isinstance(self.eval_negatives, bool) or self.eval_negatives < 1):
            raise ValueError(f"eval_negatives: expected an int >= 1, got {self.eval_negatives!r}")

    @property
    def eval_law(self) -> str:
        """The law of drawn evaluation negatives: per-source destinations for a ranking metric (MRR
        against uniform pairs would rank a positive against pairs of other sources: meaningless)."""
        return "per_source" if is_ranking(self.metric) else "uniform"

    @property
    def eval_ratio(self) -> int:
        if self.eval_negatives is not None:
            return self.eval_negatives
        return DEFAULT_EVAL_NEGATIVES["ranking" if is_ranking(self.metric) else "pooled"]
