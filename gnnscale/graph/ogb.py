"""OGB node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M) from a local copy. Never downloads.

``root`` is the folder OGB's ``NodePropPredDataset(name, root=root)`` was given: the dataset lives in
``root/<name with '-' replaced by '_'>/``. Two layouts are read:

raw (what OGB downloads)::

    raw/edge.csv.gz           E rows "src,dst"            (arxiv, products)
    raw/node-feat.csv.gz      n rows of d floats
    raw/node-label.csv.gz     n rows of one int
    raw/num-node-list.csv.gz  one row: n
    raw/num-edge-list.csv.gz  one row: E
    raw/data.npz              edge_index [2, E], node_feat [n, d], num_nodes_list [1]  (papers100M)
    raw/node-label.npz        node_label [n, 1] float, NaN = unlabeled                   (papers100M)

processed (what ``NodePropPredDataset`` writes after its first load)::

    processed/data_processed  torch.save({"graph": {"edge_index", "node_feat", "num_nodes", ...},
                                          "labels": [n, 1]}) of numpy arrays

and, for both, ``split/<split name>/{train,valid,test}.csv.gz`` (one node id per line).

The processed file is a pickle inside torch's zip container. It is read with the restricted unpickler
of :mod:`gnnscale.graph.planetoid` (numpy arrays and builtin containers only), not with
``torch.load(weights_only=True)``: OGB writes it with ``pickle_protocol=4``, whose FRAME opcode torch's
weights-only unpickler (torch 2.13) rejects. Legacy (non-zip) torch files are refused.
"""

from __future__ import annotations

import gzip
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.npz import DAMAGED, open_npz
from gnnscale.graph.planetoid import UnsafePickleError, restricted_loads

Layout = Literal["auto", "raw", "processed"]
RAW_CSV_FILES = ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz", "num-node-list.csv.gz",
                 "num-edge-list.csv.gz")
RAW_BINARY_FILES = ("data.npz", "node-label.npz")
PROCESSED_FILE = "data_processed"


@dataclass(frozen=True, slots=True, kw_only=True)
class OgbSpec:
    """What differs between the supported datasets (from OGB's ``master.csv``).

    split: folder under ``split/``. undirected: the raw edge list stores each undirected edge once and
    OGB adds the reverse (``add_inverse_edge``). binary: raw data in ``.npz`` instead of ``.csv.gz``.
    """

    split: str
    num_classes: int
    undirected: bool
    binary: bool


