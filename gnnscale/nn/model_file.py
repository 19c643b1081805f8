"""A model file that describes itself: weights, the model's config and the dataset it was trained on.

``gnnscale train --save-model FILE`` writes one dict with ``torch.save`` (so ``torch.load`` reads it)::

    {"format": "gnnscale-model", "version": 1,
     "config": ModelConfig fields (name, in_dim, hidden_dim, num_classes, num_layers, dropout, ...),
     "dataset": {"name": str, "feature_dim": int, "num_classes": int, "num_nodes": int},
     "state_dict": the model's state_dict,
     "link": {"decoder": "dot" | "mlp"}}    (a link model only: ``config`` is its encoder's, whose
                                           num_classes is the embedding width)

:func:`load_model` rebuilds the model from it in one call. A bare ``state_dict`` (what ``--save-model``
wrote before) still loads when the caller gives the config it was trained with.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from gnnscale.files import atomic_write
from gnnscale.nn.link import DECODERS, LinkModel, build_link_model
from gnnscale.nn.models import ModelConfig, build_model

FORMAT = "gnnscale-model"
VERSION = 1
NOT_OURS = "not a gnnscale model file (those are written by train --save-model)"


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetFacts:
    """What a model file records about the data it was trained on.

    Args:
        name: the dataset's name (``"cora"``, ``"synthetic"``).
        feature_dim: input features per node (> 0).
        num_classes: classes (> 0).
        num_nodes: nodes of the training graph (>= 0).
    """

    name: str
    feature_dim: int
    num_classes: int
    num_nodes: int

    def __post_init__(self) -> None:
        for field in ("feature_dim", "num_classes", "num_nodes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if field == "num_nodes" else 1):
                raise ValueError(f"{field}: expected a {'non-negative' if field == 'num_nodes' else 'positive'} "
                                 f"int, got {value!r}")

    def describe(self) -> str:
        return f"{self.name} ({self.feature_dim} features, {self.num_classes} classes)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFile:
    """A loaded model file: the rebuilt model (eval mode), its config, and the dataset facts (None for a
    weight-only file, which records none); ``decoder``: a link model's (its ``model`` a
    :class:`~gnnscale.nn.link.LinkModel`), None for a node classifier."""

    path: Path
    model: nn.Module
    config: ModelConfig
    dataset: DatasetFacts | None
    decoder: str | None = None

    def check_fits(self, *, name: str, feature_dim: int, num_classes: int) -> None:
        """ValueError naming the file and the data when the model's input or output width does not fit."""
        if (feature_dim, num_classes) != (self.config.in_dim, self.config.num_classes):
            trained = self.dataset.describe() if self.dataset is not None else (
                f"{self.config.in_dim} features, {self.config.num_classes} classes")
            raise ValueError(f"model: {self.path} was trained on {trained}, but dataset {name} has {feature_dim} "
                             f"features and {num_classes} classes; use the dataset the model was trained on")


def save_model_file(path: str | Path, model: nn.Module, config: ModelConfig, dataset: DatasetFacts, *,
                    state_dict: dict | None = None) -> Path:
    """Write ``model``'s weights with ``config`` and ``dataset`` atomically (:func:`~gnnscale.files.atomic_write`:
    a regular file only, never half written). ``state_dict``: weights of ``model`` to write instead of its
    current ones (a training run's best epoch)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config: expected a ModelConfig, got {type(config).__name__}")
    if not isinstance(dataset, DatasetFacts):
        raise TypeError(f"dataset: expected DatasetFacts, got {type(dataset).__name__}")
    payload = {"format": FORMAT, "version": VERSION, "config": asdict(config), "dataset": asdict(dataset),
               "state_dict": model.state_dict() if state_dict is None else state_dict}
    if isinstance(model, LinkModel):
        payload["link"] = {"decoder": model.decoder_name}
    return atomic_write(path, lambda f: torch.save(payload, f))


def read_model_file(path: str | Path, config: ModelConfig | None = None) -> ModelFile:
    """Rebuild the model a file holds (see the module docstring), in eval mode.

    Args:
        path: a file from ``--save-model``.
        config: the model's config, needed for a weight-only file (a bare ``state_dict``); for a
            self-describing file its shape (all but the dropout rates, which inference does not use)
            must agree with the one recorded, or it is None (the default).

    Raises ValueError, one line naming ``path``, for a missing or foreign file, a weight-only file
    without ``config``, or weights whose shapes do not fit the config.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"model: no model file at {path}" + ("" if not path.exists() else " (not a regular file)"))
    try:
        payload = load_data(path)  # a model file is data, never code to run
    except ValueError as err:
        raise ValueError(f"model: {path} is {NOT_OURS}: {err}") from None
    if isinstance(payload, Mapping) and payload.get("format") == FORMAT:
        if payload.get("version") != VERSION:
            raise ValueError(f"model: {path} is a model file of version {payload.get('version')!r}; this gnnscale "
                             f"reads version {VERSION}")
        saved = _config_from(payload["config"], path)
        if config is not None and _shape(config) != _shape(saved):
            raise ValueError(f"model: {path} holds {_describe(saved)}, not the {_describe(config)} asked for")
        facts = DatasetFacts(**payload["dataset"])
        state = payload["state_dict"]
        config = saved
        decoder = _decoder_from(payload.get("link"), path)
    elif isinstance(payload, Mapping) and payload and all(isinstance(v, torch.Tensor) for v in payload.values()):
        if config is None:
            raise ValueError(f"model: {path} holds weights only (a state_dict from an older --save-model); give the "
                             "model's flags (--arch, --hidden, --layers, --heads) to load it")
        facts, state, decoder = None, payload, None
    else:
        raise ValueError(f"model: {path} is {NOT_OURS}: it holds a {type(payload).__name__} of other contents")
    model = build_model(config) if decoder is None else build_link_model(config, decoder)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # missing/unexpected keys or size mismatches: torch lists them over many lines
        detail = " ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip())
        raise ValueError(f"model: {path} does not fit {_describe(config)}: {detail[:300]}") from None
    return ModelFile(path=path, model=model.eval(), config=config, dataset=facts, decoder=decoder)


