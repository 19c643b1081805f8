"""The training loop, the same for one process and for every worker of a distributed run.

Per iteration: take the next prepared batch, forward+backward (the forward pass and the loss in the run's
precision, :mod:`gnnscale.train.precision`), all-reduce the gradients (nothing moves with one worker),
step. Batches are prepared ``cfg.prefetch`` groups ahead by the stages (:mod:`gnnscale.train.stages`) in a
background thread whose collectives (remote sampling, the feature fetch) run on a process group of their
own, so they overlap the training step and never interleave with its gradient all-reduce (or split
parallelism's shuffles). What is learned is the task's
(:mod:`gnnscale.train.tasks`: its steps, targets, loss and per-epoch score); what a worker samples, fetches
and computes is its layout's (:mod:`gnnscale.train.layouts`); a run in one process is the one-worker layout
(:mod:`gnnscale.train.layouts.single`) on a process group of its own.

Every random choice is keyed by ``(seed, epoch, step, rank)``, so a resumed run continues exactly,
whatever the thread count or prefetch depth. A ``saver`` (:class:`Saver`) checkpoints after every
epoch and, when it says so, after an iteration, with the best-validation epoch's weights
(:class:`~gnnscale.train.checkpoints.best.BestWeights`, kept after every epoch that is the best so far).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.gradients import all_reduce_gradients
from gnnscale.keys import STREAM_DROPOUT, derive_key
from gnnscale.train.checkpoints.best import BestWeights, score_keys
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import model_device
from gnnscale.train.layouts.base import add_counts
from gnnscale.train.layouts.data_parallel import worker_memory
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.precision import StepPrecision
from gnnscale.train.stages import Pipeline
from gnnscale.train.tasks.base import Task


class Saver(Protocol):
    """Checkpoints a run: after every epoch, and after an iteration when :meth:`due` says so."""

    def due(self, epoch: int, steps_done: int) -> bool: ...

    def save(self, model, optimizer, *, epoch: int, step: int, history: list[dict], worker_state: dict,
             layout_state: dict, best: dict | None, scaler_state: dict | None) -> None: ...


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam, fused into one kernel per step on the CPU and on CUDA (instead of ~5 small ops per parameter
    tensor), on the model's device: build it after the model moved there. Every trainer steps with this
    one: fused and unfused Adam round differently."""
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def progress_bar(iterable, *, enabled: bool, **kwargs):
    """tqdm over ``iterable`` when ``enabled`` and stderr is a terminal: a log file gets no bar."""
    return tqdm(iterable, disable=not enabled or not sys.stderr.isatty(), leave=False, **kwargs)


def score_columns(metric: str, val: float, test: float) -> dict:
    """An epoch's score entries: ``val_acc``/``test_acc`` for node accuracy; a link task's metric under
    ``val_score``/``test_score`` beside its name."""
    if metric == "accuracy":
        return {"val_acc": val, "test_acc": test}
    return {"metric": metric, "val_score": val, "test_score": test}


@dataclass(slots=True, kw_only=True)
class EpochSums:
    """This worker's running sums of one epoch, one entry per iteration trained so far (mutable: the
    loop adds to it; a mid-epoch checkpoint saves it and a resumed run starts from it).

    Args:
        loss_sums: float64 0-d tensors: each iteration's cross-entropy summed over this worker's seeds.
        correct: int64 0-d tensor: correct training predictions so far.
        counts: each iteration's seed count (this worker's loss terms).
        edges: sampled edges so far.
        comm: each iteration's communication on this worker (loader and training groups together).
    """

    loss_sums: list[Tensor] = field(default_factory=list)
    correct: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.long))
    counts: list[int] = field(default_factory=list)
    edges: int = 0
    comm: list[dict] = field(default_factory=list)

    def to_state(self) -> dict:
        """Tensors (on the CPU, wherever the sums live), numbers and dicts only (``torch.load(weights_only=True)``
        reads them back)."""
        losses = torch.stack(self.loss_sums) if self.loss_sums else torch.zeros(0, dtype=torch.float64)
        # Host sync on a GPU: only at a mid-epoch checkpoint.
        return {"loss_sums": losses.cpu(), "correct": self.correct.to("cpu", copy=True), "counts": list(self.counts),
                "edges": self.edges, "comm": list(self.comm)}

    def to(self, device: torch.device) -> "EpochSums":
        """These sums with their tensors on ``device`` (where the step accumulates them); the losses move as
        one tensor (one copy, not one per iteration)."""
        losses = list(torch.stack(self.loss_sums).to(device).unbind()) if self.loss_sums else []
        return EpochSums(loss_sums=losses, correct=self.correct.to(device),
                         counts=list(self.counts), edges=self.edges, comm=list(self.comm))

    @classmethod
    def from_state(cls, state: dict) -> "EpochSums":
        return cls(loss_sums=list(state["loss_sums"].unbind()), correct=state["correct"].clone(),
                   counts=list(state["counts"]), edges=int(state["edges"]), comm=list(state["comm"]))


