"""The model side of a run: how the training loop calls a model on a prepared batch, and what identifies
the model in a checkpoint.

A model takes its batches in one of two forms, named by ``fit(..., inputs=...)`` (never guessed):

- ``"blocks"``: ``model(blocks, x)``, gnnscale's layered blocks (input layer first) and the features of
  ``blocks[0]``'s sources; it returns the logits of ``blocks[-1]``'s destinations, the seeds. The
  built-in models (:mod:`gnnscale.nn.models`) also take the step's ``dropout_key``.
- ``"pyg"``: ``model(x, edge_index)``, PyG's node-wise batch (:mod:`gnnscale.train.pyg_inputs`); the
  first ``batch_size`` rows of its output are the seeds' logits.

A model other than the built-in ones draws its random numbers (dropout) from torch's default generator:
the loop seeds it before every training step from ``(seed, epoch, step, rank)``, as the built-in models
key their masks, so a run is reproducible and a resumed run draws the same masks.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Protocol

import torch
from torch import Tensor, nn

from gnnscale.devices import resolve_device
from gnnscale.keys import STREAM_INIT, derive_key
from gnnscale.nn.link import LinkModel, build_link_model
from gnnscale.nn.models import ModelConfig, build_model
from gnnscale.nn.typed_models import TypedModel, TypedModelConfig, model_config
from gnnscale.train.steps import Batch

class ModelInputs(Protocol):
    """How the loop hands a prepared batch to the model.

    ``convert`` runs in the loading stage (beside the training step) and returns what ``logits`` takes;
    ``logits`` runs on the training thread and returns the model's outputs, float [n, width], one row per
    node of the batch's ``out_ids`` in order (the seeds; the task makes the loss's logits of them).
    ``dropout_key`` is the step's key in training, None in evaluation."""

    name: str

    def convert(self, batch: Batch): ...

    def logits(self, model: nn.Module, converted, *, dropout_key: int | None) -> Tensor: ...


class BuiltinBlockInputs:
    """gnnscale's built-in models: ``model(blocks, x, dropout_key=key)``."""

    name = "blocks"

    def convert(self, batch: Batch) -> Batch:
        return batch

    def logits(self, model: nn.Module, batch: Batch, *, dropout_key: int | None) -> Tensor:
        return model(batch.blocks, batch.x, dropout_key=dropout_key)


class BlockInputs(BuiltinBlockInputs):
    """A model of one's own over gnnscale blocks: ``model(blocks, x)``."""

    def logits(self, model: nn.Module, batch: Batch, *, dropout_key: int | None) -> Tensor:
        seed_torch_for_step(dropout_key)
        return model(batch.blocks, batch.x)


def seed_torch_for_step(dropout_key: int | None) -> None:
    """Seed torch's default generator with the step's key (training steps only), so that a model's own
    dropout draws the same masks in every run of the same seed and in a resumed run."""
    if dropout_key is not None:
        torch.manual_seed(dropout_key)


def model_device(model: nn.Module) -> torch.device:
    """The one device of ``model``'s parameters and buffers; ValueError for a model split over devices
    (the loop sends each batch to one device)."""
    devices = {t.device for t in (*model.parameters(), *model.buffers())}
    if len(devices) != 1:
        raise ValueError(f"model: its parameters and buffers are on {', '.join(sorted(map(str, devices)))}; gnnscale "
                         "trains a model on one device (move it there with model.to(device))")
    return devices.pop()


def check_model_device(model: nn.Module, device: torch.device) -> None:
    """A model given on the CPU (moved to ``device`` when the run starts) or already on ``device``; a model
    on another device is an error, not moved silently."""
    where = model_device(model)
    if where.type != "cpu" and where != device:
        raise ValueError(f"device: the model is on {where}, this run trains on {device}; pass device={str(where)!r} "
                         "(--device) or give the model on the CPU")


def training_device(model: nn.Module, device: str) -> torch.device:
    """``device`` (``TrainConfig.device``) resolved on this worker (ValueError where it is absent), checked
    against where ``model`` is (:func:`check_model_device`)."""
    resolved = resolve_device(device)
    check_model_device(model, resolved)
    return resolved


def model_signature(model: nn.Module, inputs: ModelInputs) -> dict:
    """What identifies the model in a run's checkpoint: a built-in model's config (its fields; a typed model's, its
    graph's schema too); for any other module, its class, input form and parameter shapes."""
    if isinstance(model, LinkModel):
        return {"encoder": asdict(model.config), "decoder": model.decoder_name}
    config = model_config(model)
    if config is not None:
        return asdict(config)
    return {"module": f"{type(model).__module__}.{type(model).__qualname__}", "inputs": inputs.name,
            "parameters": {name: list(p.shape) for name, p in model.named_parameters()}}


def seeded_model(config: ModelConfig | TypedModelConfig, seed: int) -> nn.Module:
    """The built-in model ``config`` describes (plain or typed), initialised from the run's ``seed`` (the same
    weights in every worker and every run of the seed)."""
    torch.manual_seed(derive_key(seed, stream=STREAM_INIT))
    return TypedModel(config) if isinstance(config, TypedModelConfig) else build_model(config)


def seeded_link_model(encoder: ModelConfig, decoder: str, seed: int) -> LinkModel:
    """The link model of ``encoder`` (its ``num_classes``: the embedding width) and ``decoder``, initialised
    from the run's ``seed`` as :func:`seeded_model` (the encoder's weights first)."""
    torch.manual_seed(derive_key(seed, stream=STREAM_INIT))
    return build_link_model(encoder, decoder)
