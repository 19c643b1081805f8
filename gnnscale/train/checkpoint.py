"""Atomic checkpoints and resuming.

Every random choice of training is a function of ``(seed, epoch, step)`` (sampling keys, batch
order, and torch's RNG re-seeded at each iteration), so a run resumed from the checkpoint of epoch
``e`` continues exactly as the uninterrupted run would have. Distributed runs write checkpoints of
their own kind (:mod:`gnnscale.train.dist_checkpoint`); each kind refuses the other's.

A checkpoint file is a magic string, the sha256 of what follows, and ``torch.save``'s bytes: a truncated
or altered file is found before anything is loaded. Every save keeps the one before it beside the file
(``<name>.prev``), so a damaged newest checkpoint, or a crash between the two renames of a save, still
leaves a complete one to resume from (:func:`newest_complete`).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from gnnscale.files import atomic_write, load_data
from gnnscale.nn.model_file import DatasetFacts, save_model_file
from gnnscale.nn.models import ModelConfig
from gnnscale.settings import flag_names
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.registry import option_classes

CHECKPOINT_VERSION = 2
MAGIC = b"GNNSCKP2"
DIGEST_BYTES = 32  # sha256
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
    """Write ``payload`` (checksummed) to a temporary file in the same directory, fsync, then rename it over
    ``path``; the file it replaces is kept as ``<name>.prev``."""
    data = encode_payload(payload)
    atomic_write(path, lambda f: f.write(data), keep_previous=previous_path(path))


def previous_path(path: str | Path) -> Path:
    """Where a save keeps the checkpoint it replaces."""
    path = Path(path)
    return path.with_name(path.name + ".prev")


def encode_payload(payload: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    return MAGIC + hashlib.sha256(body).digest() + body


def decode_payload(data: bytes, path: str | Path) -> dict:
    """The dict a checkpoint file's bytes hold; ValueError naming ``path`` for a foreign or damaged file."""
    head = len(MAGIC) + DIGEST_BYTES
    if len(data) < head or data[:len(MAGIC)] != MAGIC:
        raise ValueError(f"checkpoint: {path} is not a gnnscale checkpoint (version {CHECKPOINT_VERSION})")
    body = data[head:]
    if hashlib.sha256(body).digest() != data[len(MAGIC):head]:
        raise ValueError(f"checkpoint: {path} is damaged (its checksum does not match: truncated or altered)")
    try:
        payload = load_data(io.BytesIO(body))  # a checkpoint is data, never code to run
    except ValueError as err:
        raise ValueError(f"checkpoint: {path} is not a readable gnnscale checkpoint: {err}") from None
    if not isinstance(payload, dict) or payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"checkpoint: {path} has no gnnscale checkpoint version {CHECKPOINT_VERSION}")
    return payload


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """The checkpoint a run resumes from: its file, what it holds, and a line to print when it is not the
    newest one (the newest was missing or damaged)."""

    path: Path
    payload: dict
    note: str = ""


def newest_complete(path: str | Path, kind: str) -> Found | None:
    """The checkpoint at ``path`` or, when that one is missing or damaged, the previous one kept beside it;
    None when there is neither. ValueError when every file there is damaged or of the other kind."""
    path = Path(path)
    problems = []
    for candidate in (path, previous_path(path)):
        try:
            data = candidate.read_bytes() if candidate.is_file() else None
        except FileNotFoundError:  # renamed away by a save in another process since is_file()
            data = None
        if data is None:
            problems.append(f"{candidate} is missing")
            continue
        try:
            payload = decode_payload(data, candidate)
        except ValueError as err:  # damaged or foreign: the previous save may still be whole
            problems.append(str(err).removeprefix("checkpoint: "))
            continue
        check_kind(payload, candidate, kind)  # whole, but of the other kind of run: no fallback helps
        note = "" if candidate == path else f"checkpoint: {problems[0]}; resuming from the previous one, {candidate}"
        return Found(path=candidate, payload=payload, note=note)
    if all(p.endswith(" is missing") for p in problems):
        return None
    raise ValueError(f"checkpoint: no complete checkpoint to resume from ({'; '.join(problems)})")


def read_payload(path: str | Path, kind: str) -> dict:
    """The dict a checkpoint file holds, of ``kind`` (:data:`KIND_SINGLE` or :data:`KIND_DISTRIBUTED`).

    Raises ValueError naming ``checkpoint`` for a missing, unreadable or foreign file, or one written by
    the other kind of run (a single-process checkpoint cannot resume a distributed run, nor the reverse).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no file at {path} to resume from")
    payload = decode_payload(path.read_bytes(), path)
    return check_kind(payload, path, kind)


def check_kind(payload: dict, path: Path, kind: str) -> dict:
    """``payload`` when it was written by a run of ``kind``; else ValueError saying how to resume it."""
    written = payload.get("kind", KIND_SINGLE)  # checkpoints from before distributed ones have no kind
    if written != kind:
        if written == KIND_DISTRIBUTED:
            raise ValueError(f"checkpoint: {path} was written by a distributed run ({payload.get('world_size')} "
                             f"workers, --layout {payload.get('layout')}); resume it with torchrun and --partitions")
        raise ValueError(f"checkpoint: {path} was written by a single-process run (--dataset "
                         f"{payload.get('run_signature', {}).get('dataset')}); resume it without --partitions")
    return payload


def load_checkpoint(path: str | Path, run_signature: dict, payload: dict | None = None) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint` (or take its ``payload``, already read) and
    check it belongs to this run.

    Raises ValueError naming ``checkpoint`` for a missing, unreadable or mismatching file.
    """
    path = Path(path)
    payload = read_payload(path, KIND_SINGLE) if payload is None else payload
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


# Signature entries that no config field's flag sets: the data's (single-process runs) and a model of
# one's own (fit), identified by its class, input form and parameter shapes.
_NOT_FLAGS = {"dataset": "--dataset", "num_nodes": "--dataset (and -o options)", "in_dim": "--dataset",
              "num_classes": "--dataset", "num_layers": "--fanouts/--layers", "module": "model",
              "parameters": "model", "inputs": "inputs"}


def flag_of(key: str) -> str:
    """The CLI flag that sets a run-signature entry (``train.lr`` -> ``--lr``, ``dgs.period`` ->
    ``--dgs-period``), read from the config classes' own flags (:mod:`gnnscale.settings`)."""
    section, _, leaf = key.rpartition(".")
    classes = {"train": (TrainConfig,), "model": (ModelConfig,), "dgs": (DGSConfig,),
               "layout_options": option_classes()}.get(section, ())
    for cls in classes:
        names = flag_names(cls)
        if leaf in names:
            return names[leaf]
        if leaf in {field.name for field in fields(cls)}:  # set by fit's config only: name the field
            return f"{cls.__name__}({leaf}=...)"
    return _NOT_FLAGS.get(leaf, "--" + leaf.replace("_", "-"))


def first_difference(saved, current, prefix: str = "") -> tuple[str, object, object] | None:
    """The first (dotted key, saved value, current value) where two nested dicts differ, or None."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            found = first_difference(saved.get(key), current.get(key), f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    return None if saved == current else (prefix.rstrip("."), saved, current)
def save_model(path: str | Path, model: torch.nn.Module, config: ModelConfig, dataset: DatasetFacts) -> None:
    """Write the self-describing model file (:mod:`gnnscale.nn.model_file`: weights, ``config`` and the
    ``dataset`` facts; ``gnnscale.load_model`` rebuilds it) atomically, like :func:`save_checkpoint`."""
    save_model_file(path, model, config, dataset)
