"""Distributed training over a partition directory, one worker per part (torchrun).

Every worker checks the launch, starts from rank 0's model (a built-in one or the caller's own,
:mod:`gnnscale.train.inputs`), loads its part in its layout's view, builds the layout
(:mod:`gnnscale.train.layouts`: what each worker samples, fetches and computes) and runs the training
loop that the single-process trainer runs too (:mod:`gnnscale.train.loop`). :func:`train_distributed`
is what ``gnnscale.train.fit`` runs for a partition directory.

``hybrid`` and ``vanilla`` give identical blocks for the same key (counter-based randomness), so they
train identically: only the communication differs. With one worker this is exactly the
single-machine trainer. ``split`` trains, on P workers, the single-machine trainer's mini-batches of
``P x batch_size`` seeds, each vertex computed by one worker.

With ``checkpoint``, rank 0 saves the run after every epoch (and every ``checkpoint_every``
iterations); a resumed run continues at the saved epoch and step (:mod:`gnnscale.train.dist_checkpoint`).
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_from_env, rank_from_env, shutdown, world_size_from_env
from gnnscale.inference.distributed import evaluate_full_distributed
from gnnscale.nn import ModelConfig
from gnnscale.nn.model_file import DatasetFacts
from gnnscale.nn.models import builtin_config
from gnnscale.partition.directory import LocalPartition, load_partition
from gnnscale.sampling import set_sampler_threads
from gnnscale.train.checkpoint import save_model
from gnnscale.train.checks import LaunchError, check_distinct, check_partition_launch, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import ModelInputs, model_inputs, model_signature, seeded_model
from gnnscale.train.dist_checkpoint import (RunIdentity, Checkpointer, check_checkpoint_at_launch, receive_checkpoint,
                                            run_identity, same_partition)
from gnnscale.train.layouts import (Layout, LayoutContext, LayoutOptions, LayoutSpec, build_layout, resolved,
                                    check_layout_options)
from gnnscale.train.loop import EpochSums, Start, agreed_num_batches, build_optimizer, train_epochs
from gnnscale.train.metrics import PhaseTimer, write_json_atomic
from gnnscale.train.run import (RunOutputs, TrainReport, check_inputs_fit_sampler, check_model_outputs, keep_caller_rng,
                                metrics_writer, summarize)


def load_local_partition(partition_dir: str | Path, view: str, comm: Comm) -> LocalPartition:
    """Load this worker's part (its consecutive parts, where fewer workers than parts were launched) in
    the layout's ``view`` (the whole topology, or its part's in-edges); if any worker fails (missing or
    corrupt file, a worker count that does not divide the part count), every worker raises with that
    worker's message instead of waiting forever for it."""
    part, error = None, ""
    try:
        part = load_partition(partition_dir, comm.rank, view, workers=comm.world_size)
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)
    return part


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedLaunch:
    """What the start-up checks found: the layout's spec, the built-in model's config (None for a model of
    one's own) and the identity a checkpoint must match."""

    spec: LayoutSpec
    model_cfg: ModelConfig | None
    identity: RunIdentity
    resume_path: Path | None = None  # rank 0: the checkpoint file to resume from (None: start afresh)


def builtin_model_for(partition_dir: str | Path, options: LayoutOptions, model_options: dict, cfg: TrainConfig,
                      outputs: RunOutputs = RunOutputs()) -> nn.Module:
    """The built-in model ``gnnscale train --partitions`` trains: ``model_options`` (ModelConfig fields but
    in_dim, num_classes and num_layers) sized for the partitioned dataset, initialised from ``cfg.seed``
    (the same weights on every worker). The launch checks that need no manifest come first, in
    :func:`check_launch`'s order."""
    try:
        spec = check_before_manifest(options, cfg, model_options["name"], outputs)
        manifest = check_partition_launch(partition_dir, world_size_from_env(), cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        model_cfg = ModelConfig(in_dim=manifest["feature_dim"], num_classes=manifest["num_classes"],
                                num_layers=cfg.num_layers, **model_options)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return seeded_model(model_cfg, cfg.seed)


def check_before_manifest(options: LayoutOptions, cfg: TrainConfig, model_name: str | None,
                          outputs: RunOutputs) -> LayoutSpec:
    """The flags, the output paths and the launch's worker count (ValueError): what needs no partition."""
    # The flags first: a bad combination is named even when the launch itself is wrong too.
    spec = check_layout_options(options, cfg, model_name)
    check_model_outputs(model_name, outputs)
    # The checkpoint file itself is rank 0's to check (check_checkpoint_at_launch): another machine has none.
    check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=None, resume=False,
                      overwrite=outputs.overwrite or outputs.resume, model_out=outputs.model_out)
    check_distinct({flag: Path(path) for flag, path in (("--metrics-out", outputs.metrics_out),
                                                        ("--checkpoint", outputs.checkpoint),
                                                        ("--save-model", outputs.model_out)) if path is not None})
    check_layout_options(options, cfg, model_name, world_size_from_env())
    return spec


