"""The one setup path of every run: check, join the process group, load the data, build the layout, train,
checkpoint and save. :func:`gnnscale.train.fit` runs it for a dataset in this process
(:class:`~gnnscale.train.sources.in_process.InProcess`: a one-worker run on a process group of its own) and for a
partition directory under torchrun (:class:`~gnnscale.train.sources.partitioned.Partitioned`); the two differ
only in what a :class:`RunSource` gives: the checks, how a worker joins, its data and its layout.

Every worker starts from rank 0's model, resumes from rank 0's checkpoint (one format for every run,
:mod:`gnnscale.train.checkpoints.runs`), runs the training loop (:mod:`gnnscale.train.loop`) and keeps
the best-validation epoch's weights (:mod:`gnnscale.train.checkpoints.best`), which rank 0 saves by default.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import DistContext, shutdown
from gnnscale.distributed.device_policy import DevicePolicy, decide, step_comm, use_device
from gnnscale.nn import ModelConfig, TypedModelConfig
from gnnscale.nn.model_file import DatasetFacts, TypedDatasetFacts
from gnnscale.nn.typed_models import embeddings_by_dataset_id
from gnnscale.partition.directory import LocalPartition
from gnnscale.partition.typed import TypedPartition
from gnnscale.sampling import set_sampler_threads
from gnnscale.sampling.registry import sampler_spec
from gnnscale.train.checkpoints.best import BestWeights
from gnnscale.train.checkpoints.files import on_host, save_model
from gnnscale.train.checks import LaunchError
from gnnscale.train.config import TrainConfig
from gnnscale.train.checkpoints.runs import Checkpointer, RunIdentity, receive_checkpoint, same_partition
from gnnscale.train.inputs import ModelInputs
from gnnscale.train.layouts import Layout, LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.loop import EpochSums, Start, agreed_num_batches, build_optimizer, train_epochs
from gnnscale.train.memory import keep_freed_memory
from gnnscale.train.metrics import PhaseTimer, write_json_atomic
from gnnscale.train.precision import StepPrecision
from gnnscale.train.run import (InterruptedRun, RunOutputs, TrainReport, deterministic_kernels, keep_caller_rng,
                                metrics_writer, needs_deterministic_kernels, summarize)
from gnnscale.train.stages import Pipeline
from gnnscale.train.tasks.base import TaskContext, TaskSpec
from gnnscale.train.tasks.registry import task_header


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedLaunch:
    """What the start-up checks found, before any worker joins the run.

    Args:
        inputs: how the loop calls the model (:func:`~gnnscale.train.inputs.model_inputs`).
        spec: the layout's spec (one process: :data:`~gnnscale.train.layouts.single.SINGLE`).
        options: the layout's options.
        model_cfg: the built-in model's config; None for a model of one's own.
        identity: what a checkpoint must match to be resumed.
        device: where this worker trains (``TrainConfig.device`` resolved: under torchrun, its own GPU).
        task: the task's spec; ``task_settings`` its own settings (None where it has none).
        resume_path: rank 0: the checkpoint file to resume from (None: start afresh).
    """

    inputs: ModelInputs
    spec: LayoutSpec
    options: LayoutOptions
    model_cfg: ModelConfig | None
    identity: RunIdentity
    device: torch.device
    task: TaskSpec
    task_settings: object | None
    resume_path: Path | None = None

    def header(self, cfg: TrainConfig) -> dict:
        """What the metrics file says of the model, the settings (the device as resolved) and the task."""
        return {"model": self.task.describe_model(self.identity.signature["model"]),
                "train": asdict(replace(cfg, device=str(self.device))),
                **task_header(self.task, self.task_settings)}


class RunSource(Protocol):
    """Where a run's data lives and how its workers join: what differs between one process and torchrun."""

    @property
    def partition_dir(self) -> Path | None: ...

    def check(self, model: nn.Module, inputs: str, cfg: TrainConfig, outputs: RunOutputs) -> CheckedLaunch:
        """Every check that needs no peer (ValueError, one line naming the setting)."""

    def join(self) -> DistContext:
        """This worker's process group."""

    def load(self, launch: CheckedLaunch, comm: Comm) -> LocalPartition:
        """This worker's data, in the layout's view (collective where a worker can fail alone)."""

    def build(self, ctx: LayoutContext) -> Layout:
        """This worker's layout (collective on the context's Comms)."""

    def header(self, launch: CheckedLaunch, cfg: TrainConfig, world_size: int) -> dict:
        """What the metrics file says of the run besides its epochs (:meth:`CheckedLaunch.header` and the data)."""

    def full_eval(self, model: nn.Module, part: LocalPartition, comm: Comm, metric: str) -> dict:
        """``--eval full``'s scores of the trained model (collective)."""


