"""Node classification: each iteration trains on a batch of training nodes, labelled by their class, and the
per-epoch score is the accuracy of sampled inference over the validation and test nodes.

**Batches.** With data parallelism every worker draws micro-batches of ``batch_size`` of its own training
nodes, in an order fixed by ``(seed, epoch, rank)``; one worker is exactly the single-process run. A layout
that trains one mini-batch across all workers (split parallelism) draws the single-process trainer's batches
of ``P x batch_size`` seeds from every training node, with rank 0's order and keys, on every worker.

**Evaluation.** Every worker classifies its own validation (or test) nodes in chunks of ``eval_batch_size``,
with the inference fanouts; sampling and fetching are collective, so every worker runs as many steps as the
one with most nodes (stand-ins for the rest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.keys import derive_key
from gnnscale.nn.link import LinkModel
from gnnscale.nn.models import ModelConfig
from gnnscale.nn.typed_models import TypedModelConfig, model_config
from gnnscale.train.batches import EVAL_EPOCH, epoch_batches, num_batches_for
from gnnscale.train.inputs import seeded_model
from gnnscale.train.steps import Batch, Evaluation, Sampled, Step
from gnnscale.train.tasks.base import TaskContext, TaskSpec, cross_entropy


@dataclass(frozen=True, slots=True)
class NodeSeeds:
    """A node step's seed plan: its seed nodes themselves (int64 [b])."""

    seeds: Tensor


@dataclass(frozen=True, slots=True)
class NodeTargets:
    """A node batch's targets: ``y`` int64 [n], the labels of the nodes whose outputs the worker computes."""

    y: Tensor

    def moved(self, move) -> "NodeTargets":
        return NodeTargets(move(self.y))


class NodeTask:
    """Node classification on one worker (the :class:`~gnnscale.train.tasks.base.Task` protocol).

    Args:
        part: this worker's partition (its labels, its training, validation and test nodes).
        cfg: training settings (``batch_size``, ``eval_batch_size``, ``seed``).
        rank, world_size: this worker among all.
        pool: int64, the training nodes batches are drawn from (this worker's, or every worker's for a
            shared mini-batch).
        shared: one mini-batch of ``world_size x batch_size`` seeds on every worker (rank 0's order and keys).
    """

    metric = "accuracy"

    def __init__(self, part, cfg, rank: int, world_size: int, pool: Tensor, shared: bool) -> None:
        self.part, self.cfg, self.rank, self.world_size = part, cfg, rank, world_size
        self.pool, self.shared = pool, shared
        self.labels = torch.from_numpy(np.asarray(part.labels).copy())
        self._plan_rank = 0 if shared else rank
        self._batch_size = world_size * cfg.batch_size if shared else cfg.batch_size

    def local_batches(self) -> int:
        return num_batches_for(self.pool.numel(), self._batch_size)

    def check_num_batches(self, num_batches: int) -> str:
        local = self.pool.numel()
        if self.shared or local >= num_batches:
            return ""  # a shared mini-batch is drawn from all training nodes: never short
        return (f"part {self.rank} has {local} training nodes, fewer than the {num_batches} iterations per epoch the "
                "largest part needs; raise --batch-size, or repartition with fewer --parts (gnnscale partition spreads "
                "training nodes evenly over the parts with either --method)")

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]:
        batches = epoch_batches(self.pool, num_batches, self.cfg.seed, epoch, self._plan_rank)
        return [Step(items=seeds, key=derive_key(self.cfg.seed, epoch, step, self._plan_rank),
                     iteration=epoch * num_batches + step) for step, seeds in enumerate(batches)]

    def plan_seeds(self, step: Step, training: bool) -> NodeSeeds:
        return NodeSeeds(step.items)

    def exclude(self, sampled: Sampled, plan: NodeSeeds, training: bool) -> Sampled:
        return sampled  # every sampled edge carries its message

    def targets(self, sampled: Sampled, plan: NodeSeeds, training: bool) -> NodeTargets:
        return NodeTargets(self.labels[sampled.out_ids - self.part.label_offset])

    def logits(self, model: nn.Module, outputs: Tensor, batch: Batch) -> Tensor:
        return outputs

    def loss(self, logits: Tensor, batch: Batch, total: int | None) -> Tensor:
        return cross_entropy(logits, batch.y, total)

    def describe(self, comm: Comm) -> dict:
        return {}  # the dataset's own split says it all

    def plan_eval(self, node_ids: np.ndarray, num_steps: int) -> list[Step]:
        """``num_steps`` inference steps over this worker's ``node_ids`` (the same count on every worker);
        a worker out of nodes samples a stand-in."""
        chunks = list(torch.from_numpy(np.asarray(node_ids).copy()).split(self.cfg.eval_batch_size))
        stand_in = torch.tensor([self.part.label_offset])
        return [Step(items=chunks[i] if i < len(chunks) else stand_in,
                     key=derive_key(self.cfg.seed, EVAL_EPOCH, i, self.rank), real=i < len(chunks))
                for i in range(num_steps)]

    @torch.no_grad()
    def score(self, model: nn.Module, evaluation: Evaluation, comm: Comm, split: str) -> float:
        """Accuracy over every worker's ``split`` nodes (collective)."""
        node_ids = getattr(self.part, f"{split}_idx")
        # Collective: the largest number of inference steps any worker needs.
        num_steps = comm.all_reduce_max_int(math.ceil(node_ids.shape[0] / self.cfg.eval_batch_size), "eval")
        correct = 0
        for batch, outputs in evaluation.outputs(model, self.plan_eval(node_ids, num_steps)):
            correct = correct + (outputs.argmax(1) == batch.y).sum()  # counted on the device: no sync per batch
        totals = torch.tensor([int(correct), node_ids.shape[0]], dtype=torch.float64)  # host sync: once
        comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: global counts
        return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")


def all_training_nodes(part, comm: Comm) -> Tensor:
    """int64 [all training nodes], sorted: every part's ``train_idx`` (parts own ascending id ranges, so
    concatenating them in rank order sorts them). Collective: one ``"setup"`` round."""
    mine = torch.from_numpy(np.array(part.train_idx, dtype=np.int64))  # a copy: the part is a read-only map
    # Collective: every worker's training nodes to every worker.
    return torch.cat([t.cpu() for t in comm.all_to_allv([mine] * comm.world_size, "setup")])


def build_node_task(ctx: TaskContext) -> NodeTask:
    """This worker's node task; a shared mini-batch first gathers every worker's training nodes (collective)."""
    comm = ctx.comm
    pool = (all_training_nodes(ctx.part, comm) if ctx.shared_batches
            else torch.from_numpy(np.asarray(ctx.part.train_idx).copy()))
    return NodeTask(ctx.part, ctx.cfg, comm.rank, comm.world_size, pool, ctx.shared_batches)


def check_node_model(model: nn.Module) -> None:
    if isinstance(model, LinkModel):
        raise ValueError("task: a LinkModel trains a link task; pass task=LinkConfig() (--task link)")


def no_settings(settings: None, distributed: bool) -> None:
    """Node classification has no settings of its own."""


def node_output_width(model_options: dict, num_classes: int) -> int:
    """A node classifier's outputs are the dataset's classes."""
    return num_classes


def node_model(config: ModelConfig | TypedModelConfig, settings, seed: int) -> nn.Module:
    return seeded_model(config, seed)


NODE = TaskSpec(name="node", summary="node classification: each node's class from its sampled neighborhood",
                config=None, needs=(), dgs=True, full_eval=True, model_config=model_config,
                check_model=check_node_model, check_settings=no_settings, output_width=node_output_width,
                build_model=node_model, build=build_node_task)
