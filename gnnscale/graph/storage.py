"""The on-disk dataset directory: one ``.npy`` file per array plus ``meta.json``, loaded memory-mapped.

Layout of a dataset directory (``kind = "dataset"``)::

    meta.json       format_version, kind, name, num_nodes, num_edges, feature_dim, num_classes,
                    dtypes {file stem: dtype}, shapes {file stem: shape}
    indptr.npy      int64 [num_nodes + 1]
    indices.npy     int32 | int64 [num_edges]
    features.npy    float32 [num_nodes, feature_dim]
    labels.npy      int64 [num_nodes]
    train_idx.npy, val_idx.npy, test_idx.npy    int64, sorted, unique

A graph directory (``kind = "graph"``, :func:`save_graph`) holds only ``indptr.npy``, ``indices.npy``
and ``meta.json``.

Writes are atomic: everything goes into a temporary sibling directory, is fsynced, and the directory
is renamed into place, so a killed run leaves no half-written directory under the target name (at
most a ``.<name>.tmp-<host>-<pid>-*`` sibling, which loaders never read). The next write to the same
target removes such siblings whose process has ended on this machine: a killed 17 GB generation
does not keep its disk until someone notices.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.dataset import NodeDataset

FORMAT_VERSION = 1
META_FILE = "meta.json"
GRAPH_ARRAYS = ("indptr", "indices")
DATASET_ARRAYS = GRAPH_ARRAYS + ("features", "labels", "train_idx", "val_idx", "test_idx")


def save_dataset(ds: NodeDataset, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``ds`` to ``directory`` atomically; returns the directory.

    Args:
        ds: the dataset (memory-mapped arrays are fine; they are streamed to disk).
        directory: target path; its parent must exist.
        overwrite: replace an existing directory (else an existing one is a ValueError).
    """
    if not isinstance(ds, NodeDataset):
        raise TypeError(f"ds: expected a NodeDataset, got {type(ds).__name__}")
    arrays = {
        "indptr": ds.graph.indptr, "indices": ds.graph.indices, "features": ds.features, "labels": ds.labels,
        "train_idx": ds.train_idx, "val_idx": ds.val_idx, "test_idx": ds.test_idx,
    }
    meta = dataset_meta(name=ds.name, num_nodes=ds.graph.num_nodes, num_edges=ds.graph.num_edges,
                        feature_dim=ds.feature_dim, num_classes=ds.num_classes)
    return _write_directory(Path(directory), arrays, meta, overwrite)


def dataset_meta(*, name: str, num_nodes: int, num_edges: int, feature_dim: int, num_classes: int) -> dict:
    """The counts of a dataset directory's ``meta.json`` (:func:`with_array_specs` adds the arrays)."""
    return {"format_version": FORMAT_VERSION, "kind": "dataset", "name": name, "num_nodes": num_nodes,
            "num_edges": num_edges, "feature_dim": feature_dim, "num_classes": num_classes}


