"""``gnnscale predict``: a trained model over every node (or ``nodes``), written to an output folder.

Files (row ``i`` is node ``i`` of the dataset, or node ``nodes[i]`` with ``nodes``), memory-mapped ``.npy``:

    predictions.npy    int64 [rows]                     the predicted class
    probabilities.npy  float32 [rows, num_classes]      softmax of the logits (logits.npy with logits=True)
    embeddings.npy     float32 [rows, width]            hidden layer ``embeddings``' output (if asked)
    nodes.npy          int64 [rows]                     the node id of every row (with ``nodes`` only)
    meta.json          what was run on what, the files, timings and the metric per split

A typed dataset's rows are its target type's nodes: row ``i`` is the node of local id ``i`` of that type, or of
local id ``nodes[i]``; the layers compute over every node type (:mod:`gnnscale.inference.typed_layerwise`).

Every file is written under a staging folder (:func:`staging`) and published when all are complete,
``meta.json`` last: a reader never sees half a file, and a run that fails or is interrupted leaves
``out`` as it was (a missing ``out`` stays missing).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from gnnscale.devices import resolve_device
from gnnscale.files import atomic_write
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.graph.storage import _staging_directory
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layerwise_inference, weights_device
from gnnscale.inference.metrics import check_metric, score
from gnnscale.inference.typed_layerwise import typed_layerwise_inference
from gnnscale.nn.model_file import ModelFile

OUTPUT_FILES = ("predictions.npy", "probabilities.npy", "logits.npy", "embeddings.npy", "nodes.npy", "meta.json")
ROWS_PER_PASS = 1 << 16  # rows per pass when deriving probabilities and predictions from the logits


def check_out_dir(out: str | Path, *, overwrite: bool) -> Path:
    """``out`` when it can take the outputs: missing, an empty folder, or (``overwrite``) a folder of earlier
    outputs. ValueError naming ``out`` otherwise; checked before the dataset loads."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {out} exists and is not a folder; give a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"out: {out} is not empty; pass --overwrite to replace the outputs there, or choose "
                         "another folder")
    return out


