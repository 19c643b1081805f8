"""Distributed training over a partition directory, one worker per part (torchrun).

The loop is the same for every layout (:mod:`gnnscale.train.layouts` says what each worker of each
registered layout samples, fetches and computes): per
iteration, take the next prepared batch, forward+backward, all-reduce the gradients, step. Batches
are prepared ``--prefetch`` iterations ahead by a background stage whose collectives (remote
sampling, the feature fetch) run on a process group of their own, so they overlap the training step
and never interleave with its gradient all-reduce (or split parallelism's shuffles).

``hybrid`` and ``vanilla`` give identical blocks for the same key (counter-based randomness), so they
train identically: only the communication differs. With one worker this is exactly the
single-machine trainer. ``split`` trains, on P workers, the single-machine trainer's mini-batches of
``P x batch_size`` seeds, each vertex computed by one worker.

With ``checkpoint``, rank 0 saves the run after every epoch (and every ``checkpoint_every``
iterations); a resumed run continues at the saved epoch and step (:mod:`gnnscale.train.dist_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_from_env, rank_from_env, shutdown, world_size_from_env
from gnnscale.distributed.gradients import all_reduce_gradients
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition.directory import LocalPartition, load_partition
from gnnscale.sampling import derive_key, set_sampler_threads
from gnnscale.sampling.keys import STREAM_DROPOUT, STREAM_INIT
from gnnscale.train.checkpoint import save_model
from gnnscale.train.checks import LaunchError, check_partition_launch, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.dist_checkpoint import (Checkpointer, RunIdentity, check_checkpoint_at_launch, receive_checkpoint,
                                            run_identity, same_partition)
from gnnscale.train.layouts import (Layout, LayoutContext, LayoutOptions, LayoutSpec, Step, build_layout,
                                   check_layout_options)
from gnnscale.train.layouts.base import add_counts
from gnnscale.train.metrics import PhaseTimer, write_json_atomic
from gnnscale.train.prefetch import stream_in_groups
from gnnscale.train.run import TrainReport, build_optimizer, summarize


def load_local_partition(partition_dir: str | Path, view: str, comm: Comm) -> LocalPartition:
    """Load this worker's part in the layout's ``view`` (the whole topology, or its part's in-edges);
    if any worker fails (missing or corrupt file, wrong worker count), every worker raises with that
    worker's message instead of waiting forever for it."""
    part, error = None, ""
    try:
        part = load_partition(partition_dir, comm.rank, view)
        if part.num_parts != comm.world_size:
            raise ValueError(f"partitions: {partition_dir} has {part.num_parts} parts but {comm.world_size} "
                             f"workers were launched; use --nproc-per-node {part.num_parts}")
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)
    return part


def prepared_batches(layout: Layout, steps: list[Step], cfg: TrainConfig, timer: PhaseTimer, *,
                     training: bool = True):
    """The layout's batches for ``steps``, prepared ``cfg.prefetch`` groups ahead in the background
    stage (its collectives on the loader's own process group). ``timer`` gets the stage's busy time
    (``sample``, ``fetch``) and the training thread's ``wait``."""
    loader = PhaseTimer()  # the stage's thread writes only this one; merged at the end
    yield from stream_in_groups(lambda items: layout.prepare(steps[items.start:items.stop], loader,
                                                             training=training),
                                len(steps), layout.bulk, cfg.prefetch, wait_seconds=lambda s: timer.add("wait", s))
    timer.merge(loader)


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
        """Tensors, numbers and dicts only (``torch.load(weights_only=True)`` reads them back)."""
        losses = torch.stack(self.loss_sums) if self.loss_sums else torch.zeros(0, dtype=torch.float64)
        return {"loss_sums": losses, "correct": self.correct.clone(), "counts": list(self.counts),
                "edges": self.edges, "comm": list(self.comm)}

    @classmethod
    def from_state(cls, state: dict) -> "EpochSums":
        return cls(loss_sums=list(state["loss_sums"].unbind()), correct=state["correct"].clone(),
                   counts=list(state["counts"]), edges=int(state["edges"]), comm=list(state["comm"]))