OGB_DATASETS = {
    "ogbn-arxiv": OgbSpec(split="time", num_classes=40, undirected=False, binary=False),
    "ogbn-products": OgbSpec(split="sales_ranking", num_classes=47, undirected=True, binary=False),
    "ogbn-papers100M": OgbSpec(split="time", num_classes=172, undirected=False, binary=True),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Arrays:
    """edge_index: int64 [2, E] (row 0 source); features: float32 [n, d]; labels: int64 [n], -1 unlabeled."""

    edge_index: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    num_nodes: int


def load_ogb(root: str | Path, name: str, *, symmetrize: bool = True, layout: Layout = "auto") -> NodeDataset:
    """Load an OGB node-property dataset from its on-disk layout.

    Args:
        root: the folder that holds ``<name with '_'>/`` (OGB's ``root``).
        name: ``"ogbn-arxiv"``, ``"ogbn-products"`` or ``"ogbn-papers100M"``.
        symmetrize: add the reverse of every edge of a directed dataset (arxiv, papers100M), as the OGB
            examples do for GraphSAGE/GCN. ogbn-products is undirected and always gets both directions.
        layout: ``"raw"``, ``"processed"``, or ``"auto"`` (processed when ``processed/data_processed``
            exists, since it loads much faster, else raw).

    Duplicate edges are removed, self loops kept. Labels are int64 with -1 for unlabeled nodes
    (papers100M's NaN labels). Missing files raise ValueError naming the path and how to get it.
    """
    if name not in OGB_DATASETS:
        raise ValueError(f"name: expected one of {sorted(OGB_DATASETS)}, got {name!r}")
    if layout not in ("auto", "raw", "processed"):
        raise ValueError(f"layout: expected 'auto', 'raw' or 'processed', got {layout!r}")
    spec = OGB_DATASETS[name]
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: expected the folder holding {_dir_name(name)}/ (OGB's root), got {root}")
    folder = root / _dir_name(name)
    processed = folder / "processed" / PROCESSED_FILE
    if layout == "processed" or (layout == "auto" and processed.is_file()):
        arrays = _read_processed(processed, name, root)
    elif spec.binary:
        arrays = _read_raw_binary(folder / "raw", name, root)
    else:
        arrays = _read_raw_csv(folder / "raw", name, root)
    train_idx, val_idx, test_idx = (_read_split(folder / "split" / spec.split / f"{part}.csv.gz", name, root,
                                                arrays.num_nodes) for part in ("train", "valid", "test"))
    src, dst = arrays.edge_index
    graph = csc_from_coo(src, dst, arrays.num_nodes, symmetrize=symmetrize or spec.undirected,
                         remove_self_loops=False, remove_duplicates=True)
    if arrays.labels.size and arrays.labels.max() >= spec.num_classes:
        raise ValueError(f"labels: {name} has {spec.num_classes} classes, found label {arrays.labels.max()}")
    return NodeDataset(name=name, graph=graph, features=arrays.features, labels=arrays.labels,
                       train_idx=train_idx, val_idx=val_idx, test_idx=test_idx, num_classes=spec.num_classes)


def _dir_name(name: str) -> str:
    return name.replace("-", "_")


def _missing(path: Path, name: str, root: Path) -> ValueError:
    return ValueError(
        f"{path}: missing. gnnscale reads OGB's on-disk layout and never downloads. On a machine with internet "
        f"access run `python -c 'from ogb.nodeproppred import NodePropPredDataset; "
        f"NodePropPredDataset(\"{name}\", root=\"ROOT\")'` and copy ROOT/{_dir_name(name)} to "
        f"{root / _dir_name(name)}"
    )


def _require_file(path: Path, name: str, root: Path) -> Path:
    if not path.is_file():
        raise _missing(path, name, root)
    return path


# --- raw layout ----------------------------------------------------------------------------------


def _read_csv_gz(path: Path, dtype) -> np.ndarray:
    """A gzip-compressed CSV of numbers as a 2-D array [rows, columns] (numpy's C parser, streamed)."""
    try:
        with gzip.open(path, "rt") as f:
            return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: expected a gzip-compressed CSV of numbers ({exc})") from exc


def _single_count(path: Path) -> int:
    values = _read_csv_gz(path, np.int64).ravel()
    if values.shape != (1,):
        raise ValueError(f"{path}: expected one count (a single graph), got {values.shape[0]} values")
    return int(values[0])


def _read_raw_csv(raw: Path, name: str, root: Path) -> _Arrays:
    for file in RAW_CSV_FILES:
        _require_file(raw / file, name, root)
    num_nodes = _single_count(raw / "num-node-list.csv.gz")
    num_edges = _single_count(raw / "num-edge-list.csv.gz")
    edges = _read_csv_gz(raw / "edge.csv.gz", np.int64)
    if edges.shape != (num_edges, 2):
        raise ValueError(f"{raw / 'edge.csv.gz'}: expected {num_edges} rows 'src,dst' "
                         f"(num-edge-list.csv.gz), got shape {edges.shape}")
    features = _read_csv_gz(raw / "node-feat.csv.gz", np.float32)
    labels = _read_csv_gz(raw / "node-label.csv.gz", np.float64)
    return _checked_arrays(np.ascontiguousarray(edges.T), features, labels, num_nodes, raw)


def _read_raw_binary(raw: Path, name: str, root: Path) -> _Arrays:
    for file in RAW_BINARY_FILES:
        _require_file(raw / file, name, root)
    data = _read_npz(raw / "data.npz", ("edge_index", "node_feat", "num_nodes_list"))
    labels = _read_npz(raw / "node-label.npz", ("node_label",))["node_label"]
    counts = data["num_nodes_list"].ravel()
    if counts.shape != (1,):
        raise ValueError(f"{raw / 'data.npz'}: num_nodes_list: expected one graph, got {counts.shape[0]}")
    return _checked_arrays(data["edge_index"], data["node_feat"], labels, int(counts[0]), raw)


def _read_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    archive = open_npz(path)
    with archive:
        missing = [k for k in keys if k not in archive.files]
        if missing:
            raise ValueError(f"{path}: missing key(s) {missing} (present: {archive.files})")
        try:
            return {k: archive[k] for k in keys}
        except DAMAGED as exc:
            raise ValueError(f"{path}: corrupt array in the archive ({exc})") from exc


# --- processed layout ----------------------------------------------------------------------------


def _read_processed(path: Path, name: str, root: Path) -> _Arrays:
    _require_file(path, name, root)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not a zip-format torch.save file (legacy torch format is not supported); "
                         "use layout='raw'")
    with zipfile.ZipFile(path) as archive:
        members = [m for m in archive.namelist() if m.endswith("/data.pkl") or m == "data.pkl"]
        if len(members) != 1:
            raise ValueError(f"{path}: expected one data.pkl inside the torch archive, found {members}")
        payload = archive.read(members[0])
    try:
        loaded = restricted_loads(payload)
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{path}: {exc}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
        # A failure to rebuild the objects means a corrupt or foreign file.
        raise ValueError(f"{path}: cannot read the processed OGB data ({type(exc).__name__}: {exc})") from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get("graph"), dict) or "labels" not in loaded:
        raise ValueError(f"{path}: expected {{'graph': {{...}}, 'labels': array}} as NodePropPredDataset saves")
    graph = loaded["graph"]
    for key in ("edge_index", "node_feat", "num_nodes"):
        if graph.get(key) is None:
            raise ValueError(f"{path}: graph[{key!r}] is missing")
    return _checked_arrays(graph["edge_index"], graph["node_feat"], loaded["labels"], int(graph["num_nodes"]), path)


