"""How the training loop calls a link model (:class:`~gnnscale.nn.link.LinkModel`) on a link batch: the
step and batch types of :mod:`gnnscale.train.link` and the scores shaped for the loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnscale.nn.link import LinkModel

# How a batch's pair scores become the loss's logits (LinkBatch.form).
BINARY, RANKED, SCORES = "binary", "ranked", "scores"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStep:
    """One iteration's pairs on this worker.

    Args:
        pos: int64 [2, b], positive (source, destination) pairs (evaluation: any pairs to score).
        key: the batch's sampling key; the training negatives are drawn under it too.
        real: False for an evaluation stand-in of a worker out of pairs (its result is ignored).
        iteration: unused (0): link batches follow no schedule over iterations.
    """

    pos: Tensor
    key: int
    real: bool = True
    iteration: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkBatch:
    """One prepared link iteration (the fields the loop reads are :class:`~gnnscale.train.layouts.base.DistBatch`'s).

    Args:
        step, blocks, x, sampled_edges, comm: as :class:`~gnnscale.train.layouts.base.DistBatch`.
        y: the loss's targets: int64 [pairs] labels 1/0 (``binary``), zeros [b] (``ranked``: column 0 is
            each positive), or [pairs] ones (``scores``: evaluation, unused).
        src, dst: int64 [pairs], each pair's endpoints as rows of the seeds' embeddings (``blocks[-1]``'s
            destinations); the positives first, then positive ``i``'s negatives at ``b + i * k ..``.
        num_pos: b, the positives.
        form: ``binary``, ``ranked`` or ``scores`` (:func:`pair_logits`).
    """

    step: LinkStep
    blocks: list
    x: Tensor
    y: Tensor
    sampled_edges: int
    comm: dict
    src: Tensor
    dst: Tensor
    num_pos: int
    form: str


def pair_logits(scores: Tensor, num_pos: int, form: str) -> Tensor:
    """The loss's logits from the pairs' scores [pairs] (module docstring): [pairs, 2] ``(0, s)`` rows
    (binary), [b, 1 + k] with each positive in column 0 (ranked), or the scores themselves."""
    if form == BINARY:
        return torch.stack([torch.zeros_like(scores), scores], dim=1)
    if form == RANKED:
        return torch.cat([scores[:num_pos, None], scores[num_pos:].view(num_pos, -1)], dim=1)
    return scores


class LinkInputs:
    """The loop's calling convention for a :class:`~gnnscale.nn.link.LinkModel`: embed the batch's
    seeds, score its pairs, shape the scores for the loss."""

    name = "blocks"

    def convert(self, batch: LinkBatch) -> LinkBatch:
        return batch

    def logits(self, model: LinkModel, batch: LinkBatch, *, dropout_key: int | None) -> Tensor:
        h = model(batch.blocks, batch.x, dropout_key=dropout_key)
        # index_select, not h[src]: the backward of advanced indexing (index_put_ with accumulate) adds rows in
        # an order that varies between runs with 2+ CPU threads; index_select's (index_add_) does not.
        # The copy stage moves a batch's blocks, x and y; the pair rows (small) follow the embeddings here.
        src, dst = batch.src.to(h.device, non_blocking=True), batch.dst.to(h.device, non_blocking=True)
        pairs = model.score(h.index_select(0, src), h.index_select(0, dst))
        return pair_logits(pairs, batch.num_pos, batch.form)