def train_epoch(model, optimizer, layout: Layout, comm: Comm, cfg: TrainConfig, epoch: int,
                num_batches: int, timer: PhaseTimer, progress: bool, *, first_step: int = 0,
                sums: EpochSums | None = None, after_step: Callable[[int, EpochSums], None] | None = None) -> dict:
    """Iterations ``first_step .. num_batches - 1`` of an epoch (the same on every worker), adding to
    ``sums`` (a resumed epoch's sums so far; default: none). ``after_step(steps_done, sums)`` runs after
    every iteration (the mid-epoch checkpoints). Returns this worker's sums (per iteration too), the
    communication counted per iteration (loader and training groups together) and the layout's metrics
    of the epoch (collective: :meth:`finish_epoch`)."""
    model.train()
    steps = layout.plan_epoch(epoch, num_batches)[first_step:]
    sums = sums if sums is not None else EpochSums()
    comm.stats.snapshot_and_reset()
    batches = prepared_batches(layout, steps, cfg, timer)
    bar = tqdm(batches, initial=first_step, total=num_batches, desc=f"epoch {epoch}", leave=False,
               disable=not progress)
    for step, batch in enumerate(bar, start=first_step):
        with timer.phase("forward_backward"):  # split parallelism: its shuffles included
            # Dropout masks keyed by (seed, epoch, step, rank), as the single-machine trainer's (rank 0 there).
            dropout_key = derive_key(cfg.seed, epoch, step, comm.rank, STREAM_DROPOUT)
            logits = model(batch.blocks, batch.x, dropout_key=dropout_key)
            loss = layout.loss(logits, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with timer.phase("grad_sync"):
            all_reduce_gradients(model, comm, divisor=layout.gradient_divisor)
        optimizer.step()
        layout.after_step(model, epoch * num_batches + step + 1)  # DGS: the model to its explainer, every T
        sums.comm.append(add_counts(batch.comm, comm.stats.snapshot_and_reset()))
        sums.edges += batch.sampled_edges
        # Accumulate as tensors: no .item() (a sync point on GPU) inside the loop.
        sums.loss_sums.append(layout.loss_sum(loss, batch))
        sums.correct += (logits.detach().argmax(1) == batch.y).sum()
        sums.counts.append(batch.y.numel())
        if after_step is not None:
            after_step(step + 1, sums)
    extra = layout.finish_epoch(comm)
    return {"loss_sums": sums.loss_sums, "correct": sums.correct, "counts": sums.counts, "edges": sums.edges,
            "comm": sums.comm, "layout": extra, "bulk": layout.bulk}


@torch.no_grad()
def evaluate(model, layout: Layout, comm: Comm, node_ids, cfg: TrainConfig) -> float:
    """Global accuracy over every worker's ``node_ids`` with sampled inference. Sampling and fetching
    are collective, so every worker runs the same number of steps (agreed on ``comm``)."""
    model.eval()
    # Collective: the largest number of inference steps any worker needs.
    num_steps = comm.all_reduce_max_int(layout.eval_steps_needed(node_ids, cfg.eval_batch_size), "eval")
    steps = layout.plan_eval(node_ids, cfg.eval_batch_size, num_steps)
    correct = 0
    for batch in prepared_batches(layout, steps, cfg, PhaseTimer(), training=False):
        if batch.step.real:
            correct += int((model(batch.blocks, batch.x).argmax(1) == batch.y).sum())
    totals = torch.tensor([correct, node_ids.shape[0]], dtype=torch.float64)
    comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: global counts
    return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")


def epoch_metrics(epoch: int, sums: dict, timer: PhaseTimer, val_acc: float, test_acc: float, comm: Comm) -> dict:
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
        "fetch_s": seconds.get("fetch", 0.0), "forward_backward_s": seconds.get("forward_backward", 0.0),
        # Inside forward_backward: the cooperative layers' collectives (split parallelism).
        "shuffle_s": comm_mean["shuffle"]["seconds"] * len(per_iter),
        "grad_sync_s": seconds.get("grad_sync", 0.0), "metrics_s": seconds.get("metrics", 0.0),
        "checkpoint_s": seconds.get("checkpoint", 0.0),
        "wait_s": seconds.get("wait", 0.0),
        "epoch_s": seconds["epoch"], "loss": float(totals[0] / totals[2]), "train_acc": float(totals[1] / totals[2]),
        "iteration_losses": iteration_losses,
        "val_acc": val_acc, "test_acc": test_acc, "num_batches": len(per_iter), "sampled_edges": sums["edges"],
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


def agreed_num_batches(layout: Layout, comm: Comm) -> int:
    """Iterations per epoch, the same on every worker: enough for the worker that needs most."""
    # Collective: every worker must run the same number of iterations.
    num_batches = comm.all_reduce_max_int(layout.local_batches(), "setup")
    error = layout.check_num_batches(num_batches)
    comm.agree(not error, error)
    return num_batches


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutputs:
    """Where a distributed run writes (rank 0) and what it resumes.

    Args:
        metrics_out: the metrics JSON.
        model_out: the trained model's ``state_dict``.
        checkpoint: saved after every epoch (:mod:`gnnscale.train.dist_checkpoint`).
        resume: continue the run saved in ``checkpoint`` (rank 0 reads it and sends it to every worker).
        checkpoint_every: also save after every this many iterations (None: at epoch ends only).
        overwrite: replace an existing ``metrics_out`` or ``checkpoint`` (else an error at start-up).
    """

    metrics_out: str | Path | None = None
    model_out: str | Path | None = None
    checkpoint: str | Path | None = None
    resume: bool = False
    checkpoint_every: int | None = None
    overwrite: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedLaunch:
    """What the start-up checks found: the layout's spec, the model's shape and the identity a checkpoint
    must match."""

    spec: LayoutSpec
    model_cfg: ModelConfig
    identity: RunIdentity


def check_launch(partition_dir: str | Path, options: LayoutOptions, model_options: dict, cfg: TrainConfig,
                 outputs: RunOutputs) -> CheckedLaunch:
    """Every check that needs no peer, before joining the run: every worker fails at once with the same
    line instead of after loading its part (or, for a metrics path, after the whole run)."""
    try:
        # The flags first: a bad combination is named even when the launch itself is wrong too.
        spec = check_layout_options(options, cfg, model_options["name"])
        if options.dgs is not None and outputs.checkpoint is not None:
            raise ValueError("checkpoint: --checkpoint is not supported with --dgs yet (the explainer's masks are not "
                             "saved, so a resumed run would not equal the uninterrupted one)")
        check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=None, resume=False, overwrite=outputs.overwrite)
        world_size = world_size_from_env()
        check_layout_options(options, cfg, model_options["name"], world_size)
        manifest = check_partition_launch(partition_dir, world_size, cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        model_cfg = ModelConfig(in_dim=manifest["feature_dim"], num_classes=manifest["num_classes"],
                                num_layers=cfg.num_layers, **model_options)
        identity = run_identity(partition_dir, manifest, model_cfg, cfg, options.layout, world_size)
        check_checkpoint_at_launch(outputs.checkpoint, resume=outputs.resume, overwrite=outputs.overwrite,
                                   every=outputs.checkpoint_every, rank=rank_from_env(), run=identity,
                                   epochs=cfg.epochs)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return CheckedLaunch(spec=spec, model_cfg=model_cfg, identity=identity)


def run_distributed_training(partition_dir: str | Path, options: LayoutOptions, model_options: dict,
                             cfg: TrainConfig, outputs: RunOutputs = RunOutputs(), *, progress: bool = True,
                             timeout_s: float = 120.0) -> TrainReport:
    """Join the torchrun job, train, and return the report (the same on every worker).

    Args:
        partition_dir: written by ``gnnscale partition``; one part per worker.
        options: the layout and its options (:class:`~gnnscale.train.layouts.LayoutOptions`).
        model_options: ModelConfig fields other than in_dim, num_classes and num_layers.
        cfg: training settings; ``batch_size`` is per worker (split: a mini-batch has P x batch_size seeds).
        outputs: what rank 0 writes, and the checkpoint to resume.
        timeout_s: a collective waiting longer than this for a peer fails (no hang).
    """
    launch = check_launch(partition_dir, options, model_options, cfg, outputs)
    ctx = init_from_env(timeout_s=timeout_s)
    strategy = None
    try:
        torch.set_num_threads(cfg.threads)
        set_sampler_threads(cfg.threads)
        comm = Comm(ctx)
        part = load_local_partition(partition_dir, launch.spec.view, comm)
        # The data-loading stage's collectives run on a group of their own, beside the training step's.
        loader = comm.new_group()
        strategy = build_layout(LayoutContext(part=part, cfg=cfg, model=launch.model_cfg, comm=comm, loader=loader,
                                              options=options, partition_dir=Path(partition_dir)))
        loader.stats.snapshot_and_reset()  # set-up rounds are not part of any iteration
        report = train(strategy, part, comm, cfg, launch, outputs, lead=progress and ctx.rank == 0)
        if ctx.rank == 0 and outputs.metrics_out is not None:
            write_json_atomic(outputs.metrics_out, {
                "partitions": str(partition_dir), "layout": options.layout, "world_size": ctx.world_size,
                "cache_fraction": options.cache_fraction, "dgs": None if options.dgs is None else asdict(options.dgs),
                "replication": options.replication, "model": asdict(launch.model_cfg), "train": asdict(cfg),
                **report.to_json()})
        # Collective: nobody tears the group down while a peer is still in its last collective.
        comm.barrier("setup")
        return report
    finally:
        if strategy is not None:
            strategy.close()  # DGS: the explainer thread
        shutdown()


def train(layout: Layout, part: LocalPartition, comm: Comm, cfg: TrainConfig, launch: CheckedLaunch,
          outputs: RunOutputs, *, lead: bool) -> TrainReport:
    """Build the model (the same initial weights on every worker), resume if asked, train every epoch and
    save the model (rank 0)."""
    torch.manual_seed(derive_key(cfg.seed, stream=STREAM_INIT))
    model = build_model(launch.model_cfg)
    # The single-machine trainer's optimizer: fused and unfused Adam round differently, so one worker
    # equals the single-machine run only if both step with the same one.
    optimizer = build_optimizer(model, cfg)
    num_batches = agreed_num_batches(layout, comm)
    start = Start()
    if outputs.resume:
        start = resume_from(outputs.checkpoint, comm, model, optimizer, launch.identity, num_batches, cfg.epochs, lead)
    saver = None if outputs.checkpoint is None else Checkpointer(outputs.checkpoint, outputs.checkpoint_every,
                                                                 launch.identity, comm, num_batches)
    history = train_epochs(model, optimizer, layout, comm, cfg, part, num_batches, start, saver, lead)
    if comm.rank == 0 and outputs.model_out is not None:
        save_model(outputs.model_out, model)
    return summarize(history)


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """Where training starts: a fresh run, or a checkpoint's epoch and step (with this worker's sums of
    that epoch's first ``step`` iterations, None at an epoch boundary) and its finished epochs."""

    epoch: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)
    sums: EpochSums | None = None


