"""Link prediction on the one training loop: a layout that turns positive edges into batches, the
model's calling convention for pairs, and the per-epoch link metric.

**A batch.** ``batch_size`` positive training edges of this worker (a permutation of them fixed by
``(seed, epoch, rank)``, as node tasks permute their seeds) and ``neg_ratio`` keyed negatives per
positive (:func:`gnnscale.sampling.negatives.negative_pairs` under the step's sampling key). The seed set
is the unique endpoints of all those pairs: one sampler pass (the layout's own: fused in one process,
hybrid or vanilla distributed) draws every embedding the batch needs.

**Target edges** follow DGL's ``exclude="reverse_id"`` rule (:mod:`gnnscale.sampling.exclude`): the
batch's positive pairs, in both directions, are removed from its sampled blocks, so no positive carries
its own message. Validation and test edges are not in the message-passing graph at all.

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
from dataclasses import asdict, replace

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.inference.link_metrics import link_score, positive_ranks
from gnnscale.keys import derive_key
from gnnscale.nn.link import LinkModel
from gnnscale.sampling.exclude import exclude_target_edges
from gnnscale.sampling.negatives import negative_pairs
from gnnscale.train.batches import EVAL_EPOCH, epoch_batches
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import model_device
from gnnscale.train.layouts.base import LayoutContext, add_counts
from gnnscale.train.layouts.data_parallel import DataParallel, build_data_parallel
from gnnscale.train.layouts.single import one_worker
from gnnscale.train.link_config import LinkConfig, is_ranking
from gnnscale.train.link_data import LinkEdges, link_partition
from gnnscale.train.link_inputs import BINARY, RANKED, SCORES, LinkBatch, LinkInputs, LinkStep
from gnnscale.train.loop import prepared_batches
from gnnscale.train.metrics import PhaseTimer

class LinkLayout:
    """A data-parallel layout (one process, hybrid or vanilla) training on edges instead of nodes.

    Args:
        inner: the layout over the message-passing topology; its samplers and feature store are used.
        edges: this worker's supervision edges.
        link: the task's settings.
        cfg: training settings (``batch_size`` positives per batch and worker, ``seed``).
    """

    def __init__(self, inner: DataParallel, edges: LinkEdges, link: LinkConfig, cfg: TrainConfig) -> None:
        self.inner, self.edges, self.link, self.cfg = inner, edges, link, cfg
        self.rank = inner.rank
        self.metric = link.metric

    @property
    def bulk(self) -> int:
        return self.inner.bulk

    @property
    def gradient_divisor(self) -> int:
        return self.inner.gradient_divisor

    def local_batches(self) -> int:
        return max(1, -(-self.edges.train.shape[1] // self.cfg.batch_size))

    def check_num_batches(self, num_batches: int) -> str:
        local = self.edges.train.shape[1]
        if local >= num_batches:
            return ""
        return (f"part {self.rank} has {local} training edges, fewer than the {num_batches} iterations per epoch the "
                "largest part needs; raise --batch-size or use fewer parts")

    def plan_epoch(self, epoch: int, num_batches: int) -> list[LinkStep]:
        order = epoch_batches(torch.arange(self.edges.train.shape[1]), num_batches, self.cfg.seed, epoch, self.rank)
        return [LinkStep(pos=self.edges.train[:, ids], key=derive_key(self.cfg.seed, epoch, step, self.rank))
                for step, ids in enumerate(order)]

    def batch_pairs(self, step: LinkStep, training: bool) -> tuple[Tensor, Tensor]:
        """(src, dst) int64 [pairs]: the step's positives, then (training) their keyed negatives."""
        src, dst = step.pos[0], step.pos[1]
        if not training:
            return src, dst
        neg_src, neg_dst = negative_pairs(src, self.edges.num_nodes, self.link.neg_ratio, step.key,
                                          self.link.neg_sampling)
        return torch.cat([src, neg_src]), torch.cat([dst, neg_dst])

    def prepare(self, steps: list[LinkStep], timer: PhaseTimer, *, training: bool = True) -> list[LinkBatch]:
        """Draw the negatives, sample the unique endpoints (one ``sample_many`` for the group), remove the
        target edges (training) and fetch the features."""
        sampler = self.inner.sampler if training else self.inner.eval_sampler
        with timer.phase("sample"):
            pairs = [self.batch_pairs(s, training) for s in steps]
            seeds = [torch.cat(p).unique() for p in pairs]
            sampled = sampler.sample_many(seeds, [s.key for s in steps])
            if training:
                sampled = [exclude_target_edges(blocks, s.pos[0], s.pos[1], self.edges.num_nodes)
                           for blocks, s in zip(sampled, steps)]
        data_comm = self.inner.data_comm
        comm = data_comm.stats.snapshot_and_reset()  # a bulk's sampling rounds go with its first batch
        out = []
        for step, (src, dst), nodes, blocks in zip(steps, pairs, seeds, sampled):
            with timer.phase("fetch"):
                x = self.inner.store.gather(blocks[0].src_ids)
            counts, comm = add_counts(comm, data_comm.stats.snapshot_and_reset()), None
            b = step.pos.shape[1]
            form, y = self.targets(b, src.shape[0], training)
            out.append(LinkBatch(step=step, blocks=blocks, x=x, y=y, sampled_edges=sum(bl.num_edges for bl in blocks),
                                 comm=counts, src=torch.searchsorted(nodes, src), dst=torch.searchsorted(nodes, dst),
                                 num_pos=b, form=form))
        return out

    def targets(self, num_pos: int, num_pairs: int, training: bool) -> tuple[str, Tensor]:
        if not training:
            return SCORES, torch.ones(num_pairs, dtype=torch.int64)
        if self.link.link_loss == "softmax":
            return RANKED, torch.zeros(num_pos, dtype=torch.int64)
        y = torch.zeros(num_pairs, dtype=torch.int64)
        y[:num_pos] = 1
        return BINARY, y

    def loss(self, logits: Tensor, batch: LinkBatch) -> Tensor:
        """Mean cross-entropy over this worker's loss terms (module docstring: bce or softmax)."""
        return F.cross_entropy(logits, batch.y)

    def loss_sum(self, loss: Tensor, batch: LinkBatch) -> Tensor:
        return loss.detach().double() * batch.y.numel()

    def after_step(self, model: nn.Module, iterations_done: int) -> None:
        """Nothing to do after a step."""

    def finish_epoch(self, comm: Comm) -> dict:
        return self.inner.finish_epoch(comm)

    def checkpoint_state(self, iterations_done: int) -> dict:
        return {}

    def load_checkpoint_state(self, state: dict, iterations_done: int, timer: PhaseTimer) -> None:
        """Nothing to restore: the layout's state is the model's."""

    def close(self) -> None:
        self.inner.close()

    @torch.no_grad()
    def score(self, model: nn.Module, inputs: LinkInputs, comm: Comm, split: str, cfg: TrainConfig) -> float:
        """The link metric of ``split`` ("val" or "test") over every worker (collective: sampling, fetching
        and the metric's reduction)."""
        model.eval()
        pairs = self.edges.split(split)
        flat = torch.cat([pairs.pos, pairs.neg], dim=1)
        chunks = list(flat.split(cfg.eval_batch_size, dim=1))
        # Collective: every worker runs as many inference steps as the one with most pairs.
        num_steps = comm.all_reduce_max_int(len(chunks), "eval")
        stand_in = torch.full((2, 1), self.inner.part.node_offset, dtype=torch.int64)
        steps = [LinkStep(pos=chunks[i] if i < len(chunks) else stand_in, real=i < len(chunks),
                          key=derive_key(cfg.seed, EVAL_EPOCH, i, self.rank)) for i in range(num_steps)]
        batches = prepared_batches(self, inputs, steps, cfg, PhaseTimer(), training=False, device=model_device(model))
        scores = [inputs.logits(model, converted, dropout_key=None) for batch, converted in batches if batch.step.real]
        s = torch.cat(scores).cpu() if scores else torch.zeros(0)  # host sync: once per split
        n = pairs.pos.shape[1]
        return reduce_metric(self.metric, s[:n], s[n:], pairs.per_positive, comm)