def train_run(model: nn.Module, inputs: str, cfg: TrainConfig, source: RunSource, outputs: RunOutputs, *,
              progress: bool = True) -> TrainReport:
    """Train ``model`` in place on ``source``'s data and return the report (the same on every worker); rank
    0 writes ``outputs``. A model of one's own gets torch's random state back as the caller had it; on a GPU the
    run uses torch's deterministic kernels (:func:`~gnnscale.train.run.deterministic_kernels`), the caller's
    setting back afterwards."""
    launch = source.check(model, inputs, cfg, outputs)
    keep_freed_memory()  # before the loading stage's thread starts: large tensors are reused, not faulted in anew
    with (keep_caller_rng(launch.model_cfg is None, launch.device),
          deterministic_kernels(needs_deterministic_kernels(launch.device))):
        ctx = source.join()
        layout = None
        try:
            torch.set_num_threads(cfg.threads)
            set_sampler_threads(cfg.threads)
            use_device(launch.device)  # a GPU: streams, events and NCCL use this worker's own
            comm = Comm(ctx)
            part = source.load(launch, comm)
            # The data-loading stage's collectives run on a group of their own, beside the training step's.
            loader = comm.new_group()
            # Gradients and split's shuffles: NCCL where every worker has a GPU of its own, else gloo.
            step = step_comm(comm, launch.device)
            task = launch.task.build(TaskContext(part=part, cfg=cfg, settings=launch.task_settings, comm=comm,
                                                 partition_dir=source.partition_dir,
                                                 shared_batches=not launch.spec.per_worker_batches))
            policy = device_policy(launch, cfg, task.part, loader)
            layout = source.build(LayoutContext(part=task.part, cfg=cfg, model=launch.model_cfg, comm=step,
                                                loader=loader, options=launch.options,
                                                partition_dir=source.partition_dir, policy=policy,
                                                seeds_anywhere="seeds_anywhere" in launch.task.needs))
            described = task.describe(comm)
            loader.stats.snapshot_and_reset()  # set-up rounds are not part of any iteration
            header = {**source.header(launch, cfg, ctx.world_size), **described}
            if progress and ctx.rank == 0:
                for name, facts in described.items():
                    print(f"{name.replace('_', ' ')}: " + ", ".join(f"{value:,} {key.replace('_', ' ')}"
                                                                    for key, value in facts.items()), flush=True)
            metrics_out = outputs.metrics_out if ctx.rank == 0 else None
            pipeline = Pipeline(task, layout, launch.inputs, policy, cfg.prefetch)
            report = train(model, pipeline, part, comm, cfg, launch, outputs, lead=progress and ctx.rank == 0,
                           on_epoch_end=metrics_writer(metrics_out, header), full_eval=source.full_eval,
                           grad_comm=step, partition_dir=source.partition_dir)
            if metrics_out is not None and (report.full_eval is not None or report.saved_epoch is not None):
                write_json_atomic(metrics_out, {**header, **report.to_json()})
            # Collective: nobody tears the group down while a peer is still in its last collective.
            comm.barrier("setup")
            return report
        finally:
            if layout is not None:
                layout.close()  # DGS: the explainer thread
            shutdown()


def device_policy(launch: CheckedLaunch, cfg: TrainConfig, part: LocalPartition, loader: Comm) -> DevicePolicy:
    """This worker's device policy (collective on ``loader``)."""
    return decide(launch.device, sample_on=cfg.sample_on, device_bytes=device_sampler_bytes(launch, cfg, part),
                  gpu_cache_fraction=cfg.gpu_cache_fraction, comm=loader)