def train_epoch(model, optimizer, pipeline: Pipeline, comm: Comm, cfg: TrainConfig, epoch: int, num_batches: int,
                timer: PhaseTimer, progress: bool, precision: StepPrecision, *, first_step: int = 0,
                sums: EpochSums | None = None, after_step: Callable[[int, EpochSums], None] | None = None,
                grad_comm: Comm | None = None) -> dict:
    """Iterations ``first_step .. num_batches - 1`` of an epoch (the same on every worker), adding to
    ``sums`` (a resumed epoch's sums so far; default: none). ``after_step(steps_done, sums)`` runs after
    every iteration (the mid-epoch checkpoints). Gradients are reduced on ``grad_comm`` (default ``comm``;
    its rounds are counted in ``comm``'s accounting). The step runs on the model's device, in ``precision``
    (autocast for the forward pass and the loss; the scaler, if any, around backward and step). Returns this
    worker's sums (per iteration too), the communication counted per iteration (loader and training groups
    together) and the layout's metrics of the epoch (collective: :meth:`finish_epoch`)."""
    task, layout, inputs = pipeline.task, pipeline.layout, pipeline.inputs
    model.train()
    device = model_device(model)
    layout.start_epoch()
    steps = task.plan_epoch(epoch, num_batches)[first_step:]
    # The sums stay on the device during the epoch (no host sync per iteration) and come back once, below.
    sums = (sums if sums is not None else EpochSums()).to(device)
    comm.stats.snapshot_and_reset()
    batches = pipeline.batches(steps, timer, training=True)
    bar = progress_bar(batches, enabled=progress, initial=first_step, total=num_batches, desc=f"epoch {epoch}")
    for step, (batch, model_input) in enumerate(bar, start=first_step):
        total = layout.loss_total(batch)
        with timer.phase("forward_backward"):  # split parallelism: its shuffles included
            # Dropout masks keyed by (seed, epoch, step, rank), as the single-machine trainer's (rank 0 there).
            dropout_key = derive_key(cfg.seed, epoch, step, comm.rank, STREAM_DROPOUT)
            with precision.autocast():
                outputs = inputs.logits(model, model_input, dropout_key=dropout_key)
                logits = task.logits(model, outputs, batch)
                loss = task.loss(logits, batch, total)
            optimizer.zero_grad(set_to_none=True)
            precision.backward(loss)
        with timer.phase("grad_sync"):
            # With a scaler the gradients are still scaled: every worker unscales the same sums in its step.
            all_reduce_gradients(model, comm if grad_comm is None else grad_comm, divisor=layout.gradient_divisor)
        precision.step(optimizer)
        layout.after_step(model, epoch * num_batches + step + 1)  # DGS: the model to its explainer, every T
        sums.comm.append(add_counts(batch.comm, comm.stats.snapshot_and_reset()))
        sums.edges += batch.sampled_edges
        # Accumulate as tensors: no .item() (a sync point on GPU) inside the loop. The loss summed over this
        # worker's terms: the mean times their count, or (split) the share times the mini-batch's count.
        sums.loss_sums.append(loss.detach().double() * (batch.y.numel() if total is None else total))
        sums.correct += (logits.detach().argmax(1) == batch.y).sum()
        sums.counts.append(batch.y.numel())
        if after_step is not None:
            after_step(step + 1, sums)
    extra = layout.finish_epoch(comm)
    if "memory" not in extra:  # every layout reports its largest worker's peak memory; matrix ones add bytes held
        extra["memory"] = worker_memory(None, comm)
    host = sums.to(torch.device("cpu"))  # host sync on a GPU: once per epoch
    return {"loss_sums": host.loss_sums, "correct": host.correct, "counts": host.counts, "edges": host.edges,
            "comm": host.comm, "layout": extra, "bulk": layout.bulk}