def reduce_metric(metric: str, pos: Tensor, neg: Tensor, per_positive: int, comm: Comm) -> float:
    """``metric`` over every worker's positive and negative scores."""
    if is_ranking(metric):
        ranks = positive_ranks(pos.double().numpy(), neg.double().numpy().reshape(pos.shape[0], per_positive))
        terms = 1.0 / ranks if metric == "mrr" else (ranks <= int(metric.split("@")[1])).astype(np.float64)
        totals = torch.tensor([terms.sum(), float(terms.size)], dtype=torch.float64)
        comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: the global mean's sums
        return float(totals[0] / totals[1]) if totals[1] > 0 else math.nan
    # Collective: every worker's scores to every worker (the pooled metrics rank them all together).
    all_pos = torch.cat([t.cpu() for t in comm.all_to_allv([pos.float()] * comm.world_size, "eval")])
    all_neg = torch.cat([t.cpu() for t in comm.all_to_allv([neg.float()] * comm.world_size, "eval")])
    if all_pos.numel() == 0:
        return math.nan
    return link_score(metric, all_pos.numpy(), all_neg.numpy())


# The layouts a link task trains with: data parallelism over whole or own rows. Split parallelism, the
# matrix layouts and DGS compute per-node work that a pair batch would have to be rebuilt for.
LINK_LAYOUTS = ("hybrid", "vanilla")


