"""``gnnscale convert``: edge lists (and node arrays) into a dataset directory, in bounded memory.

Inputs (:func:`npy_inputs`, :func:`ogb_inputs`): edge lists as ``.npy`` files ([2, E] or [E, 2]
each, or pairs of 1-D source and destination files), with optional features [n, d], labels [n] and
split id files; or OGB's ogbn-papers100M raw layout (``raw/data.npz``, ``raw/node-label.npz``,
``split/time/*.csv.gz``), read member by member from the archives (:mod:`gnnscale.graph.npy_stream`).

:func:`convert_dataset` then writes byte for byte what ``save_dataset`` writes for the dataset built
in memory with :func:`gnnscale.graph.csc.csc_from_coo` (``save_graph`` when there are no node arrays),
whatever ``chunk_edges``:

1. every input's header is checked (dtype, shape, lengths) when the inputs are built, before any work;
2. a streaming pass over the edges checks every id and counts each node's in-edges (the node count
   is the largest id + 1 unless given);
3. a second pass drops self loops (unless kept), adds reverse edges (``symmetrize``) and appends the
   edges, ``chunk_edges`` at a time, to bucket files by destination range
   (:class:`gnnscale.graph.external_csc.EdgeBuckets`; ranges sized by the counts of step 2);
4. each bucket is sorted, deduplicated and appended to ``indptr.npy`` / ``indices.npy``;
5. features are copied row block by row block as float32, then labels, splits and ``meta.json``.

Everything goes into a hidden staging sibling of the target, moved into place at the end: an error
or a kill leaves nothing under the target name. Peak memory: :func:`memory_bound`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from gnnscale.graph.csc import index_dtype
from gnnscale.graph.external_csc import MAX_KEYED_NODES, EdgeBuckets, NpyWriter, bucket_bounds
from gnnscale.graph.generate import CHUNK_EDGES
from gnnscale.graph.npy_stream import MappedNpy, ZipNpy
from gnnscale.graph.ogb import OGB_DATASETS, _dir_name, _int_labels, _read_split, _require_file
from gnnscale.graph.storage import (DATASET_ARRAYS, GRAPH_ARRAYS, META_FILE, _staging_directory, check_target,
                                    dataset_meta, finish_directory, graph_meta, with_array_specs)

# Measured peak bytes (tracemalloc) per node and per chunk edge, with margin: tests/graph/test_convert.py
# checks that a run stays below memory_bound().
BYTES_PER_NODE = 64
BYTES_PER_CHUNK_EDGE = 64
DEFAULT_SPLIT = (0.8, 0.1, 0.1)
OGB_NAME = "ogbn-papers100M"

Reader = MappedNpy | ZipNpy
EdgeLayout = Literal["2xE", "Ex2", "pair"]
Progress = Callable[[str, int, int], None]
Splits = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeInput:
    """One source of directed edges ``src -> dst``.

    where: how errors name it (the file, or the two files of a pair).
    layout: ``"2xE"`` (row 0 sources, row 1 destinations), ``"Ex2"`` (one edge per row) or ``"pair"``
        (``readers[0]`` sources, ``readers[1]`` destinations, 1-D each).
    readers: one reader, two for a pair; integer dtype.
    num_edges: edges in the source.
    """

    where: str
    layout: EdgeLayout
    readers: tuple[Reader, ...]
    num_edges: int

    def chunks(self, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) pieces of at most ``chunk`` edges, in file order, in the file's dtype."""
        if self.layout == "2xE":
            for piece in self.readers[0].columns(chunk):
                yield piece[0], piece[1]
        elif self.layout == "Ex2":
            for piece in self.readers[0].rows(chunk):
                yield piece[:, 0], piece[:, 1]
        else:
            yield from zip(self.readers[0].rows(chunk), self.readers[1].rows(chunk))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInputs:
    """The arrays beside the graph.

    features: a reader of a float array [num_nodes, feature_dim] (copied as float32).
    labels: int64 [num_nodes], class ids in [0, num_classes) or -1 for unlabeled nodes.
    splits: (train, val, test) sorted unique int64 ids of labeled nodes, or None for a random split.
    num_classes: int >= 1.
    """

    features: Reader
    labels: np.ndarray
    splits: Splits | None
    num_classes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertInputs:
    """What :func:`convert_dataset` reads: a name, the edge sources, the node count (None: largest id + 1)
    and the node arrays (None: a graph directory, topology only)."""

    name: str
    edges: tuple[EdgeInput, ...]
    num_nodes: int | None
    nodes: NodeInputs | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertSummary:
    """What :func:`convert_dataset` wrote.

    num_edges: directed edges kept (after symmetrising, removing self loops and repeats).
    edges_read: edges in the inputs. largest_in_degree: of the output graph, before removing repeats.
    file_bytes: {file name: bytes on disk}.
    """

    directory: Path
    num_nodes: int
    num_edges: int
    edges_read: int
    largest_in_degree: int
    file_bytes: dict[str, int]


