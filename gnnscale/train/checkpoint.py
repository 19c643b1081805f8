"""Atomic checkpoints and resuming.

Every random choice of training is a function of ``(seed, epoch, step)`` (sampling keys, batch
order, and torch's RNG re-seeded at each iteration), so a run resumed from the checkpoint of epoch
``e`` continues exactly as the uninterrupted run would have. Distributed runs write checkpoints of
their own kind (:mod:`gnnscale.train.dist_checkpoint`); each kind refuses the other's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from gnnscale.files import atomic_write

CHECKPOINT_VERSION = 1
KIND_SINGLE = "single"  # written by run_training (one process)
KIND_DISTRIBUTED = "distributed"  # written by rank 0 of run_distributed_training


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """What a checkpoint holds.

    Args:
        epochs_done: number of completed epochs (training resumes at this epoch index).
        model_state, optimizer_state: ``state_dict()`` of each.
        run_signature: the settings that must match to resume (dataset, model, training config
            except the epoch count), as a JSON-able dict.
        history: per-epoch metrics dicts so far.
    """

    epochs_done: int
    model_state: dict
    optimizer_state: dict
    run_signature: dict
    history: list[dict]


def save_checkpoint(path: str | Path, ckpt: Checkpoint) -> None:
    """Write atomically (:func:`write_atomic`): a run killed mid-write leaves the previous checkpoint intact."""
    write_atomic(path, {
        "version": CHECKPOINT_VERSION,
        "kind": KIND_SINGLE,
        "epochs_done": ckpt.epochs_done,
        "model_state": ckpt.model_state,
        "optimizer_state": ckpt.optimizer_state,
        "run_signature": ckpt.run_signature,
        "history": ckpt.history,
    })


def write_atomic(path: str | Path, payload: object) -> None:
    """``torch.save(payload)`` to a temporary file in the same directory, fsync, then rename over ``path``."""
    atomic_write(path, lambda f: torch.save(payload, f))


def read_payload(path: str | Path, kind: str) -> dict:
    """The dict a checkpoint file holds, of ``kind`` (:data:`KIND_SINGLE` or :data:`KIND_DISTRIBUTED`).

    Raises ValueError naming ``checkpoint`` for a missing, unreadable or foreign file, or one written by
    the other kind of run (a single-process checkpoint cannot resume a distributed run, nor the reverse).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no file at {path} to resume from")
    try:
        # weights_only: a checkpoint is data, never code to run.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise ValueError(f"checkpoint: {path} is not a readable gnnscale checkpoint ({err})") from err
    if not isinstance(payload, dict) or payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"checkpoint: {path} has no gnnscale checkpoint version {CHECKPOINT_VERSION}")
    written = payload.get("kind", KIND_SINGLE)  # checkpoints from before distributed ones have no kind
    if written != kind:
        if written == KIND_DISTRIBUTED:
            raise ValueError(f"checkpoint: {path} was written by a distributed run ({payload.get('world_size')} "
                             f"workers, --layout {payload.get('layout')}); resume it with torchrun and --partitions")
        raise ValueError(f"checkpoint: {path} was written by a single-process run (--dataset "
                         f"{payload.get('run_signature', {}).get('dataset')}); resume it without --partitions")
    return payload


def load_checkpoint(path: str | Path, run_signature: dict) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint` and check it belongs to this run.

    Raises ValueError naming ``checkpoint`` for a missing, unreadable or mismatching file.
    """
    path = Path(path)
    payload = read_payload(path, KIND_SINGLE)
    saved = payload["run_signature"]
    check_same_settings(path, saved, run_signature)
    return Checkpoint(epochs_done=int(payload["epochs_done"]), model_state=payload["model_state"],
                      optimizer_state=payload["optimizer_state"], run_signature=saved,
                      history=list(payload["history"]))


def check_same_settings(path: Path, saved: dict, current: dict) -> None:
    """ValueError naming the first setting (and its flag) where ``saved`` and ``current`` differ."""
    difference = first_difference(saved, current)
    if difference is not None:
        key, was, now = difference
        raise ValueError(f"checkpoint: {path} was written with {key}={was!r}, this run has {key}={now!r}; resume "
                         f"with the same {flag_of(key)} as the run that wrote it")


# Settings whose command-line flag is not "--" + the field name with dashes.
_FLAGS = {"dataset": "--dataset", "num_nodes": "--dataset (and -o options)", "name": "--model",
          "hidden_dim": "--hidden", "in_dim": "--dataset", "num_classes": "--dataset",
          "num_layers": "--fanouts/--layers", "evaluate": "--no-eval"}


def flag_of(key: str) -> str:
    """The CLI flag that sets a run-signature entry (``train.lr`` -> ``--lr``)."""
    leaf = key.rsplit(".", 1)[-1]
    return _FLAGS.get(leaf, "--" + leaf.replace("_", "-"))


def first_difference(saved, current, prefix: str = "") -> tuple[str, object, object] | None:
    """The first (dotted key, saved value, current value) where two nested dicts differ, or None."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            found = first_difference(saved.get(key), current.get(key), f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    return None if saved == current else (prefix.rstrip("."), saved, current)
def save_model(path: str | Path, model: torch.nn.Module) -> None:
    """Write ``model.state_dict()`` (``torch.load`` reads it back) atomically, like :func:`save_checkpoint`."""
    atomic_write(path, lambda f: torch.save(model.state_dict(), f))
