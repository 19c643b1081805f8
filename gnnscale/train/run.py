"""Build everything one training run needs from a dataset and two configs, run it, report it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from gnnscale.graph.dataset import NodeDataset
from gnnscale.nn import ModelConfig, build_model
from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling import BatchSampler, NeighborSampler, derive_key, set_sampler_threads
from gnnscale.sampling.keys import STREAM_INIT
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.train.checkpoint import Checkpoint, load_checkpoint, save_checkpoint, save_model
from gnnscale.train.checks import check_run_outputs
from gnnscale.train.config import TrainConfig, check_sampler_fits_model
from gnnscale.train.loop import TrainData, fit
from gnnscale.train.memory import keep_freed_memory
from gnnscale.train.metrics import EpochMetrics, write_json_atomic


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

    def to_json(self) -> dict:
        return asdict(self)


def train_data_from(dataset: NodeDataset) -> TrainData:
    return TrainData(
        features=dataset.features,  # numpy, in memory or memory-mapped: gathered by a numba kernel
        labels=torch.from_numpy(np.asarray(dataset.labels)),
        train_idx=torch.from_numpy(np.asarray(dataset.train_idx)),
        val_idx=torch.from_numpy(np.asarray(dataset.val_idx)),
        test_idx=torch.from_numpy(np.asarray(dataset.test_idx)),
    )


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam, fused into one kernel per step on CPU (instead of ~5 small ops per parameter tensor)."""
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def run_signature(dataset: NodeDataset, model_cfg: ModelConfig, train_cfg: TrainConfig) -> dict:
    """Settings a checkpoint must share with the run that resumes it: all but those that cannot change
    the result (the epoch count, thread count and prefetch depth)."""
    train = {k: v for k, v in asdict(train_cfg).items() if k not in RESUMABLE_CHANGES}
    return {"dataset": dataset.name, "num_nodes": dataset.graph.num_nodes, "model": asdict(model_cfg),
            "train": train}


