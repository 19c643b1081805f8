"""``gnnscale predict --partitions DIR`` under torchrun: the outputs of :mod:`gnnscale.inference.predict`,
computed part by part (:func:`~gnnscale.inference.distributed.distributed_layerwise`) and written by
original node id (the partition's relabelling undone through its ``new_to_old.npy``).

Every worker writes its own rows straight into the output files, so ``--out`` must be a folder all
workers see (one machine, or a shared file system), and rank 0 reads every part's labels from the
partition directory for the metrics. The steps, each ended by a collective:

1. rank 0 checks ``--out`` and creates the output files, full size, in a staging folder inside it;
2. every worker runs its part and writes its rows at their original ids, then flushes and fsyncs;
3. rank 0 scores the splits, renames the files into ``--out`` and writes ``meta.json`` last.

A run that fails or is interrupted before step 3 leaves ``--out`` as it was: rank 0 removes the staging
folder, and ``--out`` itself where this run created it.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from gnnscale.distributed.comm import Comm
from gnnscale.devices import resolve_device
from gnnscale.files import atomic_write
from gnnscale.inference.distributed import distributed_layerwise
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layer_widths, weights_device
from gnnscale.inference.metrics import check_metric, score
from gnnscale.inference.predict import OUTPUT_FILES, check_out_dir
from gnnscale.nn.model_file import ModelFile
from gnnscale.inference.typed_distributed import type_rows, typed_distributed_layerwise
from gnnscale.inference.typed_layerwise import typed_layer_widths
from gnnscale.nn.typed_models import TypedModelConfig, embeddings_by_partition_id
from gnnscale.partition.directory import LocalPartition, is_typed_manifest, load_partition, read_manifest
from gnnscale.partition.typed import TypedPartition, manifest_schema
from gnnscale.partition.typed_directory import load_typed_partition

STAGING = ".predict-staging"


def load_part(partition_dir: str | Path, view: str, comm: Comm) -> LocalPartition | TypedPartition:
    """This worker's part in ``view`` (:data:`gnnscale.partition.VIEWS`: the topology the layout that the
    caller chose loads; a typed partition's typed part); a failure on any worker (a missing file, a wrong worker
    count) is raised on all."""
    part, error = None, ""
    try:
        load = load_typed_partition if is_typed_manifest(read_manifest(partition_dir)) else load_partition
        part = load(partition_dir, comm.rank, view, workers=comm.world_size)
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)  # collective: every worker stops together
    return part


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputPlacement:
    """Which rows of this worker's layer files are outputs, and where they go.

    Args:
        count: rows of every output file (the dataset's nodes; a typed dataset's nodes of its target type).
        rows: this worker's layer-file rows that are outputs.
        at: int64: the output row of each, the dataset's id (a typed dataset: local id of the target type).
        offset: the first id of the target type in the partition's and the dataset's numbering (0: one node type).
        widths: every layer's output width.
        described: what ``meta.json`` says the rows are.
    """

    count: int
    rows: slice
    at: np.ndarray
    offset: int
    widths: list[int]
    described: str


def placement(model: torch.nn.Module, part: LocalPartition | TypedPartition, new_to_old: np.ndarray) -> OutputPlacement:
    """The :class:`OutputPlacement` of this worker: every row of its part (one node type), or its nodes of the
    target type, which a typed worker's files hold after those of the types before it (its own order)."""
    if not isinstance(part, TypedPartition):
        lo, hi = part.book.node_range(part.part)
        return OutputPlacement(count=part.book.num_nodes, rows=slice(0, hi - lo), at=np.asarray(new_to_old[lo:hi]),
                               offset=0, widths=layer_widths(model),
                               described="original node ids 0 .. num_nodes - 1")
    schema, t = part.schema, part.schema.type_id(part.target_type)
    lo, hi = part.book.node_range(t, part.part)
    offset = int(schema.type_offsets[t])  # a partition renumbers within each type: the same in both numberings
    count = schema.count(part.target_type)
    return OutputPlacement(count=count, rows=type_rows(part, part.target_type),
                           at=np.asarray(new_to_old[lo:hi]) - offset, offset=offset, widths=typed_layer_widths(model),
                           described=f"the dataset's local ids 0 .. {count - 1} of node type {part.target_type}")