# --- shared --------------------------------------------------------------------------------------


def _checked_arrays(edge_index, features, labels, num_nodes: int, source: Path) -> _Arrays:
    if not isinstance(edge_index, np.ndarray) or edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"{source}: edge_index: expected an int array [2, num_edges], got "
                         f"{getattr(edge_index, 'shape', type(edge_index).__name__)}")
    if not isinstance(features, np.ndarray) or features.ndim != 2 or features.shape[0] != num_nodes:
        raise ValueError(f"{source}: node_feat: expected [{num_nodes}, d], got "
                         f"{getattr(features, 'shape', type(features).__name__)}")
    labels = np.asarray(labels).reshape(-1)
    if labels.shape != (num_nodes,):
        raise ValueError(f"{source}: node labels: expected {num_nodes} values, got {labels.shape[0]}")
    return _Arrays(edge_index=edge_index.astype(np.int64, copy=False),
                   features=np.ascontiguousarray(features, dtype=np.float32),
                   labels=_int_labels(labels, source), num_nodes=num_nodes)


def _int_labels(labels: np.ndarray, source: Path) -> np.ndarray:
    """int64 labels; NaN (papers100M's unlabeled nodes) becomes -1."""
    if np.issubdtype(labels.dtype, np.integer):
        return labels.astype(np.int64)
    unlabeled = np.isnan(labels)
    values = np.where(unlabeled, -1.0, labels)
    if np.any(values != np.round(values)) or np.any(values < -1):
        raise ValueError(f"{source}: node labels: expected integer class ids or NaN")
    return values.astype(np.int64)


def _read_split(path: Path, name: str, root: Path, num_nodes: int) -> np.ndarray:
    """Sorted unique int64 node ids from a split file (one id per line)."""
    _require_file(path, name, root)
    idx = np.sort(_read_csv_gz(path, np.int64).ravel())
    if idx.size and (idx[0] < 0 or idx[-1] >= num_nodes):
        raise ValueError(f"{path}: node ids must lie in [0, {num_nodes}), got [{idx[0]}, {idx[-1]}]")
    if idx.size > 1 and np.any(idx[1:] == idx[:-1]):
        raise ValueError(f"{path}: repeated node ids")
    return idx
