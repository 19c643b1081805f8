"""Cora, CiteSeer and PubMed from the raw Planetoid files, with the standard (Kipf & Welling) processing.

The raw files ``ind.<name>.{x,y,tx,ty,allx,ally,graph}`` are Python-2 pickles of scipy sparse
matrices, numpy arrays and a dict of adjacency lists; ``ind.<name>.test.index`` is text. A pickle can
run arbitrary code when loaded, so they are read with :class:`RestrictedUnpickler`, which admits only
the numpy, scipy.sparse and builtin container classes those files need.

Processing (as in Kipf's ``gcn/utils.py`` and PyG's ``read_planetoid_data``):

* ``allx``/``ally`` hold the first nodes (training nodes first), ``tx``/``ty`` the test nodes in the
  order of ``test.index``; rows are moved so that row ``i`` is node ``i``;
* CiteSeer has test ids with no test row (isolated nodes): they get zero features and no label;
* label = argmax of the one-hot row, -1 for an all-zero row;
* split: train = the first ``len(y)`` nodes, val = the next 500, test = the ``test.index`` nodes
  (unlabeled nodes are left out of every split; Cora has none);
* edges from the adjacency dict, symmetrised, self loops and duplicates removed (Cora: 10,556).
"""

from __future__ import annotations

import codecs
import collections
import importlib
import io
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.dataset import NodeDataset

PLANETOID_NAMES = ("cora", "citeseer", "pubmed")
PICKLED_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
NUM_VAL = 500  # the standard split's validation size (Yang et al. 2016)


class UnsafePickleError(pickle.UnpicklingError, ValueError):
    """A pickle asked for a class outside the allowlist (also a ValueError, for uniform handling)."""


def _numpy_multiarray():
    # numpy >= 2 moved numpy.core to numpy._core; pickles written by numpy 1.x still name numpy.core.
    try:
        return importlib.import_module("numpy._core.multiarray")
    except ImportError:
        return importlib.import_module("numpy.core.multiarray")