def load_model(path: str | Path, config: ModelConfig | None = None) -> nn.Module:
    """The model ``--save-model`` wrote to ``path``, rebuilt with its weights, in eval mode.

    ``config`` is needed only for a weight-only file (see :func:`read_model_file`)."""
    return read_model_file(path, config).model


def _decoder_from(link: object, path: Path) -> str | None:
    """A link model's decoder from the file's ``link`` entry (None: a node classifier)."""
    if link is None:
        return None
    if not isinstance(link, Mapping) or link.get("decoder") not in DECODERS:
        raise ValueError(f"model: {path} records a link decoder this gnnscale does not know ({link!r})")
    return link["decoder"]


def _config_from(entries: object, path: Path) -> ModelConfig:
    known = {f.name for f in fields(ModelConfig)}
    if not isinstance(entries, Mapping) or not set(entries) <= known:
        raise ValueError(f"model: {path} records a model config this gnnscale does not know ({entries!r})")
    return ModelConfig(**entries)


def _shape(cfg: ModelConfig) -> tuple:
    """What fixes the weights' shapes and the forward pass at inference: all but the dropout rates."""
    return (cfg.name, cfg.in_dim, cfg.hidden_dim, cfg.num_classes, cfg.num_layers,
            *((cfg.heads, cfg.out_heads) if cfg.name == "gat" else ()))


def _describe(cfg: ModelConfig) -> str:
    extra = f", heads {cfg.heads}, out_heads {cfg.out_heads}" if cfg.name == "gat" else ""
    return (f"model {cfg.name} ({cfg.in_dim} features -> hidden {cfg.hidden_dim} -> {cfg.num_classes} classes, "
            f"{cfg.num_layers} layers{extra})")



# In nn/, not with atomic_write among the base modules: the graph stage writes files too and stays free of
# torch, whose import a converter or generator would otherwise pay.
def load_data(source: str | Path | BinaryIO) -> object:
    """What ``torch.save`` wrote to ``source``, read as data only (tensors, numbers, strings, containers).

    A file that is not that raises a ValueError whose message says what it is, in a few words. It never
    passes on torch's advice to retry with ``weights_only=False``: that unpickles arbitrary objects,
    which runs whatever code the file carries, and a gnnscale file never needs it.
    """
    try:
        with warnings.catch_warnings():
            # torch warns about the pickle protocol of files it did not write; the error below says enough.
            warnings.simplefilter("ignore")
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's restricted unpickler names a class it refuses as an "Unsupported global"; other
        # failures (an unknown opcode: text, a plain pickle) mean the file is not torch's at all.
        if "Unsupported global" in str(err):
            raise ValueError("it holds Python objects other than tensors and plain data, which gnnscale never "
                             "loads (loading them could run code)") from None
        raise ValueError("it is not a file torch.save wrote") from None
    except Exception:  # torch raises KeyError, RuntimeError, EOFError, ... for other files
        raise ValueError("it is not a file torch.save wrote") from None