def epoch_metrics(epoch: int, sums: dict, timer: PhaseTimer, cpu_s: float, scores: dict, comm: Comm) -> dict:
    """Global loss (of the epoch and of every iteration) and accuracy (one all-reduce of this worker's
    sums), this worker's time split and communication per iteration, and the layout's metrics."""
    n = len(sums["counts"])
    # The epoch's loss summed in iteration order, as the single-machine trainer does (same rounding).
    epoch_totals = torch.stack([sum(sums["loss_sums"]), sums["correct"].double(),
                                torch.tensor(float(sum(sums["counts"])))])
    local = torch.cat([epoch_totals, torch.stack(sums["loss_sums"]), torch.tensor(sums["counts"], dtype=torch.float64)])
    comm.all_reduce_(local, dist.ReduceOp.SUM, "eval")  # collective: epoch and iteration totals over workers
    totals, iteration_losses = local[:3], (local[3:3 + n] / local[3 + n:]).tolist()
    per_iter = sums["comm"]
    comm_mean = {c: {k: sum(it[c][k] for it in per_iter) / len(per_iter) for k in per_iter[0][c]}
                 for c in per_iter[0]}
    num_bulks = -(-len(per_iter) // sums["bulk"])
    per_bulk = {c: {k: v * len(per_iter) / num_bulks for k, v in counts.items()} for c, counts in comm_mean.items()}
    seconds = timer.seconds
    return {
        "epoch": epoch, "sample_s": seconds.get("sample", 0.0), "split_s": seconds.get("split", 0.0),
        "fetch_s": seconds.get("fetch", 0.0),
        # The loading stage's share of sending batches to the device (pinning, queueing the copies).
        "copy_s": seconds.get("copy", 0.0), "forward_backward_s": seconds.get("forward_backward", 0.0),
        # Inside forward_backward: the cooperative layers' collectives (split parallelism).
        "shuffle_s": comm_mean["shuffle"]["seconds"] * len(per_iter),
        "grad_sync_s": seconds.get("grad_sync", 0.0), "metrics_s": seconds.get("metrics", 0.0),
        "checkpoint_s": seconds.get("checkpoint", 0.0),
        "wait_s": seconds.get("wait", 0.0),
        "epoch_s": seconds["epoch"],
        # This process's CPU over the epoch's training, every thread (trainer, loading stage, DGS explainer,
        # the backend's communication threads): what the epoch costs where cores are the limit.
        "cpu_s": cpu_s,
        "loss": float(totals[0] / totals[2]), "train_acc": float(totals[1] / totals[2]),
        "iteration_losses": iteration_losses,
        **scores, "num_batches": len(per_iter), "sampled_edges": sums["edges"],
        "sampled_edges_per_s": sums["edges"] / seconds["sample"] if seconds.get("sample") else 0.0,
        "rounds_per_iteration": {c: v["rounds"] for c, v in comm_mean.items()},
        "bytes_per_iteration": {c: v["bytes_sent"] + v["bytes_received"] for c, v in comm_mean.items()},
        "comm_per_iteration": comm_mean,
        # Matrix sampling: one sample_many per group of `bulk` batches (its rounds land on the group's first).
        "bulk": sums["bulk"], "num_bulks": num_bulks,
        "seconds_per_bulk": seconds.get("sample", 0.0) / num_bulks,
        "rounds_per_bulk": {c: v["rounds"] for c, v in per_bulk.items()},
        "bytes_per_bulk": {c: v["bytes_sent"] + v["bytes_received"] for c, v in per_bulk.items()},
        **sums["layout"],
    }


def agreed_num_batches(task: Task, comm: Comm) -> int:
    """Iterations per epoch, the same on every worker: enough for the worker that needs most."""
    # Collective: every worker must run the same number of iterations.
    num_batches = comm.all_reduce_max_int(task.local_batches(), "setup")
    error = task.check_num_batches(num_batches)
    comm.agree(not error, error)
    return num_batches


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """Where training starts: a fresh run, or a checkpoint's epoch and step (with this worker's sums of
    that epoch's first ``step`` iterations, None at an epoch boundary), its finished epochs and the best of
    them (``best``, which the loop keeps up to date: mutable)."""

    epoch: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)
    sums: EpochSums | None = None
    layout_state: dict = field(default_factory=dict)
    best: BestWeights = field(default_factory=BestWeights)