def check_link_launch(link: LinkConfig | None, model: nn.Module, outputs, *, layout: str | None = None,
                      dgs: bool = False) -> None:
    """A link task's one-line refusals before any work: its model, ``--eval full`` (which scores nodes) and
    the layouts it does not run on (``layout`` None: one process)."""
    if link is None:
        if isinstance(model, LinkModel):
            raise ValueError("task: a LinkModel trains a link task; pass task=LinkConfig() (--task link)")
        return
    if not isinstance(model, LinkModel):
        raise TypeError(f"model: a link task trains a gnnscale.nn.link.LinkModel (an encoder and a decoder), got "
                        f"{type(model).__name__}")
    if layout is not None:
        check_link_layout(layout, dgs=dgs)
    if layout is not None and link.link_split is not None:
        raise ValueError("link_split: a dataset's own split trains in one process; a partition directory uses "
                         "--edge-split")
    if outputs.full_eval is not None:
        raise ValueError("full_eval: --eval full scores nodes; a link task is evaluated by --metric every epoch")


def check_link_layout(layout: str, *, dgs: bool) -> None:
    """The distributed layouts a link task runs on (:data:`LINK_LAYOUTS`), without DGS."""
    if layout not in LINK_LAYOUTS:
        raise ValueError(f"task: --task link trains with --layout {' or '.join(LINK_LAYOUTS)}, got --layout {layout}")
    if dgs:
        raise ValueError("task: --task link trains without --dgs")


def task_signature(model_signature: dict, link: LinkConfig | None) -> dict:
    """The model's checkpoint signature with the link task's settings (each changes the numbers)."""
    if link is None:
        return model_signature
    return {**model_signature, "link": asdict(link)}


def link_header(link: LinkConfig | None) -> dict:
    """What the metrics file says of a link task (nothing for a node task)."""
    return {} if link is None else {"task": "link", "link": asdict(link)}


def inner_layout(ctx: LayoutContext) -> DataParallel:
    """The data-parallel layout a link layout samples and fetches through: one process's, or a hybrid or
    vanilla worker's whose samplers take seeds owned anywhere (a pair's endpoints and negatives)."""
    if ctx.partition_dir is None:
        return one_worker(ctx.part, ctx.model, ctx.cfg, ctx.loader, ctx.device)
    return build_data_parallel(ctx.part, ctx.cfg, ctx.loader, cache_fraction=ctx.options.settings.cache_fraction,
                               device=ctx.device, any_seeds=True)


def build_link_layout(ctx: LayoutContext, link: LinkConfig) -> LinkLayout:
    """This worker's link layout: its part over the message-passing topology, the data-parallel layout of
    it, and the supervision edges it owns. A worker whose split fails stops every worker with its message."""
    part, edges, error = None, None, ""
    try:
        part, edges = link_partition(ctx.part, link, ctx.cfg.seed, ctx.partition_dir, ctx.comm.rank)
    except ValueError as err:
        if ctx.comm.world_size == 1:
            raise  # one process: the error itself, one line
        error = str(err)
    ctx.comm.agree(not error, error)
    return LinkLayout(inner_layout(replace(ctx, part=part)), edges, link, ctx.cfg)
