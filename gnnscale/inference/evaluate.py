"""Validation and test scores of a model by layer-wise full-neighborhood inference (``train --eval full``)."""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch
from torch import nn

from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layerwise_inference
from gnnscale.inference.metrics import check_metric, score
from gnnscale.inference.typed_layerwise import typed_layerwise_inference


def evaluate_full(model: nn.Module, dataset: NodeDataset | TypedDataset, metric: str = "accuracy", *,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, device: str | torch.device | None = None) -> dict:
    """``{"metric", "val", "test", "seconds"}``: ``metric`` of the model's full-graph predictions (every
    in-neighbor, no sampling) on the validation and test nodes; NaN for an empty split.

    Only the rows the validation and test nodes depend on are computed; the layer files go to a
    temporary folder that is removed afterwards. ``device``: where the layers compute (None, the
    default: where the model's weights are, so a model trained on a GPU is evaluated there). A typed dataset
    (its model a :class:`~gnnscale.nn.typed_models.TypedModel`) scores its target type's nodes by
    :func:`~gnnscale.inference.typed_layerwise.typed_layerwise_inference`.
    """
    check_metric(metric, dataset.num_classes)
    typed = isinstance(dataset, TypedDataset)
    infer = typed_layerwise_inference if typed else layerwise_inference
    label_offset = dataset.target_range[0] if typed else 0  # a typed dataset's labels are by local id
    started = time.perf_counter()
    wanted = np.union1d(dataset.val_idx, dataset.test_idx)
    result = {"metric": metric}
    with tempfile.TemporaryDirectory(prefix="gnnscale-eval-") as tmp:
        if wanted.size:
            logits = np.load(infer(model, dataset.graph, dataset.features, tmp, nodes=wanted, chunk_size=chunk_size,
                                   device=device)[-1], mmap_mode="r")
        for split in ("val", "test"):
            ids = getattr(dataset, f"{split}_idx")
            if ids.size == 0:
                result[split] = float("nan")
                continue
            probabilities = torch.softmax(torch.from_numpy(np.array(logits[ids])), dim=1).numpy()
            result[split] = score(metric, dataset.labels[ids - label_offset], probabilities)
    result["seconds"] = time.perf_counter() - started
    return result
