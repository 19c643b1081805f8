"""The typed dataset directory: a :class:`~gnnscale.graph.typed_dataset.TypedDataset` as one ``.npy`` file per
array plus ``meta.json``, loaded memory-mapped (the layout of :mod:`gnnscale.graph.storage`, ``kind =
"typed_dataset"``)::

    meta.json             format_version, kind, name, num_nodes, num_edges, node_types (names, in id order),
                          relations ("src__name__dst", in id order), target_type, num_classes,
                          feature_dims {type: width or null}, dtypes {file stem: dtype}, shapes {file stem: shape}
    indptr.npy            int64 [num_nodes + 1]           the CSC over global ids (TypedGraph.graph)
    indices.npy           int32 | int64 [num_edges]
    rel_indptr.npy        int64 [typed rows + 1]          the typed rows (TypedGraph.rel_indptr)
    type_offsets.npy      int64 [node types + 1]
    features.<type>.npy   float32 [count, width]          one per node type that has features
    labels.npy            int64 [count of the target type], by local id, -1 unlabeled
    train_idx.npy, val_idx.npy, test_idx.npy              int64 global ids of the target type, sorted, unique

``indptr.npy`` and ``indices.npy`` are a graph directory's: :func:`gnnscale.graph.storage.load_graph` reads the
typed topology as one graph over all types. Writes are atomic as every dataset directory's (a hidden staging
sibling moved into place), and features are written block by block (:class:`FeatureRows`), so a converter or a
generator writes features larger than memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.external_csc import NpyWriter
from gnnscale.graph.pages import release_pages
from gnnscale.graph.storage import (FORMAT_VERSION, META_FILE, _read_arrays, _read_meta, _staging_directory,
                                    check_target, finish_directory, load_dataset_dir, read_versioned_json,
                                    with_array_specs)
from gnnscale.graph.typed import TypedGraph, parse_relation
from gnnscale.graph.typed_dataset import SPLITS, TypedDataset, check_target_data

TYPED_KIND = "typed_dataset"
TOPOLOGY_ARRAYS = ("indptr", "indices", "rel_indptr", "type_offsets")
# Feature rows per block when an in-memory (or mapped) matrix is written: about 64 MB of float32 at width 1024.
BLOCK_VALUES = 1 << 24

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureRows:
    """A node type's features as they are written: ``rows`` rows of width ``dim``, given as ``blocks``
    (float arrays [k, dim] in row order, copied as float32; the blocks' rows must add up to ``rows``)."""

    rows: int
    dim: int
    blocks: Iterable[np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteSummary:
    """What :func:`write_typed_dataset` wrote: the directory, the graph's counts (nodes of all types, edges of all
    relations) and ``{file name: bytes on disk}``."""

    directory: Path
    num_nodes: int
    num_edges: int
    file_bytes: dict[str, int]


def array_rows(x: np.ndarray) -> FeatureRows:
    """A feature matrix (in memory or memory-mapped) as :class:`FeatureRows`, a block of rows at a time (the pages
    of a mapped matrix are released after each block: a copy, not a load)."""
    step = max(1, BLOCK_VALUES // max(int(x.shape[1]), 1))

    def blocks():
        for start in range(0, x.shape[0], step):
            yield np.asarray(x[start:start + step])
            release_pages(x)

    return FeatureRows(rows=int(x.shape[0]), dim=int(x.shape[1]), blocks=blocks())


def feature_stem(node_type: str) -> str:
    return f"features.{node_type}"


def typed_meta(*, name: str, graph: TypedGraph, feature_dims: Mapping[str, int | None], target_type: str,
               num_classes: int) -> dict:
    """The counts and names of a typed dataset directory's ``meta.json`` (:func:`with_array_specs` adds the
    arrays)."""
    return {"format_version": FORMAT_VERSION, "kind": TYPED_KIND, "name": name, "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges, "node_types": list(graph.node_types),
            "relations": [str(rel) for rel in graph.relations], "target_type": target_type,
            "num_classes": int(num_classes), "feature_dims": {t: feature_dims.get(t) for t in graph.node_types}}


def save_typed_dataset(ds: TypedDataset, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``ds`` to ``directory`` atomically; returns the directory. Memory-mapped features are copied block by
    block. ``overwrite``: replace an existing directory (else it is a ValueError)."""
    if not isinstance(ds, TypedDataset):
        raise TypeError(f"ds: expected a TypedDataset, got {type(ds).__name__}")
    features = {t: None if x is None else array_rows(x) for t, x in ds.features.items()}
    write_typed_dataset(directory, name=ds.name, graph=ds.graph, features=features, target_type=ds.target_type,
                        labels=ds.labels, splits=(ds.train_idx, ds.val_idx, ds.test_idx),
                        num_classes=ds.num_classes, overwrite=overwrite)
    return Path(directory)


def write_typed_dataset(directory: str | Path, *, name: str, graph: TypedGraph,
                        features: Mapping[str, FeatureRows | None], target_type: str, labels: np.ndarray,
                        splits: tuple[np.ndarray, np.ndarray, np.ndarray], num_classes: int, overwrite: bool = False,
                        progress: Progress | None = None) -> WriteSummary:
    """Write a typed dataset directory atomically, features block by block.

    Args:
        directory: the target; its parent is created if missing.
        name, graph, target_type, labels, splits, num_classes: as :class:`TypedDataset`'s (checked here, before
            any work, by the same rules).
        features: ``{node type: FeatureRows or None}``; a type not named has no features.
        overwrite: replace an existing ``directory`` (else it is a ValueError, raised before any work).
        progress: called as ``progress("features", rows done, rows in all)`` after each block.
    """
    check_target_data(graph, target_type, labels, splits, num_classes)
    for node_type, rows in features.items():
        if node_type not in graph.node_types:
            raise ValueError(f"features: names node type {node_type!r}, not one of {', '.join(graph.node_types)}")
        if rows is not None and (rows.rows != graph.count(node_type) or rows.dim < 1):
            raise ValueError(f"features: {node_type}: expected [{graph.count(node_type)}, d >= 1] (one row per "
                             f"{node_type} node), got [{rows.rows}, {rows.dim}]")
    directory = Path(directory)
    check_target(directory, overwrite)
    report = progress or (lambda phase, done, total: None)
    dims = {t: None if features.get(t) is None else features[t].dim for t in graph.node_types}
    meta = typed_meta(name=name, graph=graph, feature_dims=dims, target_type=target_type, num_classes=num_classes)
    with _staging_directory(directory) as tmp:
        specs = {}
        topology = {"indptr": graph.graph.indptr, "indices": graph.graph.indices, "rel_indptr": graph.rel_indptr,
                    "type_offsets": graph.type_offsets}
        for stem, arr in topology.items():
            specs[stem] = _write_array(tmp, stem, arr)
        total, done = sum(rows.rows for rows in features.values() if rows is not None), 0
        for node_type, rows in features.items():
            if rows is None:
                continue
            stem = feature_stem(node_type)
            with NpyWriter(tmp / f"{stem}.npy", np.float32, (rows.rows, rows.dim)) as out:
                for block in rows.blocks:
                    out.write(block)
                    done += block.shape[0]
                    report("features", done, total)
            specs[stem] = (np.dtype(np.float32), (rows.rows, rows.dim))
        for stem, arr in {"labels": labels, **dict(zip(SPLITS, splits))}.items():
            specs[stem] = _write_array(tmp, stem, arr)
        file_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        finish_directory(tmp, directory, META_FILE, with_array_specs(meta, specs))
    file_bytes[META_FILE] = (directory / META_FILE).stat().st_size
    return WriteSummary(directory=directory, num_nodes=graph.num_nodes, num_edges=graph.num_edges,
                        file_bytes=file_bytes)


def _write_array(tmp: Path, stem: str, arr: np.ndarray) -> tuple[np.dtype, tuple[int, ...]]:
    with NpyWriter(tmp / f"{stem}.npy", arr.dtype, arr.shape) as out:
        out.write(arr)
    return arr.dtype, tuple(arr.shape)


def load_typed_dataset_dir(directory: str | Path, mmap: bool = True) -> TypedDataset:
    """Load a directory written by :func:`save_typed_dataset` (or ``gnnscale convert`` / ``generate`` for a typed
    graph); ``mmap``: memory-map the arrays read-only instead of reading them.

    Raises ValueError naming the file when a file is missing, ``meta.json`` is unreadable, or an array disagrees
    with ``meta.json`` or with the typed dataset's rules."""
    directory = Path(directory)
    meta = _read_meta(directory, TYPED_KIND, ("name", "num_nodes", "num_edges", "node_types", "relations",
                                             "target_type", "num_classes", "feature_dims"))
    meta_path = directory / META_FILE
    types, dims = meta["node_types"], meta["feature_dims"]
    if not isinstance(types, list) or not isinstance(meta["relations"], list) or not isinstance(dims, dict) \
            or set(dims) != set(types):
        raise ValueError(f"{meta_path}: expected node_types and relations as lists and feature_dims keyed by every "
                         "node type")
    featured = [t for t in types if dims[t] is not None]
    stems = (*TOPOLOGY_ARRAYS, *(feature_stem(t) for t in featured), "labels", *SPLITS)
    n, e = meta["num_nodes"], meta["num_edges"]
    expected = {"indptr": (n + 1,), "indices": (e,), "type_offsets": (len(types) + 1,)}
    arrays = _read_arrays(directory, meta, stems, expected, mmap)
    try:
        relations = tuple(parse_relation(text) for text in meta["relations"])
        graph = TypedGraph(node_types=tuple(types), type_offsets=np.asarray(arrays["type_offsets"]),
                           relations=relations, graph=CSCGraph(indptr=arrays["indptr"], indices=arrays["indices"],
                                                               num_nodes=n),
                           rel_indptr=arrays["rel_indptr"])
        return TypedDataset(name=str(meta["name"]), graph=graph,
                            features={t: arrays[feature_stem(t)] for t in featured}, target_type=meta["target_type"],
                            labels=arrays["labels"], train_idx=arrays["train_idx"], val_idx=arrays["val_idx"],
                            test_idx=arrays["test_idx"], num_classes=meta["num_classes"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{directory}: the arrays do not form a valid typed dataset: {exc}") from exc


def load_dataset_directory(directory: str | Path, mmap: bool = True) -> NodeDataset | TypedDataset:
    """A dataset directory of either kind: :func:`load_typed_dataset_dir` for a typed one, else
    :func:`gnnscale.graph.storage.load_dataset_dir` (``--dataset dir``)."""
    if is_typed_directory(directory):
        return load_typed_dataset_dir(directory, mmap)
    return load_dataset_dir(directory, mmap)


def is_typed_directory(directory: str | Path) -> bool:
    """Whether ``directory`` holds a typed dataset (its ``meta.json`` says so; anything else is left to the
    loaders, whose errors name what is wrong)."""
    path = Path(directory) / META_FILE
    if not path.is_file():
        return False
    meta = read_versioned_json(path, kind=None, version=FORMAT_VERSION, hint="not a dataset directory?")
    return meta.get("kind") == TYPED_KIND