def device_sampler_bytes(launch: CheckedLaunch, cfg: TrainConfig, part: LocalPartition) -> int | None:
    """What this worker's training sampler would keep on the device, None where it samples on the host: a
    sampler with a device build, in a layout that samples on the device (``device_sampling``,
    without DGS, whose kernels are its own). A worker of the whole topology keeps the sampler's copy of it; a
    worker of block rows (1.5D) keeps none: the rows a stack needs come from its process column per hop."""
    spec = sampler_spec(cfg.sampler)
    if not (launch.spec.device_sampling and launch.options.dgs is None and spec.runs_on_device):
        return None
    if isinstance(part, TypedPartition):
        return None  # the device samplers draw plain graphs: a typed one samples on the host
    return spec.device_bytes(part.topology) if part.view == "whole" else 0


def broadcast_model(model: nn.Module, comm: Comm) -> None:
    """Every worker starts from rank 0's parameters and buffers (as DDP does): a model built in each
    worker may have been initialised differently. Collective: one all-to-all (category ``"setup"``)."""
    if comm.world_size == 1:
        return
    mine = torch.zeros(0, dtype=torch.uint8)
    if comm.rank == 0:
        buffer = io.BytesIO()
        torch.save(on_host(model.state_dict()), buffer)  # CPU tensors: each worker loads them onto its own device
        mine = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    # Collective: rank 0's state to every worker (rank 0 included: one code path).
    received = comm.all_to_allv([mine] * comm.world_size, "setup")[0]
    if comm.rank != 0:
        # weights_only: what travels is tensors, never code.
        model.load_state_dict(torch.load(io.BytesIO(received.cpu().numpy().tobytes()), map_location="cpu",
                                         weights_only=True))


FullEval = Callable[[nn.Module, LocalPartition, Comm, str], dict]


def train(model: nn.Module, pipeline: Pipeline, part: LocalPartition, comm: Comm, cfg: TrainConfig,
          launch: CheckedLaunch, outputs: RunOutputs, *, lead: bool, on_epoch_end=None,
          full_eval: FullEval, grad_comm: Comm | None = None, partition_dir: Path | None = None) -> TrainReport:
    """Move the model to the run's device, start every worker from rank 0's model, resume if asked, train
    every epoch (gradients reduced on ``grad_comm``, default ``comm``), save the model (rank 0, a built-in
    model) and score it with ``full_eval`` when ``outputs.full_eval`` asks. ``partition_dir``: the partition directory
    the run reads (None: a dataset in this process), whose numbering a typed model's file undoes."""
    model.to(launch.device)  # in place: the caller's model trains there (and stays there)
    broadcast_model(model, comm)
    # One optimizer for every run: fused and unfused Adam round differently, so one worker equals the
    # single-process run only if both step with the same one.
    optimizer = build_optimizer(model, cfg)
    precision = StepPrecision(cfg.precision, launch.device)
    layout = pipeline.layout
    num_batches = agreed_num_batches(pipeline.task, comm)
    start = Start()
    if outputs.resume:
        start = resume_from(launch.resume_path, comm, model, optimizer, precision, launch.identity, num_batches,
                            cfg.epochs, lead)
        # Collective for DGS (a refresh): every worker resumes with the same checkpoint.
        layout.load_checkpoint_state(start.layout_state, start.epoch * num_batches + start.step, PhaseTimer())
    saver = None if outputs.checkpoint is None else Checkpointer(outputs.checkpoint, outputs.checkpoint_every,
                                                                 launch.identity, comm, num_batches)
    try:
        history = train_epochs(model, optimizer, pipeline, comm, cfg, num_batches, start, saver, lead, precision,
                               on_epoch_end=on_epoch_end, grad_comm=grad_comm)
    except KeyboardInterrupt:  # Ctrl-C, or a scheduler's SIGINT: keep the best model so far
        raise InterruptedRun(save_best_so_far(model, part, comm, launch, outputs, start.best, cfg.seed,
                                              partition_dir)) from None
    report = summarize(history)
    if outputs.model_out is not None:
        report = replace(report, saved_epoch=save_trained_model(model, part, comm, launch, outputs, report,
                                                                start.best, cfg.seed, partition_dir))
    if outputs.full_eval is not None:  # collective: every worker computes its part's nodes
        # On the model's device: layer-wise inference copies each chunk there and its rows back to host memory.
        report = replace(report, full_eval=full_eval(model, part, comm, outputs.full_eval))
    return report


