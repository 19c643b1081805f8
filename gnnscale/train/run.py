"""Build everything one training run needs from a dataset and two configs, run it, report it."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_single_process, shutdown
from gnnscale.graph.dataset import NodeDataset, check_finite_features
from gnnscale.inference.evaluate import evaluate_full
from gnnscale.inference.metrics import check_metric
from gnnscale.nn import ModelConfig, build_model
from gnnscale.nn.model_file import DatasetFacts
from gnnscale.sampling import derive_key, set_sampler_threads
from gnnscale.sampling.keys import STREAM_INIT
from gnnscale.train.checkpoint import (KIND_SINGLE, Checkpoint, load_checkpoint, newest_complete, save_checkpoint,
                                       save_model)
from gnnscale.train.checks import check_run_outputs
from gnnscale.train.config import TrainConfig, check_sampler_fits_model
from gnnscale.train.layouts.single import build_single_process
from gnnscale.train.loop import Start, agreed_num_batches, build_optimizer, train_epochs
from gnnscale.train.memory import keep_freed_memory
from gnnscale.train.metrics import write_json_atomic


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


def run_signature(dataset: NodeDataset, model_cfg: ModelConfig, train_cfg: TrainConfig) -> dict:
    """Settings a checkpoint must share with the run that resumes it: all but those that cannot change
    the result (the epoch count, thread count and prefetch depth)."""
    train = {k: v for k, v in asdict(train_cfg).items() if k not in RESUMABLE_CHANGES}
    return {"dataset": dataset.name, "num_nodes": dataset.graph.num_nodes, "model": asdict(model_cfg),
            "train": train}


def run_training(dataset: NodeDataset, model_cfg: ModelConfig, train_cfg: TrainConfig, *,
                 metrics_out: str | Path | None = None, checkpoint: str | Path | None = None,
                 resume: bool = False, progress: bool = True, overwrite: bool = False,
                 model_out: str | Path | None = None, full_eval: str | None = None) -> TrainReport:
    """Train ``model_cfg`` on ``dataset`` with ``train_cfg`` in this process; optionally checkpoint each epoch
    and resume, and write the trained model's ``state_dict`` to ``model_out``.

    The loop is the distributed one (:mod:`gnnscale.train.loop`) with one worker: the one-part layout
    (:mod:`gnnscale.train.layouts.single`) on a process group of this process alone.

    An existing ``checkpoint`` is continued (``resume``) or replaced (``overwrite``), and an existing
    ``metrics_out`` replaced only with ``overwrite``; otherwise a ValueError before training starts.

    ``full_eval`` (a metric name, ``--eval full``): after the last epoch, score the validation and
    test nodes by layer-wise full-neighborhood inference (:func:`~gnnscale.inference.evaluate.evaluate_full`)
    beside the sampled per-epoch evaluation; the report's ``full_eval`` holds the result.
    """
    if full_eval is not None:
        check_metric(full_eval, dataset.num_classes)
    if model_cfg.num_layers != train_cfg.num_layers:
        raise ValueError(f"fanouts: {train_cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    check_run_outputs(metrics_out=metrics_out, checkpoint=checkpoint, resume=resume, overwrite=overwrite,
                      model_out=model_out)
    check_sampler_fits_model(train_cfg.sampler, model_cfg.name)
    if np.asarray(dataset.train_idx).size == 0:
        raise ValueError("train_idx: the training set is empty; nothing to train on")
    check_finite_features(dataset.features)
    signature = run_signature(dataset, model_cfg, train_cfg)
    found = newest_complete(checkpoint, KIND_SINGLE) if resume else None
    if found is not None and found.note:
        print(found.note, file=sys.stderr, flush=True)
    ckpt = None if found is None else load_checkpoint(found.path, signature, found.payload)
    if ckpt is not None and ckpt.epochs_done >= train_cfg.epochs:
        raise ValueError(f"epochs: {checkpoint} already holds {ckpt.epochs_done} trained epochs; pass --epochs "
                         f"above {ckpt.epochs_done} to train more")
    keep_freed_memory()  # before the loader thread starts: large tensors are reused, not faulted in anew
    torch.set_num_threads(train_cfg.threads)
    set_sampler_threads(train_cfg.threads)
    ctx = init_single_process()
    try:
        comm = Comm(ctx)
        loader = comm.new_group()  # the loading stage's group, as in a distributed run
        layout = build_single_process(dataset, model_cfg, train_cfg, loader)
        torch.manual_seed(derive_key(train_cfg.seed, stream=STREAM_INIT))
        model = build_model(model_cfg)
        optimizer = build_optimizer(model, train_cfg)
        start = Start()
        if ckpt is not None:
            model.load_state_dict(ckpt.model_state)
            optimizer.load_state_dict(ckpt.optimizer_state)
            start = Start(epoch=ckpt.epochs_done, history=list(ckpt.history))
            if progress:
                print(f"resuming from {found.path}: {ckpt.epochs_done} of {train_cfg.epochs} epochs done, continuing "
                      f"at epoch {ckpt.epochs_done}", flush=True)
        saver = None if checkpoint is None else EpochCheckpointer(checkpoint, signature)
        num_batches = agreed_num_batches(layout, comm)
        header = {"dataset": dataset.summary(), "model": asdict(model_cfg), "train": asdict(train_cfg)}
        history = train_epochs(model, optimizer, layout, comm, train_cfg, layout.part, num_batches, start, saver,
                               progress, on_epoch_end=metrics_writer(metrics_out, header))
    finally:
        shutdown()
    report = summarize(history)
    if full_eval is not None:
        report = replace(report, full_eval=evaluate_full(model, dataset, full_eval))
        if metrics_out is not None:
            write_json_atomic(metrics_out, {**header, **report.to_json()})
    if model_out is not None:
        save_model(model_out, model, model_cfg, DatasetFacts(name=dataset.name, feature_dim=dataset.feature_dim,
                                                       num_classes=dataset.num_classes,
                                                       num_nodes=dataset.graph.num_nodes))
    return report


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