def resume_from(checkpoint: str | Path, comm: Comm, model, optimizer, identity: RunIdentity, num_batches: int,
                epochs: int, lead: bool) -> Start:
    """Load rank 0's checkpoint (checked at launch) into every worker. Collective (one all-to-all)."""
    ckpt = receive_checkpoint(comm, checkpoint)
    model.load_state_dict(ckpt.model_state)
    optimizer.load_state_dict(ckpt.optimizer_state)
    sums = None
    if ckpt.step:
        # The same partition, worker count and batch size (checked at launch): the same iterations.
        if ckpt.num_batches != num_batches:
            raise LaunchError(f"checkpoint: {checkpoint} was written with {ckpt.num_batches} iterations per epoch, "
                              f"this run has {num_batches}; it cannot resume mid-epoch")
        sums = EpochSums.from_state(ckpt.workers[comm.rank])
    if lead:
        was = ckpt.identity
        changed = "" if same_partition(was, identity) else (
            f" (written by {was.world_size} workers on {was.partition['path']}: model, optimizer and epoch carry "
            f"over, batches are drawn for these {identity.world_size} workers)")
        print(f"resuming from {checkpoint}: {ckpt.epoch} of {epochs} epochs done, continuing at epoch {ckpt.epoch} "
              f"step {ckpt.step} of {num_batches}{changed}", flush=True)
    return Start(epoch=ckpt.epoch, step=ckpt.step, history=ckpt.history, sums=sums)