class TrainingDiverged(ValueError):
    """The loss (or the parameters) became NaN or infinite. Every worker finds it at the same point (the
    loss is all-reduced, the parameters are the same everywhere), so every worker stops with this message,
    before a checkpoint of the broken state is written."""


def check_finite_epoch(m: dict) -> None:
    bad = [i for i, loss in enumerate(m["iteration_losses"]) if not math.isfinite(loss)]
    if bad:
        raise TrainingDiverged(
            f"loss: became {m['iteration_losses'][bad[0]]} at epoch {m['epoch']} iteration {bad[0]} (and in "
            f"{len(bad) - 1} more iterations of the epoch); training stopped, the last checkpoint (if any) is the "
            "epoch before. Lower --lr, or check the features and labels")


def check_finite_parameters(model: torch.nn.Module, epoch: int, steps_done: int) -> None:
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):  # host sync: only before a mid-epoch checkpoint
            raise TrainingDiverged(f"loss: parameter {name} became NaN or infinite by epoch {epoch} iteration "
                                   f"{steps_done}; training stopped before checkpointing it. Lower --lr, or check "
                                   "the features and labels")


def train_epochs(model, optimizer, pipeline: Pipeline, comm: Comm, cfg: TrainConfig, num_batches: int,
                 start: Start, saver: Saver | None, lead: bool, precision: StepPrecision,
                 on_epoch_end: Callable[[list[dict]], None] | None = None, grad_comm: Comm | None = None) -> list[dict]:
    """Epochs ``start.epoch .. cfg.epochs - 1`` in ``precision``, each scored by the task on its validation and
    test splits (the forward passes under the same autocast);
    ``start.best`` keeps the weights of the best one; ``saver`` saves after every epoch and, when due, after an
    iteration; ``on_epoch_end(history)`` runs after every epoch (the metrics file). Returns the history, the
    checkpoint's epochs first. A loss that becomes NaN or infinite stops the run (:class:`TrainingDiverged`)
    before the broken state is saved."""
    history, best = list(start.history), start.best
    task, layout = pipeline.task, pipeline.layout
    for epoch in range(start.epoch, cfg.epochs):
        timer = PhaseTimer()
        resumed = epoch == start.epoch and start.step > 0

        def after_step(steps_done: int, sums: EpochSums, epoch=epoch, timer=timer) -> None:
            if saver is not None and saver.due(epoch, steps_done):
                check_finite_parameters(model, epoch, steps_done)
                with timer.phase("checkpoint"):
                    saver.save(model, optimizer, epoch=epoch, step=steps_done, history=history,
                               worker_state=sums.to_state(),
                               layout_state=layout.checkpoint_state(epoch * num_batches + steps_done),
                               best=best.checkpoint_state(epoch, steps_done), scaler_state=precision.state_dict())

        cpu_start = time.process_time()
        with timer.phase("epoch"):
            sums = train_epoch(model, optimizer, pipeline, comm, cfg, epoch, num_batches, timer, lead, precision,
                               first_step=start.step if resumed else 0, sums=start.sums if resumed else None,
                               after_step=after_step, grad_comm=grad_comm)
        cpu_s = time.process_time() - cpu_start
        val = test = float("nan")
        if cfg.evaluate:
            with precision.autocast():
                val = task.score(model, pipeline, comm, "val")
                test = task.score(model, pipeline, comm, "test")
        history.append(epoch_metrics(epoch, sums, timer, cpu_s, score_columns(task.metric, val, test), comm))
        if lead:
            print_epoch(history[-1])
        check_finite_epoch(history[-1])
        if cfg.evaluate:  # without validation the best epoch is the last: nothing to keep
            best.update(model, history)
        if saver is not None:
            saver.save(model, optimizer, epoch=epoch + 1, step=0, history=history, worker_state={},
                       layout_state=layout.checkpoint_state((epoch + 1) * num_batches),
                       best=best.checkpoint_state(epoch + 1, 0), scaler_state=precision.state_dict())
        if on_epoch_end is not None:
            on_epoch_end(history)
    return history