def read_id_file(path: str | Path, name: str, what: str, columns: int | None = None) -> np.ndarray:
    """Integer node ids from ``path``: a ``.npy`` array, or text with one row per line (``columns`` ids
    separated by spaces, tabs or commas; None: one id per line, a 1-D result). ValueError naming the
    argument ``name`` for a missing file, a file that is neither, or ids that are not integers."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{name}: no file at {path}")
    try:
        if path.suffix == ".npy":
            ids = np.load(path, allow_pickle=False)
        else:
            with open(path, encoding="utf-8") as f:
                comma = "," in f.readline()
            with warnings.catch_warnings():  # an empty file: numpy warns, the size check below says it
                warnings.simplefilter("ignore", UserWarning)
                ids = np.loadtxt(path, dtype=np.int64, ndmin=1 if columns is None else 2,
                                 delimiter="," if comma else None)
    except ValueError as err:  # UnicodeDecodeError too: a binary file that is no .npy
        form = "a .npy array" if path.suffix == ".npy" else f"{what} (text: {_row_words(columns)} per line)"
        raise ValueError(f"{name}: {path} is not {form}: {str(err).splitlines()[0]}") from None
    shape = "[n]" if columns is None else f"[n, {columns}]"
    if ids.ndim != (1 if columns is None else 2) or (columns is not None and ids.shape[1] != columns) or \
            not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name}: {path} must hold integer node ids of shape {shape}, got {ids.dtype} of shape "
                         f"{ids.shape}")
    return ids


def _row_words(columns: int | None) -> str:
    return "one id" if columns is None else f"{columns} ids"


def check_id_range(ids: np.ndarray, name: str, path: str | Path, num_nodes: int) -> np.ndarray:
    """``ids`` as int64 when every one is a node id of the dataset, else ValueError naming ``name``."""
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"{name}: {path} holds ids in [{int(ids.min())}, {int(ids.max())}], but the dataset's ids "
                         f"are [0, {num_nodes})")
    return ids.astype(np.int64)


def read_nodes(path: str | Path, num_nodes: int) -> np.ndarray:
    """int64 node ids from ``path``: a ``.npy`` integer array, or text with one id per line."""
    ids = read_id_file(path, "nodes", "a list of node ids")
    if ids.size == 0:
        raise ValueError(f"nodes: {path} holds no node ids")
    return check_id_range(ids, "nodes", path, num_nodes)


@contextmanager
def staging(out: Path) -> Iterator[Path]:
    """The folder a run writes its files in before :func:`publish` moves them to ``out``: a hidden folder
    inside ``out`` when it exists, else a hidden sibling of it (named as the dataset writers' are, so that
    one a killed run left is removed by the next run). Removed when the block ends, whatever happened:
    ``out`` is then as it was."""
    if out.is_dir():
        with tempfile.TemporaryDirectory(prefix=".predict-", dir=out) as tmp:
            yield Path(tmp)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with _staging_directory(out) as tmp:
        yield tmp


def publish(tmp: Path, out: Path, names: list[str], meta: dict, outputs: tuple[str, ...]) -> None:
    """Move the files ``names`` from the staging folder ``tmp`` into ``out``, ``meta.json`` (``meta``)
    last. Into a new ``out``: the staging folder itself, the rest of its files removed, renamed in one
    step. Into an existing one: file by file, and every other name of ``outputs`` (an earlier run's,
    which would mislead beside these) removed."""
    for name in names:  # the pages on disk before the rename publishes them
        with open(tmp / name, "rb+") as f:
            os.fsync(f.fileno())
    if not out.exists():
        for path in tmp.iterdir():  # scratch: the layer files of inference
            if path.name in names:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        atomic_write(tmp / "meta.json", lambda f: f.write(json.dumps(meta, indent=2).encode()))
        os.replace(tmp, out)
        return
    for name in outputs:
        if name not in names and name != "meta.json":
            (out / name).unlink(missing_ok=True)
    for name in names:
        os.replace(tmp / name, out / name)
    atomic_write(out / "meta.json", lambda f: f.write(json.dumps(meta, indent=2).encode()))


def predict(model_file: ModelFile, dataset: NodeDataset | TypedDataset, out: str | Path, *,
            nodes: np.ndarray | None = None,
            embeddings: int | None = None, logits: bool = False, metric: str = "accuracy",
            chunk_size: int = DEFAULT_CHUNK_SIZE, overwrite: bool = False,
            device: str | torch.device | None = None) -> dict:
    """Run ``model_file``'s model over ``dataset`` by layer-wise inference and write the outputs to ``out``
    (see the module docstring). Returns what ``meta.json`` holds.

    Args:
        model_file: from :func:`~gnnscale.nn.model_file.read_model_file`.
        dataset: the dataset to predict on; its feature and class counts must fit the model (a typed dataset: its
            node types, relations, feature widths, target type and classes must be the typed model's).
        out: the output folder (missing, empty, or with ``overwrite`` one of earlier outputs).
        nodes: int64 node ids to predict (rows follow this order; a typed dataset: local ids of its target type);
            None (default): every node (of the target type).
        embeddings: a hidden layer, 1 .. num_layers - 1, whose output to write; None (default): none.
        logits: write ``logits.npy`` instead of ``probabilities.npy``. Default False.
        metric: ``accuracy``, ``roc_auc`` (two classes) or ``f1_macro``, reported per split. Default accuracy.
        chunk_size: destination nodes per block (memory per chunk). Default :data:`DEFAULT_CHUNK_SIZE`.
        overwrite: replace earlier outputs in ``out``. Default False.
        device: where the layers compute: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``
            (:func:`~gnnscale.devices.resolve_device`); None (default): where the model's weights are (the
            CPU for a model read from a file). Only the weights and one chunk live on the device.
    """
    out = check_out_dir(out, overwrite=overwrite)
    device = weights_device(model_file.model) if device is None else resolve_device(device)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    cfg = model_file.config
    typed = isinstance(dataset, TypedDataset)
    if typed:
        model_file.check_fits_typed(dataset)
    else:
        model_file.check_fits(name=dataset.name, feature_dim=dataset.feature_dim, num_classes=dataset.num_classes)
    rows = output_rows(dataset, nodes)
    check_metric(metric, dataset.num_classes)
    if embeddings is not None and not 1 <= embeddings < cfg.num_layers:
        raise ValueError(f"embeddings: the model has {cfg.num_layers} layers, so its hidden layers are 1 .. "
                         f"{cfg.num_layers - 1}; got {embeddings}" if cfg.num_layers > 1 else
                         f"embeddings: the model has one layer and no hidden layer to write; got {embeddings}")
    started = time.perf_counter()
    with staging(out) as tmp:
        infer = typed_layerwise_inference if typed else layerwise_inference
        layers = infer(model_file.model, dataset.graph, dataset.features, tmp, nodes=rows.subset,
                       chunk_size=chunk_size, device=device)
        inference_s = time.perf_counter() - started
        files = {}
        last = np.load(layers[-1], mmap_mode="r")
        files["predictions.npy"], scores = _derive(last, rows.subset, tmp, logits)
        files["logits.npy" if logits else "probabilities.npy"] = scores
        if embeddings is not None:
            files["embeddings.npy"] = _rows_of(np.load(layers[embeddings - 1], mmap_mode="r"), rows.ids, rows.subset,
                                               layers[embeddings - 1], tmp / "embeddings.npy")
        if nodes is not None:
            files["nodes.npy"] = _write_npy(tmp / "nodes.npy", nodes)
        metrics = split_metrics(dataset, rows.ids, scores, logits, metric, label_offset=rows.label_offset)
        described = {"name": dataset.name, "num_nodes": dataset.graph.num_nodes, "num_edges": dataset.graph.num_edges}
        if typed:
            described["target_type"] = dataset.target_type
        meta = {"model": {"file": str(model_file.path), "config": asdict(cfg),
                          "trained_on": None if model_file.dataset is None else asdict(model_file.dataset)},
                "dataset": described, "rows": int(rows.ids.shape[0]), "rows_are": rows.described,
                "files": sorted(files) + ["meta.json"],
                "embeddings_layer": embeddings, "chunk_size": chunk_size, "device": str(device), "metric": metric,
                "metrics": metrics, "inference_seconds": inference_s, "seconds": time.perf_counter() - started,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        publish(tmp, out, sorted(files), meta, OUTPUT_FILES)
    return meta


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRows:
    """The rows the outputs hold, as rows of the layer files (which are indexed by the dataset's ids).

    Args:
        ids: int64 [rows]: the layer files' row of every output row, in order.
        subset: ``ids`` where the outputs are a copy of those rows; None where they are every row of the layer files
            in order (a dataset of one node type without ``nodes``: the files themselves are the outputs).
        label_offset: the id of ``dataset.labels[0]`` (a typed dataset's labels are by local id of its target type).
        described: what ``meta.json`` says the rows are.
    """

    ids: np.ndarray
    subset: np.ndarray | None
    label_offset: int
    described: str


def output_rows(dataset: NodeDataset | TypedDataset, nodes: np.ndarray | None) -> OutputRows:
    """Every node (of a typed dataset: of its target type), or ``nodes`` (a typed dataset: local ids of its target
    type, checked; the layer files hold every type's rows, so the target type's are always copied out)."""
    if not isinstance(dataset, TypedDataset):
        if nodes is None:
            return OutputRows(ids=np.arange(dataset.graph.num_nodes), subset=None, label_offset=0,
                              described="node ids 0 .. num_nodes - 1")
        return OutputRows(ids=nodes, subset=nodes, label_offset=0, described="the node ids in nodes.npy")
    lo, hi = dataset.target_range
    t = dataset.target_type
    if nodes is None:
        ids = np.arange(lo, hi, dtype=np.int64)
        return OutputRows(ids=ids, subset=ids, label_offset=lo,
                          described=f"local ids 0 .. {hi - lo - 1} of node type {t}")
    nodes = np.asarray(nodes, dtype=np.int64)
    if nodes.size and (int(nodes.min()) < 0 or int(nodes.max()) >= hi - lo):
        raise ValueError(f"nodes: expected local ids of node type {t} in [0, {hi - lo}), got range "
                         f"[{int(nodes.min())}, {int(nodes.max())}]")
    return OutputRows(ids=nodes + lo, subset=nodes + lo, label_offset=lo,
                      described=f"the local ids of node type {t} in nodes.npy")


def _derive(last: np.ndarray, rows: np.ndarray | None, tmp: Path, logits: bool) -> tuple[Path, Path]:
    """predictions.npy and probabilities.npy (or logits.npy) of ``rows`` (None: every row) from the last
    layer's file, a pass of :data:`ROWS_PER_PASS` rows at a time."""
    n, c = last.shape[0] if rows is None else rows.shape[0], last.shape[1]
    predictions = np.lib.format.open_memmap(tmp / "predictions.npy", mode="w+", dtype=np.int64, shape=(n,))
    name = "logits.npy" if logits else "probabilities.npy"
    scores = np.lib.format.open_memmap(tmp / name, mode="w+", dtype=np.float32, shape=(n, c))
    for lo in range(0, n, ROWS_PER_PASS):
        hi = min(lo + ROWS_PER_PASS, n)
        z = torch.from_numpy(np.array(last[lo:hi] if rows is None else last[rows[lo:hi]]))
        predictions[lo:hi] = z.argmax(dim=1).numpy()
        scores[lo:hi] = (z if logits else torch.softmax(z, dim=1)).numpy()
    predictions.flush()  # publish() fsyncs the files
    scores.flush()
    return tmp / "predictions.npy", tmp / name


def _rows_of(layer: np.ndarray, rows: np.ndarray, nodes: np.ndarray | None, layer_path: Path, path: Path) -> Path:
    """A layer's rows for ``rows``: the layer file itself when every node is asked for, else a copy."""
    if nodes is None:  # the layer file is the output
        os.replace(layer_path, path)
        return path
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows.shape[0], layer.shape[1]))
    for lo in range(0, rows.shape[0], ROWS_PER_PASS):
        out[lo:lo + ROWS_PER_PASS] = layer[rows[lo:lo + ROWS_PER_PASS]]
    out.flush()
    return path


def _write_npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


def split_metrics(dataset: NodeDataset | TypedDataset, rows: np.ndarray, scores_path: Path, scores_are_logits: bool,
                  metric: str, *, label_offset: int = 0) -> dict:
    """``{split: {"nodes": count, metric: value}}`` for the train, validation and test nodes among ``rows``
    (the node id of every row of the scores file); ``label_offset``: the id of ``dataset.labels[0]`` (a typed
    dataset's target type's first id)."""
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    scores = np.load(scores_path, mmap_mode="r")
    out = {}
    for split in ("train", "val", "test"):
        ids = getattr(dataset, f"{split}_idx")
        pos = np.minimum(np.searchsorted(sorted_rows, ids), max(sorted_rows.shape[0] - 1, 0))
        found = sorted_rows[pos] == ids if sorted_rows.size else np.zeros(ids.shape, dtype=bool)
        at, ids = order[pos[found]], ids[found]
        z = torch.from_numpy(np.array(scores[at]))
        probs = (torch.softmax(z, dim=1) if scores_are_logits else z).numpy()
        out[split] = {"nodes": int(at.shape[0]), metric: score(metric, dataset.labels[ids - label_offset], probs)}
    return out