# --- inputs --------------------------------------------------------------------------------------


def npy_inputs(*, edges: Sequence[str | Path] = (), src: Sequence[str | Path] = (), dst: Sequence[str | Path] = (),
               num_nodes: int | None = None, features: str | Path | None = None, labels: str | Path | None = None,
               splits: tuple[str | Path, str | Path, str | Path] | None = None, num_classes: int | None = None,
               name: str = "converted") -> ConvertInputs:
    """Edge lists and node arrays in ``.npy`` files; every header is checked here, before any work.

    Args:
        edges: files of one int array each, [2, E] (row 0 sources) or [E, 2] (a [2, 2] array is [2, E]).
        src, dst: 1-D int files, the i-th of ``src`` paired with the i-th of ``dst``, equal lengths.
        num_nodes: the node count (default: the rows of ``features``, else the largest id + 1).
        features: float [n, d] (float16, float32, float64); written as float32.
        labels: int [n] or [n, 1] (-1, or NaN in a float array, for an unlabeled node); with ``features``.
        splits: (train, val, test) files of int node ids; None: a random split of the labeled nodes.
        num_classes: default: the largest label + 1.
    """
    if not edges and not src and not dst:
        raise ValueError("edges: no edge files given (edges, or src with dst)")
    if len(src) != len(dst):
        raise ValueError(f"src, dst: expected as many source files as destination files, got {len(src)} and "
                         f"{len(dst)}")
    sources = [edge_array(MappedNpy(path)) for path in edges]
    sources += [edge_pair(MappedNpy(s), MappedNpy(d)) for s, d in zip(src, dst)]
    _check_count("num_nodes", num_nodes)
    if (features is None) != (labels is None):
        given = "features" if labels is None else "labels"
        raise ValueError(f"{given}: features and labels go together (a dataset needs both; neither gives a "
                         "graph directory)")
    if features is None:
        if splits is not None or num_classes is not None:
            raise ValueError("splits: split files and num_classes need features and labels")
        return ConvertInputs(name=name, edges=tuple(sources), num_nodes=num_nodes, nodes=None)
    reader = feature_reader(MappedNpy(features), num_nodes)
    n = reader.shape[0]
    label_ids = read_labels(MappedNpy(labels), n)
    if splits is not None:
        split_ids = tuple(read_split_ids(MappedNpy(path), n) for path in splits)
    else:
        split_ids = None
    nodes = node_inputs(reader, label_ids, split_ids, num_classes, str(labels))
    return ConvertInputs(name=name, edges=tuple(sources), num_nodes=n, nodes=nodes)


