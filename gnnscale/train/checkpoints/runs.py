"""Checkpoints of every run (one process is a one-worker run, :mod:`gnnscale.train.sources.in_process`): what
rank 0 writes, what a resuming run may change, and how every worker gets its state back.

One file, written by rank 0 only, is enough to rebuild every worker:

- model and optimizer: the same bits on every worker after every step (each worker applies the same
  all-reduced gradient with the same Adam state), so rank 0's copy stands for all. Every save checks
  it: each worker's fingerprint of both goes to rank 0, which refuses to save if one differs.
- randomness: the batch order is a function of ``(seed, epoch, rank)``, the sampling keys and the
  dropout seed of every iteration of ``(seed, epoch, step, rank)``; nothing else draws. The epoch and
  the step within it are therefore all a resumed run needs to draw exactly what the stopped one would.
- the epoch under way (a save every ``--checkpoint-every`` iterations): each worker's running sums of
  the epoch (losses, correct predictions, seed counts, edges, communication per iteration) go to rank
  0 with the fingerprint and come back to the same rank on resume, so the epoch's metrics are the
  uninterrupted run's. (Its phase times, edge metrics and cache hit rate cover the iterations after
  the resume.)

What a resumed run may change: the epoch count, threads, prefetch depth, device, where batches are
sampled and the device's feature rows (:data:`RESUMABLE_CHANGES`). Model and optimizer state are saved as CPU tensors and loaded into the
model wherever it trains, so a run checkpointed on a GPU resumes on the CPU or another GPU.
The hybrid layout may also continue at an epoch boundary
on another partition of the same dataset (a layout whose spec is ``repartitionable``), with another worker count: model, optimizer, epoch and
history carry over; batches are then drawn for the new workers (not bit for bit the old run). The data
is identified by dataset-level facts (name, node, edge, feature, class and split counts), which do not
depend on how nodes were numbered per partition.
"""

from __future__ import annotations

import hashlib
import io
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from gnnscale.distributed.comm import Comm
from gnnscale.nn import ModelConfig
from gnnscale.partition.directory import MANIFEST, SPLITS, sha256_file
from gnnscale.settings import resumable_fields
from gnnscale.train.checkpoints.files import (CHECKPOINT_KIND, CHECKPOINT_VERSION, check_same_settings, first_difference, on_host,
                                       decode_payload, newest_complete, write_atomic)
from gnnscale.train.checks import check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import LayoutOptions
from gnnscale.train.layouts.registry import layout_spec, layouts_with, resolved
from gnnscale.train.layouts.single import SINGLE

