"""The partition directory: written once by ``gnnscale partition``, read by every worker.

Layout (node ids are the relabelled ones: part ``p`` owns ``[offsets[p], offsets[p + 1])``)::

    manifest.json             format_version, kind "partition", dataset, num_parts, method, seed,
                              num_nodes, num_edges, feature_dim, num_classes, offsets, edge_cut,
                              edge_cut_fraction, nodes/edges/train_nodes per part, balance,
                              feature_dtype (float32 when absent),
                              split_sizes {train_idx|val_idx|test_idx: count per part},
                              files {relative path: sha256 hex} for every other file
    new_to_old.npy            int64 [num_nodes], original id of each node
    topology/indptr.npy       int64 [num_nodes + 1]     the whole relabelled graph ("whole" view)
    topology/indices.npy      int32|int64 [num_edges]
    part<p>/features.npy      float32|float16|bfloat16 (as uint16) [n_p, feature_dim], row i is node offsets[p] + i
    part<p>/labels.npy        int64 [n_p]
    part<p>/train_idx.npy     int64, global ids owned by p, sorted (also val_idx.npy, test_idx.npy)
    part<p>/indptr.npy        int64 [n_p + 1]           in-edges of p's nodes ("own" view): the
    part<p>/indices.npy       int32|int64 [e_p]         topology's rows offsets[p]..offsets[p+1], same order

Writes are atomic (a hidden staging sibling, fsync, one rename, as in :mod:`gnnscale.graph.storage`);
``manifest.json`` is the last file written, so a staging directory left by a killed run has none and
is never loaded. Loads verify every file they read against its sha256 in the manifest.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.graph.dataset import NodeDataset, check_finite_features
from gnnscale.graph.external_csc import NpyWriter
from gnnscale.graph.feature_dtype import (FEATURE_DTYPES, check_feature_dtype, check_features_fit, encode,
                                         numpy_dtype)
from gnnscale.graph.pages import release_pages
from gnnscale.graph.storage import (_flush_to_disk, _fsync_directory, _staging_directory, finish_directory,
                                    read_versioned_json)
from gnnscale.partition.assign import assign_parts_reported
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.relabel import NewIds, PartitionSummary, new_ids, relabelled_rows
from gnnscale.partition.typed import check_typed_manifest

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KIND = "partition"  # the manifest's kind: a graph of one node type (written here)
TYPED_KIND = "typed_partition"  # a typed graph's (gnnscale.partition.typed_directory)
# What a worker reads of the topology: the whole graph (replicated) or its own part's in-edges.
VIEWS: tuple[str, ...] = ("whole", "own")
SPLITS = ("train_idx", "val_idx", "test_idx")
# Read and write in 8 MiB pieces: large enough for sha256 and the disk to run at full speed, small
# enough that gathering one piece of a memory-mapped feature matrix stays cheap.
CHUNK_BYTES = 8 << 20
# Relabelled edges per step of the topology pass: 2**24, 64-128 MB of rows (int32 or int64 ids).
CHUNK_EDGES = 1 << 24


# --- writing -------------------------------------------------------------------------------------


def write_partition_dir(dataset: NodeDataset, num_parts: int, method: str, out_dir: str | Path, seed: int = 0, *,
                        overwrite: bool = False, feature_dtype: str = "float32",
                        threads: int = 1, chunk_edges: int = CHUNK_EDGES,
                        memory_gb: float | None = None) -> PartitionSummary:
    """Partition ``dataset`` and write the partition directory atomically.

    Everything after the part assignment streams: the relabelled topology is built and written a range
    of rows at a time (its whole and per-part copies in one pass, the edge cut counted on the way),
    features are gathered part by part in chunks, and every file is hashed as it is written. Memory,
    besides the partitioner's own: a chunk plus a few arrays of one entry per node, whatever the edge
    and feature counts; a dataset loaded memory-mapped (``load_dataset_dir``) is never read whole.

    Args:
        dataset: the dataset; its arrays may be memory-mapped.
        num_parts: number of parts, in [1, num_nodes].
        method: ``"metis"``, ``"kaminpar"`` or ``"random"`` (:func:`assign_parts`).
        out_dir: target directory; its parent must exist.
        seed: seed of the assignment.
        overwrite: replace an existing directory (else an existing one is a ValueError).
        feature_dtype: how the part features are stored: ``"float32"``, or ``"float16"`` / ``"bfloat16"``
            (rounded to nearest even: half the bytes on disk, in memory and on the wire; workers compute
            in float32).
        threads: KaMinPar's threads (:func:`assign_parts`; default 1).
        chunk_edges: int >= 1, edges relabelled per step (default 2**24; a node with more in-edges is
            relabelled alone): memory, not output.
        memory_gb: KaMinPar's memory budget in GB (:func:`assign_parts`; default: MemAvailable). Where
            the graph is coarsened first, the manifest and the summary say so (``coarsening``).

    Returns the cut and balance of the partition (also stored in the manifest).
    """
    if not isinstance(dataset, NodeDataset):
        raise TypeError(f"dataset: expected a NodeDataset, got {type(dataset).__name__}")
    out_dir = check_write_settings(out_dir, [dataset.features], overwrite=overwrite, feature_dtype=feature_dtype,
                                   chunk_edges=chunk_edges)
    part, coarsening = assign_parts_reported(dataset.graph, num_parts, method, train_idx=dataset.train_idx, seed=seed,
                                             threads=threads, memory_gb=memory_gb)
    ids = new_ids(dataset.graph, part, num_parts)
    del part
    splits = {name: ids.map_ids(getattr(dataset, name)) for name in SPLITS}
    offsets = ids.book.offsets
    with staged_directory(out_dir) as tmp:
        files, edge_cut = _write_files(tmp, dataset, ids, splits, feature_dtype, int(chunk_edges))
        summary = PartitionSummary(
            method=method, num_edges=dataset.graph.num_edges, edge_cut=edge_cut,
            nodes=tuple(int(x) for x in np.diff(offsets)),
            edges=tuple(int(x) for x in np.diff(ids.indptr[offsets])),
            train_nodes=tuple(int(x) for x in np.diff(np.searchsorted(splits["train_idx"], offsets))),
            coarsening=None if coarsening is None else coarsening.to_dict())
        manifest = {
            "format_version": FORMAT_VERSION, "kind": KIND, "dataset": dataset.name,
            "num_parts": int(num_parts), "method": method, "seed": int(seed),
            "num_nodes": dataset.graph.num_nodes, "num_edges": dataset.graph.num_edges,
            "feature_dim": dataset.feature_dim, "feature_dtype": feature_dtype,
            "num_classes": dataset.num_classes, "offsets": offsets.tolist(), **summary.to_dict(),
            "split_sizes": {name: np.diff(np.searchsorted(idx, offsets)).tolist()
                            for name, idx in splits.items()},
            "files": files,
        }
        finish_directory(tmp, out_dir, MANIFEST, manifest)
    return summary


def check_write_settings(out_dir: str | Path, features: list[np.ndarray], *, overwrite: bool, feature_dtype: str,
                         chunk_edges: int) -> Path:
    """The checks of a partition directory's write that need no partitioning (which takes minutes on a large
    graph): ``out_dir`` (its parent created), the feature dtype, the chunk size and every feature matrix's values
    (NaN rows would train a NaN model, and half precision may not round a finite value to Inf)."""
    if isinstance(chunk_edges, bool) or not isinstance(chunk_edges, (int, np.integer)) or chunk_edges < 1:
        raise ValueError(f"chunk_edges: expected an int >= 1, got {chunk_edges!r}")
    out_dir = Path(out_dir)
    check_feature_dtype(feature_dtype)
    if out_dir.exists() and not overwrite:
        raise ValueError(f"out_dir: {out_dir} already exists; pass overwrite=True to replace it")
    if out_dir.parent.exists() and not out_dir.parent.is_dir():
        raise ValueError(f"out_dir: {out_dir.parent} is a file, not a folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for x in features:
        check_finite_features(x)
        check_features_fit(x, feature_dtype)
    return out_dir


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """A staging sibling of ``out_dir`` to write a partition directory into (``finish_directory`` moves it into
    place); a full disk or a file size limit is an OSError naming ``out_dir``, and leaves nothing behind."""
    try:
        with _staging_directory(out_dir) as tmp:
            yield tmp
    except OSError as err:
        raise OSError(err.errno, f"{out_dir}: could not write the partition directory ({err.strerror or err}); "
                                 "nothing was left under this name") from err


def _write_files(root: Path, dataset: NodeDataset, ids: NewIds, splits: dict[str, np.ndarray],
                 feature_dtype: str, chunk_edges: int) -> tuple[dict[str, str], int]:
    """Write every array file under ``root``; returns ({relative path: sha256 hex}, edge cut)."""
    book = ids.book
    files = {"new_to_old.npy": _write_npy(root / "new_to_old.npy", ids.new_to_old)}
    (root / "topology").mkdir()
    files["topology/indptr.npy"] = _write_npy(root / "topology" / "indptr.npy", ids.indptr)
    for p in range(book.num_parts):
        (root / f"part{p}").mkdir()
    edges, edge_cut = _write_edges(root, dataset.graph, ids, chunk_edges)
    files["topology/indices.npy"] = edges.pop("topology/indices.npy")
    _fsync_directory(root / "topology")
    labels = dataset.labels  # memory-mapped or not; gathered part by part
    for p in range(book.num_parts):
        lo, hi = book.node_range(p)
        folder = root / f"part{p}"
        rows = ids.new_to_old[lo:hi]
        arrays = {
            "features": _Gathered(dataset.features, rows, feature_dtype),
            "labels": labels[rows],
            **{name: idx[np.searchsorted(idx, lo):np.searchsorted(idx, hi)] for name, idx in splits.items()},
            "indptr": ids.indptr[lo:hi + 1] - ids.indptr[lo],
        }
        for name, arr in arrays.items():
            files[f"part{p}/{name}.npy"] = _write_npy(folder / f"{name}.npy", arr)
        release_pages(labels)
        files[f"part{p}/indices.npy"] = edges.pop(f"part{p}/indices.npy")
        _fsync_directory(folder)
    return files, edge_cut


def _write_edges(root: Path, graph: CSCGraph, ids: NewIds, chunk_edges: int) -> tuple[dict[str, str], int]:
    """``topology/indices.npy`` and every ``part<p>/indices.npy`` (the same rows, split at the part
    boundaries) in one pass over the relabelled rows, ``chunk_edges`` at a time; returns their sha256
    and the edge cut (in-edges whose source lies in another part)."""
    dtype = index_dtype(graph.num_nodes)
    book, cut = ids.book, 0
    writers = {}
    with ExitStack() as stack:
        whole = writers["topology/indices.npy"] = stack.enter_context(
            _HashingWriter(root / "topology" / "indices.npy", dtype, (graph.num_edges,)))
        for p in range(book.num_parts):
            lo, hi = book.node_range(p)
            own = writers[f"part{p}/indices.npy"] = stack.enter_context(
                _HashingWriter(root / f"part{p}" / "indices.npy", dtype, (int(ids.indptr[hi] - ids.indptr[lo]),)))
            for a, b in _row_ranges(ids.indptr, lo, hi, chunk_edges):
                rows = relabelled_rows(graph, ids, a, b)
                release_pages(graph.indices)
                whole.write(rows)
                own.write(rows)
                cut += int(_count_outside(rows, lo, hi))
    return {rel: writer.hexdigest() for rel, writer in writers.items()}, cut


def _row_ranges(indptr: np.ndarray, lo: int, hi: int, chunk_edges: int) -> Iterator[tuple[int, int]]:
    """Consecutive ``[a, b)`` covering nodes ``[lo, hi)``, each with at most ``chunk_edges`` edges or
    one node."""
    a = lo
    while a < hi:
        b = int(np.searchsorted(indptr, indptr[a] + chunk_edges, side="right")) - 1
        b = min(max(b, a + 1), hi)
        yield a, b
        a = b


@numba.njit(cache=True)
def _count_outside(ids, lo, hi):
    """How many of ``ids`` lie outside ``[lo, hi)`` (no boolean temporaries the size of ``ids``)."""
    count = 0
    for i in range(ids.shape[0]):
        if ids[i] < lo or ids[i] >= hi:
            count += 1
    return count


class _HashingWriter(NpyWriter):
    """A :class:`NpyWriter` of known length that also computes the sha256 of the file it writes."""

    def __init__(self, path: Path, dtype, shape: tuple[int, ...]) -> None:
        super().__init__(path, dtype, shape)
        self._digest = hashlib.sha256(self._header(self.shape[0]))

    def write(self, piece: np.ndarray) -> None:
        piece = np.ascontiguousarray(piece, dtype=self.dtype)
        super().write(piece)
        self._digest.update(memoryview(piece).cast("B"))

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@dataclass(frozen=True, slots=True)
class _Gathered:
    """``source[rows]`` stored as ``feature_dtype``, without materialising it: rows are gathered (and
    narrowed) chunk by chunk as they are written."""

    source: np.ndarray  # float32 [num_nodes, d], may be memory-mapped
    rows: np.ndarray  # int64 [n], rows of source, in output order
    feature_dtype: str = "float32"

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows.shape[0], *self.source.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.feature_dtype)

    def chunks(self, rows_per_chunk: int) -> Iterator[np.ndarray]:
        for start in range(0, self.rows.shape[0], rows_per_chunk):
            chunk = encode(self.source[self.rows[start:start + rows_per_chunk]], self.feature_dtype)
            release_pages(self.source)  # the gathered rows are a copy
            yield chunk


def _write_npy(path: Path, array: np.ndarray | _Gathered) -> str:
    """Write ``array`` as a .npy file (same bytes as ``np.save``), fsync it, return its sha256 hex.

    Hashing the bytes as they are written spares reading the file back.
    """
    shape, dtype = tuple(array.shape), np.dtype(array.dtype)
    row_bytes = max(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize, 1)
    rows_per_chunk = max(CHUNK_BYTES // row_bytes, 1)
    if isinstance(array, _Gathered):
        chunks: Iterable[np.ndarray] = array.chunks(rows_per_chunk)
    else:
        chunks = (array[s:s + rows_per_chunk] for s in range(0, shape[0], rows_per_chunk))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for piece in (header.getbuffer(), *(memoryview(np.ascontiguousarray(c, dtype=dtype)) for c in chunks)):
            digest.update(piece)
            f.write(piece)
        _flush_to_disk(f)
    return digest.hexdigest()


# --- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartRows:
    """One part's rows of the relabelled CSC graph ("own" view).

    Args:
        local_indptr: int64 [n_p + 1], starts at 0; the in-edges of global node ``v`` are
            ``local_indices[local_indptr[v - node_offset]:local_indptr[v - node_offset + 1]]``.
        local_indices: int32 | int64 [e_p], GLOBAL source ids in [0, num_nodes), each row sorted.
        node_offset: first global id of the part (``book.offsets[part]``).
        num_nodes: nodes of the whole graph.
    """

    local_indptr: np.ndarray
    local_indices: np.ndarray
    node_offset: int
    num_nodes: int

    def __post_init__(self) -> None:
        if self.local_indptr.ndim != 1 or self.local_indptr.dtype != np.int64 or self.local_indptr.shape[0] < 1:
            raise TypeError(f"local_indptr: expected a non-empty 1-D int64 array, got {self.local_indptr.dtype} "
                            f"{self.local_indptr.shape}")
        if self.local_indices.ndim != 1 or self.local_indices.dtype not in (np.int32, np.int64):
            raise TypeError(f"local_indices: expected a 1-D int32/int64 array, got {self.local_indices.dtype}")
        if self.local_indptr[0] != 0 or self.local_indptr[-1] != self.local_indices.shape[0]:
            raise ValueError(f"local_indptr: expected to run from 0 to len(local_indices) = "
                             f"{self.local_indices.shape[0]}, got {self.local_indptr[0]}..{self.local_indptr[-1]}")

    @property
    def num_local_nodes(self) -> int:
        return int(self.local_indptr.shape[0] - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalPartition:
    """What one worker loads from a partition directory.

    Args:
        dataset_name: name of the partitioned dataset.
        book: node ranges of all parts (global ids are the relabelled ones).
        part: this worker's part, in [0, num_parts).
        view: ``"whole"`` (topology is the whole graph) or ``"own"`` (only this part's rows).
        topology: whole: the whole relabelled :class:`CSCGraph`; own: :class:`PartRows`. Memory-mapped.
        features: [n_p, feature_dim], memory-mapped; row i is global node ``node_offset + i``; float32,
            float16, or bfloat16 stored as uint16 (:mod:`gnnscale.graph.feature_dtype`).
        labels: int64 [n_p], same rows.
        train_idx, val_idx, test_idx: int64, GLOBAL ids owned by this part, sorted.
        num_classes: number of classes.
    """

    dataset_name: str
    book: PartitionBook
    part: int
    view: str
    topology: CSCGraph | PartRows
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if not 0 <= self.part < self.book.num_parts:
            raise ValueError(f"part: expected an int in [0, {self.book.num_parts}), got {self.part}")
        if self.view not in VIEWS:
            raise ValueError(f"view: expected one of {', '.join(VIEWS)}, got {self.view!r}")
        expected = CSCGraph if self.view == "whole" else PartRows
        if not isinstance(self.topology, expected):
            raise TypeError(f"topology: view {self.view!r} needs a {expected.__name__}, "
                            f"got {type(self.topology).__name__}")
        n_p = self.num_local_nodes
        if self.features.ndim != 2 or self.features.shape[0] != n_p or self.labels.shape != (n_p,):
            raise ValueError(f"features, labels: expected {n_p} rows (the part's node count), got "
                             f"{self.features.shape} and {self.labels.shape}")

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    @property
    def node_offset(self) -> int:
        return int(self.book.offsets[self.part])

    @property
    def label_offset(self) -> int:
        """The global id of ``labels[0]``: this part's labels are its nodes' (a typed part's: its target type's)."""
        return self.node_offset

    @property
    def num_local_nodes(self) -> int:
        lo, hi = self.book.node_range(self.part)
        return hi - lo

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])


def parts_per_worker(num_parts: int, workers: int, directory: str | Path = "the partition directory") -> int:
    """How many consecutive parts each of ``workers`` workers holds: ``num_parts // workers``, or a
    ValueError (naming ``directory``) when ``workers`` does not divide ``num_parts``."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers: expected an int >= 1, got {workers!r}")
    if num_parts % workers:
        divisors = [d for d in range(1, num_parts + 1) if num_parts % d == 0]
        raise ValueError(f"partitions: {directory} has {num_parts} parts, which {workers} workers cannot share "
                         f"equally (each worker holds the same number of consecutive parts); launch "
                         f"{', '.join(map(str, divisors))} workers, or repartition with gnnscale partition "
                         f"--parts {workers}")
    return num_parts // workers


