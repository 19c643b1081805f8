"""Layer-wise inference over a partition: every worker computes its own part's nodes, layer by layer.

Worker ``p`` owns the (relabelled) ids ``[lo, hi)`` of the partition book and holds their in-edges
(the whole topology in the hybrid view, its own rows in the vanilla one: either has them). For every
layer it walks its nodes in chunks; a chunk's block reads the previous layer's rows of its sources,
which other workers own too, and fetches them like input features are fetched in training: a
:class:`~gnnscale.features.partitioned.PartitionedFeatureStore` over each worker's file of the
previous layer (two rounds per chunk: ids out, rows back). Fetches are collective, so every worker
runs the same number of chunks per layer (the largest part's; a worker past its last chunk fetches
nothing and computes nothing).

With a ``device`` each worker computes its chunks there (under torchrun, ``cuda`` is the worker's own
GPU, ``cuda:LOCAL_RANK``): the fetched rows travel between workers on the host, as in training's
feature fetch, and are copied to the device per chunk; the layer files stay on the host.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, apply_layer, evaluating_on, layer_widths, rows_block
from gnnscale.partition.directory import LocalPartition


def own_rows(part: LocalPartition) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr [n_p + 1], indices)``: the in-edges of the part's own nodes, sources as global ids,
    row ``i`` being node ``node_offset + i``; slices of the memory maps, nothing copied but ``indptr``."""
    if part.view == "whole":
        lo, hi = part.book.node_range(part.part)
        graph = part.topology
        start, end = int(graph.indptr[lo]), int(graph.indptr[hi])
        return np.asarray(graph.indptr[lo:hi + 1]) - start, graph.indices[start:end]
    return part.topology.local_indptr, part.topology.local_indices


@torch.no_grad()
def distributed_layerwise(model: nn.Module, part: LocalPartition, comm: Comm, workdir: str | Path, *,
                          chunk_size: int = DEFAULT_CHUNK_SIZE, device: str | torch.device | None = None) -> list[Path]:
    """Run ``model`` (eval mode) over this worker's nodes of the partition, layer by layer; return this
    worker's file of every layer (input layer first), float32 [n_p, width], row ``i`` = node
    ``part.node_offset + i``. Collective: every worker of ``comm`` calls it with the same model.

    Args:
        model: a gnnscale model, the same weights on every worker.
        part: this worker's partition (``part.part == comm.rank``).
        comm: the workers' collectives.
        workdir: an existing folder of this worker's for its layer files.
        chunk_size: destination nodes per block (> 0). Default :data:`DEFAULT_CHUNK_SIZE`.
        device: where this worker's layers compute (:func:`~gnnscale.devices.resolve_device`'s names);
            None (the default): where the model's weights are.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    book, rank = part.book, comm.rank
    lo, hi = book.node_range(rank)
    indptr, indices = own_rows(part)
    # Collective: the largest chunk count of any part, so that every worker makes the same fetches.
    num_chunks = comm.all_reduce_max_int(math.ceil((hi - lo) / chunk_size), "eval")
    local = np.full(book.num_nodes, -1, dtype=np.int64)
    paths: list[Path] = []
    store = PartitionedFeatureStore(book, rank, part.features, comm)  # one "setup" round: equal widths
    with evaluating_on(model, device):
        for i, width in enumerate(layer_widths(model)):
            path = Path(workdir) / f"layer{i + 1}.npy"
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(hi - lo, width))
            for c in range(num_chunks):
                a, b = min(lo + c * chunk_size, hi), min(lo + (c + 1) * chunk_size, hi)
                block = rows_block(indptr, indices, np.arange(a, b, dtype=np.int64), lo, local) if a < b else None
                ids = block.src_ids if block is not None else torch.empty(0, dtype=torch.int64)
                x_src = store.gather(ids)  # collective: 2 "feature" rounds, also with nothing to fetch
                if block is not None:
                    out[a - lo:b - lo] = apply_layer(model, i, block, x_src)
            out.flush()
            del out
            paths.append(path)
            # The next layer fetches this one's rows from their owners.
            store = PartitionedFeatureStore(book, rank, np.load(path, mmap_mode="r"), comm)
    return paths


def evaluate_full_distributed(model: nn.Module, part: LocalPartition, comm: Comm, metric: str = "accuracy", *,
                              chunk_size: int = DEFAULT_CHUNK_SIZE, device: str | torch.device | None = None) -> dict:
    """``{"metric", "val", "test", "seconds"}`` as :func:`~gnnscale.inference.evaluate.evaluate_full`, over a
    partition: every worker scores its own validation and test nodes and one all-reduce per split sums the
    counts (correct answers; per class true positives, false positives, false negatives). Collective.

    ``roc_auc`` ranks every score against every other, which per-worker counts cannot give: ValueError.
    ``device``: as :func:`distributed_layerwise` (None: where the model's weights are).
    """
    if metric not in ("accuracy", "f1_macro"):
        raise ValueError(f"metric: a distributed --eval full reports accuracy or f1_macro, got {metric!r} "
                         "(for roc_auc, run gnnscale predict --partitions on the saved model)")
    started = time.perf_counter()
    result: dict = {"metric": metric}
    c = part.num_classes
    with tempfile.TemporaryDirectory(prefix="gnnscale-eval-") as tmp:
        logits = np.load(distributed_layerwise(model, part, comm, tmp, chunk_size=chunk_size, device=device)[-1],
                         mmap_mode="r")
        for split in ("val", "test"):
            rows = getattr(part, f"{split}_idx") - part.node_offset
            counts = metric_counts(np.asarray(part.labels[rows]), np.asarray(logits[rows]).argmax(axis=1), c)
            comm.all_reduce_(counts, dist.ReduceOp.SUM, "eval")  # collective: the global counts
            result[split] = metric_from_counts(metric, counts, c)
    result["seconds"] = time.perf_counter() - started
    return result


def metric_counts(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> torch.Tensor:
    """float64 [3 * num_classes + 2]: one worker's counts of its nodes' ``predicted`` classes against their
    ``labels``, which summed over workers give :func:`metric_from_counts` the whole split: per class the
    true positives, false positives and false negatives, then the correct answers and the nodes."""
    c = num_classes
    predicted, labels = torch.from_numpy(np.asarray(predicted)), torch.from_numpy(np.asarray(labels))
    hit = predicted == labels
    return torch.cat([torch.bincount(labels[hit], minlength=c),     # true positives per class
                      torch.bincount(predicted[~hit], minlength=c),  # false positives
                      torch.bincount(labels[~hit], minlength=c),     # false negatives
                      torch.tensor([int(hit.sum()), labels.shape[0]])]).to(torch.float64)


def metric_from_counts(metric: str, counts: torch.Tensor, num_classes: int) -> float:
    """``metric`` (accuracy or f1_macro) of a split from its :func:`metric_counts` summed over workers:
    what :func:`~gnnscale.inference.metrics.accuracy` and ``f1_macro`` give on the whole split's
    predictions; NaN for no nodes."""
    c = num_classes
    tp, fp, fn, (correct, total) = counts[:c], counts[c:2 * c], counts[2 * c:3 * c], counts[3 * c:].tolist()
    if total == 0:
        return float("nan")
    if metric == "accuracy":
        return correct / total
    seen = (tp + fp + fn) > 0  # classes that occur in the labels or the predictions, as f1_macro
    return float((2 * tp[seen] / (2 * tp[seen] + fp[seen] + fn[seen])).mean())
