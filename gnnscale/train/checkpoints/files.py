"""Atomic checkpoint files and resuming.

Every random choice of training is a function of ``(seed, epoch, step, rank)`` (sampling keys, batch
order, and torch's RNG re-seeded at each iteration), so a run resumed from the checkpoint of epoch
``e`` continues exactly as the uninterrupted run would have. One process is a one-worker run, so every
run writes one kind of checkpoint: what it holds and how a run resumes it is
:mod:`gnnscale.train.checkpoints.runs`; this module is the file.

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
from torch import Tensor

from gnnscale.files import atomic_write
from gnnscale.nn.model_file import DatasetFacts, LinkSplitRecord, TypedDatasetFacts, load_data, save_model_file
from gnnscale.nn.models import ModelConfig
from gnnscale.nn.typed_models import TypedModelConfig
from gnnscale.settings import flag_names
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.registry import option_classes

CHECKPOINT_VERSION = 2
MAGIC = b"GNNSCKP2"
DIGEST_BYTES = 32  # sha256
# Every run writes this kind. Distributed runs wrote "distributed" before one process became a one-worker
# run: the same contents, still read. Single-process runs wrote "single" (or, before that, no kind): another
# format, refused (:func:`check_kind`).
CHECKPOINT_KIND = "run"
READABLE_KINDS = (CHECKPOINT_KIND, "distributed")


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


def newest_complete(path: str | Path) -> Found | None:
    """The checkpoint at ``path`` or, when that one is missing or damaged, the previous one kept beside it;
    None when there is neither. ValueError when every file there is damaged, or the newest whole one was
    written by an older gnnscale in a format no longer read."""
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
        check_kind(payload, candidate)  # whole, but of a format no longer read: no fallback helps
        note = "" if candidate == path else f"checkpoint: {problems[0]}; resuming from the previous one, {candidate}"
        return Found(path=candidate, payload=payload, note=note)
    if all(p.endswith(" is missing") for p in problems):
        return None
    raise ValueError(f"checkpoint: no complete checkpoint to resume from ({'; '.join(problems)})")


def read_payload(path: str | Path) -> dict:
    """The dict a checkpoint file holds (:mod:`gnnscale.train.checkpoints.runs` decodes it).

    Raises ValueError naming ``checkpoint`` for a missing, unreadable or foreign file, or one of a format
    no longer read.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no file at {path} to resume from")
    return check_kind(decode_payload(path.read_bytes(), path), path)


def check_kind(payload: dict, path: Path) -> dict:
    """``payload`` when this version reads it; else ValueError, one line saying why."""
    if payload.get("kind") not in READABLE_KINDS:
        # A single-process checkpoint of before one process became a one-worker run: other fields.
        raise ValueError(f"checkpoint: {path} was written by an older version of gnnscale (a single-process "
                         "checkpoint, a format this version does not read); start afresh with --overwrite")
    return payload


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


def save_model(path: str | Path, model: torch.nn.Module, config: ModelConfig | TypedModelConfig,
               dataset: DatasetFacts | TypedDatasetFacts, *, state_dict: dict | None = None,
               link_split: LinkSplitRecord | None = None) -> None:
    """Write the self-describing model file (:mod:`gnnscale.nn.model_file`: weights, ``config`` and the
    ``dataset`` facts; ``gnnscale.load_model`` rebuilds it) atomically, like :func:`write_atomic`.
    ``state_dict``: weights of ``model`` to write instead of its current ones (the best epoch's);
    ``link_split``: a link model's split."""
    save_model_file(path, model, config, dataset, state_dict=state_dict, link_split=link_split)


def on_host(value):
    """``value`` (a state dict, an optimizer's state: tensors in dicts, lists and tuples) with every tensor
    on the CPU: what checkpoints, model files and saved weights hold, so that a run written on one device
    loads on another. CPU tensors are returned as they are (no copy)."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: on_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_host(item) for item in value)
    return value
