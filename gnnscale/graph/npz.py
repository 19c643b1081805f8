"""A generic single-file dataset format: one ``.npz`` archive of plain arrays (see docs/npz_format.md).

Keys:

* ``features`` [n, d] float (integer/bool are converted to float32), required;
* ``labels`` [n] int, required; -1 marks an unlabeled node;
* topology, exactly one of: ``indptr`` int [n + 1] + ``indices`` int [E] (CSC: in-edges of ``v`` are
  ``indices[indptr[v]:indptr[v + 1]]``), or ``edge_index`` int [2, E] (row 0 source, row 1 destination);
* per split, exactly one of ``<split>_idx`` (int node ids) or ``<split>_mask`` (bool [n]), for
  ``split`` in train, val, test;
* optional ``num_classes`` (int scalar; default ``max(labels) + 1``) and ``name`` (string scalar).

The archive is read with ``allow_pickle=False``: object arrays are refused, so a file cannot run code.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Literal

import numpy as np

from gnnscale.files import atomic_write
from gnnscale.graph.csc import CSCGraph, csc_from_coo, index_dtype
from gnnscale.graph.dataset import NodeDataset

SPLITS = ("train", "val", "test")
Topology = Literal["csc", "edge_index"]


def load_npz(path: str | Path, *, symmetrize: bool = False, remove_self_loops: bool = False) -> NodeDataset:
    """Load a dataset from a ``.npz`` file in the documented format.

    Args:
        path: the ``.npz`` file.
        symmetrize: add the reverse of every edge (for a directed edge list of an undirected graph).
        remove_self_loops: drop edges ``v -> v``.

    The CSC form is used as stored when neither option is set; otherwise (and for ``edge_index``) the
    graph is rebuilt with duplicates removed. Errors name the missing or malformed key.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} does not exist or is not a file")
    arrays = _read_archive(path)
    features = _features(_required(arrays, "features", path), path)
    num_nodes = features.shape[0]
    labels = _labels(_required(arrays, "labels", path), num_nodes, path)
    graph = _topology(arrays, num_nodes, path, symmetrize=symmetrize, remove_self_loops=remove_self_loops)
    train_idx, val_idx, test_idx = (_split(arrays, split, num_nodes, path) for split in SPLITS)
    num_classes = _num_classes(arrays, labels, path)
    name = _name(arrays, path)
    try:
        return NodeDataset(name=name, graph=graph, features=features, labels=labels, train_idx=train_idx,
                           val_idx=val_idx, test_idx=test_idx, num_classes=num_classes)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc


def save_npz(ds: NodeDataset, path: str | Path, *, topology: Topology = "csc") -> Path:
    """Write ``ds`` in the npz format (uncompressed, written to a temporary name then renamed).

    Args:
        ds: the dataset.
        path: target file (the name is used as given; no ``.npz`` suffix is added).
        topology: ``"csc"`` (``indptr``/``indices``, loads without rebuilding) or ``"edge_index"``.
    """
    if not isinstance(ds, NodeDataset):
        raise TypeError(f"ds: expected a NodeDataset, got {type(ds).__name__}")
    if topology not in ("csc", "edge_index"):
        raise ValueError(f"topology: expected 'csc' or 'edge_index', got {topology!r}")
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"path: parent folder {path.parent} does not exist")
    arrays = {"features": ds.features, "labels": ds.labels, "train_idx": ds.train_idx, "val_idx": ds.val_idx,
              "test_idx": ds.test_idx, "num_classes": np.int64(ds.num_classes), "name": np.str_(ds.name)}
    if topology == "csc":
        arrays["indptr"], arrays["indices"] = ds.graph.indptr, ds.graph.indices
    else:
        dst = np.repeat(np.arange(ds.graph.num_nodes, dtype=np.int64), ds.graph.in_degrees())
        arrays["edge_index"] = np.stack([ds.graph.indices.astype(np.int64), dst])
    return atomic_write(path, lambda f: np.savez(f, **arrays))


