"""Training in one process: from a model and a dataset (:func:`train_in_process`, what ``fit`` runs for a
dataset), build everything the run needs, run it, report it; and what every run shares (its outputs,
its report, the metrics file)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_single_process, shutdown
from gnnscale.graph.dataset import NodeDataset, check_finite_features
from gnnscale.inference.evaluate import evaluate_full
from gnnscale.inference.metrics import check_metric
from gnnscale.nn import ModelConfig
from gnnscale.nn.models import builtin_config
from gnnscale.nn.model_file import DatasetFacts
from gnnscale.sampling import set_sampler_threads
from gnnscale.train.checkpoint import (KIND_SINGLE, Checkpoint, load_checkpoint, newest_complete, save_checkpoint,
                                       save_model)
from gnnscale.train.checks import check_run_outputs
from gnnscale.train.config import TrainConfig, check_sampler_fits_model
from gnnscale.train.inputs import ModelInputs, model_inputs, model_signature, seeded_model
from gnnscale.train.layouts.single import build_single_process
from gnnscale.train.loop import Start, agreed_num_batches, build_optimizer, train_epochs
from gnnscale.train.memory import keep_freed_memory
from gnnscale.train.metrics import write_json_atomic
from gnnscale.settings import setting


# Settings a resumed run may change: they do not change what is computed.
RESUMABLE_CHANGES = ("epochs", "threads", "prefetch")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainReport:
    """The outcome of a run. ``best_*`` is the epoch with the highest validation accuracy (model
    selection as in Kipf & Welling and Veličković et al.); ``history`` has every epoch, resumed ones too."""

    history: list[dict]
    best_epoch: int
    best_val_acc: float
    test_acc_at_best_val: float
    final_test_acc: float
    full_eval: dict | None = None  # --eval full: {"metric", "val", "test", "seconds"} after the last epoch

    def to_json(self) -> dict:
        out = asdict(self)
        if self.full_eval is None:
            del out["full_eval"]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutputs:
    """Where a run writes (a distributed run: rank 0) and what it resumes.

    Args:
        metrics_out: the metrics JSON, rewritten after every epoch.
        model_out: the trained model's file (built-in models: :mod:`gnnscale.nn.model_file`).
        checkpoint: saved after every epoch (distributed: :mod:`gnnscale.train.dist_checkpoint`).
        resume: continue the run saved in ``checkpoint`` (distributed: rank 0 reads it and sends it to every
            worker); ``"auto"``: continue it if there is one, else start afresh (a run torchrun restarts).
        checkpoint_every: distributed: also save after every this many iterations (None: at epoch ends only).
        overwrite: replace an existing ``metrics_out`` or ``checkpoint`` (else an error at start-up).
        full_eval: ``--eval full``'s metric (accuracy or f1_macro): after the last epoch, score the
            validation and test nodes by layer-wise inference (built-in models); None: no such score.
    """

    metrics_out: str | Path | None = setting(None, "write per-epoch metrics as JSON here", metavar="FILE")
    model_out: str | Path | None = setting(None, "write the trained model here: weights, model config and dataset "
                                                 "facts (gnnscale.load_model and gnnscale predict --model read it)",
                                           name="--save-model", metavar="FILE")
    checkpoint: str | Path | None = setting(None, "save a checkpoint here after every epoch (distributed: rank 0 "
                                                  "writes it)", metavar="FILE")
    resume: bool | str = setting(False, "continue the run saved in --checkpoint (the newest complete one: a damaged "
                                        "file falls back to the previous save); --resume auto also starts afresh "
                                        "when there is none yet, so that torchrun --max-restarts can restart a "
                                        "failed run with the same command", choices=("auto",), metavar="auto")
    checkpoint_every: int | None = setting(None, "distributed: also save --checkpoint after every N iterations (a "
                                                 "resume continues mid-epoch)", metavar="N")
    overwrite: bool = setting(False, "replace an existing --checkpoint (without --resume) or --metrics-out file")
    full_eval: str | None = None


def check_model_outputs(model: ModelConfig | str | None, outputs: RunOutputs) -> None:
    """What only a built-in model (its config or name; None: a model of one's own) can give: its
    self-describing file and layer-wise full evaluation."""
    if model is not None:
        return
    if outputs.model_out is not None:
        raise ValueError("model_out: the model file records a built-in model's config, which a model of your own "
                         "has none of; fit trains your model in place: save it with torch.save(model.state_dict(), "
                         "path) after fit returns (on rank 0)")
    if outputs.full_eval is not None:
        raise ValueError("full_eval: layer-wise full-graph inference runs gnnscale's own layers one at a time; a "
                         "model of your own is evaluated on sampled neighborhoods every epoch (drop full_eval)")


def check_inputs_fit_sampler(inputs: ModelInputs, cfg: TrainConfig) -> None:
    """PyG's ``(x, edge_index)`` has no edge weights, which LADIES' blocks carry."""
    if inputs.name == "pyg" and cfg.sampler == "ladies":
        raise ValueError("sampler: --sampler ladies gives weighted blocks, and a PyG model's (x, edge_index) batch "
                         "has no edge weights; train it with sampler fused, two_step or matrix")


def run_signature(dataset: NodeDataset, model: dict, train_cfg: TrainConfig) -> dict:
    """Settings a checkpoint must share with the run that resumes it: all but those that cannot change
    the result (the epoch count, thread count and prefetch depth). ``model``: the model's
    :func:`~gnnscale.train.inputs.model_signature`."""
    train = {k: v for k, v in asdict(train_cfg).items() if k not in RESUMABLE_CHANGES}
    return {"dataset": dataset.name, "num_nodes": dataset.graph.num_nodes, "model": model, "train": train}


def run_training(dataset: NodeDataset, model_cfg: ModelConfig, train_cfg: TrainConfig, *,
                 metrics_out: str | Path | None = None, checkpoint: str | Path | None = None,
                 resume: bool = False, progress: bool = True, overwrite: bool = False,
                 model_out: str | Path | None = None, full_eval: str | None = None) -> TrainReport:
    """Train the built-in model ``model_cfg`` (initialised from ``train_cfg.seed``) on ``dataset`` in this
    process: :func:`train_in_process`, which ``gnnscale.train.fit`` runs for a dataset, on that model."""
    outputs = RunOutputs(metrics_out=metrics_out, checkpoint=checkpoint, resume=resume, overwrite=overwrite,
                         model_out=model_out, full_eval=full_eval)
    return train_in_process(seeded_model(model_cfg, train_cfg.seed), dataset, "blocks", train_cfg, outputs,
                            progress=progress)


def train_in_process(model: nn.Module, dataset: NodeDataset, inputs: str, train_cfg: TrainConfig,
                     outputs: RunOutputs = RunOutputs(), *, progress: bool = True) -> TrainReport:
    """Train ``model`` (in place) on ``dataset`` with ``train_cfg`` in this process; optionally checkpoint
    each epoch and resume, and (a built-in model) write the trained model's file to ``outputs.model_out``.

    The loop is the distributed one (:mod:`gnnscale.train.loop`) with one worker: the one-part layout
    (:mod:`gnnscale.train.layouts.single`) on a process group of this process alone.

    An existing ``checkpoint`` is continued (``resume``) or replaced (``overwrite``), and an existing
    ``metrics_out`` replaced only with ``overwrite``; otherwise a ValueError before training starts.

    ``outputs.full_eval`` (a metric name, ``--eval full``; built-in models): after the last epoch, score
    the validation and test nodes by layer-wise full-neighborhood inference
    (:func:`~gnnscale.inference.evaluate.evaluate_full`) beside the sampled per-epoch evaluation; the
    report's ``full_eval`` holds the result.
    """
    adapter = model_inputs(model, inputs)
    model_cfg = builtin_config(model)
    check_model_outputs(model_cfg, outputs)
    if outputs.checkpoint_every is not None:
        raise ValueError("checkpoint_every: --checkpoint-every is for distributed runs (--partitions); a "
                         "single-process run saves --checkpoint after every epoch")
    full_eval, checkpoint, metrics_out = outputs.full_eval, outputs.checkpoint, outputs.metrics_out
    if full_eval is not None:
        check_metric(full_eval, dataset.num_classes)
    if model_cfg is not None and model_cfg.num_layers != train_cfg.num_layers:
        raise ValueError(f"fanouts: {train_cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    check_run_outputs(metrics_out=metrics_out, checkpoint=checkpoint, resume=outputs.resume,
                      overwrite=outputs.overwrite, model_out=outputs.model_out)
    check_sampler_fits_model(train_cfg.sampler, None if model_cfg is None else model_cfg.name)
    check_inputs_fit_sampler(adapter, train_cfg)
    if np.asarray(dataset.train_idx).size == 0:
        raise ValueError("train_idx: the training set is empty; nothing to train on")
    check_finite_features(dataset.features)
    signature = run_signature(dataset, model_signature(model, adapter), train_cfg)
    found = newest_complete(checkpoint, KIND_SINGLE) if outputs.resume else None
    if found is not None and found.note:
        print(found.note, file=sys.stderr, flush=True)
    ckpt = None if found is None else load_checkpoint(found.path, signature, found.payload)
    if ckpt is not None and ckpt.epochs_done >= train_cfg.epochs:
        raise ValueError(f"epochs: {checkpoint} already holds {ckpt.epochs_done} trained epochs; pass --epochs "
                         f"above {ckpt.epochs_done} to train more")
    keep_freed_memory()  # before the loader thread starts: large tensors are reused, not faulted in anew
    torch.set_num_threads(train_cfg.threads)
    set_sampler_threads(train_cfg.threads)
    header = {"dataset": dataset.summary(), "model": signature["model"], "train": asdict(train_cfg)}
    with keep_caller_rng(model_cfg is None):
        ctx = init_single_process()
        try:
            comm = Comm(ctx)
            loader = comm.new_group()  # the loading stage's group, as in a distributed run
            layout = build_single_process(dataset, model_cfg, train_cfg, loader)
            optimizer = build_optimizer(model, train_cfg)
            start = Start()
            if ckpt is not None:
                model.load_state_dict(ckpt.model_state)
                optimizer.load_state_dict(ckpt.optimizer_state)
                start = Start(epoch=ckpt.epochs_done, history=list(ckpt.history))
                if progress:
                    print(f"resuming from {found.path}: {ckpt.epochs_done} of {train_cfg.epochs} epochs done, "
                          f"continuing at epoch {ckpt.epochs_done}", flush=True)
            saver = None if checkpoint is None else EpochCheckpointer(checkpoint, signature)
            num_batches = agreed_num_batches(layout, comm)
            history = train_epochs(model, optimizer, layout, adapter, comm, train_cfg, layout.part, num_batches,
                                   start, saver, progress, on_epoch_end=metrics_writer(metrics_out, header))
        finally:
            shutdown()
    report = summarize(history)
    if full_eval is not None:
        report = replace(report, full_eval=evaluate_full(model, dataset, full_eval))
        if metrics_out is not None:
            write_json_atomic(metrics_out, {**header, **report.to_json()})
    if outputs.model_out is not None:
        save_model(outputs.model_out, model, model_cfg, DatasetFacts(
            name=dataset.name, feature_dim=dataset.feature_dim, num_classes=dataset.num_classes,
            num_nodes=dataset.graph.num_nodes))
    return report


@contextmanager
def keep_caller_rng(fork: bool):
    """With ``fork``: torch's default generator, which the loop seeds before every step of a model of one's
    own (:mod:`gnnscale.train.inputs`), is back in the caller's state afterwards."""
    if not fork:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        yield


def metrics_writer(path: str | Path | None, header: dict) -> Callable[[list[dict]], None] | None:
    """Writes the metrics file after every epoch (atomically), so that a crash or Ctrl-C keeps the epochs
    done; a resumed run's history starts with the checkpoint's epochs, so it continues the same file."""
    if path is None:
        return None
    return lambda history: write_json_atomic(path, {**header, **summarize(history).to_json()})


class EpochCheckpointer:
    """The single-process :class:`~gnnscale.train.loop.Saver`: the whole run after every epoch."""

    def __init__(self, path: str | Path, signature: dict) -> None:
        self.path, self.signature = path, signature

    def due(self, epoch: int, steps_done: int) -> bool:
        return False  # epoch ends only

    def save(self, model, optimizer, *, epoch: int, step: int, history: list[dict], worker_state: dict,
             layout_state: dict) -> None:
        save_checkpoint(self.path, Checkpoint(epochs_done=epoch, model_state=model.state_dict(),
                                              optimizer_state=optimizer.state_dict(), run_signature=self.signature,
                                              history=history))


def summarize(history: list[dict]) -> TrainReport:
    if not history:
        raise ValueError("epochs: no epoch was trained (the checkpoint already has every epoch?)")
    # NaN validation accuracy (no validation nodes) never wins: fall back to the last epoch.
    scored = [h for h in history if not math.isnan(h["val_acc"])] or history[-1:]
    best = max(scored, key=lambda h: (h["val_acc"], h["epoch"]))
    return TrainReport(history=history, best_epoch=best["epoch"], best_val_acc=best["val_acc"],
                       test_acc_at_best_val=best["test_acc"], final_test_acc=history[-1]["test_acc"])