def run_training(dataset: NodeDataset, model_cfg: ModelConfig, train_cfg: TrainConfig, *,
                 metrics_out: str | Path | None = None, checkpoint: str | Path | None = None,
                 resume: bool = False, progress: bool = True, overwrite: bool = False,
                 model_out: str | Path | None = None) -> TrainReport:
    """Train ``model_cfg`` on ``dataset`` with ``train_cfg``; optionally checkpoint each epoch and resume,
    and write the trained model's ``state_dict`` to ``model_out``.

    An existing ``checkpoint`` is continued (``resume``) or replaced (``overwrite``), and an existing
    ``metrics_out`` replaced only with ``overwrite``; otherwise a ValueError before training starts.
    """
    if model_cfg.num_layers != train_cfg.num_layers:
        raise ValueError(f"fanouts: {train_cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    check_run_outputs(metrics_out=metrics_out, checkpoint=checkpoint, resume=resume, overwrite=overwrite)
    check_sampler_fits_model(train_cfg.sampler, model_cfg.name)
    keep_freed_memory()  # before the loader thread starts: large tensors are reused, not faulted in anew
    data = train_data_from(dataset)
    torch.set_num_threads(train_cfg.threads)
    set_sampler_threads(train_cfg.threads)
    torch.manual_seed(derive_key(train_cfg.seed, stream=STREAM_INIT))
    model = build_model(model_cfg)
    optimizer = build_optimizer(model, train_cfg)
    signature = run_signature(dataset, model_cfg, train_cfg)
    history: list[dict] = []
    start_epoch = 0
    if resume:
        ckpt = load_checkpoint(checkpoint, signature)
        if ckpt.epochs_done >= train_cfg.epochs:
            raise ValueError(f"epochs: {checkpoint} already holds {ckpt.epochs_done} trained epochs; pass --epochs "
                             f"above {ckpt.epochs_done} to train more")
        model.load_state_dict(ckpt.model_state)
        optimizer.load_state_dict(ckpt.optimizer_state)
        history, start_epoch = ckpt.history, ckpt.epochs_done
        if progress:
            print(f"resuming from {checkpoint}: {start_epoch} of {train_cfg.epochs} epochs done, continuing at "
                  f"epoch {start_epoch}", flush=True)

    def on_epoch_end(epoch: int, metrics: EpochMetrics) -> None:
        history.append(metrics.to_json())
        if checkpoint is not None:
            save_checkpoint(checkpoint, Checkpoint(epochs_done=epoch + 1, model_state=model.state_dict(),
                                                   optimizer_state=optimizer.state_dict(),
                                                   run_signature=signature, history=history))
        if progress:
            print(f"epoch {epoch:3d}  loss {metrics.loss:.4f}  train {metrics.train_acc:.4f}  "
                  f"val {metrics.val_acc:.4f}  test {metrics.test_acc:.4f}  "
                  f"{metrics.epoch_s:.1f}s (sample {metrics.sample_s:.1f}, gather {metrics.gather_s:.1f}, "
                  f"fwd+bwd {metrics.forward_backward_s:.1f}, wait {metrics.wait_s:.1f})  "
                  f"{metrics.sampled_edges_per_s / 1e6:.1f}M edges/s, "
                  f"{metrics.seconds_per_bulk * 1e3:.1f} ms per bulk of {train_cfg.bulk}",
                  flush=True)

    train_sampler, eval_sampler = build_samplers(dataset.graph, model_cfg, train_cfg)
    fit(model, optimizer, train_sampler, eval_sampler, data, train_cfg, start_epoch=start_epoch,
        on_epoch_end=on_epoch_end, progress=progress)
    report = summarize(history)
    if metrics_out is not None:
        write_json_atomic(metrics_out, {"dataset": dataset.summary(), "model": asdict(model_cfg),
                                        "train": asdict(train_cfg), **report.to_json()})
    if model_out is not None:
        save_model(model_out, model)
    return report


def build_samplers(graph: CSCGraph, model_cfg: ModelConfig, cfg: TrainConfig) -> tuple[BatchSampler, BatchSampler]:
    """The training sampler ``cfg.sampler`` names, and the inference sampler.

    Inference uses neighbor sampling with the inference fanouts: the fused kernel, or the two-step
    reference when training with it. The matrix sampler draws the fused kernel's blocks, so it would
    only be slower there; LADIES models are evaluated on (full, with fanouts above the largest
    degree) neighborhoods, as the LADIES paper evaluates on the whole graph.
    """
    eval_method = "two_step" if cfg.sampler == "two_step" else "fused"
    eval_sampler = NeighborSampler(graph, cfg.inference_fanouts, method=eval_method)
    if cfg.sampler == "matrix":
        return MatrixSampler(graph, cfg.fanouts, bulk=cfg.bulk, replace=cfg.replace), eval_sampler
    if cfg.sampler == "ladies":
        # The operator LADIES estimates is the layer's own: D~^-1 (A + I) for GCN, D^-1 A for SAGE's mean.
        sizes = (cfg.ladies_layer_size,) * model_cfg.num_layers
        return LadiesSampler(graph, sizes, bulk=cfg.bulk, self_loops=model_cfg.name == "gcn"), eval_sampler
    return NeighborSampler(graph, cfg.fanouts, replace=cfg.replace, method=cfg.sampler), eval_sampler


def summarize(history: list[dict]) -> TrainReport:
    if not history:
        raise ValueError("epochs: no epoch was trained (the checkpoint already has every epoch?)")
    # NaN validation accuracy (no validation nodes) never wins: fall back to the last epoch.
    scored = [h for h in history if not math.isnan(h["val_acc"])] or history[-1:]
    best = max(scored, key=lambda h: (h["val_acc"], h["epoch"]))
    return TrainReport(history=history, best_epoch=best["epoch"], best_val_acc=best["val_acc"],
                       test_acc_at_best_val=best["test_acc"], final_test_acc=history[-1]["test_acc"])