def partition_model(model_file: ModelFile, new_to_old: np.ndarray, manifest: dict) -> torch.nn.Module:
    """The model that computes over the partition: the file's own, or for a typed model a copy whose embedding rows
    (by the dataset's ids in the file) are put in the partition's numbering."""
    if not isinstance(model_file.config, TypedModelConfig) or not model_file.config.embedding_rows:
        return model_file.model
    model = copy.deepcopy(model_file.model)
    model.load_state_dict(embeddings_by_partition_id(model.state_dict(), model_file.config, new_to_old,
                                                     manifest_schema(manifest).type_offsets))
    return model


def check_model_fits(model_file: ModelFile, manifest: dict, partition_dir: str | Path) -> None:
    """ValueError naming the file and the partitions when the model is not one of the partitioned dataset's."""
    if is_typed_manifest(manifest):
        model_file.check_fits_schema(name=f"partitions {partition_dir}", schema=manifest_schema(manifest),
                                     feature_dims=manifest["feature_dim"], target_type=manifest["target_type"],
                                     num_classes=int(manifest["num_classes"]))
    else:
        model_file.check_fits(name=str(manifest["dataset"]), feature_dim=int(manifest["feature_dim"]),
                              num_classes=int(manifest["num_classes"]))


def predict_partitioned(model_file: ModelFile, partition_dir: str | Path, view: str, comm: Comm,
                        out: str | Path, *, layout: str, embeddings: int | None = None, logits: bool = False,
                        metric: str = "accuracy", chunk_size: int = DEFAULT_CHUNK_SIZE,
                        overwrite: bool = False, device: str | torch.device | None = None) -> dict | None:
    """Collective: every worker of ``comm`` calls it. Returns what ``meta.json`` holds on rank 0, None
    elsewhere. Arguments as :func:`~gnnscale.inference.predict.predict` (no node subset); ``view`` is the
    partition view of the layout named ``layout`` (recorded in ``meta.json``). ``device``: where this
    worker computes; ``"cuda"`` (or ``"auto"`` on a GPU machine) is its own GPU, ``cuda:LOCAL_RANK``. A typed
    partition's outputs are its target type's, one row per node by the dataset's local id of that type."""
    out, error = Path(out), ""
    compute_on = weights_device(model_file.model)
    manifest = read_manifest(partition_dir)
    cfg = model_file.config
    try:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
        check_model_fits(model_file, manifest, partition_dir)
        check_metric(metric, int(manifest["num_classes"]))
        if embeddings is not None and not 1 <= embeddings < cfg.num_layers:
            raise ValueError(f"embeddings: the model has {cfg.num_layers} layers, so its hidden layers are 1 .. "
                             f"{cfg.num_layers - 1}; got {embeddings}")
        if device is not None:
            compute_on = resolve_device(device)
        if comm.rank == 0:
            check_out_dir(out, overwrite=overwrite)
    except ValueError as err:
        error = str(err)
    comm.agree(not error, error)  # collective: a bad input stops every worker with rank 0's line
    part = load_part(partition_dir, view, comm)
    new_to_old = np.load(Path(partition_dir) / "new_to_old.npy", mmap_mode="r")
    model = partition_model(model_file, new_to_old, manifest)
    place = placement(model, part, new_to_old)
    n, width = place.count, place.widths
    names = {"predictions.npy": (np.int64, (n,)),
             "logits.npy" if logits else "probabilities.npy": (np.float32, (n, width[-1]))}
    if embeddings is not None:
        names["embeddings.npy"] = (np.float32, (n, width[embeddings - 1]))
    staging = out / STAGING
    fresh = comm.rank == 0 and not out.exists()  # a folder this run creates: removed if the run does not finish
    published = False
    try:
        if comm.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)  # left by a killed run
            staging.mkdir(parents=True)
            for name, (dtype, shape) in names.items():  # full size, every row written by its owner below
                np.lib.format.open_memmap(staging / name, mode="w+", dtype=dtype, shape=shape).flush()
        comm.barrier("eval")  # collective: the staging files exist before any worker opens them

        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f".predict-rank{comm.rank}-", dir=out) as tmp:
            infer = typed_distributed_layerwise if isinstance(part, TypedPartition) else distributed_layerwise
            layers = infer(model, part, comm, tmp, chunk_size=chunk_size, device=compute_on)
            inference_s = time.perf_counter() - started
            z = torch.from_numpy(np.array(np.load(layers[-1], mmap_mode="r")[place.rows]))
            rows = {"predictions.npy": z.argmax(dim=1).numpy(),
                    "logits.npy" if logits else "probabilities.npy":
                        (z if logits else torch.softmax(z, dim=1)).numpy()}
            if embeddings is not None:
                rows["embeddings.npy"] = np.load(layers[embeddings - 1], mmap_mode="r")[place.rows]
            for name, values in rows.items():
                target = np.load(staging / name, mmap_mode="r+")
                target[place.at] = values
                target.flush()
                with open(staging / name, "rb+") as f:
                    os.fsync(f.fileno())
                del target
        # Collective (also: every worker's rows are on disk): each worker's peak RSS so far, in its slot.
        peaks = torch.zeros(comm.world_size, dtype=torch.float64)
        peaks[comm.rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        comm.all_reduce_(peaks, dist.ReduceOp.SUM, "eval")
        if comm.rank != 0:
            comm.barrier("eval")  # collective: rank 0 published the files
            return None
        scores_name = "logits.npy" if logits else "probabilities.npy"
        metrics = split_metrics_from_parts(partition_dir, manifest, staging / scores_name, logits, metric,
                                           offset=place.offset)
        described = {"name": str(manifest["dataset"]), "num_nodes": int(manifest["num_nodes"]),
                     "num_edges": int(manifest["num_edges"])}
        if is_typed_manifest(manifest):
            described["target_type"] = manifest["target_type"]
        meta = {"model": {"file": str(model_file.path), "config": asdict(cfg),
                          "trained_on": None if model_file.dataset is None else asdict(model_file.dataset)},
                "dataset": described,
                "partitions": str(partition_dir), "layout": layout, "workers": comm.world_size,
                "rows": n, "rows_are": place.described,
                "files": sorted(names) + ["meta.json"],
                "embeddings_layer": embeddings, "chunk_size": chunk_size, "device": compute_on.type,
                "metric": metric,
                "metrics": metrics, "inference_seconds": inference_s, "seconds": time.perf_counter() - started,
                "peak_rss_bytes_per_worker": [int(p) for p in peaks.tolist()]}
        for name in OUTPUT_FILES:
            if name not in names and name != "meta.json":
                (out / name).unlink(missing_ok=True)
        for name in names:
            os.replace(staging / name, out / name)
        staging.rmdir()
        atomic_write(out / "meta.json", lambda f: f.write(json.dumps(meta, indent=2).encode()))
        published = True
        comm.barrier("eval")  # collective: the others return once the files are published
        return meta
    except BaseException:  # an error, Ctrl-C or SIGTERM before publishing: --out as it was, no staging left
        if comm.rank == 0 and not published:
            shutil.rmtree(staging, ignore_errors=True)
            if fresh:
                shutil.rmtree(out, ignore_errors=True)  # only this run's files: staging, the workers' scratch
        raise


def split_metrics_from_parts(partition_dir: str | Path, manifest: dict, scores_path: Path, scores_are_logits: bool,
                             metric: str, *, offset: int = 0) -> dict:
    """``{split: {"nodes", metric}}`` over every part's split nodes, from the partition directory's labels
    and split files (relabelled ids) and the scores file (original ids). ``offset``: a typed dataset's first
    id of its target type (its labels and the scores' rows are by local id of that type)."""
    directory = Path(partition_dir)
    new_to_old = np.load(directory / "new_to_old.npy", mmap_mode="r")
    labels = np.concatenate([np.load(directory / f"part{p}" / "labels.npy") for p in range(manifest["num_parts"])])
    scores = np.load(scores_path, mmap_mode="r")
    out = {}
    for split in ("train", "val", "test"):
        ids = np.concatenate([np.load(directory / f"part{p}" / f"{split}_idx.npy")
                              for p in range(manifest["num_parts"])]).astype(np.int64)
        z = torch.from_numpy(np.array(scores[np.asarray(new_to_old[ids]) - offset]))
        probs = (torch.softmax(z, dim=1) if scores_are_logits else z).numpy()
        out[split] = {"nodes": int(ids.shape[0]), metric: score(metric, labels[ids - offset], probs)}
    return out