# First bytes of a zip archive (a local file header, or the end record of an empty archive) and of a .npy file.
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"
# What a damaged archive raises: a truncated or foreign zip (BadZipFile), a CRC mismatch when a member is
# read (BadZipFile), a corrupt deflate stream (zlib.error), a member cut short (EOFError, ValueError).
DAMAGED = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError)


def open_npz(path: Path) -> np.lib.npyio.NpzFile:
    """Open an .npz archive of named arrays without pickles; a ValueError naming ``path`` otherwise.

    The first bytes are checked before numpy sees the file: numpy would read anything that is not a
    zip or .npy file as a pickle and advise loading it "unsafely".
    """
    with open(path, "rb") as f:
        head = f.read(len(NPY_MAGIC))
    if head.startswith(NPY_MAGIC):
        # np.load also accepts a single .npy file; this format is an archive of named arrays.
        raise ValueError(f"path: {path} is a single .npy array, expected an .npz archive of named arrays")
    if not head.startswith(ZIP_MAGICS):
        raise ValueError(f"path: {path} is not an .npz archive (it does not start like a zip file; first bytes "
                         f"{head!r}); see docs/npz_format.md")
    try:
        return np.load(path, allow_pickle=False)
    except DAMAGED as exc:
        raise ValueError(f"path: {path} is a damaged .npz archive (truncated or corrupt: {exc})") from exc


def _read_archive(path: Path) -> dict[str, np.ndarray]:
    archive = open_npz(path)
    with archive:
        return {key: _read_key(archive, key, path) for key in archive.files}


def _read_key(archive, key: str, path: Path) -> np.ndarray:
    try:
        return archive[key]
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
        raise ValueError(f"{key}: damaged in {path} (truncated or corrupt archive: {exc})") from exc
    except ValueError as exc:  # an object array under allow_pickle=False, or a malformed .npy header
        raise ValueError(f"{key}: cannot be read from {path} without pickle, or is malformed: {exc}") from exc


def _required(arrays: dict, key: str, path: Path) -> np.ndarray:
    if key not in arrays:
        raise ValueError(f"{key}: required key missing from {path} (keys present: {sorted(arrays)})")
    return arrays[key]