# Settings a resumed run may change: they do not change what is computed, and each says so on its field
# (``setting(..., resumable=True)`` in TrainConfig). The device changes how it is rounded (a GPU's sums add
# in another order, within float32's rounding), not the model, the batches or the optimizer's state, so a
# run may move to another device when it resumes. Where batches are sampled and which feature rows the
# device holds change neither: the device sampler draws the host sampler's blocks bit for bit, and the
# cache returns the store's rows.
RESUMABLE_CHANGES = resumable_fields(TrainConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunIdentity:
    """What a checkpoint must match to be resumed (known before the workers join the run).

    Args:
        signature: ``{"model": ModelConfig fields, "train": TrainConfig fields but RESUMABLE_CHANGES}``.
        layout: the registered layout's name (``--layout``); ``"single"`` for one process
            (:data:`~gnnscale.train.layouts.single.SINGLE`).
        world_size: number of workers.
        data: dataset-level facts of the (partitioned) dataset (:func:`dataset_facts`).
        partition: ``{"path": str, "manifest_sha256": hex}``: which partition directory exactly (both None
            for one process: its dataset is ``data``).
    """

    signature: dict
    layout: str
    world_size: int
    data: dict
    partition: dict


@dataclass(frozen=True, slots=True, kw_only=True)
class DistCheckpoint:
    """What rank 0 writes.

    Args:
        identity: the run that wrote it.
        epoch: the epoch training continues in.
        step: iterations of ``epoch`` already trained (0 at an epoch boundary).
        num_batches: iterations per epoch of the run that wrote it.
        model_state, optimizer_state: ``state_dict()`` of each (the same on every worker).
        history: per-epoch metrics dicts of the finished epochs.
        workers: per rank, the epoch's running sums after ``step`` iterations (empty when ``step`` is 0).
        layout_state: what the layout needs beyond the model (DGS: the model snapshots whose masks the
            run samples with next), the same on every worker.
        best: the best-validation epoch so far and its weights (:meth:`BestWeights.checkpoint_state
            <gnnscale.train.checkpoints.best.BestWeights.checkpoint_state>`); None before the first epoch's end and in
            checkpoints of older versions.
        scaler_state: the gradient scaler's state (``--precision 16-mixed``: its scale and the steps since its
            last overflow, :meth:`~gnnscale.train.precision.StepPrecision.state_dict`); None for other precisions.
    """

    identity: RunIdentity
    epoch: int
    step: int
    num_batches: int
    model_state: dict
    optimizer_state: dict
    history: list[dict]
    workers: list[dict]
    layout_state: dict
    best: dict | None = None
    scaler_state: dict | None = None


def run_identity(partition_dir: str | Path, manifest: dict, model: ModelConfig | dict, cfg: TrainConfig,
                 options: LayoutOptions, world_size: int) -> RunIdentity:
    """``model``: a built-in model's config, or the model's :func:`~gnnscale.train.inputs.model_signature`;
    ``options``: the layout, its own options (recorded whole: each of them changes the numbers) and DGS's;
    a resume must use the same."""
    train = {k: v for k, v in asdict(cfg).items() if k not in RESUMABLE_CHANGES}
    model = asdict(model) if isinstance(model, ModelConfig) else model
    settings = resolved(options).settings
    signature = {"model": model, "train": train, "layout_options": asdict(settings),
                 "dgs": None if options.dgs is None else asdict(options.dgs)}
    return RunIdentity(signature=signature, layout=options.layout, world_size=world_size,
                       data=dataset_facts(manifest),
                       partition={"path": str(partition_dir),
                                  "manifest_sha256": sha256_file(Path(partition_dir) / MANIFEST)})


def one_process_identity(data: dict, model: dict, cfg: TrainConfig) -> RunIdentity:
    """A run of one process on a dataset whose :func:`dataset_facts` are ``data``: :func:`run_identity`'s
    signature (no DGS), the one-process layout, no partition directory. ``model``: the model's
    :func:`~gnnscale.train.inputs.model_signature`."""
    train = {k: v for k, v in asdict(cfg).items() if k not in RESUMABLE_CHANGES}
    return RunIdentity(signature={"model": model, "train": train, "layout_options": {}, "dgs": None},
                       layout=SINGLE.name, world_size=1,
                       data=data, partition={"path": None, "manifest_sha256": None})


def dataset_facts(manifest: dict) -> dict:
    """Facts of the partitioned dataset that every partition of it shares (no node ids)."""
    facts = {key: manifest[key] for key in ("dataset", "num_nodes", "num_edges", "feature_dim", "num_classes")}
    facts.update({name: sum(manifest["split_sizes"][name]) for name in SPLITS})
    return facts


def save_dist_checkpoint(path: str | Path, ckpt: DistCheckpoint) -> None:
    """Write ``ckpt`` atomically (a killed write leaves the previous checkpoint intact)."""
    write_atomic(path, {"version": CHECKPOINT_VERSION, "kind": CHECKPOINT_KIND, **asdict(ckpt.identity),
                        "epoch": ckpt.epoch, "step": ckpt.step, "num_batches": ckpt.num_batches,
                        "model_state": ckpt.model_state, "optimizer_state": ckpt.optimizer_state,
                        "history": ckpt.history, "workers": ckpt.workers, "layout_state": ckpt.layout_state,
                        "best": ckpt.best, "scaler_state": ckpt.scaler_state})


# Settings that checkpoints written before they existed ran with: resuming one compares these with this
# run's, so the error names the flag and value to resume with (--dgs-explain-lr 0.3, --precision 32).
DGS_SETTINGS_BEFORE_RECORDED = {"explain_steps": 10, "explain_lr": 0.3}
TRAIN_SETTINGS_BEFORE_RECORDED = {"precision": "32", "relation_fanouts": ()}


def decode(payload: dict) -> DistCheckpoint:
    identity = RunIdentity(**{key: payload[key] for key in ("signature", "layout", "world_size", "data", "partition")})
    signature = {**identity.signature, "train": {**TRAIN_SETTINGS_BEFORE_RECORDED, **identity.signature["train"]}}
    dgs = signature.get("dgs")
    if dgs is not None:
        signature["dgs"] = {**DGS_SETTINGS_BEFORE_RECORDED, **dgs}
    identity = replace(identity, signature=signature)
    return DistCheckpoint(identity=identity, epoch=int(payload["epoch"]), step=int(payload["step"]),
                          num_batches=int(payload["num_batches"]), model_state=payload["model_state"],
                          optimizer_state=payload["optimizer_state"], history=list(payload["history"]),
                          workers=list(payload["workers"]), layout_state=dict(payload["layout_state"]),
                          # None in checkpoints written before they were recorded
                          best=payload.get("best"), scaler_state=payload.get("scaler_state"))


def check_resume(ckpt: DistCheckpoint, path: Path, run: RunIdentity, epochs: int) -> None:
    """ValueError (one line naming the setting and its flag) unless this run can continue ``ckpt``."""
    was = ckpt.identity
    check_same_kind_of_run(was, run, path)
    if was.layout != run.layout:
        raise ValueError(f"checkpoint: {path} was written with --layout {was.layout}, this run has --layout "
                         f"{run.layout}; resume with --layout {was.layout}")
    difference = first_difference(was.data, run.data)
    if difference is not None:
        key, old, new = difference
        if in_one_process(run):
            where, advice = f"--dataset {run.data['dataset']}", "the same --dataset (and -o options)"
        else:
            where, advice = f"--partitions {run.partition['path']}", "a partition of the same dataset"
        raise ValueError(f"checkpoint: {path} was written on another dataset ({key}={old!r}, this run's {where} has "
                         f"{key}={new!r}); resume with {advice}")
    check_same_settings(path, was.signature, run.signature)
    if not same_partition(was, run):
        workers = f"{was.world_size} worker{'' if was.world_size == 1 else 's'}"
        where = f"{workers} on --partitions {was.partition['path']}"
        if not layout_spec(run.layout).repartitionable:
            raise ValueError(f"checkpoint: {path} was written by {where} (another partition or worker count); "
                             f"--layout {run.layout} resumes only on the same partition with the same worker count "
                             f"(--layout {layouts_with('repartitionable')} can change them at an epoch boundary)")
        if was.signature["model"].get("embedding_rows"):
            raise ValueError(f"checkpoint: {path} was written by {where} (another partition or worker count); a typed "
                             "model's embeddings (its node types without features) hold a row per node id, which "
                             "another partition numbers otherwise: resume on the same --partitions and worker count")
        if ckpt.step > 0:
            raise ValueError(f"checkpoint: {path} was written mid-epoch (epoch {ckpt.epoch}, step {ckpt.step}) by "
                             f"{where}; a mid-epoch checkpoint resumes only with the same --partitions and worker "
                             f"count (--nproc-per-node)")
    if ckpt.epoch >= epochs:
        raise ValueError(f"epochs: {path} already holds {ckpt.epoch} trained epochs; pass --epochs above "
                         f"{ckpt.epoch} to train more")


def in_one_process(identity: RunIdentity) -> bool:
    return identity.layout == SINGLE.name


def check_same_kind_of_run(was: RunIdentity, run: RunIdentity, path: Path) -> None:
    """One process and a torchrun launch read the same checkpoints, but neither continues the other's run
    (the same bits would need the same layout)."""
    if in_one_process(was) and not in_one_process(run):
        raise ValueError(f"checkpoint: {path} was written by a single-process run (--dataset {was.data['dataset']}); "
                         "resume it without --partitions")
    if in_one_process(run) and not in_one_process(was):
        raise ValueError(f"checkpoint: {path} was written by a distributed run ({was.world_size} workers, --layout "
                         f"{was.layout}); resume it with torchrun and --partitions")


def same_partition(a: RunIdentity, b: RunIdentity) -> bool:
    """The same partition directory contents (hence the same worker count): the run resumes bit for bit."""
    return a.partition["manifest_sha256"] == b.partition["manifest_sha256"] and a.world_size == b.world_size


def check_checkpoint_at_launch(path: str | Path | None, *, resume: bool | str, overwrite: bool, every: int | None,
                               rank: int, run: RunIdentity, epochs: int) -> Path | None:
    """The checks of ``--checkpoint``, ``--resume`` and ``--checkpoint-every`` before joining the run; on
    rank 0, the checkpoint file to resume from (the newest complete one; None: start afresh).

    Rank 0 writes and reads the checkpoint file (the other workers receive its contents from rank 0,
    so another machine needs no copy): only rank 0 checks the file itself.
    """
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every: expected an int >= 1 (--checkpoint-every), got {every!r}")
        if path is None:
            raise ValueError("checkpoint_every: --checkpoint-every needs --checkpoint FILE, where to save")
    if path is None or rank != 0:
        if path is None:
            check_run_outputs(metrics_out=None, checkpoint=None, resume=resume, overwrite=overwrite)
        return None
    check_run_outputs(metrics_out=None, checkpoint=path, resume=resume, overwrite=overwrite)
    found = newest_complete(path) if resume else None
    if found is None:
        return None
    if found.note:
        print(found.note, file=sys.stderr, flush=True)
    check_resume(decode(found.payload), found.path, run, epochs)
    return found.path


def state_fingerprint(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """sha256 of every tensor (and number) of the model's and the optimizer's state, in order."""
    digest = hashlib.sha256()

    def add(value) -> None:
        if isinstance(value, torch.Tensor):
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            for key in value:
                digest.update(str(key).encode())
                add(value[key])
        elif isinstance(value, (list, tuple)):
            for item in value:
                add(item)
        else:
            digest.update(repr(value).encode())

    add(model.state_dict())
    add(optimizer.state_dict())
    return digest.hexdigest()


def _to_bytes(obj) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes(data: torch.Tensor):
    # weights_only: what travels is data (tensors, numbers, strings, containers), never code.
    return torch.load(io.BytesIO(data.cpu().numpy().tobytes()), map_location="cpu", weights_only=True)


def gather_to_rank0(comm: Comm, obj) -> list | None:
    """Every worker's ``obj`` (tensors, numbers, strings, containers), in rank order, on rank 0; None
    elsewhere. Collective: one all-to-all (category ``"checkpoint"``)."""
    mine, nothing = _to_bytes(obj), torch.zeros(0, dtype=torch.uint8)
    # Collective: each worker's bytes to rank 0.
    received = comm.all_to_allv([mine if q == 0 else nothing for q in range(comm.world_size)], "checkpoint")
    return [_from_bytes(r) for r in received] if comm.rank == 0 else None


def receive_checkpoint(comm: Comm, path: Path | None) -> DistCheckpoint | None:
    """Rank 0 reads the checkpoint it chose at launch and sends it to every worker; None on every worker
    when rank 0 has none (``--resume auto`` before the first save). Collective: one all-to-all (category
    ``"setup"``)."""
    nothing = torch.zeros(0, dtype=torch.uint8)
    send = [nothing] * comm.world_size
    if comm.rank == 0 and path is not None:
        data = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8)
        send = [data] * comm.world_size
    # Collective: rank 0's file to every worker (rank 0 included: one code path).
    received = comm.all_to_allv(send, "setup")[0]
    if received.numel() == 0:
        return None
    return decode(decode_payload(received.cpu().numpy().tobytes(), path or "rank 0's checkpoint"))


class Checkpointer:
    """Saves the run's checkpoint with rank 0 (every worker takes part: the saves are collective).

    Args:
        path: the checkpoint file (``--checkpoint``).
        every: also save after every this many iterations, counted from the first epoch (None: epochs only).
        identity: the run, written into the checkpoint.
        comm: the training Comm.
        num_batches: iterations per epoch.
    """

    def __init__(self, path: str | Path, every: int | None, identity: RunIdentity, comm: Comm,
                 num_batches: int) -> None:
        self.path, self.every, self.identity, self.comm, self.num_batches = Path(path), every, identity, comm, num_batches

    def due(self, epoch: int, steps_done: int) -> bool:
        """A mid-epoch save after ``steps_done`` iterations of ``epoch`` (the epoch's end saves anyway)."""
        return (self.every is not None and steps_done < self.num_batches
                and (epoch * self.num_batches + steps_done) % self.every == 0)

    def save(self, model, optimizer, *, epoch: int, step: int, history: list[dict], worker_state: dict,
             layout_state: dict, best: dict | None = None, scaler_state: dict | None = None) -> None:
        """Check that every worker holds rank 0's model and optimizer, then rank 0 writes the checkpoint
        (with every worker's ``worker_state`` when ``step`` > 0, the best epoch's weights ``best`` and the
        gradient scaler's state ``scaler_state``, the same on every worker).
        Every worker stops with rank 0's message if either fails. Collective: one all-to-all and one agree
        (category ``"checkpoint"``: a peer that dies meanwhile is reported as dying during a save), left out
        of the iterations' accounting."""
        def checkpoint(workers: list[dict]) -> DistCheckpoint:
            return DistCheckpoint(identity=self.identity, epoch=epoch, step=step, num_batches=self.num_batches,
                                  # CPU tensors: the checkpoint loads on any device (and on a machine with none).
                                  model_state=on_host(model.state_dict()),
                                  optimizer_state=on_host(optimizer.state_dict()),
                                  history=history, workers=workers if step else [], layout_state=layout_state,
                                  best=best, scaler_state=scaler_state)

        if self.comm.world_size == 1:
            # One worker: no copy to compare and nobody to tell; a failed write is this process's own error
            # (an OSError naming the file).
            save_dist_checkpoint(self.path, checkpoint([worker_state]))
            return
        fingerprint = state_fingerprint(model, optimizer)
        gathered = gather_to_rank0(self.comm, {"fingerprint": fingerprint, "state": worker_state if step else {}})
        error = ""
        if self.comm.rank == 0:
            differing = [rank for rank, got in enumerate(gathered) if got["fingerprint"] != fingerprint]
            if differing:
                error = (f"checkpoint: the model or optimizer of rank {differing} differs from rank 0's after epoch "
                         f"{epoch} step {step}; not saved")
            else:
                try:
                    save_dist_checkpoint(self.path, checkpoint([got["state"] for got in gathered]))
                except OSError as err:
                    error = f"checkpoint: cannot write {self.path}: {err}"
        self.comm.agree(not error, error, "checkpoint")  # collective: every worker stops if rank 0 could not save
        self.comm.stats.snapshot_and_reset()  # a save belongs to no iteration's communication