def save_trained_model(model: nn.Module, part: LocalPartition, comm: Comm, launch: CheckedLaunch,
                       outputs: RunOutputs, report: TrainReport, best: BestWeights, seed: int,
                       partition_dir: Path | None) -> int:
    """Rank 0 writes the model file: the best-validation epoch's weights (``save_model_at="best"``) or the
    last epoch's (:func:`write_model_file`). Returns the epoch saved, on every worker."""
    last = report.history[-1]["epoch"]
    epoch, state = last, on_host(model.state_dict())  # the model as trained: the last epoch
    if outputs.save_model_at == "best" and report.best_epoch != last:
        if best.epoch == report.best_epoch:
            epoch, state = best.epoch, best.state
        elif comm.rank == 0:
            # Resumed from a checkpoint of an older version, which kept no weights of its best epoch.
            print(f"save_model: the checkpoint resumed holds no weights of the best epoch {report.best_epoch}; "
                  f"saving the last epoch's ({last})", file=sys.stderr, flush=True)
    if comm.rank == 0:
        write_model_file(model, state, part, launch, outputs, seed, partition_dir)
    return epoch


def save_best_so_far(model: nn.Module, part: LocalPartition, comm: Comm, launch: CheckedLaunch,
                     outputs: RunOutputs, best: BestWeights, seed: int, partition_dir: Path | None) -> str:
    """On an interrupted run, rank 0 writes the best-validation epoch's weights so far to the model file (where
    ``--save-model`` with ``--save-model-at best`` asks for it); returns what was saved, for the last line."""
    if outputs.model_out is None or outputs.save_model_at != "best" or best.epoch is None:
        return ""
    if comm.rank == 0:
        write_model_file(model, best.state, part, launch, outputs, seed, partition_dir)
    return f"{outputs.model_out} holds the model of epoch {best.epoch} (the best validation so far)"


def write_model_file(model: nn.Module, state: dict, part: LocalPartition, launch: CheckedLaunch,
                     outputs: RunOutputs, seed: int, partition_dir: Path | None) -> None:
    """``outputs.model_out``: the weights ``state`` of ``model``, the data it was trained on and what its task
    records for later use (a link model's split, under the run's ``seed``). A typed model trained over a partition
    (``partition_dir``) gets its embeddings' rows back in the dataset's numbering."""
    cfg = launch.model_cfg
    if isinstance(cfg, TypedModelConfig):  # its config holds the schema: node types, relations, widths
        facts = TypedDatasetFacts(name=part.dataset_name, target_type=part.target_type, num_classes=cfg.num_classes,
                                  num_nodes=part.book.num_nodes)
        if partition_dir is not None:
            new_to_old = np.load(Path(partition_dir) / "new_to_old.npy", mmap_mode="r")
            state = embeddings_by_dataset_id(state, cfg, new_to_old, part.book.type_offsets)
    else:
        facts = DatasetFacts(name=part.dataset_name, feature_dim=cfg.in_dim, num_classes=cfg.num_classes,
                             num_nodes=part.book.num_nodes)
    save_model(outputs.model_out, model, cfg, facts, state_dict=state,
               link_split=launch.task.model_file_record(launch.task_settings, seed))


def resume_from(checkpoint: Path | None, comm: Comm, model, optimizer, precision: StepPrecision,
                identity: RunIdentity, num_batches: int, epochs: int, lead: bool) -> Start:
    """Load the checkpoint rank 0 chose at launch into every worker (model, optimizer, the gradient scaler of
    ``precision``); a fresh start when it has none (``--resume auto`` before the first save). Collective (one
    all-to-all)."""
    ckpt = receive_checkpoint(comm, checkpoint)
    if ckpt is None:
        if lead:
            print("no checkpoint yet: starting afresh (--resume auto)", flush=True)
        return Start()
    model.load_state_dict(ckpt.model_state)
    optimizer.load_state_dict(ckpt.optimizer_state)
    precision.load_state_dict(ckpt.scaler_state)
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
    return Start(epoch=ckpt.epoch, step=ckpt.step, history=ckpt.history, sums=sums, layout_state=ckpt.layout_state,
                 best=BestWeights.from_checkpoint(ckpt.best, ckpt.model_state))