def _allowed_globals() -> dict[tuple[str, str], object]:
    """(module, name) as written in a pickle -> the object it may resolve to."""
    multiarray = _numpy_multiarray()
    allowed: dict[tuple[str, str], object] = {}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = multiarray._reconstruct
        allowed[(module, "scalar")] = multiarray.scalar
    allowed[("numpy", "ndarray")] = np.ndarray
    allowed[("numpy", "dtype")] = np.dtype
    for fmt in ("csr", "csc", "coo", "lil"):
        cls = getattr(sp, f"{fmt}_matrix")
        for module in (f"scipy.sparse.{fmt}", f"scipy.sparse._{fmt}", "scipy.sparse"):
            allowed[(module, cls.__name__)] = cls
    # Python 2 pickles name builtins "__builtin__".
    for module in ("builtins", "__builtin__"):
        for cls in (dict, list, set, frozenset, tuple):
            allowed[(module, cls.__name__)] = cls
    allowed[("collections", "defaultdict")] = collections.defaultdict
    # Python 3 writes bytes under protocols < 3 as _codecs.encode(str, "latin1"): a pure str -> bytes call
    # (also on torch's weights-only allowlist).
    allowed[("_codecs", "encode")] = codecs.encode
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only allowlisted numpy / scipy.sparse / builtin container classes.

    Anything else (``os.system``, ``builtins.eval``, arbitrary classes) raises
    :class:`UnsafePickleError` naming the class, before it is imported. Persistent ids (torch tensor
    storages) are refused too.
    """

    _ALLOWED = _allowed_globals()

    def find_class(self, module: str, name: str):
        obj = self._ALLOWED.get((module, name))
        if obj is None:
            raise UnsafePickleError(
                f"pickle: refusing to load global {module}.{name}; only numpy arrays, scipy.sparse matrices "
                "and builtin containers are allowed"
            )
        return obj

    def persistent_load(self, pid):
        raise UnsafePickleError(f"pickle: refusing persistent id {pid!r} (tensor storages are not allowed here)")


def restricted_loads(data: bytes, *, encoding: str = "ASCII") -> object:
    """Unpickle ``data`` with :class:`RestrictedUnpickler` (``encoding="latin1"`` for Python-2 pickles)."""
    return RestrictedUnpickler(io.BytesIO(data), encoding=encoding).load()


def load_planetoid(root: str | Path, name: str, *, normalize_features: bool = True) -> NodeDataset:
    """Load a Planetoid dataset with the standard split.

    Args:
        root: folder holding ``ind.<name>.*``.
        name: ``"cora"``, ``"citeseer"`` or ``"pubmed"`` (case-insensitive).
        normalize_features: divide each feature row by its sum (Kipf & Welling); all-zero rows stay zero.

    Returns a NodeDataset: float32 features [n, d], int64 labels [n] (-1 unlabeled), symmetric graph.
    """
    if not isinstance(name, str) or name.lower() not in PLANETOID_NAMES:
        raise ValueError(f"name: expected one of {PLANETOID_NAMES}, got {name!r}")
    name = name.lower()
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: expected a directory holding ind.{name}.* files, got {root}")
    parts = {part: _read_pickle(root / f"ind.{name}.{part}") for part in PICKLED_PARTS}
    test_ids = _read_test_index(root / f"ind.{name}.test.index")

    x, tx, allx = (_dense(parts[k], f"ind.{name}.{k}") for k in ("x", "tx", "allx"))
    y, ty, ally = (_dense(parts[k], f"ind.{name}.{k}") for k in ("y", "ty", "ally"))
    tx, ty = _pad_missing_test_rows(tx, ty, test_ids)
    features = np.vstack([allx, tx]).astype(np.float32)
    onehot = np.vstack([ally, ty])
    # Rows of tx/ty follow test.index order; put each at its node id (the sorted ids are the row slots).
    sorted_test = np.sort(test_ids)
    features[test_ids] = features[sorted_test]
    onehot[test_ids] = onehot[sorted_test]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)
    if normalize_features:
        features = _row_normalize(features)

    num_nodes = features.shape[0]
    src, dst = _edges_from_adjacency(parts["graph"], f"ind.{name}.graph", num_nodes)
    graph = csc_from_coo(src, dst, num_nodes, symmetrize=True, remove_self_loops=True, remove_duplicates=True)

    num_train = y.shape[0]
    # Validation nodes come from allx (the labeled non-test nodes); the bound only matters for tiny files.
    val_end = min(num_train + NUM_VAL, allx.shape[0])
    splits = [np.arange(num_train), np.arange(num_train, val_end), np.unique(test_ids)]
    train_idx, val_idx, test_idx = (s[labels[s] >= 0].astype(np.int64) for s in splits)
    return NodeDataset(name=name, graph=graph, features=features, labels=labels, train_idx=train_idx,
                       val_idx=val_idx, test_idx=test_idx, num_classes=int(onehot.shape[1]))


def _read_pickle(path: Path) -> object:
    if not path.is_file():
        raise ValueError(f"{path}: missing Planetoid file (expected the raw ind.* files of kimiyoung/planetoid)")
    try:
        return restricted_loads(path.read_bytes(), encoding="latin1")
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{path}: {exc}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError) as exc:
        raise ValueError(f"{path}: not a readable Planetoid pickle ({exc})") from exc


def _read_test_index(path: Path) -> np.ndarray:
    if not path.is_file():
        raise ValueError(f"{path}: missing Planetoid file (one test node id per line)")
    try:
        return np.loadtxt(path, dtype=np.int64, ndmin=1)
    except ValueError as exc:
        raise ValueError(f"{path}: expected one integer node id per line ({exc})") from exc


def _dense(obj: object, what: str) -> np.ndarray:
    if sp.issparse(obj):
        return np.asarray(obj.toarray())
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return obj
    raise ValueError(f"{what}: expected a 2-D scipy.sparse matrix or numpy array, got {type(obj).__name__}")


def _pad_missing_test_rows(tx: np.ndarray, ty: np.ndarray, test_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give every id in [min(test), max(test)] a row; ids absent from test.index get zero rows.

    Only CiteSeer needs it (15 isolated nodes have no test row); for the others it is the identity.
    """
    lo, hi = int(test_ids.min()), int(test_ids.max())
    if hi - lo + 1 == tx.shape[0]:
        return tx, ty
    rows = np.sort(test_ids) - lo
    tx_full = np.zeros((hi - lo + 1, tx.shape[1]), dtype=tx.dtype)
    ty_full = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
    tx_full[rows] = tx
    ty_full[rows] = ty
    return tx_full, ty_full


def _row_normalize(features: np.ndarray) -> np.ndarray:
    row_sum = features.sum(axis=1, keepdims=True)
    # Empty rows (isolated CiteSeer nodes) stay zero rather than becoming NaN.
    return np.divide(features, row_sum, out=np.zeros_like(features), where=row_sum != 0)


def _edges_from_adjacency(adjacency: object, what: str, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency dict {node: [neighbors]} as int64 COO arrays (src = key, dst = neighbor)."""
    if not isinstance(adjacency, dict):
        raise ValueError(f"{what}: expected a dict of adjacency lists, got {type(adjacency).__name__}")
    keys = np.fromiter(adjacency.keys(), dtype=np.int64, count=len(adjacency))
    lists = [np.asarray(v, dtype=np.int64).reshape(-1) for v in adjacency.values()]
    lengths = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    src = np.repeat(keys, lengths)
    dst = np.concatenate(lists) if lists else np.empty(0, dtype=np.int64)
    for arr in (src, dst):
        if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
            raise ValueError(f"{what}: node ids must lie in [0, {num_nodes}), got [{arr.min()}, {arr.max()}]")
    return src, dst