def with_array_specs(meta: dict, specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> dict:
    """``meta`` plus the ``dtypes`` and ``shapes`` of the arrays ``{file stem: (dtype, shape)}``, in the
    order given (writers that stream their files build the same ``meta.json`` as :func:`save_dataset`)."""
    meta = dict(meta)
    meta["dtypes"] = {stem: np.dtype(dtype).str for stem, (dtype, _) in specs.items()}
    meta["shapes"] = {stem: list(shape) for stem, (_, shape) in specs.items()}
    return meta


def save_graph(graph: CSCGraph, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write the topology alone (``indptr.npy``, ``indices.npy``, ``meta.json``) atomically."""
    if not isinstance(graph, CSCGraph):
        raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
    meta = graph_meta(num_nodes=graph.num_nodes, num_edges=graph.num_edges)
    return _write_directory(Path(directory), {"indptr": graph.indptr, "indices": graph.indices}, meta, overwrite)


def graph_meta(*, num_nodes: int, num_edges: int) -> dict:
    """The counts of a graph directory's ``meta.json`` (:func:`with_array_specs` adds the arrays)."""
    return {"format_version": FORMAT_VERSION, "kind": "graph", "num_nodes": num_nodes, "num_edges": num_edges}


def load_dataset_dir(directory: str | Path, mmap: bool = True) -> NodeDataset:
    """Load a directory written by :func:`save_dataset`.

    Args:
        directory: the dataset directory.
        mmap: memory-map the arrays read-only (``np.memmap``; nothing is read until touched) instead of
            reading them into memory.

    Raises ValueError naming the file when a file is missing, ``meta.json`` is unreadable, or an
    array's dtype or shape disagrees with ``meta.json``.
    """
    directory = Path(directory)
    meta = _read_meta(directory, "dataset", ("name", "num_nodes", "num_edges", "feature_dim", "num_classes"))
    n, e, d = meta["num_nodes"], meta["num_edges"], meta["feature_dim"]
    expected = {"indptr": (n + 1,), "indices": (e,), "features": (n, d), "labels": (n,)}
    arrays = _read_arrays(directory, meta, DATASET_ARRAYS, expected, mmap)
    try:
        graph = CSCGraph(indptr=arrays["indptr"], indices=arrays["indices"], num_nodes=n)
        return NodeDataset(name=str(meta["name"]), graph=graph, features=arrays["features"],
                           labels=arrays["labels"], train_idx=arrays["train_idx"], val_idx=arrays["val_idx"],
                           test_idx=arrays["test_idx"], num_classes=meta["num_classes"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{_culprit(directory, str(exc))}: the arrays do not form a valid dataset: {exc}") from exc


def load_graph(directory: str | Path, mmap: bool = True) -> CSCGraph:
    """Load the topology from a directory written by :func:`save_graph` or :func:`save_dataset`."""
    directory = Path(directory)
    meta = _read_meta(directory, None, ("num_nodes", "num_edges"))
    n, e = meta["num_nodes"], meta["num_edges"]
    arrays = _read_arrays(directory, meta, GRAPH_ARRAYS, {"indptr": (n + 1,), "indices": (e,)}, mmap)
    try:
        return CSCGraph(indptr=arrays["indptr"], indices=arrays["indices"], num_nodes=n)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{_culprit(directory, str(exc))}: the arrays do not form a valid CSC graph: {exc}") from exc


def _culprit(directory: Path, message: str) -> Path:
    """The file a validation message is about (it starts with the array's name, e.g. ``"indices: ..."``),
    else the directory."""
    stem = message.split(":", 1)[0]
    return directory / f"{stem}.npy" if stem in DATASET_ARRAYS else directory


# --- writing -------------------------------------------------------------------------------------


def _write_directory(directory: Path, arrays: Mapping[str, np.ndarray], meta: dict, overwrite: bool) -> Path:
    check_target(directory, overwrite)
    meta = with_array_specs(meta, {stem: (arr.dtype, arr.shape) for stem, arr in arrays.items()})
    with _staging_directory(directory) as tmp:
        for stem, arr in arrays.items():
            with open(tmp / f"{stem}.npy", "wb") as f:
                np.save(f, np.asarray(arr), allow_pickle=False)
                _flush_to_disk(f)
        finish_directory(tmp, directory, META_FILE, meta)
    return directory


def check_target(directory: Path, overwrite: bool, name: str = "directory") -> None:
    """Before writing ``directory``: it must not exist unless ``overwrite``, and its parent (created if
    missing) must be a folder. Errors name the argument ``name``."""
    if directory.exists() and not overwrite:
        raise ValueError(f"{name}: {directory} already exists; pass overwrite=True to replace it")
    if directory.parent.exists() and not directory.parent.is_dir():
        raise ValueError(f"{name}: {directory.parent} is a file, not a folder")
    directory.parent.mkdir(parents=True, exist_ok=True)


@contextmanager
def _staging_directory(directory: Path) -> Iterator[Path]:
    """A fresh hidden sibling of ``directory``, named after this machine and process; removed if the
    block raises or leaves it behind. Siblings that a run on this machine that has ended left behind
    (killed: no ``finally`` ran) are removed first."""
    remove_stale_staging(directory)
    tmp = directory.parent / f".{directory.name}.tmp-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def remove_stale_staging(directory: Path) -> list[Path]:
    """Remove the staging (``.tmp-``) and set-aside (``.old-``) siblings of ``directory`` left by
    processes of this machine that no longer run; returns them. Siblings of other machines (a shared
    file system) or of a live process are kept."""
    removed = []
    for kind in ("tmp", "old"):
        for path in directory.parent.glob(f".{glob_escape(directory.name)}.{kind}-*"):
            host, _, rest = path.name[len(directory.name) + len(kind) + 3:].rpartition("-")[0].rpartition("-")
            if host != _host() or not rest.isdigit() or _alive(int(rest)):
                continue
            shutil.rmtree(path, ignore_errors=True)
            print(f"removed {path}: a staging folder left by process {rest}, which has ended", file=sys.stderr)
            removed.append(path)
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _host() -> str:
    """This machine's name as it can appear in a file name (no '-' or '/': the name is split on '-')."""
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _move_into_place(tmp: Path, directory: Path) -> None:
    # rename(2) cannot replace a non-empty directory: move the old one aside first, then drop it.
    old = None
    if directory.exists():
        old = directory.parent / f".{directory.name}.old-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.replace(directory, old)
    os.replace(tmp, directory)
    _fsync_directory(directory.parent)
    if old is not None:
        shutil.rmtree(old)


def finish_directory(tmp: Path, target: Path, header_name: str, header: dict) -> None:
    """Write the JSON header last, make the staging directory durable, and move it to ``target``:
    a reader that finds the header finds every file it lists."""
    with open(tmp / header_name, "w", encoding="utf-8") as f:
        json.dump(header, f, indent=2)
        _flush_to_disk(f)
    _fsync_directory(tmp)
    _move_into_place(tmp, target)


def _flush_to_disk(f) -> None:
    f.flush()
    os.fsync(f.fileno())


def _fsync_directory(path: Path) -> None:
    # Makes the directory entries (new files, the rename) durable, not only the file contents.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- reading -------------------------------------------------------------------------------------


def read_versioned_json(path: Path, *, kind: str | None, version: int, hint: str) -> dict:
    """Parse a gnnscale JSON header (a dataset's meta.json, a partition's manifest.json) and check
    its ``format_version`` and ``kind``; every problem is a ValueError naming the file (``hint`` says
    what the file should have come from)."""
    if not path.is_file():
        raise ValueError(f"{path}: missing {path.name} ({hint})")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: corrupt {path.name}: {exc}") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format_version") != version:
        raise ValueError(f"{path}: expected format_version {version}, got {meta.get('format_version')!r}")
    if kind is not None and meta.get("kind") != kind:
        raise ValueError(f"{path}: expected kind {kind!r}, got {meta.get('kind')!r}")
    return meta


def _read_meta(directory: Path, kind: str | None, required: tuple[str, ...]) -> dict:
    if not directory.is_dir():
        raise ValueError(f"directory: expected a dataset directory (gnnscale.graph.storage.save_dataset writes one), "
                         f"got {directory}")
    path = directory / META_FILE
    meta = read_versioned_json(path, kind=kind, version=FORMAT_VERSION,
                               hint="not a directory written by save_dataset/save_graph?")
    for key in required:
        if key not in meta:
            raise ValueError(f"{path}: missing key {key!r}")
    for key in ("num_nodes", "num_edges", "feature_dim", "num_classes"):
        if key in meta and (not isinstance(meta[key], int) or isinstance(meta[key], bool) or meta[key] < 0):
            raise ValueError(f"{path}: {key} must be a non-negative int, got {meta[key]!r}")
    for key in ("dtypes", "shapes"):
        if not isinstance(meta.get(key), dict):
            raise ValueError(f"{path}: missing or malformed {key!r} (expected an object keyed by file stem)")
    return meta


def _read_arrays(directory: Path, meta: dict, stems: tuple[str, ...], expected_shapes: dict[str, tuple],
                 mmap: bool) -> dict[str, np.ndarray]:
    meta_path = directory / META_FILE
    arrays = {}
    for stem in stems:
        path = directory / f"{stem}.npy"
        if not path.is_file():
            raise ValueError(f"{path}: missing array file {stem}.npy")
        if stem not in meta["dtypes"] or stem not in meta["shapes"]:
            raise ValueError(f"{meta_path}: no dtype/shape recorded for {stem}.npy")
        try:
            arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{path}: unreadable or truncated .npy file: {exc}") from exc
        if arr.dtype.str != meta["dtypes"][stem]:
            raise ValueError(f"{path}: dtype {arr.dtype.str} disagrees with {META_FILE} ({meta['dtypes'][stem]})")
        if list(arr.shape) != meta["shapes"][stem]:
            raise ValueError(f"{path}: shape {list(arr.shape)} disagrees with {META_FILE} ({meta['shapes'][stem]})")
        if stem in expected_shapes and arr.shape != expected_shapes[stem]:
            raise ValueError(f"{path}: expected shape {list(expected_shapes[stem])} from {META_FILE}'s counts, "
                             f"got {list(arr.shape)}")
        arrays[stem] = arr
    return arrays
