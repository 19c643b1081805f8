"""Link prediction: each iteration trains on a batch of positive training edges and their keyed negatives,
scored by a decoder over the endpoints' embeddings; the per-epoch score is a link metric over the held-out
edges.

**A batch.** ``batch_size`` positive training edges of this worker (a permutation of them fixed by
``(seed, epoch, rank)``, as node tasks permute their seeds) and ``neg_ratio`` keyed negatives per
positive (:func:`gnnscale.sampling.negatives.negative_pairs` under the step's sampling key). The seed set
is the unique endpoints of all those pairs: one sampler pass (the layout's own: fused in one process,
hybrid or vanilla distributed) draws every embedding the batch needs.

**Target edges** follow DGL's ``exclude="reverse_id"`` rule (:mod:`gnnscale.sampling.exclude`): the
batch's positive pairs, in both directions, are removed from its sampled blocks, so no positive carries
its own message. Validation and test edges are not in the message-passing graph at all
(:mod:`gnnscale.train.tasks.link_edges`).

**Loss.** Both losses are a cross-entropy over logits the model's pair scores ``s`` give:
``bce`` is a two-class cross-entropy over ``(0, s)`` per pair, which is exactly binary cross-entropy with
logit ``s`` (``softmax([0, s])[1] = sigmoid(s)``); ``softmax`` is the cross-entropy of each positive
(column 0) against its own ``per_source`` negatives. The loop's training accuracy is therefore the share
of pairs on the right side of 0 (bce), or of positives scored above all their negatives (softmax).

**Evaluation** (every epoch, sampled inference with the inference fanouts): the validation and test
positives this worker owns and their fixed negatives are scored in chunks of ``eval_batch_size`` pairs;
ROC-AUC and AP pool every worker's scores (gathered once), MRR and Hits@K sum each positive's rank term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.inference.link_metrics import link_score, rank_terms
from gnnscale.keys import derive_key
from gnnscale.nn.link import LinkModel
from gnnscale.nn.model_file import LinkSplitRecord
from gnnscale.nn.models import ModelConfig
from gnnscale.sampling.exclude import exclude_target_edges
from gnnscale.sampling.negatives import BatchPairs, batch_pairs
from gnnscale.train.batches import EVAL_EPOCH, epoch_batches, num_batches_for
from gnnscale.train.inputs import seeded_link_model
from gnnscale.train.steps import Batch, Evaluation, Sampled, Step
from gnnscale.train.tasks.base import TaskContext, TaskSpec, cross_entropy
from gnnscale.train.tasks.link_config import LinkConfig, is_ranking
from gnnscale.train.tasks.link_edges import LinkEdges, link_partition

# How a batch's pair scores become the loss's logits (PairTargets.form).
BINARY, RANKED, SCORES = "binary", "ranked", "scores"


@dataclass(frozen=True, slots=True)
class PairTargets:
    """A link batch's targets.

    Args:
        y: the loss's targets: int64 [pairs] labels 1/0 (``binary``), zeros [b] (``ranked``: column 0 is
            each positive), or [pairs] ones (``scores``: evaluation, unused).
        src, dst: int64 [pairs], each pair's endpoints as rows of the seeds' embeddings (the model's outputs).
        num_pos: b, the positives.
        form: ``binary``, ``ranked`` or ``scores`` (:func:`pair_logits`).
    """

    y: Tensor
    src: Tensor
    dst: Tensor
    num_pos: int
    form: str

    def moved(self, move) -> "PairTargets":
        return PairTargets(y=move(self.y), src=move(self.src), dst=move(self.dst), num_pos=self.num_pos,
                           form=self.form)


def pair_logits(scores: Tensor, num_pos: int, form: str) -> Tensor:
    """The loss's logits from the pairs' scores [pairs] (module docstring): [pairs, 2] ``(0, s)`` rows
    (binary), [b, 1 + k] with each positive in column 0 (ranked), or the scores themselves."""
    if form == BINARY:
        return torch.stack([torch.zeros_like(scores), scores], dim=1)
    if form == RANKED:
        return torch.cat([scores[:num_pos, None], scores[num_pos:].view(num_pos, -1)], dim=1)
    return scores


class LinkTask:
    """Link prediction on one worker (the :class:`~gnnscale.train.tasks.base.Task` protocol).

    Args:
        part: this worker's partition over the message-passing topology (held-out edges removed).
        edges: this worker's supervision edges.
        link: the task's settings.
        cfg: training settings (``batch_size`` positives per batch and worker, ``seed``).
        rank: this worker.
    """

    def __init__(self, part, edges: LinkEdges, link: LinkConfig, cfg, rank: int) -> None:
        self.part, self.edges, self.link, self.cfg, self.rank = part, edges, link, cfg, rank
        self.metric = link.metric

    def local_batches(self) -> int:
        return num_batches_for(self.edges.train.shape[1], self.cfg.batch_size)

    def check_num_batches(self, num_batches: int) -> str:
        local = self.edges.train.shape[1]
        if local >= num_batches:
            return ""
        return (f"part {self.rank} has {local} training edges, fewer than the {num_batches} iterations per epoch the "
                "largest part needs; raise --batch-size or use fewer parts")

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]:
        order = epoch_batches(torch.arange(self.edges.train.shape[1]), num_batches, self.cfg.seed, epoch, self.rank)
        return [Step(items=self.edges.train[:, ids], key=derive_key(self.cfg.seed, epoch, step, self.rank),
                     iteration=epoch * num_batches + step) for step, ids in enumerate(order)]

    def plan_seeds(self, step: Step, training: bool) -> BatchPairs:
        """The step's positives, then (training) their keyed negatives, and the unique endpoints."""
        return batch_pairs(step.items[0], step.items[1], self.edges.num_nodes, step.key,
                           ratio=self.link.neg_ratio if training else 0, law=self.link.neg_sampling)

    def exclude(self, sampled: Sampled, plan: BatchPairs, training: bool) -> Sampled:
        """Training: the blocks without the step's positive pairs, in either direction."""
        if not training:
            return sampled
        pos = sampled.step.items
        blocks = exclude_target_edges(sampled.blocks, pos[0], pos[1], self.edges.num_nodes)
        return Sampled(step=sampled.step, blocks=blocks, out_ids=sampled.out_ids,
                       sampled_edges=sum(b.num_edges for b in blocks))

    def targets(self, sampled: Sampled, plan: BatchPairs, training: bool) -> PairTargets:
        num_pos, num_pairs = plan.num_pos, plan.pairs.shape[1]
        src, dst = plan.local[0], plan.local[1]
        if not training:
            return PairTargets(y=torch.ones(num_pairs, dtype=torch.int64), src=src, dst=dst, num_pos=num_pos,
                               form=SCORES)
        if self.link.link_loss == "softmax":
            return PairTargets(y=torch.zeros(num_pos, dtype=torch.int64), src=src, dst=dst, num_pos=num_pos,
                               form=RANKED)
        y = torch.zeros(num_pairs, dtype=torch.int64)
        y[:num_pos] = 1
        return PairTargets(y=y, src=src, dst=dst, num_pos=num_pos, form=BINARY)

    def logits(self, model: LinkModel, outputs: Tensor, batch: Batch) -> Tensor:
        """The pairs' scores from the seeds' embeddings ``outputs``, shaped for the loss."""
        t = batch.targets
        # index_select, not h[src]: the backward of advanced indexing (index_put_ with accumulate) adds rows in
        # an order that varies between runs with 2+ CPU threads; index_select's (index_add_) does not.
        scores = model.score(outputs.index_select(0, t.src), outputs.index_select(0, t.dst))
        return pair_logits(scores, t.num_pos, t.form)

    def loss(self, logits: Tensor, batch: Batch, total: int | None) -> Tensor:
        return cross_entropy(logits, batch.y, total)

    def describe(self, comm: Comm) -> dict:
        """The edge split over every worker: its supervision edges (collective: one ``"setup"`` all-reduce)."""
        counts = torch.tensor([self.edges.train.shape[1], self.edges.val.pos.shape[1], self.edges.test.pos.shape[1]],
                              dtype=torch.int64)
        comm.all_reduce_(counts, dist.ReduceOp.SUM, "setup")  # collective: every worker's edges
        train, val, test = counts.tolist()
        return {"link_split": {"train_edges": train, "val_edges": val, "test_edges": test}}

    @torch.no_grad()
    def score(self, model: LinkModel, evaluation: Evaluation, comm: Comm, split: str) -> float:
        """The link metric of ``split`` ("val" or "test") over every worker (collective: sampling, fetching
        and the metric's reduction)."""
        pairs = self.edges.split(split)
        flat = torch.cat([pairs.pos, pairs.neg], dim=1)
        chunks = list(flat.split(self.cfg.eval_batch_size, dim=1))
        # Collective: every worker runs as many inference steps as the one with most pairs.
        num_steps = comm.all_reduce_max_int(len(chunks), "eval")
        stand_in = torch.full((2, 1), self.part.node_offset, dtype=torch.int64)
        steps = [Step(items=chunks[i] if i < len(chunks) else stand_in, real=i < len(chunks),
                      key=derive_key(self.cfg.seed, EVAL_EPOCH, i, self.rank)) for i in range(num_steps)]
        scores = [self.logits(model, outputs, batch) for batch, outputs in evaluation.outputs(model, steps)]
        s = torch.cat(scores).cpu() if scores else torch.zeros(0)  # host sync: once per split
        n = pairs.pos.shape[1]
        return reduce_metric(self.metric, s[:n], s[n:], comm)


def reduce_metric(metric: str, pos: Tensor, neg: Tensor, comm: Comm) -> float:
    """``metric`` over every worker's positive scores ``pos`` [n] and their negatives' ``neg`` [n * k] (positive
    ``i``'s at ``i * k ..``; a ranking metric's mean is over every worker's positives: ``predict`` scores its
    pairs with the same :func:`~gnnscale.inference.link_metrics.rank_terms`)."""
    if is_ranking(metric):
        terms = rank_terms(metric, pos.double().numpy(), neg.double().numpy())
        totals = torch.tensor([terms.sum(), float(terms.size)], dtype=torch.float64)
        comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: the global mean's sums
        return float(totals[0] / totals[1]) if totals[1] > 0 else math.nan
    # Collective: every worker's scores to every worker (the pooled metrics rank them all together).
    all_pos = torch.cat([t.cpu() for t in comm.all_to_allv([pos.float()] * comm.world_size, "eval")])
    all_neg = torch.cat([t.cpu() for t in comm.all_to_allv([neg.float()] * comm.world_size, "eval")])
    if all_pos.numel() == 0:
        return math.nan
    return link_score(metric, all_pos.numpy(), all_neg.numpy())


def build_link_task(ctx: TaskContext) -> LinkTask:
    """This worker's link task: its part over the message-passing topology and the supervision edges it owns.
    A worker whose split fails stops every worker with its message."""
    part, edges, error = None, None, ""
    try:
        part, edges = link_partition(ctx.part, ctx.settings, ctx.cfg.seed, ctx.partition_dir, ctx.comm.rank)
    except ValueError as err:
        if ctx.comm.world_size == 1:
            raise  # one process: the error itself, one line
        error = str(err)
    ctx.comm.agree(not error, error)
    return LinkTask(part, edges, ctx.settings, ctx.cfg, ctx.comm.rank)


def check_link_model(model: nn.Module) -> None:
    if not isinstance(model, LinkModel):
        raise TypeError(f"model: a link task trains a gnnscale.nn.link.LinkModel (an encoder and a decoder), got "
                        f"{type(model).__name__}")


def check_link_settings(link: LinkConfig, distributed: bool) -> None:
    if distributed and link.link_split is not None:
        raise ValueError("link_split: a dataset's own split trains in one process; a partition directory uses "
                         "--edge-split")


def link_model_config(model: LinkModel) -> ModelConfig:
    """The encoder's config (its ``num_classes``: the embedding width)."""
    return model.config


def embedding_width(model_options: dict, num_classes: int) -> int:
    """A link encoder's output is the node embedding, ``--hidden`` wide."""
    return model_options.get("hidden_dim", ModelConfig.__dataclass_fields__["hidden_dim"].default)


def describe_link_model(signature: dict) -> dict:
    """The link model's signature with its encoder's output width named what it is: the embedding's."""
    encoder = {("embedding_dim" if name == "num_classes" else name): value
               for name, value in signature["encoder"].items()}
    return {**signature, "encoder": encoder}


def link_model(config: ModelConfig, link: LinkConfig, seed: int) -> LinkModel:
    return seeded_link_model(config, link.decoder, seed)


LINK = TaskSpec(name="link", summary="link prediction: the encoder's output is a node embedding and a decoder "
                "scores pairs", config=LinkConfig, needs=("seeds_anywhere",), dgs=False, full_eval=False,
                model_config=link_model_config, check_model=check_link_model,
                check_settings=check_link_settings, output_width=embedding_width, build_model=link_model,
                build=build_link_task, describe_model=describe_link_model, model_file_record=LinkSplitRecord.of)
