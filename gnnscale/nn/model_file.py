"""A model file that describes itself: weights, the model's config and the dataset it was trained on.

``gnnscale train --save-model FILE`` writes one dict with ``torch.save`` (so ``torch.load`` reads it)::

    {"format": "gnnscale-model", "version": 1,
     "config": ModelConfig fields (name, in_dim, hidden_dim, num_classes, num_layers, dropout, ...),
     "dataset": {"name": str, "feature_dim": int, "num_classes": int, "num_nodes": int},
     "state_dict": the model's state_dict,
     "link": {"decoder": "dot" | "mlp",     (a link model only: ``config`` is its encoder's, whose
              "split": LinkSplitRecord}}    num_classes is the embedding width; ``split``: how its edges
                                           were split, absent from files written before it was recorded)

A typed model's file (R-GCN, R-SAGE, R-GAT) holds its :class:`~gnnscale.nn.typed_models.TypedModelConfig` as
``config`` (node types, relations, the feature width of each type with features and the node count of each type
without, whose embedding rows are among the weights) and :class:`TypedDatasetFacts` as ``dataset``.

:func:`load_model` rebuilds the model from it in one call. A bare ``state_dict`` (what ``--save-model``
wrote before) still loads when the caller gives the config it was trained with.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import BinaryIO

import torch
from torch import nn

from gnnscale.files import atomic_write
from gnnscale.graph.typed import TypedSchema
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.nn.link import DECODERS, LinkModel, build_link_model
from gnnscale.nn.models import TYPED_MODELS, ModelConfig, build_model
from gnnscale.nn.typed_models import TypedModel, TypedModelConfig

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
class TypedDatasetFacts:
    """What a typed model's file records about the typed dataset it was trained on, besides the schema its config
    holds.

    Args:
        name: the dataset's name.
        target_type: the node type the model classifies.
        num_classes: classes (> 0).
        num_nodes: nodes of every type (>= 0).
    """

    name: str
    target_type: str
    num_classes: int
    num_nodes: int

    def __post_init__(self) -> None:
        for field in ("num_classes", "num_nodes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if field == "num_nodes" else 1):
                raise ValueError(f"{field}: expected a {'non-negative' if field == 'num_nodes' else 'positive'} "
                                 f"int, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSplitRecord:
    """How a link model's edges were split and its evaluation negatives drawn: the fields of the same names
    of its run's ``LinkConfig`` (:class:`gnnscale.train.tasks.link_config.LinkConfig`) and the run's seed, from
    which ``gnnscale predict --task link --metric`` recomputes the validation and test edges it was
    selected on.

    Args:
        edge_split: train, val and test fractions of the random split (three floats).
        link_split: the split directory it trained with instead (OGB's link layout), or None.
        eval_negatives: evaluation negatives per positive (None: the metric's default count).
        metric: the metric that picked its best epoch (roc_auc, ap, mrr or hits@K).
        seed: the run's seed (``TrainConfig.seed``), the key of the random split and of the negatives.
    """

    edge_split: tuple[float, ...]
    link_split: str | None
    eval_negatives: int | None
    metric: str
    seed: int

    def __post_init__(self) -> None:
        split = tuple(self.edge_split)
        if len(split) != 3 or not all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in split):
            raise ValueError(f"edge_split: expected three fractions, got {self.edge_split!r}")
        object.__setattr__(self, "edge_split", tuple(float(f) for f in split))
        if self.link_split is not None and not isinstance(self.link_split, str):
            raise TypeError(f"link_split: expected a folder name or None, got {type(self.link_split).__name__}")
        for name, value in (("eval_negatives", self.eval_negatives), ("seed", self.seed)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if not isinstance(self.metric, str):
            raise TypeError(f"metric: expected a metric name, got {type(self.metric).__name__}")

    @classmethod
    def of(cls, link, seed: int) -> LinkSplitRecord:
        """The record of a run's ``LinkConfig`` ``link`` (its fields of the same names) and ``seed``."""
        return cls(edge_split=link.edge_split, link_split=None if link.link_split is None else str(link.link_split),
                   eval_negatives=link.eval_negatives, metric=link.metric, seed=seed)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFile:
    """A loaded model file: the rebuilt model (eval mode), its config, and the dataset facts (None for a
    weight-only file, which records none; a typed model's: :class:`TypedDatasetFacts`); ``decoder``: a link
    model's (its ``model`` a :class:`~gnnscale.nn.link.LinkModel`), None for a node classifier; ``link_split``:
    how a link model's edges were split (None: a node classifier, or a file written before the split was
    recorded)."""

    path: Path
    model: nn.Module
    config: ModelConfig | TypedModelConfig
    dataset: DatasetFacts | TypedDatasetFacts | None
    decoder: str | None = None
    link_split: LinkSplitRecord | None = None

    def check_fits(self, *, name: str, feature_dim: int, num_classes: int) -> None:
        """ValueError naming the file and the data when the model's input or output width does not fit (a dataset of
        one node type)."""
        if isinstance(self.config, TypedModelConfig):
            raise ValueError(f"model: {self.path} holds {_describe(self.config)}, but dataset {name} has one node "
                             "type; use the typed dataset the model was trained on")
        if (feature_dim, num_classes) != (self.config.in_dim, self.config.num_classes):
            trained = self.dataset.describe() if self.dataset is not None else (
                f"{self.config.in_dim} features, {self.config.num_classes} classes")
            raise ValueError(f"model: {self.path} was trained on {trained}, but dataset {name} has {feature_dim} "
                             f"features and {num_classes} classes; use the dataset the model was trained on")

    def check_fits_typed(self, dataset: TypedDataset) -> None:
        """ValueError naming the file, the dataset and the first difference when the model is not one of
        ``dataset``'s node types, relations, feature widths, featureless types' node counts, target type and
        classes."""
        self.check_fits_schema(name=f"dataset {dataset.name}", schema=dataset.graph.schema,
                               feature_dims=dataset.feature_dims, target_type=dataset.target_type,
                               num_classes=dataset.num_classes)

    def check_fits_schema(self, *, name: str, schema: TypedSchema, feature_dims: Mapping[str, int | None],
                          target_type: str, num_classes: int) -> None:
        """:meth:`check_fits_typed` against a typed graph's facts (``name``: what the message calls it, "dataset X"
        or "partitions DIR"): its ``schema``, ``{node type: width or None}``, target type and classes."""
        cfg = self.config
        if not isinstance(cfg, TypedModelConfig):
            raise ValueError(f"model: {self.path} holds {_describe(cfg)}, a model of graphs of one node type, but "
                             f"{name} is a typed graph; give a typed model's file (gnnscale train "
                             f"--model {' or '.join(TYPED_MODELS)} --save-model)")
        has = {"node types": schema.node_types, "relations": tuple((r.src, r.name, r.dst) for r in schema.relations),
               "feature widths": {t: d for t, d in feature_dims.items() if d is not None},
               "node counts of the types without features": {t: schema.count(t) for t, d in feature_dims.items()
                                                             if d is None},
               "target type": target_type, "classes": num_classes}
        built = {"node types": cfg.node_types, "relations": cfg.relations, "feature widths": cfg.feature_dims,
                 "node counts of the types without features": cfg.embedding_rows,
                 "target type": target_type if self.dataset is None else self.dataset.target_type,
                 "classes": cfg.num_classes}
        for what, value in has.items():
            if value != built[what]:
                raise ValueError(f"model: {self.path} was trained on {what} {_words(built[what])}, but {name} has "
                                 f"{_words(value)}; use the dataset the model was trained on")


def save_model_file(path: str | Path, model: nn.Module, config: ModelConfig | TypedModelConfig,
                    dataset: DatasetFacts | TypedDatasetFacts, *, state_dict: dict | None = None,
                    link_split: LinkSplitRecord | None = None) -> Path:
    """Write ``model``'s weights with ``config`` and ``dataset`` atomically (:func:`~gnnscale.files.atomic_write`:
    a regular file only, never half written). ``state_dict``: weights of ``model`` to write instead of its
    current ones (a training run's best epoch). ``link_split``: a link model's split (a link model only). A typed
    model's ``config`` is a :class:`~gnnscale.nn.typed_models.TypedModelConfig`, its ``dataset``
    :class:`TypedDatasetFacts`."""
    if not isinstance(config, (ModelConfig, TypedModelConfig)):
        raise TypeError(f"config: expected a ModelConfig or TypedModelConfig, got {type(config).__name__}")
    facts = TypedDatasetFacts if isinstance(config, TypedModelConfig) else DatasetFacts
    if not isinstance(dataset, facts):
        raise TypeError(f"dataset: expected {facts.__name__}, got {type(dataset).__name__}")
    if link_split is not None and not isinstance(model, LinkModel):
        raise ValueError("link_split: a node classifier has no link split; pass it for a LinkModel only")
    payload = {"format": FORMAT, "version": VERSION, "config": asdict(config), "dataset": asdict(dataset),
               "state_dict": model.state_dict() if state_dict is None else state_dict}
    if isinstance(model, LinkModel):
        payload["link"] = {"decoder": model.decoder_name}
        if link_split is not None:
            payload["link"]["split"] = {**asdict(link_split), "edge_split": list(link_split.edge_split)}
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
        facts = (TypedDatasetFacts if isinstance(saved, TypedModelConfig) else DatasetFacts)(**payload["dataset"])
        state = payload["state_dict"]
        config = saved
        decoder = _decoder_from(payload.get("link"), path)
        link_split = _link_split_from(payload.get("link"), path)
    elif isinstance(payload, Mapping) and payload and all(isinstance(v, torch.Tensor) for v in payload.values()):
        if config is None:
            raise ValueError(f"model: {path} holds weights only (a state_dict from an older --save-model); give the "
                             "model's flags (--arch, --hidden, --layers, --heads) to load it")
        facts, state, decoder, link_split = None, payload, None, None
    else:
        raise ValueError(f"model: {path} is {NOT_OURS}: it holds a {type(payload).__name__} of other contents")
    if isinstance(config, TypedModelConfig):
        model = TypedModel(config)
    else:
        model = build_model(config) if decoder is None else build_link_model(config, decoder)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # missing/unexpected keys or size mismatches: torch lists them over many lines
        detail = " ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip())
        raise ValueError(f"model: {path} does not fit {_describe(config)}: {detail[:300]}") from None
    return ModelFile(path=path, model=model.eval(), config=config, dataset=facts, decoder=decoder,
                     link_split=link_split)


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


def _link_split_from(link: object, path: Path) -> LinkSplitRecord | None:
    """A link model's split record (None: a node classifier, or a file that predates the record)."""
    entries = link.get("split") if isinstance(link, Mapping) else None
    if entries is None:
        return None
    known = {f.name for f in fields(LinkSplitRecord)}
    try:
        if not isinstance(entries, Mapping) or set(entries) != known:
            raise ValueError("unknown fields")
        return LinkSplitRecord(**entries)
    except (TypeError, ValueError):
        raise ValueError(f"model: {path} records a link split this gnnscale does not know ({entries!r})") from None


def _config_from(entries: object, path: Path) -> ModelConfig | TypedModelConfig:
    """The recorded config: a typed model's by its name (R-GCN, R-SAGE, R-GAT), else a built-in model's."""
    typed = isinstance(entries, Mapping) and entries.get("name") in TYPED_MODELS
    cls = TypedModelConfig if typed else ModelConfig
    known = {f.name for f in fields(cls)}
    if not isinstance(entries, Mapping) or not set(entries) <= known:
        raise ValueError(f"model: {path} records a model config this gnnscale does not know ({entries!r})")
    return cls(**entries)


def _shape(cfg: ModelConfig | TypedModelConfig) -> tuple:
    """What fixes the weights' shapes and the forward pass at inference: all but the dropout rates."""
    if isinstance(cfg, TypedModelConfig):
        return (cfg.name, cfg.node_types, cfg.relations, cfg.feature_dims, cfg.embedding_rows, cfg.num_classes,
                cfg.num_layers, cfg.hidden_dim, cfg.heads, cfg.out_heads, cfg.num_bases)
    return (cfg.name, cfg.in_dim, cfg.hidden_dim, cfg.num_classes, cfg.num_layers,
            *((cfg.heads, cfg.out_heads) if cfg.name == "gat" else ()))


def _words(value: object) -> str:
    """A schema entry as words: relations as ``src__name__dst``, names and ``{type: n}`` listed, else as is."""
    if isinstance(value, dict):
        return ", ".join(f"{key} {n}" for key, n in value.items()) or "none"
    if isinstance(value, tuple):
        return ", ".join("__".join(v) if isinstance(v, tuple) else str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)


def _describe(cfg: ModelConfig | TypedModelConfig) -> str:
    if isinstance(cfg, TypedModelConfig):
        return (f"typed model {cfg.name} (node types {', '.join(cfg.node_types)}, {len(cfg.relations)} relations -> "
                f"hidden {cfg.hidden_dim} -> {cfg.num_classes} classes, {cfg.num_layers} layers)")
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