def train_epochs(model, optimizer, layout: Layout, comm: Comm, cfg: TrainConfig, part: LocalPartition,
                 num_batches: int, start: Start, saver: Checkpointer | None, lead: bool) -> list[dict]:
    """Epochs ``start.epoch .. cfg.epochs - 1``, each evaluated; ``saver`` saves after every epoch and,
    when due, after an iteration. Returns the history, the checkpoint's epochs first."""
    history = list(start.history)
    for epoch in range(start.epoch, cfg.epochs):
        timer = PhaseTimer()
        resumed = epoch == start.epoch and start.step > 0

        def after_step(steps_done: int, sums: EpochSums, epoch=epoch, timer=timer) -> None:
            if saver is not None and saver.due(epoch, steps_done):
                with timer.phase("checkpoint"):
                    saver.save(model, optimizer, epoch=epoch, step=steps_done, history=history,
                               worker_state=sums.to_state())

        with timer.phase("epoch"):
            sums = train_epoch(model, optimizer, layout, comm, cfg, epoch, num_batches, timer, lead,
                               first_step=start.step if resumed else 0, sums=start.sums if resumed else None,
                               after_step=after_step)
        val_acc = test_acc = float("nan")
        if cfg.evaluate:
            val_acc = evaluate(model, layout, comm, part.val_idx, cfg)
            test_acc = evaluate(model, layout, comm, part.test_idx, cfg)
        history.append(epoch_metrics(epoch, sums, timer, val_acc, test_acc, comm))
        if lead:
            print_epoch(history[-1])
        if saver is not None:
            saver.save(model, optimizer, epoch=epoch + 1, step=0, history=history, worker_state={})
    return history