def group_counts(counts: list[int], workers: int) -> list[int]:
    """Per-part counts of a manifest (nodes, edges, split sizes) summed over each worker's parts."""
    k = len(counts) // workers
    return [sum(counts[w * k:(w + 1) * k]) for w in range(workers)]


def worker_parts(num_parts: int, part: int, workers: int | None, directory: Path) -> int:
    """How many consecutive parts worker ``part`` of ``workers`` holds (one per part: ``workers`` None); a
    ValueError when ``workers`` does not divide ``num_parts`` or ``part`` is out of range."""
    k = 1 if workers is None else parts_per_worker(num_parts, workers, directory)
    if isinstance(part, bool) or not isinstance(part, (int, np.integer)) or not 0 <= part < num_parts // k:
        name = "num_parts" if workers is None else "workers"
        raise ValueError(f"part: expected an int in [0, {name} = {num_parts // k}), got {part!r}")
    return k


def load_partition(directory: str | Path, part: int, view: str = "whole", *, verify: bool = True,
                   workers: int | None = None) -> LocalPartition:
    """Load part ``part`` of a directory written by :func:`write_partition_dir`, memory-mapped.

    Args:
        directory: the partition directory.
        part: which part, in [0, num_parts) (with ``workers``: which worker, in [0, workers)).
        view: ``"whole"`` (read the whole topology) or ``"own"`` (read this part's rows only).
        verify: check the sha256 of every file read against the manifest (default True; streams each
            file once).
        workers: how many workers share the parts (default: one per part). A divisor ``W`` of the part
            count: worker ``part`` holds parts ``[part * k, (part + 1) * k)``, ``k = num_parts // W``,
            as one part of a ``W``-part partition (their node ranges are consecutive, so the book's
            offsets are every ``k``-th). With ``k > 1`` its features, labels and "own" in-edges are
            copied into memory, concatenated; the whole topology stays memory-mapped.

    Raises ValueError naming the path when the manifest or a file is missing, a file is corrupt
    (checksum mismatch) or disagrees with the manifest's counts; and for a wrong format_version,
    ``part`` out of range, ``workers`` not dividing the part count or an unknown ``view``.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    if is_typed_manifest(manifest):
        raise ValueError(f"{directory}: holds a typed graph (node types {', '.join(manifest['node_types'])}); a typed "
                         "model (--model rgcn, rsage or rgat) trains on it, which load_typed_partition reads")
    if view not in VIEWS:
        raise ValueError(f"view: expected one of {', '.join(VIEWS)}, got {view!r}")
    k = worker_parts(manifest["num_parts"], part, workers, directory)
    first = _load_one(directory, manifest, int(part * k), view, verify)
    if k == 1:
        return first
    # The whole topology is the same file for every part: read (and checked) once.
    shared = first.topology if view == "whole" else None
    rest = [_load_one(directory, manifest, q, view, verify, shared) for q in range(part * k + 1, (part + 1) * k)]
    return _merged([first, *rest], int(part), k)


def _merged(parts: list[LocalPartition], index: int, k: int) -> LocalPartition:
    """Consecutive parts as part ``index`` of the partition whose book keeps every ``k``-th offset."""
    first = parts[0]
    book = PartitionBook(offsets=np.ascontiguousarray(first.book.offsets[::k]))
    if first.view == "whole":
        topology: CSCGraph | PartRows = first.topology
    else:
        indptrs, base = [np.zeros(1, dtype=np.int64)], 0
        for p in parts:
            indptrs.append(np.asarray(p.topology.local_indptr[1:]) + base)
            base += int(p.topology.local_indptr[-1])
        topology = PartRows(local_indptr=np.concatenate(indptrs),
                            local_indices=np.concatenate([p.topology.local_indices for p in parts]),
                            node_offset=first.node_offset, num_nodes=first.topology.num_nodes)
    return LocalPartition(dataset_name=first.dataset_name, book=book, part=index, view=first.view, topology=topology,
                          features=np.concatenate([p.features for p in parts]),
                          labels=np.concatenate([p.labels for p in parts]), num_classes=first.num_classes,
                          **{name: np.concatenate([getattr(p, name) for p in parts]) for name in SPLITS})


def _load_one(directory: Path, manifest: dict, part: int, view: str, verify: bool,
              whole: CSCGraph | None = None) -> LocalPartition:
    """Part ``part`` as written, memory-mapped; ``whole``: the whole topology, already loaded."""
    book = PartitionBook(offsets=np.asarray(manifest["offsets"], dtype=np.int64))
    lo, hi = book.node_range(part)
    n, n_p, d = manifest["num_nodes"], hi - lo, manifest["feature_dim"]
    reader = _Reader(directory, manifest["files"], verify)
    local = reader.array(f"part{part}/features.npy", numpy_dtype(manifest["feature_dtype"]), (n_p, d))
    labels = reader.array(f"part{part}/labels.npy", np.int64, (n_p,))
    splits = {name: reader.ids(f"part{part}/{name}.npy", lo, hi, manifest["split_sizes"][name][part])
              for name in SPLITS}
    if whole is not None:
        topology: CSCGraph | PartRows = whole
    elif view == "whole":
        indptr = reader.array("topology/indptr.npy", np.int64, (n + 1,))
        indices = reader.array("topology/indices.npy", None, (manifest["num_edges"],))
        topology = _checked(directory, lambda: CSCGraph(indptr=indptr, indices=indices, num_nodes=n))
    else:
        local_indptr = reader.array(f"part{part}/indptr.npy", np.int64, (n_p + 1,))
        local_indices = reader.array(f"part{part}/indices.npy", None, (manifest["edges"][part],))
        topology = _checked(directory, lambda: PartRows(local_indptr=local_indptr, local_indices=local_indices,
                                                        node_offset=lo, num_nodes=n))
    return LocalPartition(dataset_name=str(manifest["dataset"]), book=book, part=int(part), view=view,
                          topology=topology, features=local, labels=labels, num_classes=manifest["num_classes"],
                          **splits)


def _checked(directory: Path, build):
    try:
        return build()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{directory}: the topology files do not form a valid graph: {exc}") from exc


_REQUIRED_INTS = ("num_parts", "num_nodes", "num_edges", "feature_dim", "num_classes")


def read_manifest(directory: str | Path) -> dict:
    """The parsed ``manifest.json`` of a partition directory, its structure checked (files not read): of a graph of
    one node type (kind ``"partition"``), or of a typed graph (``"typed_partition"``, whose own fields
    :func:`~gnnscale.partition.typed.check_typed_manifest` checks; :func:`is_typed_manifest` tells them apart)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"directory: expected a partition directory (`gnnscale partition --out DIR` writes one), "
                         f"got {directory}, which is {'a file' if directory.exists() else 'missing'}")
    path = directory / MANIFEST
    manifest = read_versioned_json(path, kind=None, version=FORMAT_VERSION,
                                   hint="not a partition directory, or an unfinished write")
    if manifest.get("kind") not in (KIND, TYPED_KIND):
        raise ValueError(f"{path}: expected kind {KIND!r} or {TYPED_KIND!r}, got {manifest.get('kind')!r}")
    typed = is_typed_manifest(manifest)
    for key in _REQUIRED_INTS:
        value = manifest.get(key)
        if (key != "feature_dim" or not typed) and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{path}: {key} must be a non-negative int, got {value!r}")
    k = manifest["num_parts"]
    for key in ("edges",) if typed else ("offsets", "edges"):
        value = manifest.get(key)
        length = k + 1 if key == "offsets" else k
        if not isinstance(value, list) or len(value) != length or not all(isinstance(x, int) for x in value):
            raise ValueError(f"{path}: {key} must be a list of {length} ints, got {value!r}")
    sizes = manifest.get("split_sizes")
    if not isinstance(sizes, dict) or any(
            not isinstance(sizes.get(name), list) or len(sizes[name]) != k
            or not all(isinstance(x, int) and x >= 0 for x in sizes[name]) for name in SPLITS):
        raise ValueError(f"{path}: split_sizes must map each of {', '.join(SPLITS)} to {k} counts, got {sizes!r}")
    if typed:
        check_typed_manifest(manifest, path)
    elif manifest["offsets"][0] != 0 or manifest["offsets"][-1] != manifest["num_nodes"] \
            or any(b < a for a, b in zip(manifest["offsets"], manifest["offsets"][1:])):
        raise ValueError(f"{path}: offsets must rise from 0 to num_nodes, got {manifest['offsets']}")
    if not isinstance(manifest.get("files"), dict):
        raise ValueError(f"{path}: missing or malformed 'files' (expected {{relative path: sha256}})")
    manifest.setdefault("feature_dtype", "float32")  # directories written before half precision
    if manifest["feature_dtype"] not in FEATURE_DTYPES:
        raise ValueError(f"{path}: feature_dtype must be one of {', '.join(FEATURE_DTYPES)}, got "
                         f"{manifest['feature_dtype']!r}")
    return manifest