def _features(arr: np.ndarray, path: Path) -> np.ndarray:
    if arr.ndim != 2:
        raise ValueError(f"features: expected shape [num_nodes, feature_dim] in {path}, got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise TypeError(f"features: expected a float array in {path}, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _labels(arr: np.ndarray, num_nodes: int, path: Path) -> np.ndarray:
    if arr.shape != (num_nodes,):
        raise ValueError(f"labels: expected shape [{num_nodes}] (one per feature row) in {path}, got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"labels: expected an integer array in {path}, got dtype {arr.dtype}")
    if arr.size and arr.min() < -1:
        raise ValueError(f"labels: expected class ids >= 0 or -1 (unlabeled) in {path}, found {arr.min()}")
    return arr.astype(np.int64)


def _int_array(arrays: dict, key: str, ndim: int, path: Path) -> np.ndarray:
    arr = arrays[key]
    # An empty list saved without a dtype comes back float64: accept it, it holds no ids.
    if arr.ndim != ndim or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"{key}: expected a {ndim}-D integer array in {path}, got dtype {arr.dtype} shape {arr.shape}")
    return arr if arr.size else arr.astype(np.int64)


def _topology(arrays: dict, num_nodes: int, path: Path, *, symmetrize: bool, remove_self_loops: bool) -> CSCGraph:
    has_csc = "indptr" in arrays or "indices" in arrays
    has_coo = "edge_index" in arrays
    if has_csc and has_coo:
        raise ValueError(f"edge_index: {path} holds both edge_index and indptr/indices; keep exactly one topology")
    if not has_csc and not has_coo:
        raise ValueError(f"indptr/indices or edge_index: no topology in {path} (keys present: {sorted(arrays)})")
    if has_coo:
        edge_index = _int_array(arrays, "edge_index", 2, path)
        if edge_index.shape[0] != 2:
            raise ValueError(f"edge_index: expected shape [2, num_edges] in {path}, got {edge_index.shape}")
        _check_ids("edge_index", edge_index, num_nodes, path)
        return _checked(path, csc_from_coo, edge_index[0], edge_index[1], num_nodes, symmetrize=symmetrize,
                        remove_self_loops=remove_self_loops, remove_duplicates=True)
    for key in ("indptr", "indices"):
        _required(arrays, key, path)
    indptr = _int_array(arrays, "indptr", 1, path).astype(np.int64)
    indices = _int_array(arrays, "indices", 1, path)
    _check_ids("indices", indices, num_nodes, path)  # before the cast to int32, which would wrap
    indices = indices.astype(index_dtype(num_nodes))
    graph = _checked(path, CSCGraph, indptr=indptr, indices=indices, num_nodes=num_nodes)
    if not (symmetrize or remove_self_loops):
        return graph
    dst = np.repeat(np.arange(num_nodes, dtype=np.int64), graph.in_degrees())
    return csc_from_coo(graph.indices, dst, num_nodes, symmetrize=symmetrize, remove_self_loops=remove_self_loops,
                        remove_duplicates=True)


def _check_ids(key: str, arr: np.ndarray, num_nodes: int, path: Path) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
        raise ValueError(f"{key}: node ids must lie in [0, {num_nodes}) (num_nodes = rows of features) in {path}, "
                         f"got [{arr.min()}, {arr.max()}]")


def _checked(path: Path, build, *args, **kwargs):
    """Call a graph builder; its errors (which name indptr/indices/src/dst) gain the file name."""
    try:
        return build(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{exc} (in {path})") from exc


def _split(arrays: dict, split: str, num_nodes: int, path: Path) -> np.ndarray:
    idx_key, mask_key = f"{split}_idx", f"{split}_mask"
    if idx_key in arrays and mask_key in arrays:
        raise ValueError(f"{idx_key}: {path} holds both {idx_key} and {mask_key}; keep one")
    if mask_key in arrays:
        mask = arrays[mask_key]
        if mask.dtype != bool or mask.shape != (num_nodes,):
            raise ValueError(f"{mask_key}: expected a bool array of shape [{num_nodes}] in {path}, "
                             f"got dtype {mask.dtype} shape {mask.shape}")
        return np.flatnonzero(mask).astype(np.int64)
    if idx_key not in arrays:
        raise ValueError(f"{idx_key}: missing from {path}; give {idx_key} (int node ids) or {mask_key} (bool [n])")
    idx = _int_array(arrays, idx_key, 1, path)
    _check_ids(idx_key, idx, num_nodes, path)
    idx = np.sort(idx.astype(np.int64))
    if idx.size > 1 and np.any(idx[1:] == idx[:-1]):
        raise ValueError(f"{idx_key}: contains repeated node ids in {path}")
    return idx


def _num_classes(arrays: dict, labels: np.ndarray, path: Path) -> int:
    if "num_classes" not in arrays:
        return int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 1
    value = arrays["num_classes"]
    if value.shape != () or not np.issubdtype(value.dtype, np.integer) or int(value) < 1:
        raise ValueError(f"num_classes: expected an integer scalar >= 1 in {path}, got {value!r}")
    if labels.size and labels.max() >= int(value):
        raise ValueError(f"num_classes: {int(value)} in {path}, but labels go up to {labels.max()}")
    return int(value)


def _name(arrays: dict, path: Path) -> str:
    if "name" not in arrays:
        return path.stem
    value = arrays["name"]
    if value.shape != () or value.dtype.kind != "U":
        raise ValueError(f"name: the 'name' entry of {path} must be a string scalar, got dtype {value.dtype} "
                         f"shape {value.shape}")
    return str(value)