def print_epoch(m: dict) -> None:
    """One line per epoch: loss and accuracy, where the time went, and what a distributed layout moved
    (rounds per iteration; only where there were any)."""
    parts = [f"sample {m['sample_s']:.1f}"]
    if m["split_s"]:
        parts.append(f"split {m['split_s']:.1f}")
    parts.append(f"fetch {m['fetch_s']:.1f}")
    fwd = f"fwd+bwd {m['forward_backward_s']:.1f}"
    parts.append(fwd + (f" of which shuffle {m['shuffle_s']:.1f}" if m["shuffle_s"] else ""))
    rounds = m["rounds_per_iteration"]
    if rounds["grad"]:
        parts.append(f"grad sync {m['grad_sync_s']:.1f}")
    parts.append(f"wait {m['wait_s']:.1f}")
    speed = f"  {edge_rate(m['sampled_edges_per_s'])} edges/s"
    # An epoch of fewer batches than --bulk samples them in one bulk of that many, not of --bulk.
    shown = min(m["bulk"], m["num_batches"])
    if shown > 1:
        size = f"{shown}" if m["num_batches"] % shown == 0 else f"up to {shown}"
        speed += f", {m['seconds_per_bulk'] * 1e3:.1f} ms per bulk of {size}"
    moved = ""
    if any(rounds[c] for c in ("sample", "feature", "shuffle")):
        moved = (f"  rounds/iter sample {rounds['sample']:g} + feature {rounds['feature']:g} + shuffle "
                 f"{rounds['shuffle']:g}")
    edges = m.get("edge_metrics", {})
    redundancy = f"  redundancy {edges['redundancy']:.1%}" if edges.get("iterations") and rounds["grad"] else ""
    val, test = score_keys(m)
    name = f"{m['metric']} " if "metric" in m else ""
    print(f"epoch {m['epoch']:3d}  loss {m['loss']:.4f}  train {m['train_acc']:.4f}  val {name}{m[val]:.4f}  "
          f"test {name}{m[test]:.4f}  {m['epoch_s']:.1f}s ({', '.join(parts)}){speed}{moved}{redundancy}"
          f"{dgs_summary(m)}", flush=True)


def edge_rate(per_s: float) -> str:
    """Sampled edges per second in a unit that shows it: the first epoch's sampling includes loading the
    sampler's kernels from numba's cache (0.7 s on Cora, against 4,472 edges in its one batch), so its
    rate can be thousands, not millions, which printed as 0.0M."""
    if per_s >= 1e6:
        return f"{per_s / 1e6:.1f}M"
    if per_s >= 1e3:
        return f"{per_s / 1e3:.1f}k"
    return f"{per_s:.0f}"


def dgs_summary(m: dict) -> str:
    """The epoch's DGS figures for the per-epoch line ("" without --dgs)."""
    d = m.get("dgs")
    if d is None:
        return ""
    stale = "plain" if d["staleness_mean"] is None else f"masks {d['staleness_mean']:.0f} it. old"
    return (f"  dgs: feature {d['feature_bytes'] / 1e6:.2f} MB, {d['remote_nodes']} remote nodes, "
            f"{d['dims_sent_mean']:.0f} dims, explain {d['explanation_cpu_s']:.2f}s cpu "
            f"(waited {d['explanation_wait_s']:.2f}s), {stale}")