def is_typed_manifest(manifest: dict) -> bool:
    """Whether a manifest (:func:`read_manifest`) is a typed graph's."""
    return manifest["kind"] == TYPED_KIND


@dataclass(frozen=True, slots=True)
class _Reader:
    """Opens the files of one partition directory: presence, checksum, dtype and shape checked."""

    directory: Path
    checksums: dict
    verify: bool

    def array(self, rel: str, dtype, shape: tuple[int, ...]) -> np.ndarray:
        """Memory-mapped array at ``rel``; ``dtype`` None accepts int32 or int64 (graph indices)."""
        path = self.directory / rel
        if not path.is_file():
            raise ValueError(f"{path}: missing file (the partition directory is incomplete)")
        expected = self.checksums.get(rel)
        if not isinstance(expected, str):
            raise ValueError(f"{self.directory / MANIFEST}: no sha256 recorded for {rel}")
        if self.verify:
            got = sha256_file(path)
            if got != expected:
                raise ValueError(f"{path}: file is corrupt (sha256 {got[:16]}... does not match the "
                                 f"manifest's {expected[:16]}...)")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{path}: unreadable or truncated .npy file: {exc}") from exc
        allowed = (np.dtype(np.int32), np.dtype(np.int64)) if dtype is None else (np.dtype(dtype),)
        if arr.dtype not in allowed or arr.shape != shape:
            raise ValueError(f"{path}: expected dtype {'/'.join(str(a) for a in allowed)} and shape {list(shape)} "
                             f"from {MANIFEST}, got {arr.dtype} {list(arr.shape)}")
        return arr

    def ids(self, rel: str, lo: int, hi: int, size: int) -> np.ndarray:
        """A split file: ``size`` int64 ids, sorted, inside the part's range [lo, hi)."""
        arr = self.array(rel, np.int64, (size,))
        if arr.size and (arr[0] < lo or arr[-1] >= hi or np.any(arr[1:] <= arr[:-1])):
            raise ValueError(f"{self.directory / rel}: expected sorted unique ids in the part's range [{lo}, {hi})")
        return arr


def sha256_file(path: Path) -> str:
    """sha256 hex digest of a file, read in CHUNK_BYTES pieces into one reused buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb") as f:
        while (size := f.readinto(buffer)) > 0:
            digest.update(view[:size])
    return digest.hexdigest()
