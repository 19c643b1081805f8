"""Link-prediction edge splits: which edges train, validate and test, and the graph messages pass over.

Two sources:

- a **random split** by fractions (``--edge-split 0.85,0.05,0.10``): every stored edge ``u -> v`` falls in
  train, val or test by a keyed hash of the *unordered* pair of its *original* node ids under the run's
  seed. The reverse edge ``v -> u`` of an undirected graph therefore always falls in the same part, and
  any worker decides its own in-edges alone, whatever the partition's relabelling or worker count (no
  global edge list is drawn, gathered or written). The fractions are expectations (each edge draws
  independently), as in a Bernoulli split.
- a dataset's **own split** in OGB's link layout: a directory with ``train``, ``valid`` and ``test`` as
  ``.npz`` or ``.pt`` files, each holding ``source_node`` and ``target_node`` (int [n]) and, for ranking,
  ``target_node_neg`` (int [n, k], each positive's own negative destinations), ids of the loaded dataset.
  Validation and test pairs (and their reverses) are removed from the message-passing graph.

The training positives are the message-passing graph's edges (both directions of an undirected edge).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.torch_keys import node_stream, uniform_below

SPLIT_FILES = ("train", "valid", "test")
EDGE_PARTS = ("train", "val", "test")
_SPLIT_STREAM = 0x4C53504C  # "LSPL": the hop slot of node_stream for the split's hash
_HASH_BOUND = 1 << 31  # the hash's uniform integer range: a fraction is resolved to 2**-31
_CHUNK = 1 << 22  # edges hashed per step (bounded temporaries on large graphs)


def check_edge_split(fractions) -> tuple[float, float, float]:
    """Three non-negative fractions (train, val, test) that sum to 1, train > 0."""
    values = tuple(float(f) for f in fractions)
    if len(values) != 3:
        raise ValueError(f"edge_split: expected three fractions train,val,test such as 0.85,0.05,0.10, got {values}")
    if any(not np.isfinite(f) or f < 0 for f in values):
        raise ValueError(f"edge_split: expected fractions >= 0, got {','.join(map(str, values))}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"edge_split: the fractions train,val,test must sum to 1, got {','.join(map(str, values))} "
                         f"(sum {sum(values):g})")
    if values[0] == 0:
        raise ValueError("edge_split: a train fraction of 0 leaves no training edge")
    return values


def edge_codes(src: np.ndarray, dst: np.ndarray, fractions: tuple[float, float, float], key: int) -> np.ndarray:
    """int8 [e]: 0 train, 1 val, 2 test for each edge ``src[i] -> dst[i]`` (original ids), a keyed hash of
    the unordered pair ``{src, dst}`` compared with the cumulative fractions."""
    out = np.empty(src.shape[0], dtype=np.int8)
    cuts = torch.tensor([round(fractions[0] * _HASH_BOUND), round((fractions[0] + fractions[1]) * _HASH_BOUND)],
                        dtype=torch.int64)
    for start in range(0, src.shape[0], _CHUNK):
        a = torch.from_numpy(np.asarray(src[start:start + _CHUNK], dtype=np.int64))
        b = torch.from_numpy(np.asarray(dst[start:start + _CHUNK], dtype=np.int64))
        lo, hi = torch.minimum(a, b), torch.maximum(a, b)
        draw = uniform_below(node_stream(key, _SPLIT_STREAM, lo), hi, _HASH_BOUND)
        out[start:start + _CHUNK] = ((draw >= cuts[0]).to(torch.int8) + (draw >= cuts[1]).to(torch.int8)).numpy()
    return out


def edge_destinations(indptr: np.ndarray) -> np.ndarray:
    """int64 [e]: the destination (row) of every CSC edge, ``0 ..`` row numbers."""
    return np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))


def keep_edges(indptr: np.ndarray, indices: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSC rows with only the edges ``keep`` marks (bool [e]), order kept. Kept edges are counted per
    row by one reduction over ``keep`` (no per-edge row array)."""
    rows = indptr.shape[0] - 1
    # A False sentinel: a row's range may end at e, and reduceat needs an index inside the array.
    counts = np.add.reduceat(np.append(keep, False), indptr[:-1], dtype=np.int64) if rows else np.zeros(0, np.int64)
    counts[np.diff(indptr) == 0] = 0  # reduceat gives an empty range's first element, not 0
    new_indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=new_indptr[1:])
    return new_indptr, np.ascontiguousarray(indices[keep])


def csc_edge_codes(indptr: np.ndarray, indices: np.ndarray, fractions: tuple[float, float, float], key: int,
                   original_ids: np.ndarray | None = None, first_row: int = 0) -> np.ndarray:
    """:func:`edge_codes` of every CSC edge (row ``r`` is node ``first_row + r``), a chunk of edges at a
    time: each chunk's destinations are found by a binary search in ``indptr``, so no per-edge id array
    of the whole graph is made."""
    e = indices.shape[0]
    out = np.empty(e, dtype=np.int8)
    for start in range(0, e, _CHUNK):
        stop = min(e, start + _CHUNK)
        src = np.asarray(indices[start:stop], dtype=np.int64)
        dst = np.searchsorted(indptr, np.arange(start, stop), side="right") - 1 + first_row
        if original_ids is not None:
            src, dst = original_ids[src], original_ids[dst]
        out[start:stop] = edge_codes(src, dst, fractions, key)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSplit:
    """The supervision edges of a link task, in the graph's (global) ids.

    Args:
        graph: the message-passing graph: the input graph without validation and test edges (nor their
            reverses).
        train: int64 [2, n_train], (source, destination) of the training positives.
        val, test: int64 [2, n], the validation and test positives.
        val_neg, test_neg: int64 [n, k], each positive's own negative destinations (ranking), or None
            (drawn from the seed where needed).
    """

    graph: CSCGraph
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    val_neg: np.ndarray | None = None
    test_neg: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("train", "val", "test"):
            edges = getattr(self, name)
            if edges.dtype != np.int64 or edges.ndim != 2 or edges.shape[0] != 2:
                raise TypeError(f"{name}: expected int64 [2, n] edges, got {edges.dtype} {edges.shape}")
        for name, edges in (("val_neg", self.val), ("test_neg", self.test)):
            neg = getattr(self, name)
            if neg is not None and (neg.ndim != 2 or neg.shape[0] != edges.shape[1]):
                raise ValueError(f"{name}: expected [{edges.shape[1]}, k] negatives (one row per positive), got "
                                 f"{neg.shape}")
        if self.train.shape[1] == 0:
            raise ValueError("edge_split: the split leaves no training edge")


