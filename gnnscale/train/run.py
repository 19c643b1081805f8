"""What every run shares, in one process or many (:mod:`gnnscale.train.setup` runs it): its outputs, its
report, the checks of both, the metrics file."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.utils.deterministic

from gnnscale.nn import ModelConfig
from gnnscale.train.checkpoints.best import best_entry, score_keys
from gnnscale.train.metrics import write_json_atomic
from gnnscale.settings import setting

# Which epoch's weights ``--save-model`` writes (RunOutputs.save_model_at).
SAVE_MODEL_AT = ("best", "last")


class InterruptedRun(KeyboardInterrupt):
    """Ctrl-C during training, after the run kept what it could: ``saved`` says what, in a clause for the last
    line ("" where nothing more than the checkpoint and metrics files was written)."""

    def __init__(self, saved: str) -> None:
        super().__init__(saved)
        self.saved = saved


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainReport:
    """The outcome of a run. ``best_*`` is the epoch with the highest validation accuracy (model
    selection as in Kipf & Welling and Veličković et al.); ``history`` has every epoch, resumed ones too."""

    history: list[dict]
    best_epoch: int
    best_val_acc: float
    test_acc_at_best_val: float
    final_test_acc: float
    metric: str = "accuracy"  # what the best/final scores are: accuracy, or a link task's metric
    full_eval: dict | None = None  # --eval full: {"metric", "val", "test", "seconds"} after the last epoch
    saved_epoch: int | None = None  # the epoch whose weights model_out holds (None: no model file written)

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("full_eval", "saved_epoch"):  # only where the run has one
            if out[key] is None:
                del out[key]
        if self.metric == "accuracy":
            del out["metric"]  # a node task's file is as it was
        else:  # a link task's scores are named as what they are
            for key in ("best_val_acc", "test_acc_at_best_val", "final_test_acc"):
                out[key.replace("acc", "score")] = out.pop(key)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutputs:
    """Where a run writes (a distributed run: rank 0) and what it resumes.

    Args:
        metrics_out: the metrics JSON, rewritten after every epoch.
        model_out: the trained model's file (built-in models: :mod:`gnnscale.nn.model_file`).
        save_model_at: which epoch's weights ``model_out`` holds: ``"best"``, the best-validation epoch's (the
            report's ``best_epoch``), or ``"last"``, the last epoch's (the model as ``fit`` leaves it).
        checkpoint: saved after every epoch (:mod:`gnnscale.train.checkpoints.runs`).
        resume: continue the run saved in ``checkpoint`` (rank 0 reads it and sends it to every worker);
            ``"auto"``: continue it if there is one, else start afresh (a run torchrun restarts).
        checkpoint_every: also save after every this many iterations (None: at epoch ends only).
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
    checkpoint_every: int | None = setting(None, "also save --checkpoint after every N iterations (a resume "
                                                 "continues mid-epoch)", metavar="N")
    overwrite: bool = setting(False, "replace an existing --checkpoint (without --resume) or --metrics-out file")
    full_eval: str | None = None
    save_model_at: str = setting("best", "which epoch's weights --save-model writes: best (the best-validation "
                                         "epoch's, the one the final line reports) or last", choices=SAVE_MODEL_AT)

    def __post_init__(self) -> None:
        if self.save_model_at not in SAVE_MODEL_AT:
            raise ValueError(f"save_model_at: expected one of {SAVE_MODEL_AT} (the best-validation epoch's weights or "
                             f"the last epoch's), got {self.save_model_at!r}")


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


@contextmanager
def keep_caller_rng(fork: bool, device: torch.device):
    """With ``fork``: torch's generators, which the loop seeds before every step of a model of one's own
    (:mod:`gnnscale.train.inputs`), are back in the caller's state afterwards: the CPU's and those of
    :func:`forked_gpus` (the run trains on ``device``)."""
    if not fork:
        yield
        return
    with torch.random.fork_rng(devices=forked_gpus(device)):
        yield


def forked_gpus(device: torch.device) -> list[int]:
    """The GPUs whose generators a run on ``device`` must give back: every visible one when it trains on a GPU or
    CUDA is already initialised (``torch.manual_seed`` reseeds them all), none otherwise (forking them would
    initialise CUDA on a CPU run). Their states live on the host: forking them makes no CUDA context."""
    if device.type != "cuda" and not torch.cuda.is_initialized():
        return []
    return list(range(torch.cuda.device_count()))


def needs_deterministic_kernels(device: torch.device) -> bool:
    """Whether a run on ``device`` must switch torch to its deterministic kernels to train the same bit for bit
    every time (and resume exactly): on CUDA, ``index_add_`` (the torch-native aggregation) and the backward of
    ``index_select`` accumulate with float atomics otherwise, in whatever order the threads land. The CPU
    kernels (numba's and torch's) are deterministic as they are."""
    return device.type == "cuda"


# cuBLAS's deterministic workspace: torch refuses (here: warns about) cuBLAS products under deterministic mode
# without it. cuBLAS reads it once per process, at its first product: it helps where the run makes that one.
CUBLAS_WORKSPACE = ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@contextmanager
def deterministic_kernels(enabled: bool):
    """With ``enabled``: torch's deterministic algorithms for the run, the caller's settings back afterwards.

    ``warn_only``: an operation that has no deterministic CUDA kernel (in a model of one's own) warns, naming
    itself, rather than stopping the run. Memory that torch allocates is not filled first (deterministic mode
    would, at a cost per batch): the run's kernels write every element they allocate before reading it, so the
    fill changes no result."""
    if not enabled:
        yield
        return
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    name, value = CUBLAS_WORKSPACE
    workspace = os.environ.get(name)
    os.environ.setdefault(name, value)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
        if workspace is None:
            os.environ.pop(name, None)


def metrics_writer(path: str | Path | None, header: dict) -> Callable[[list[dict]], None] | None:
    """Writes the metrics file after every epoch (atomically), so that a crash or Ctrl-C keeps the epochs
    done; a resumed run's history starts with the checkpoint's epochs, so it continues the same file."""
    if path is None:
        return None
    return lambda history: write_json_atomic(path, {**header, **summarize(history).to_json()})


def summarize(history: list[dict]) -> TrainReport:
    if not history:
        raise ValueError("epochs: no epoch was trained (the checkpoint already has every epoch?)")
    best = best_entry(history)
    val, test = score_keys(best)
    return TrainReport(history=history, best_epoch=best["epoch"], best_val_acc=best[val],
                       test_acc_at_best_val=best[test], final_test_acc=history[-1][test],
                       metric=best.get("metric", "accuracy"))