def ogb_inputs(root: str | Path) -> ConvertInputs:
    """ogbn-papers100M's raw layout under ``root`` (OGB's root: it holds ``ogbn_papers100M/``), read
    member by member. Labels: NaN (unlabeled) becomes -1; splits from ``split/time``."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: expected the folder holding {_dir_name(OGB_NAME)}/ (OGB's root), got {root}")
    folder = root / _dir_name(OGB_NAME)
    data = _require_file(folder / "raw" / "data.npz", OGB_NAME, root)
    label_file = _require_file(folder / "raw" / "node-label.npz", OGB_NAME, root)
    counts = ZipNpy(data, "num_nodes_list").read().ravel()
    if counts.shape != (1,) or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(f"{data}: num_nodes_list: expected one integer count (one graph), got {counts!r}")
    n = int(counts[0])
    reader = feature_reader(ZipNpy(data, "node_feat"), n)
    labels = read_labels(ZipNpy(label_file, "node_label"), n)
    splits = tuple(_read_split(folder / "split" / OGB_DATASETS[OGB_NAME].split / f"{part}.csv.gz", OGB_NAME, root, n)
                   for part in ("train", "valid", "test"))
    nodes = node_inputs(reader, labels, splits, OGB_DATASETS[OGB_NAME].num_classes, f"{label_file}")
    return ConvertInputs(name=OGB_NAME, edges=(edge_array(ZipNpy(data, "edge_index")),), num_nodes=n, nodes=nodes)


def edge_array(reader: Reader) -> EdgeInput:
    """An edge list in one array, [2, E] or [E, 2]."""
    _check_id_dtype(reader)
    shape = reader.shape
    if len(shape) == 2 and shape[0] == 2:
        return EdgeInput(where=reader.where, layout="2xE", readers=(reader,), num_edges=shape[1])
    if len(shape) == 2 and shape[1] == 2:
        return EdgeInput(where=reader.where, layout="Ex2", readers=(reader,), num_edges=shape[0])
    raise ValueError(f"{reader.where}: expected edges as an array [2, E] or [E, 2], got shape {list(shape)}")


def edge_pair(src: Reader, dst: Reader) -> EdgeInput:
    """An edge list in two 1-D arrays of equal length, sources and destinations."""
    for reader in (src, dst):
        _check_id_dtype(reader)
        if len(reader.shape) != 1:
            raise ValueError(f"{reader.where}: expected a 1-D array of node ids, got shape {list(reader.shape)}")
    if src.shape != dst.shape:
        raise ValueError(f"{src.where}, {dst.where}: source and destination files differ in length "
                         f"({src.shape[0]} and {dst.shape[0]} ids)")
    return EdgeInput(where=f"{src.where} / {dst.where}", layout="pair", readers=(src, dst), num_edges=src.shape[0])


def feature_reader(reader: Reader, num_nodes: int | None) -> Reader:
    """``reader`` checked to hold float features [num_nodes, d] (any row count when None)."""
    if len(reader.shape) != 2 or not np.issubdtype(reader.dtype, np.floating):
        raise ValueError(f"{reader.where}: expected float features [num_nodes, feature_dim], got dtype "
                         f"{reader.dtype} shape {list(reader.shape)}")
    if num_nodes is not None and reader.shape[0] != num_nodes:
        raise ValueError(f"{reader.where}: expected {num_nodes} rows (num_nodes), got {reader.shape[0]}")
    return reader


def read_labels(reader: Reader, num_nodes: int, chunk: int = 1 << 16) -> np.ndarray:
    """int64 [num_nodes] from labels [n] or [n, 1] (int, or float with NaN for unlabeled: -1), read in pieces."""
    if reader.shape not in ((num_nodes,), (num_nodes, 1)):
        raise ValueError(f"{reader.where}: expected labels of shape [{num_nodes}] or [{num_nodes}, 1], got "
                         f"{list(reader.shape)}")
    if not (np.issubdtype(reader.dtype, np.integer) or np.issubdtype(reader.dtype, np.floating)):
        raise ValueError(f"{reader.where}: expected int labels (or float with NaN), got dtype {reader.dtype}")
    labels = np.empty(num_nodes, dtype=np.int64)
    start = 0
    for piece in reader.rows(chunk):
        piece = _int_labels(piece.reshape(-1), Path(reader.where))
        if piece.size and piece.min() < -1:
            raise ValueError(f"{reader.where}: expected class ids >= 0 or -1 (unlabeled), found {piece.min()}")
        labels[start:start + piece.size] = piece
        start += piece.size
    return labels


def read_split_ids(reader: Reader, num_nodes: int) -> np.ndarray:
    """Sorted int64 node ids from a 1-D int file; ids out of range or repeated are a ValueError."""
    _check_id_dtype(reader)
    if len(reader.shape) != 1:
        raise ValueError(f"{reader.where}: expected a 1-D array of node ids, got shape {list(reader.shape)}")
    ids = np.sort(np.concatenate([np.empty(0, np.int64), *reader.rows(max(1, reader.shape[0]))]).astype(np.int64))
    if ids.size and (ids[0] < 0 or ids[-1] >= num_nodes):
        raise ValueError(f"{reader.where}: node ids must lie in [0, {num_nodes}), got [{ids[0]}, {ids[-1]}]")
    if ids.size > 1 and np.any(ids[1:] == ids[:-1]):
        raise ValueError(f"{reader.where}: repeated node ids")
    return ids


def node_inputs(features: Reader, labels: np.ndarray, splits: Splits | None, num_classes: int | None,
                labels_where: str) -> NodeInputs:
    """The node arrays, checked together: labels below ``num_classes`` (default largest + 1), split
    nodes labeled."""
    top = int(labels.max()) if labels.size else -1
    if num_classes is None:
        num_classes = max(top + 1, 1)
    _check_count("num_classes", num_classes, low=1)
    if top >= num_classes:
        raise ValueError(f"{labels_where}: label {top} found, num_classes is {num_classes}")
    for part, ids in zip(("train", "val", "test"), splits or ()):
        if ids.size and np.any(labels[ids] < 0):
            raise ValueError(f"{labels_where}: the {part} split holds unlabeled nodes (label -1), e.g. node "
                             f"{int(ids[np.argmax(labels[ids] < 0)])}")
    return NodeInputs(features=features, labels=labels, splits=splits, num_classes=num_classes)


def random_split(labels: np.ndarray, fractions: Sequence[float], seed: int) -> Splits:
    """(train, val, test): disjoint random sets of labeled nodes, ``int(f * labeled)`` nodes for each
    fraction ``f``, sorted int64; one permutation of the labeled nodes drawn from ``seed``."""
    check_split_fractions(fractions)
    labeled = np.flatnonzero(labels >= 0).astype(np.int64)
    order = np.random.default_rng(seed).permutation(labeled)
    cuts = np.cumsum([0, *(int(f * labeled.size) for f in fractions)])
    return tuple(np.sort(order[cuts[i]:cuts[i + 1]]) for i in range(3))


def check_split_fractions(fractions: Sequence[float]) -> None:
    """ValueError unless ``fractions`` is (train, val, test), each in [0, 1], summing to at most 1."""
    if len(fractions) != 3 or any(not 0 <= f <= 1 for f in fractions) or sum(fractions) > 1 + 1e-9:
        raise ValueError(f"split_fractions: expected 3 fractions in [0, 1] summing to at most 1, got "
                         f"{list(fractions)}")


def _check_id_dtype(reader: Reader) -> None:
    if not np.issubdtype(reader.dtype, np.integer):
        raise ValueError(f"{reader.where}: node ids must be integers, got dtype {reader.dtype}")


def _check_count(name: str, value, low: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low):
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")


# --- conversion ----------------------------------------------------------------------------------


def memory_bound(num_nodes: int, chunk_edges: int, largest_in_degree: int = 0) -> int:
    """Bytes of working memory :func:`convert_dataset` stays below: per-node arrays (in-edge counts,
    labels, a split), one chunk of edges or feature values, and the largest bucket (at most
    ``chunk_edges`` plus one node's in-edges)."""
    return BYTES_PER_NODE * num_nodes + BYTES_PER_CHUNK_EDGE * (chunk_edges + largest_in_degree) + (1 << 20)


def convert_dataset(inputs: ConvertInputs, out_dir: str | Path, *, symmetrize: bool = False,
                    keep_self_loops: bool = False, chunk_edges: int = CHUNK_EDGES,
                    split_fractions: Sequence[float] = DEFAULT_SPLIT, seed: int = 0, overwrite: bool = False,
                    progress: Progress | None = None) -> ConvertSummary:
    """Write ``inputs`` to ``out_dir`` as a dataset directory (a graph directory without node arrays).

    Args:
        inputs: from :func:`npy_inputs` or :func:`ogb_inputs`.
        out_dir: the directory to write; its parent is created if missing.
        symmetrize: add the reverse of every edge.
        keep_self_loops: keep edges ``v -> v`` (default: dropped). Repeated edges are always dropped.
        chunk_edges: int >= 1, directed edges held in memory at a time (default 2**24): memory, not output.
        split_fractions: (train, val, test) fractions of the labeled nodes for a random split, used
            when ``inputs`` has no splits; ``seed`` draws it.
        overwrite: replace an existing ``out_dir`` (else a ValueError, raised before any work).
        progress: called as ``progress(phase, done, total)`` in the phases ``"scan"`` and ``"edges"``
            (edge chunks), ``"csc"`` (buckets), ``"features"`` (row blocks).
    """
    if not isinstance(inputs, ConvertInputs):
        raise TypeError(f"inputs: expected ConvertInputs (npy_inputs, ogb_inputs), got {type(inputs).__name__}")
    _check_count("chunk_edges", chunk_edges)
    if inputs.nodes is not None and inputs.nodes.splits is None:
        check_split_fractions(split_fractions)
    out_dir = Path(out_dir)
    check_target(out_dir, overwrite, "out_dir")
    report = progress or (lambda phase, done, total: None)
    n, in_edges = _scan_edges(inputs, int(chunk_edges), symmetrize, report)
    largest = int(in_edges.max())
    bounds = bucket_bounds(in_edges, int(chunk_edges))
    del in_edges  # the buckets' temporary arrays come next
    try:
        with _staging_directory(out_dir) as tmp:
            num_edges, file_bytes = _write_staged(inputs, tmp, out_dir, n, bounds, symmetrize=symmetrize,
                                                  keep_self_loops=keep_self_loops, chunk=int(chunk_edges),
                                                  split_fractions=split_fractions, seed=seed, report=report)
    except OSError as err:
        # A full disk or a file size limit: the staging folder is gone; say where the write went.
        raise OSError(err.errno, f"{out_dir}: could not write the directory ({err.strerror or err}); nothing "
                                 "was left under this name") from err
    return ConvertSummary(directory=out_dir, num_nodes=n, num_edges=num_edges,
                          edges_read=sum(e.num_edges for e in inputs.edges), largest_in_degree=largest,
                          file_bytes=file_bytes)


def _write_staged(inputs: ConvertInputs, tmp: Path, out_dir: Path, n: int, bounds: np.ndarray, *, symmetrize: bool,
                  keep_self_loops: bool, chunk: int, split_fractions: Sequence[float], seed: int,
                  report: Progress) -> tuple[int, dict[str, int]]:
    """Steps 3-5 in the staging folder ``tmp``, then its move to ``out_dir``; (edge count, file bytes)."""
    buckets = EdgeBuckets(tmp / "buckets", bounds, n)
    _bucket_edges(inputs.edges, buckets, chunk, symmetrize, keep_self_loops, report)
    specs = {"indptr": (np.dtype(np.int64), (n + 1,))}
    with NpyWriter(tmp / "indptr.npy", np.int64, (n + 1,)) as indptr, \
            NpyWriter(tmp / "indices.npy", index_dtype(n), (None,)) as indices:
        num_edges = buckets.write_csc(indptr, indices, progress=lambda done, total: report("csc", done, total))
    specs["indices"] = (index_dtype(n), (num_edges,))
    if inputs.nodes is None:
        meta = with_array_specs(graph_meta(num_nodes=n, num_edges=num_edges), specs)
        expected = GRAPH_ARRAYS
    else:
        specs.update(_write_nodes(inputs.nodes, tmp, chunk, split_fractions, seed, report))
        meta = with_array_specs(dataset_meta(name=inputs.name, num_nodes=n, num_edges=num_edges,
                                             feature_dim=inputs.nodes.features.shape[1],
                                             num_classes=inputs.nodes.num_classes), specs)
        expected = DATASET_ARRAYS
    if tuple(specs) != expected:  # the storage format's array list, in its order
        raise RuntimeError(f"convert wrote arrays {tuple(specs)}, the storage format expects {expected}")
    file_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
    finish_directory(tmp, out_dir, META_FILE, meta)
    file_bytes[META_FILE] = (out_dir / META_FILE).stat().st_size
    return num_edges, file_bytes


def _scan_edges(inputs: ConvertInputs, chunk: int, symmetrize: bool, report: Progress) -> tuple[int, np.ndarray]:
    """First pass: every id checked; (node count, int64 [n] in-edges per node before removing repeats)."""
    given = inputs.num_nodes
    limit = given if given is not None else MAX_KEYED_NODES
    counts = np.zeros(given or 0, dtype=np.int64)
    top = -1
    total = sum(math.ceil(e.num_edges / chunk) for e in inputs.edges)
    done = 0
    for source in inputs.edges:
        offset = 0
        for src, dst in source.chunks(chunk):
            for role, ids in (("source", src), ("destination", dst)):
                _check_ids(ids, limit, given is not None, source.where, role, offset)
                if ids.size:
                    top = max(top, int(ids.max()))
                if role == "destination" or symmetrize:
                    counts = _add_counts(counts, ids.astype(np.int64, copy=False))
            offset += src.shape[0]
            done += 1
            report("scan", done, total)
    n = given if given is not None else top + 1
    if n == 0:
        raise ValueError("num_nodes: the edge files hold no edges; give num_nodes for a graph without edges")
    if counts.size < n:
        counts = np.concatenate([counts, np.zeros(n - counts.size, dtype=np.int64)])
    return n, counts


def _check_ids(ids: np.ndarray, limit: int, given: bool, where: str, role: str, offset: int) -> None:
    if ids.size == 0 or (ids.min() >= 0 and ids.max() < limit):
        return
    at = int(np.argmax((ids < 0) | (ids >= limit)))
    what = (f"[0, {limit}) (num_nodes {limit})" if given
            else f"[0, {limit}) (ids must be >= 0; at most {MAX_KEYED_NODES} nodes)")
    raise ValueError(f"{where}: edge {offset + at}: {role} id {ids[at]} out of range {what}")


def _add_counts(counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``counts`` plus one per occurrence in ``ids``, grown when an id passes its end."""
    if ids.size == 0:
        return counts
    more = np.bincount(ids, minlength=counts.size)
    if more.size > counts.size:
        more[:counts.size] += counts
        return more
    counts += more
    return counts


def _bucket_edges(edges: Sequence[EdgeInput], buckets: EdgeBuckets, chunk: int, symmetrize: bool,
                  keep_self_loops: bool, report: Progress) -> None:
    """Second pass: every edge (and its reverse) into ``buckets``, at most ``chunk`` directed edges at a time."""
    step = max(1, chunk // 2) if symmetrize else chunk
    total = sum(math.ceil(e.num_edges / step) for e in edges)
    done = 0
    for source in edges:
        for src, dst in source.chunks(step):
            src, dst = src.astype(np.int64), dst.astype(np.int64)
            if not keep_self_loops:
                keep = src != dst
                src, dst = src[keep], dst[keep]
            if symmetrize:
                src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            buckets.add(src, dst)
            del src, dst
            done += 1
            report("edges", done, total)


def _write_nodes(nodes: NodeInputs, tmp: Path, chunk: int, split_fractions: Sequence[float], seed: int,
                 report: Progress) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """features.npy (a block of about ``chunk`` values at a time), labels.npy and the splits; their specs."""
    n, d = nodes.features.shape
    rows = max(1, chunk // max(d, 1))
    blocks = math.ceil(n / rows)
    with NpyWriter(tmp / "features.npy", np.float32, (n, d)) as features:
        for block, piece in enumerate(nodes.features.rows(rows)):
            features.write(piece.astype(np.float32, copy=False))
            report("features", block + 1, blocks)
    with NpyWriter(tmp / "labels.npy", np.int64, (n,)) as labels:
        labels.write(nodes.labels)
    specs = {"features": (np.dtype(np.float32), (n, d)), "labels": (np.dtype(np.int64), (n,))}
    splits = nodes.splits if nodes.splits is not None else random_split(nodes.labels, split_fractions, seed)
    for stem, ids in zip(("train_idx", "val_idx", "test_idx"), splits):
        with NpyWriter(tmp / f"{stem}.npy", np.int64, ids.shape) as f:
            f.write(ids)
        specs[stem] = (np.dtype(np.int64), ids.shape)
    return specs
