"""The values that pass between a task, a layout and the training loop, one iteration at a time.

A task plans :class:`Step` s (what an iteration trains on), a layout samples them (:class:`Sampled`) and
fetches their input rows, and the task adds its targets: the :class:`Batch` the step consumes. The
stages between them are in :mod:`gnnscale.train.stages`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn

from gnnscale.sampling import Block


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One iteration's work on this worker.

    Args:
        items: what the task trains on in this iteration: int64 [b] seed nodes (node classification), or
            int64 [2, b] (source, destination) pairs (link prediction; evaluation: any pairs to score).
        key: the iteration's sampling key (:func:`gnnscale.keys.derive_key`); a link task's negatives are
            drawn under it too.
        real: False for a stand-in of a worker that has run out of items but must still take part in the
            collectives (evaluation); its result is ignored.
        iteration: the training iteration counted over the whole run (DGS's mask schedule reads it).
    """

    items: Tensor
    key: int
    real: bool = True
    iteration: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampled:
    """One step's sampled blocks on this worker, before its rows are fetched.

    Args:
        step: what was sampled.
        blocks: the blocks in model order (data parallelism), or this worker's splits of the mini-batch's
            blocks (split parallelism).
        out_ids: int64 [n], the global ids of the nodes whose outputs this worker computes, in the order of
            the model's output rows (the seeds; split parallelism: the seeds this worker owns).
        sampled_edges: edges this worker sampled for the step.
    """

    step: Step
    blocks: list
    out_ids: Tensor
    sampled_edges: int


class Targets(Protocol):
    """What a task's loss compares the model's output with, one type per task.

    ``y`` is int64 [terms]: the class of each of the loss's terms (a node's label; a pair's label, or the
    column of each positive among its negatives), the rows of the logits the task makes of the model's output.
    """

    y: Tensor

    def moved(self, move) -> "Targets":
        """These targets with ``move`` applied to each tensor the step reads (the copy stage)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One prepared iteration on this worker: what the training step consumes.

    Args:
        step: what was prepared.
        blocks: what the model runs on, in model order: the sampled blocks (data parallelism), or this
            worker's cooperative splits of the mini-batch (split parallelism).
        x: float32 [blocks[0].num_src, feature_dim], input features of the first block's sources.
        targets: the task's targets of the batch (:class:`Targets`).
        sampled_edges: edges of this worker's blocks.
        comm: this batch's communication in the loader's process group, ``{category: {"rounds", "calls",
            "bytes_sent", "bytes_received", "seconds"}}`` (:class:`gnnscale.distributed.CommStats`).
    """

    step: Step
    blocks: list[Block] | list
    x: Tensor
    targets: Targets
    sampled_edges: int
    comm: dict[str, dict[str, float]]

    @property
    def y(self) -> Tensor:
        """The targets' classes, int64 [terms]."""
        return self.targets.y


class Evaluation(Protocol):
    """How a task evaluates: its steps' batches through the stages (sampled with the inference fanouts,
    nothing excluded) and the model's outputs on each, computed on the model's device without gradients."""

    def outputs(self, model: nn.Module, steps: list[Step]) -> Iterator[tuple[Batch, Tensor]]:
        """``(batch, outputs)`` of every step in order, stand-ins included (their ``step.real`` is False)."""
