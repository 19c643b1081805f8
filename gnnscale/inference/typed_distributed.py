"""Layer-wise inference of a typed model over a typed partition: every worker computes its own nodes of every type,
layer by layer, as :mod:`gnnscale.inference.distributed` does for a graph of one type.

Worker ``p`` owns, of every node type, the id range ``book.node_range(t, p)``; its files hold one row per owned node,
type after type in id order (its *own order*: the order of its feature rows). The encoder runs once over its own
nodes (their feature rows are local, the embeddings are the model's). Then, per layer, a chunk of its own nodes gets
its every-neighbor typed block (the whole typed graph's sampler in the hybrid view; its own typed rows in the vanilla
one, where one hop asks nobody) and the previous layer's rows of the block's sources, fetched from their owners
through a :class:`~gnnscale.features.typed.TypedPartitionedStore` over every worker's file of that layer (2 rounds
per chunk). Fetches are collective: every worker runs the largest part's number of chunks.

The rows equal :func:`~gnnscale.inference.typed_layerwise.typed_layerwise_inference`'s on the whole graph: the
same blocks, the same layers (a chunk's rows are computed with other rows beside them, so the last bits may
differ).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.typed_sampling import TypedVanillaSampler
from gnnscale.features.typed import TypedPartitionedStore
from gnnscale.inference.distributed import metric_counts, metric_from_counts
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, evaluating_on, weights_device
from gnnscale.inference.typed_layerwise import apply_typed_layer, typed_layer_widths
from gnnscale.nn.typed_models import TypedInput, TypedModel, place_rows
from gnnscale.partition.typed import TypedPartition
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.sampling.typed import TypedNeighborSampler


def own_ids(part: TypedPartition) -> np.ndarray:
    """int64: the global ids this worker owns, type after type (its own order, that of its feature rows)."""
    book, schema = part.book, part.schema
    return np.concatenate([np.arange(*book.node_range(t, part.part), dtype=np.int64)
                           for t in range(len(schema.node_types))])


def type_rows(part: TypedPartition, node_type: str) -> slice:
    """Where this worker's nodes of ``node_type`` are in its files (its own order: after the types before it)."""
    counts = part.book.counts(part.part)
    t = part.schema.type_id(node_type)
    first = int(counts[:t].sum())
    return slice(first, first + int(counts[t]))


def layer_rows(part: TypedPartition, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``{node type: its slice of rows}`` of a layer file in this worker's own order (every type has a row per
    owned node: after the encoder every node has the model's width)."""
    return {t: rows[type_rows(part, t)] for t in part.schema.node_types}


def dense(x: TypedInput) -> torch.Tensor:
    """A fetched layer's rows (every type with rows) as one [num_src, width] tensor in the block's source order."""
    types = list(x.features)
    return place_rows(x.num_src, [x.positions[t] for t in types], [x.features[t] for t in types])


@torch.no_grad()
def typed_distributed_layerwise(model: TypedModel, part: TypedPartition, comm: Comm, workdir: str | Path, *,
                                chunk_size: int = DEFAULT_CHUNK_SIZE,
                                device: str | torch.device | None = None) -> list[Path]:
    """Run a typed ``model`` (eval mode) over this worker's nodes of every type, layer by layer; return this worker's
    file of every layer (input layer first), float32 [owned nodes, width] in its own order (:func:`own_ids`).
    Collective: every worker of ``comm`` calls it with the same model.

    Args:
        model: a :class:`~gnnscale.nn.typed_models.TypedModel` of the partition's schema, the same weights on every
            worker.
        part: this worker's typed partition (``part.part == comm.rank``), either view.
        comm: the workers' collectives.
        workdir: an existing folder of this worker's for ``input.npy`` and its layer files.
        chunk_size: destination nodes per block (> 0).
        device: where this worker's layers compute (None: where the model's weights are).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    workdir, ids = Path(workdir), own_ids(part)
    if part.view == "whole":
        sampler = TypedNeighborSampler(part.topology, [ALL_NEIGHBORS])  # one hop, every in-edge
    else:
        sampler = TypedVanillaSampler(part.topology, [ALL_NEIGHBORS], comm)  # one "setup" round; a hop asks nobody
    num_chunks = comm.all_reduce_max_int(math.ceil(ids.shape[0] / chunk_size), "eval")
    store = TypedPartitionedStore(part.schema, part.book, part.features, comm)  # one "setup" round
    paths = []
    with evaluating_on(model, device):
        rows = np.lib.format.open_memmap(workdir / "input.npy", mode="w+", dtype=np.float32,
                                         shape=(ids.shape[0], model.config.width))
        for c in range(num_chunks):  # own rows only, but the store's fetch is collective
            chunk = ids[c * chunk_size:(c + 1) * chunk_size]
            x = store.gather(torch.from_numpy(chunk))
            if chunk.size:
                rows[c * chunk_size:c * chunk_size + chunk.size] = \
                    model.encoder(x.to(weights_device(model))).cpu().numpy()
        for i, width in enumerate(typed_layer_widths(model)):
            rows.flush()
            store = TypedPartitionedStore(part.schema, part.book, layer_rows(part, rows), comm)
            path = workdir / f"layer{i + 1}.npy"
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ids.shape[0], width))
            for c in range(num_chunks):
                chunk = ids[c * chunk_size:(c + 1) * chunk_size]
                block = sampler.sample(chunk, 0)[0] if chunk.size else None
                x = store.gather(block.src_ids if block is not None else torch.empty(0, dtype=torch.int64))
                if block is not None:
                    out[c * chunk_size:c * chunk_size + chunk.size] = apply_typed_layer(model, i, block, dense(x),
                                                                                         part.schema)
            out.flush()
            paths.append(path)
            rows = out
    return paths


def evaluate_full_typed_distributed(model: TypedModel, part: TypedPartition, comm: Comm, metric: str = "accuracy", *,
                                    chunk_size: int = DEFAULT_CHUNK_SIZE,
                                    device: str | torch.device | None = None) -> dict:
    """``{"metric", "val", "test", "seconds"}`` of a typed model's every-neighbor predictions of the target type, over
    a typed partition: every worker scores its own validation and test nodes, one all-reduce per split sums the
    counts (:func:`~gnnscale.inference.distributed.evaluate_full_distributed`'s rule: accuracy or f1_macro).
    Collective."""
    if metric not in ("accuracy", "f1_macro"):
        raise ValueError(f"metric: a distributed --eval full reports accuracy or f1_macro, got {metric!r} "
                         "(for roc_auc, run gnnscale predict on the saved model)")
    started = time.perf_counter()
    result: dict = {"metric": metric}
    with tempfile.TemporaryDirectory(prefix="gnnscale-eval-") as tmp:
        logits = np.load(typed_distributed_layerwise(model, part, comm, tmp, chunk_size=chunk_size,
                                                     device=device)[-1], mmap_mode="r")
        target = logits[type_rows(part, part.target_type)]  # row i: the part's target-type node label_offset + i
        for split in ("val", "test"):
            local = getattr(part, f"{split}_idx") - part.label_offset
            counts = metric_counts(np.asarray(part.labels[local]), np.asarray(target[local]).argmax(axis=1),
                                   part.num_classes)
            comm.all_reduce_(counts, dist.ReduceOp.SUM, "eval")  # collective: the global counts
            result[split] = metric_from_counts(metric, counts, part.num_classes)
    result["seconds"] = time.perf_counter() - started
    return result