def random_link_split(graph: CSCGraph, fractions, key: int, original_ids: np.ndarray | None = None,
                      rows: tuple[int, int] | None = None) -> LinkSplit:
    """The random split of ``graph``'s edges (module docstring); ``original_ids[v]`` is node ``v``'s id in
    the dataset (a partition's relabelling; None: the graph's own ids), which the hash reads. The
    supervision pairs are those whose destination is in ``rows`` (lo, hi) (a worker's own nodes; None:
    every node); the message-passing graph is always the whole one."""
    fractions = check_edge_split(fractions)
    codes = csc_edge_codes(graph.indptr, graph.indices, fractions, key, original_ids)
    indptr, indices = keep_edges(graph.indptr, graph.indices, codes == 0)
    mp = CSCGraph(indptr=indptr, indices=indices, num_nodes=graph.num_nodes)
    lo, hi = rows if rows is not None else (0, graph.num_nodes)
    e0, e1 = int(graph.indptr[lo]), int(graph.indptr[hi])
    src = np.asarray(graph.indices[e0:e1], dtype=np.int64)
    dst = edge_destinations(graph.indptr[lo:hi + 1] - e0) + lo
    mine = codes[e0:e1]
    pairs = [np.stack([src[mine == c], dst[mine == c]]) for c in range(3)]
    return LinkSplit(graph=mp, train=pairs[0], val=pairs[1], test=pairs[2])


def read_split_file(directory: Path, name: str) -> dict[str, np.ndarray]:
    """``name``.npz or ``name``.pt of an OGB link split directory as numpy arrays."""
    npz, pt = directory / f"{name}.npz", directory / f"{name}.pt"
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    if pt.is_file():
        data = torch.load(pt, weights_only=True)  # tensors and dicts only: never code
        if not isinstance(data, dict):
            raise ValueError(f"link_split: {pt} holds a {type(data).__name__}, expected a dict of arrays")
        return {k: np.asarray(v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in data.items()}
    raise ValueError(f"link_split: {directory} has neither {name}.npz nor {name}.pt (OGB's link split layout)")


def _pairs(data: dict, path: str, num_nodes: int) -> np.ndarray:
    for key in ("source_node", "target_node"):
        if key not in data:
            raise ValueError(f"link_split: {path} has no {key!r} (it holds {', '.join(sorted(data)) or 'nothing'})")
    src, dst = np.asarray(data["source_node"]).reshape(-1), np.asarray(data["target_node"]).reshape(-1)
    if src.shape != dst.shape:
        raise ValueError(f"link_split: {path} has {src.size} source_node but {dst.size} target_node entries")
    pairs = np.stack([src, dst])
    return _ids(pairs, f"{path} source_node/target_node", num_nodes)


def _ids(ids: np.ndarray, what: str, num_nodes: int) -> np.ndarray:
    if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= num_nodes):
        raise ValueError(f"link_split: {what} must be int node ids in [0, {num_nodes})")
    return ids.astype(np.int64)


def read_link_split(graph: CSCGraph, directory: str | Path) -> LinkSplit:
    """A dataset's own split (module docstring): its validation and test pairs and their reverses are
    removed from ``graph``; the training positives are the rest of its edges (the ``train`` file's pairs
    are checked to exist, as OGB's are the graph's edges)."""
    directory = Path(directory)
    files = {name: read_split_file(directory, name) for name in SPLIT_FILES}
    n = graph.num_nodes
    val, test = _pairs(files["valid"], f"{directory}/valid", n), _pairs(files["test"], f"{directory}/test", n)
    _pairs(files["train"], f"{directory}/train", n)
    held = np.concatenate([val, test, val[::-1], test[::-1]], axis=1)
    src = np.asarray(graph.indices, dtype=np.int64)
    dst = edge_destinations(graph.indptr)
    keep = ~np.isin(src * n + dst, held[0] * n + held[1])
    if not keep.any():
        raise ValueError(f"link_split: {directory}'s valid and test pairs hold every edge of the graph, which leaves "
                         "no training edge")
    indptr, indices = keep_edges(graph.indptr, graph.indices, keep)
    negs = {}
    for name, edges in (("valid", val), ("test", test)):
        neg = files[name].get("target_node_neg")
        negs[name] = None if neg is None else _ids(np.asarray(neg).reshape(edges.shape[1], -1 if edges.shape[1] else 0),
                                                    f"{directory}/{name} target_node_neg", n)
    return LinkSplit(graph=CSCGraph(indptr=indptr, indices=indices.astype(index_dtype(n)), num_nodes=n),
                     train=np.stack([src[keep], dst[keep]]), val=val, test=test, val_neg=negs["valid"],
                     test_neg=negs["test"])