def check_launch(partition_dir: str | Path, options: LayoutOptions, model: nn.Module, inputs: ModelInputs,
                 cfg: TrainConfig, outputs: RunOutputs) -> CheckedLaunch:
    """Every check that needs no peer, before joining the run: every worker fails at once with the same
    line instead of after loading its part (or, for a metrics path, after the whole run)."""
    model_cfg = builtin_config(model)
    try:
        spec = check_before_manifest(options, cfg, None if model_cfg is None else model_cfg.name, outputs)
        check_inputs_fit_sampler(inputs, cfg)
        world_size = world_size_from_env()
        manifest = check_partition_launch(partition_dir, world_size, cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        if model_cfg is not None:
            check_builtin_fits(model_cfg, manifest, cfg, partition_dir)
        identity = run_identity(partition_dir, manifest, model_signature(model, inputs), cfg, options, world_size)
        resume_path = check_checkpoint_at_launch(outputs.checkpoint, resume=outputs.resume,
                                                 overwrite=outputs.overwrite, every=outputs.checkpoint_every,
                                                 rank=rank_from_env(), run=identity, epochs=cfg.epochs)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return CheckedLaunch(spec=spec, model_cfg=model_cfg, identity=identity, resume_path=resume_path)


def check_builtin_fits(model_cfg: ModelConfig, manifest: dict, cfg: TrainConfig, partition_dir: str | Path) -> None:
    """A built-in model's input and output widths are the dataset's, and its layers the fanouts' hops."""
    if model_cfg.num_layers != cfg.num_layers:
        raise ValueError(f"fanouts: {cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    if (model_cfg.in_dim, model_cfg.num_classes) != (manifest["feature_dim"], manifest["num_classes"]):
        raise ValueError(f"model: built for {model_cfg.in_dim} features and {model_cfg.num_classes} classes, but "
                         f"{partition_dir} holds {manifest['feature_dim']} features and {manifest['num_classes']} "
                         "classes")


def run_distributed_training(partition_dir: str | Path, options: LayoutOptions, model_options: dict,
                             cfg: TrainConfig, outputs: RunOutputs = RunOutputs(), *, progress: bool = True,
                             timeout_s: float = 120.0) -> TrainReport:
    """Train the built-in model ``model_options`` describes (:func:`builtin_model_for`) over
    ``partition_dir``: :func:`train_distributed`, which ``gnnscale.train.fit`` runs for a partition."""
    model = builtin_model_for(partition_dir, options, model_options, cfg, outputs)
    return train_distributed(model, partition_dir, "blocks", cfg, options, outputs, progress=progress,
                             timeout_s=timeout_s)


def train_distributed(model: nn.Module, partition_dir: str | Path, inputs: str, cfg: TrainConfig,
                      options: LayoutOptions = LayoutOptions(), outputs: RunOutputs = RunOutputs(), *,
                      progress: bool = True, timeout_s: float = 120.0) -> TrainReport:
    """Join the torchrun job, train ``model`` (in place; rank 0's initial weights on every worker), and
    return the report (the same on every worker).

    Args:
        model: a built-in model, or a module of one's own taking ``inputs`` (:mod:`gnnscale.train.inputs`).
        partition_dir: written by ``gnnscale partition``; one part per worker.
        inputs: ``"blocks"`` or ``"pyg"``: what the model's forward takes.
        cfg: training settings; ``batch_size`` is per worker (split: a mini-batch has P x batch_size seeds).
        options: the layout and its options (:class:`~gnnscale.train.layouts.LayoutOptions`).
        outputs: what rank 0 writes, and the checkpoint to resume.
        timeout_s: a collective waiting longer than this for a peer fails (no hang).
    """
    try:
        adapter = model_inputs(model, inputs)
    except (ValueError, TypeError) as err:
        raise LaunchError(str(err)) from err
    options = resolved(options)  # the layout's own options filled in: recorded whole below
    launch = check_launch(partition_dir, options, model, adapter, cfg, outputs)
    with keep_caller_rng(launch.model_cfg is None):
        ctx = init_from_env(timeout_s=timeout_s)
        strategy = None
        try:
            torch.set_num_threads(cfg.threads)
            set_sampler_threads(cfg.threads)
            comm = Comm(ctx)
            part = load_local_partition(partition_dir, launch.spec.view, comm)
            # The data-loading stage's collectives run on a group of their own, beside the training step's.
            loader = comm.new_group()
            strategy = build_layout(LayoutContext(part=part, cfg=cfg, model=launch.model_cfg, comm=comm,
                                                  loader=loader, options=options,
                                                  partition_dir=Path(partition_dir)))
            loader.stats.snapshot_and_reset()  # set-up rounds are not part of any iteration
            header = {"partitions": str(partition_dir), "layout": options.layout, "world_size": ctx.world_size,
                      "layout_options": asdict(options.settings),
                      "dgs": None if options.dgs is None else asdict(options.dgs),
                      "model": launch.identity.signature["model"],
                      "train": asdict(cfg)}
            write_metrics = metrics_writer(outputs.metrics_out if ctx.rank == 0 else None, header)
            report = train(model, adapter, strategy, part, comm, cfg, launch, outputs,
                           lead=progress and ctx.rank == 0, on_epoch_end=write_metrics)
            if report.full_eval is not None and ctx.rank == 0 and outputs.metrics_out is not None:
                write_json_atomic(outputs.metrics_out, {**header, **report.to_json()})
            # Collective: nobody tears the group down while a peer is still in its last collective.
            comm.barrier("setup")
            return report
        finally:
            if strategy is not None:
                strategy.close()  # DGS: the explainer thread
            shutdown()


def broadcast_model(model: nn.Module, comm: Comm) -> None:
    """Every worker starts from rank 0's parameters and buffers (as DDP does): a model built in each
    worker may have been initialised differently. Collective: one all-to-all (category ``"setup"``)."""
    if comm.world_size == 1:
        return
    mine = torch.zeros(0, dtype=torch.uint8)
    if comm.rank == 0:
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        mine = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    # Collective: rank 0's state to every worker (rank 0 included: one code path).
    received = comm.all_to_allv([mine] * comm.world_size, "setup")[0]
    if comm.rank != 0:
        # weights_only: what travels is tensors, never code.
        model.load_state_dict(torch.load(io.BytesIO(received.cpu().numpy().tobytes()), weights_only=True))


def train(model: nn.Module, inputs: ModelInputs, layout: Layout, part: LocalPartition, comm: Comm, cfg: TrainConfig,
          launch: CheckedLaunch, outputs: RunOutputs, *, lead: bool, on_epoch_end=None) -> TrainReport:
    """Start every worker from rank 0's model, resume if asked, train every epoch and save the model
    (rank 0, a built-in model)."""
    broadcast_model(model, comm)
    # The single-machine trainer's optimizer: fused and unfused Adam round differently, so one worker
    # equals the single-machine run only if both step with the same one.
    optimizer = build_optimizer(model, cfg)
    num_batches = agreed_num_batches(layout, comm)
    start = Start()
    if outputs.resume:
        start = resume_from(launch.resume_path, comm, model, optimizer, launch.identity, num_batches, cfg.epochs,
                            lead)
        # Collective for DGS (a refresh): every worker resumes with the same checkpoint.
        layout.load_checkpoint_state(start.layout_state, start.epoch * num_batches + start.step, PhaseTimer())
    saver = None if outputs.checkpoint is None else Checkpointer(outputs.checkpoint, outputs.checkpoint_every,
                                                                 launch.identity, comm, num_batches)
    history = train_epochs(model, optimizer, layout, inputs, comm, cfg, part, num_batches, start, saver, lead,
                           on_epoch_end=on_epoch_end)
    if comm.rank == 0 and outputs.model_out is not None:
        facts = DatasetFacts(name=part.dataset_name, feature_dim=launch.model_cfg.in_dim,
                             num_classes=launch.model_cfg.num_classes, num_nodes=part.book.num_nodes)
        save_model(outputs.model_out, model, launch.model_cfg, facts)
    report = summarize(history)
    if outputs.full_eval is not None:  # collective: every worker computes its part's nodes
        report = replace(report, full_eval=evaluate_full_distributed(model, part, comm, outputs.full_eval))
    return report


def resume_from(checkpoint: Path | None, comm: Comm, model, optimizer, identity: RunIdentity, num_batches: int,
                epochs: int, lead: bool) -> Start:
    """Load the checkpoint rank 0 chose at launch into every worker; a fresh start when it has none
    (``--resume auto`` before the first save). Collective (one all-to-all)."""
    ckpt = receive_checkpoint(comm, checkpoint)
    if ckpt is None:
        if lead:
            print("no checkpoint yet: starting afresh (--resume auto)", flush=True)
        return Start()
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
    return Start(epoch=ckpt.epoch, step=ckpt.step, history=ckpt.history, sums=sums, layout_state=ckpt.layout_state)