def print_epoch(m: dict) -> None:
    rounds = m["rounds_per_iteration"]
    edges = m.get("edge_metrics", {})
    redundancy = f"  redundancy {edges['redundancy']:.1%}" if edges.get("iterations") else ""
    print(f"epoch {m['epoch']:3d}  loss {m['loss']:.4f}  train {m['train_acc']:.4f}  val {m['val_acc']:.4f}  "
          f"test {m['test_acc']:.4f}  {m['epoch_s']:.1f}s (sample {m['sample_s']:.1f}, split {m['split_s']:.1f}, "
          f"fetch {m['fetch_s']:.1f}, fwd+bwd {m['forward_backward_s']:.1f} of which shuffle {m['shuffle_s']:.1f}, "
          f"grad sync {m['grad_sync_s']:.1f}, wait {m['wait_s']:.1f})  rounds/iter sample {rounds['sample']:g} + "
          f"feature {rounds['feature']:g} + shuffle {rounds['shuffle']:g}{redundancy}{dgs_summary(m)}", flush=True)


def dgs_summary(m: dict) -> str:
    """The epoch's DGS figures for the per-epoch line ("" without --dgs)."""
    d = m.get("dgs")
    if d is None:
        return ""
    stale = "plain" if d["staleness_mean"] is None else f"masks {d['staleness_mean']:.0f} it. old"
    return (f"  dgs: feature {d['feature_bytes'] / 1e6:.2f} MB, {d['remote_nodes']} remote nodes, "
            f"{d['dims_sent_mean']:.0f} dims, explain {d['explanation_cpu_s']:.2f}s cpu "
            f"(waited {d['explanation_wait_s']:.2f}s), {stale}")
