"""What a task is: the protocol of a worker's task and the spec through which the registry
(:mod:`gnnscale.train.tasks.registry`) knows it.

A **task** says what is learned: it plans each iteration's work (:class:`~gnnscale.train.steps.Step`), names
the nodes the layout samples for it, removes what must not carry messages (a link task's target edges),
gives the loss its targets and logits, and scores the model on the validation and test splits. A
**layout** (:mod:`gnnscale.train.layouts`) says where data lives and who computes what: it samples and
fetches for whatever seeds the task hands it. The stages between them are in :mod:`gnnscale.train.stages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.split.shuffle import split_loss
from gnnscale.nn import ModelConfig
from gnnscale.partition.directory import LocalPartition
from gnnscale.train.config import TrainConfig
from gnnscale.train.steps import Batch, Evaluation, Sampled, Step, Targets


class SeedPlan(Protocol):
    """What a task makes of a step before sampling, one type per task: ``seeds`` is int64 [s], the nodes
    whose blocks the layout samples (the task's own targets read the rest)."""

    seeds: Tensor


class Task(Protocol):
    """One worker's task (see the module docstring). ``metric`` names its per-epoch score."""

    metric: str
    part: LocalPartition

    def local_batches(self) -> int:
        """Iterations this worker's own work needs (workers then agree on the largest)."""

    def check_num_batches(self, num_batches: int) -> str:
        """Why this worker cannot run ``num_batches`` iterations per epoch ("" if it can)."""

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]:
        """This worker's training steps of ``epoch``, in order."""

    def plan_seeds(self, step: Step, training: bool) -> SeedPlan:
        """The nodes to sample for ``step`` (a link task draws its negatives here)."""

    def exclude(self, sampled: Sampled, plan: SeedPlan, training: bool) -> Sampled:
        """``sampled`` without what must not carry messages (the identity for a task without such a rule)."""

    def targets(self, sampled: Sampled, plan: SeedPlan, training: bool) -> Targets:
        """The loss's targets of a step."""

    def logits(self, model: nn.Module, outputs: Tensor, batch: Batch) -> Tensor:
        """float [terms, classes]: the loss's logits from the model's outputs (the rows of ``sampled.out_ids``)."""

    def loss(self, logits: Tensor, batch: Batch, total: int | None) -> Tensor:
        """The step's loss over this worker's terms, normalised as its layout says (:func:`cross_entropy`)."""

    def describe(self, comm: Comm) -> dict:
        """What the metrics file and the run's first lines say of the task's data over every worker, ``{}`` for
        nothing (collective where it says something: every worker's task is built alike)."""

    def score(self, model: nn.Module, evaluation: Evaluation, comm: Comm, split: str) -> float:
        """The metric of ``split`` (``"val"`` or ``"test"``) over every worker (collective: ``evaluation`` samples
        and fetches on every worker alike)."""


def cross_entropy(logits: Tensor, y: Tensor, total: int | None) -> Tensor:
    """The step's loss from this worker's terms: their mean (``total`` None: data parallelism, each worker's
    step is the mean over its own terms), or their sum divided by ``total`` (split parallelism: this worker's
    share of the whole mini-batch's mean)."""
    return F.cross_entropy(logits, y) if total is None else split_loss(logits, y, total)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    """What a task is built from on one worker.

    Args:
        part: this worker's partition as loaded (the task may build the message-passing graph from it).
        cfg: training settings.
        settings: the task's own settings (an instance of its spec's ``config``; None where it has none).
        comm: the training step's Comm (set-up collectives).
        partition_dir: the partition directory; None in one process.
        shared_batches: the layout trains one mini-batch across all workers (split parallelism: the task plans
            the single-process batches of ``P x batch_size``), not one micro-batch per worker.
    """

    part: LocalPartition
    cfg: TrainConfig
    settings: object | None
    comm: Comm
    partition_dir: Path | None
    shared_batches: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    """A task as the registry, the checks, the command line and checkpoints know it.

    Args:
        name: ``--task`` value; also the key its settings have in checkpoints and the metrics file.
        summary: one line for ``--help``.
        config: the dataclass of its own settings, whose flagged fields are its flags (None: it has none).
        needs: the layout capabilities it runs on, as names of :class:`~gnnscale.train.layouts.base.LayoutSpec`'s
            boolean fields (a link task's seeds are any nodes: ``seeds_anywhere``).
        dgs: trains with ``--dgs`` (DGS explains node classification).
        full_eval: ``--eval full`` scores its model (layer-wise inference of node predictions).
        model_config: the built-in model config a model of this task is built on (None: a model of one's own).
        check_model: the task's rules for the model it trains (TypeError/ValueError naming the argument).
        check_settings: the task's rules for its own settings in a run (``distributed``: over a partition
            directory), beyond what the settings' class checks itself.
        output_width: the encoder's output width from the built-in model's options and the dataset's class count.
        build_model: the task's built-in model from the encoder's config, its settings and the seed.
        build: this worker's task (collective on the context's Comm where a worker can fail alone).
        describe_model: the model's checkpoint signature as the metrics file shows it (default: as it is).
        model_file_record: what the model file keeps of the task's settings and the run's seed, for
            ``gnnscale predict`` (a link model's split: :class:`~gnnscale.nn.model_file.LinkSplitRecord`; default
            nothing).
    """

    name: str
    summary: str
    config: type | None
    needs: tuple[str, ...]
    dgs: bool
    full_eval: bool
    model_config: Callable[[nn.Module], ModelConfig | None]
    check_model: Callable[[nn.Module], None]
    check_settings: Callable[[object | None, bool], None]
    output_width: Callable[[dict, int], int]
    build_model: Callable[[ModelConfig, object, int], nn.Module]
    build: Callable[[TaskContext], Task]
    describe_model: Callable[[dict], dict] = lambda signature: signature
    model_file_record: Callable[[object | None, int], object | None] = lambda settings, seed: None
