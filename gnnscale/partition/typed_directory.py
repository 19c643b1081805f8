"""The typed partition directory: ``gnnscale partition`` of a typed dataset, read by every worker of a typed run.

The parts come from METIS or KaMinPar over one graph of all types (the typed graph's ``graph``), the target type's
training nodes spread evenly over them (:func:`~gnnscale.partition.assign.assign_parts`). Ids are then renumbered
type-major, then part, then by original id (:mod:`gnnscale.partition.typed`): types stay one range each, and part
``p`` owns ``[part_offsets[t][p], part_offsets[t][p + 1])`` of type ``t``. Layout::

    manifest.json                format_version, kind "typed_partition", dataset, num_parts, method, seed, num_nodes,
                                 num_edges, node_types, type_offsets, relations ("src__name__dst"), target_type,
                                 feature_dim {type: width or null}, feature_dtype, num_classes, part_offsets
                                 [types][parts + 1], edge_cut, edge_cut_fraction, nodes/edges/train_nodes per part,
                                 balance, split_sizes {train_idx|val_idx|test_idx: count per part},
                                 files {relative path: sha256 hex} for every other file
    new_to_old.npy               int64 [num_nodes], the dataset's id of each node
    topology/indptr.npy          int64 [num_nodes + 1]   the whole relabelled typed graph ("whole" view): its CSC,
    topology/indices.npy         int32|int64 [num_edges]
    topology/rel_indptr.npy      int64 [typed rows + 1]  and its typed rows (gnnscale.graph.typed)
    part<p>/features.<type>.npy  [n_tp, d_t] as feature_dtype: the part's rows of each type with features, in id order
    part<p>/labels.npy           int64 [the part's nodes of the target type]
    part<p>/train_idx.npy        int64 global ids of the part's target-type nodes, sorted (also val_idx, test_idx)
    part<p>/rel_indptr.npy       int64 [the part's typed rows + 1], from 0   ("own" view): the typed rows of the
    part<p>/indices.npy          int32|int64 [e_p]                            part's nodes, type by type

Written as a homogeneous partition directory is (:mod:`gnnscale.partition.directory`): everything after the part
assignment streams (the relabelled rows a chunk at a time, into the whole topology and the part's rows in one pass;
features part by part in chunks), every file is hashed as it is written, the manifest comes last, in a staging
sibling moved into place when complete. Loads check every file against its sha256.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.graph.feature_dtype import numpy_dtype
from gnnscale.graph.pages import release_pages
from gnnscale.graph.storage import _fsync_directory, finish_directory
from gnnscale.graph.typed import TypedGraph
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.partition.assign import assign_parts_reported
from gnnscale.partition.directory import (CHUNK_EDGES, FORMAT_VERSION, MANIFEST, SPLITS, TYPED_KIND, _checked,
                                          _Gathered, _HashingWriter, _Reader, _row_ranges, _write_npy,
                                          check_write_settings, is_typed_manifest, read_manifest, staged_directory,
                                          worker_parts)
from gnnscale.partition.relabel import PartitionSummary, mapped_rows
from gnnscale.partition.typed import (VIEWS, TypedPartition, TypedPartitionBook, TypedPartRows, manifest_book,
                                      manifest_schema, part_row_start)


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedNewIds:
    """The new ids of a typed partition and the relabelled typed rows' bounds (the rows themselves are written a
    chunk at a time, :func:`typed_rows`).

    Args:
        new_to_old: int64 [num_nodes], the old id of each new id.
        old_to_new: int64 [num_nodes], the inverse permutation.
        rel_indptr: int64 [typed rows + 1]: the relabelled graph's typed rows (a new node's rows keep the old
            node's lengths).
        book: part ``p`` owns new ids ``book.node_range(t, p)`` of type ``t``.
    """

    new_to_old: np.ndarray
    old_to_new: np.ndarray
    rel_indptr: np.ndarray
    book: TypedPartitionBook

    def map_ids(self, old_ids: np.ndarray) -> np.ndarray:
        """int64: new ids of ``old_ids``, sorted (split indices are sorted sets)."""
        return np.sort(self.old_to_new[np.asarray(old_ids, dtype=np.int64)])


def typed_new_ids(graph: TypedGraph, part: np.ndarray, num_parts: int) -> TypedNewIds:
    """Renumber ``graph``'s nodes by (type, part, old id); memory: a few arrays of one entry per node or typed row
    (``graph`` may be memory-mapped: its ``rel_indptr`` is read, not its edges).

    Args:
        graph: the typed graph.
        part: int [num_nodes], part of each node, in [0, num_parts).
        num_parts: number of parts (parts may own no node of a type).
    """
    n = graph.num_nodes
    part = np.asarray(part)
    if part.shape != (n,) or not np.issubdtype(part.dtype, np.integer):
        raise ValueError(f"part: expected an integer array of shape [{n}], got {part.dtype} {part.shape}")
    if n and (part.min() < 0 or part.max() >= num_parts):
        raise ValueError(f"part: expected values in [0, num_parts = {num_parts}), got range "
                         f"[{part.min()}, {part.max()}]")
    layout = graph.row_layout()
    new_to_old = np.empty(n, dtype=np.int64)
    offsets = np.empty((len(graph.node_types), num_parts + 1), dtype=np.int64)
    sizes = np.diff(graph.rel_indptr)  # each old row's length
    new_sizes = np.empty_like(sizes)
    for t in range(len(graph.node_types)):
        lo, hi = int(graph.type_offsets[t]), int(graph.type_offsets[t + 1])
        order = np.argsort(part[lo:hi], kind="stable")  # by part, then old id: the type's new order
        new_to_old[lo:hi] = order + lo
        offsets[t, 0] = lo
        np.cumsum(np.bincount(part[lo:hi], minlength=num_parts), out=offsets[t, 1:])
        offsets[t, 1:] += lo
        k, first = layout.rows_per_node(t), int(layout.row_start[t])
        rows = slice(first, first + (hi - lo) * k)
        new_sizes[rows] = sizes[rows].reshape(hi - lo, k)[order].reshape(-1)
    old_to_new = np.empty(n, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(n, dtype=np.int64)
    rel_indptr = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=rel_indptr[1:])
    return TypedNewIds(new_to_old=new_to_old, old_to_new=old_to_new, rel_indptr=rel_indptr,
                       book=TypedPartitionBook(offsets=offsets))


def typed_rows(graph: TypedGraph, ids: TypedNewIds, t: int, lo: int, hi: int) -> np.ndarray:
    """The edges of the relabelled typed rows of new nodes ``[lo, hi)``, all of type ``t``, end to end (each row's
    sources as new ids, sorted); reads those nodes' old rows only."""
    layout = graph.row_layout()
    k, first, offset = layout.rows_per_node(t), int(layout.row_start[t]), int(graph.type_offsets[t])
    old = ids.new_to_old[lo:hi] - offset
    old_rows = (first + old[:, None] * k + np.arange(k, dtype=np.int64)).reshape(-1)
    r0, r1 = _row_span(graph, t, lo, hi)
    new_rows = ids.rel_indptr[r0:r1 + 1]
    return mapped_rows(graph.rel_indptr, graph.graph.indices, old_rows, ids.old_to_new, new_rows,
                       index_dtype(graph.num_nodes))


def _row_span(graph: TypedGraph, t: int, lo: int, hi: int) -> tuple[int, int]:
    """The typed rows ``[r0, r1)`` of nodes ``[lo, hi)``, all of type ``t`` (a node's rows follow from its place in
    its type, whatever its id means)."""
    layout = graph.row_layout()
    k, first, offset = layout.rows_per_node(t), int(layout.row_start[t]), int(graph.type_offsets[t])
    return first + (lo - offset) * k, first + (hi - offset) * k


def _node_indptr(graph: TypedGraph, ids: TypedNewIds) -> np.ndarray:
    """int64 [num_nodes + 1]: the relabelled CSC's bounds (a node's first typed row's start; the rows keep their
    places, only their lengths move)."""
    return np.append(ids.rel_indptr[graph.first_rows()], ids.rel_indptr[-1])


# --- writing -------------------------------------------------------------------------------------


def write_typed_partition_dir(dataset: TypedDataset, num_parts: int, method: str, out_dir: str | Path, seed: int = 0,
                              *, overwrite: bool = False, feature_dtype: str = "float32", threads: int = 1,
                              chunk_edges: int = CHUNK_EDGES, memory_gb: float | None = None) -> PartitionSummary:
    """Partition a typed dataset and write the typed partition directory atomically (the module docstring).

    Args: as :func:`~gnnscale.partition.directory.write_partition_dir`: ``method`` partitions the graph of all
    types, balancing the training nodes (of the target type) and the nodes over the parts.

    Returns the cut and balance of the partition (also stored in the manifest).
    """
    if not isinstance(dataset, TypedDataset):
        raise TypeError(f"dataset: expected a TypedDataset, got {type(dataset).__name__}")
    out_dir = check_write_settings(out_dir, [x for x in dataset.features.values() if x is not None],
                                   overwrite=overwrite, feature_dtype=feature_dtype, chunk_edges=chunk_edges)
    graph = dataset.graph
    part, coarsening = assign_parts_reported(graph.graph, num_parts, method, train_idx=dataset.train_idx, seed=seed,
                                             threads=threads, memory_gb=memory_gb)
    ids = typed_new_ids(graph, part, num_parts)
    del part
    splits = {name: ids.map_ids(getattr(dataset, name)) for name in SPLITS}
    target = ids.book.offsets[graph.type_id(dataset.target_type)]
    with staged_directory(out_dir) as tmp:
        files, edge_cut, edges = _write_files(tmp, dataset, ids, splits, feature_dtype, int(chunk_edges))
        summary = PartitionSummary(
            method=method, num_edges=graph.num_edges, edge_cut=edge_cut,
            nodes=tuple(int(n) for n in np.diff(ids.book.offsets, axis=1).sum(axis=0)), edges=edges,
            train_nodes=tuple(int(x) for x in np.diff(np.searchsorted(splits["train_idx"], target))),
            coarsening=None if coarsening is None else coarsening.to_dict())
        manifest = {
            "format_version": FORMAT_VERSION, "kind": TYPED_KIND, "dataset": dataset.name,
            "num_parts": int(num_parts), "method": method, "seed": int(seed),
            "num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "node_types": list(graph.node_types),
            "type_offsets": graph.type_offsets.tolist(), "relations": [str(r) for r in graph.relations],
            "target_type": dataset.target_type, "feature_dim": dataset.feature_dims, "feature_dtype": feature_dtype,
            "num_classes": dataset.num_classes, "part_offsets": ids.book.offsets.tolist(), **summary.to_dict(),
            "split_sizes": {name: np.diff(np.searchsorted(idx, target)).tolist() for name, idx in splits.items()},
            "files": files,
        }
        finish_directory(tmp, out_dir, MANIFEST, manifest)
    return summary


def _write_files(root: Path, dataset: TypedDataset, ids: TypedNewIds, splits: dict[str, np.ndarray],
                 feature_dtype: str, chunk_edges: int) -> tuple[dict[str, str], int, tuple[int, ...]]:
    """Every array file under ``root``; returns ({relative path: sha256 hex}, edge cut, edges per part)."""
    graph, book = dataset.graph, ids.book
    files = {"new_to_old.npy": _write_npy(root / "new_to_old.npy", ids.new_to_old)}
    (root / "topology").mkdir()
    node_indptr = _node_indptr(graph, ids)
    files["topology/indptr.npy"] = _write_npy(root / "topology" / "indptr.npy", node_indptr)
    files["topology/rel_indptr.npy"] = _write_npy(root / "topology" / "rel_indptr.npy", ids.rel_indptr)
    for p in range(book.num_parts):
        (root / f"part{p}").mkdir()
    hashes, edge_cut = _write_edges(root, graph, ids, node_indptr, chunk_edges)
    files["topology/indices.npy"] = hashes.pop("topology/indices.npy")
    _fsync_directory(root / "topology")
    target = graph.type_id(dataset.target_type)
    edges = []
    for p in range(book.num_parts):
        folder = root / f"part{p}"
        rel_indptr = _part_rel_indptr(graph, ids, p)
        edges.append(int(rel_indptr[-1]))
        lo, hi = book.node_range(target, p)
        rows = ids.new_to_old[lo:hi] - graph.type_offsets[target]
        arrays = {
            **{f"features.{name}": _Gathered(x, ids.new_to_old[slice(*book.node_range(t, p))] - graph.type_offsets[t],
                                             feature_dtype)
               for t, (name, x) in enumerate(dataset.features.items()) if x is not None},
            "labels": dataset.labels[rows],
            **{name: idx[np.searchsorted(idx, lo):np.searchsorted(idx, hi)] for name, idx in splits.items()},
            "rel_indptr": rel_indptr,
        }
        for name, arr in arrays.items():
            files[f"part{p}/{name}.npy"] = _write_npy(folder / f"{name}.npy", arr)
        release_pages(dataset.labels)
        files[f"part{p}/indices.npy"] = hashes.pop(f"part{p}/indices.npy")
        _fsync_directory(folder)
    return files, edge_cut, tuple(edges)


def _part_rel_indptr(graph: TypedGraph, ids: TypedNewIds, p: int) -> np.ndarray:
    """int64 [part p's typed rows + 1] from 0: the bounds of its nodes' rows, type by type."""
    pieces, base = [np.zeros(1, dtype=np.int64)], 0
    for t in range(len(graph.node_types)):
        r0, r1 = _row_span(graph, t, *ids.book.node_range(t, p))
        bounds = ids.rel_indptr[r0:r1 + 1]
        pieces.append(bounds[1:] - bounds[0] + base)
        base += int(bounds[-1] - bounds[0])
    return np.concatenate(pieces)


def _write_edges(root: Path, graph: TypedGraph, ids: TypedNewIds, node_indptr: np.ndarray,
                 chunk_edges: int) -> tuple[dict[str, str], int]:
    """``topology/indices.npy`` and every ``part<p>/indices.npy`` in one pass over the relabelled rows (type by
    type, part by part within a type: the whole file's order, and each part's), ``chunk_edges`` at a time; returns
    their sha256 and the edge cut (in-edges whose source another part owns)."""
    dtype = index_dtype(graph.num_nodes)
    book, cut = ids.book, 0
    with ExitStack() as stack:
        whole = stack.enter_context(_HashingWriter(root / "topology" / "indices.npy", dtype, (graph.num_edges,)))
        own = [stack.enter_context(_HashingWriter(root / f"part{p}" / "indices.npy", dtype,
                                                  (int(_part_edges(node_indptr, book, p)),)))
               for p in range(book.num_parts)]
        for t in range(len(graph.node_types)):
            for p in range(book.num_parts):
                for a, b in _row_ranges(node_indptr, *book.node_range(t, p), chunk_edges):
                    rows = typed_rows(graph, ids, t, a, b)
                    release_pages(graph.graph.indices)
                    whole.write(rows)
                    own[p].write(rows)
                    cut += int(np.count_nonzero(book.owner(rows) != p))
        writers = {"topology/indices.npy": whole, **{f"part{p}/indices.npy": w for p, w in enumerate(own)}}
    return {rel: writer.hexdigest() for rel, writer in writers.items()}, cut


def _part_edges(node_indptr: np.ndarray, book: TypedPartitionBook, p: int) -> int:
    """The in-edges of part ``p``'s nodes (every type)."""
    return sum(int(node_indptr[hi] - node_indptr[lo]) for lo, hi in
               (book.node_range(t, p) for t in range(book.offsets.shape[0])))


# --- reading -------------------------------------------------------------------------------------


def load_typed_partition(directory: str | Path, part: int, view: str = "whole", *, verify: bool = True,
                         workers: int | None = None) -> TypedPartition:
    """Load part ``part`` of a directory written by :func:`write_typed_partition_dir`, memory-mapped.

    Args: as :func:`~gnnscale.partition.directory.load_partition` (``view``: ``"whole"``, the whole typed topology,
    or ``"own"``, the part's typed rows; ``workers``: a divisor of the part count, each worker then holding
    consecutive parts, copied into memory and concatenated type by type).

    Raises ValueError naming the path when the manifest or a file is missing, a file is corrupt (checksum mismatch)
    or disagrees with the manifest; for a directory of a graph of one node type, a ``part`` out of range,
    ``workers`` not dividing the part count or an unknown ``view``.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    if not is_typed_manifest(manifest):
        raise ValueError(f"{directory}: holds a graph of one node type; a typed model trains on the partition of a "
                         "typed dataset (gnnscale partition of a typed --dataset)")
    if view not in VIEWS:
        raise ValueError(f"view: expected one of {', '.join(VIEWS)}, got {view!r}")
    k = worker_parts(manifest["num_parts"], part, workers, directory)
    first = _load_one(directory, manifest, int(part * k), view, verify)
    if k == 1:
        return first
    shared = first.topology if view == "whole" else None  # one file for every part: read and checked once
    rest = [_load_one(directory, manifest, q, view, verify, shared) for q in range(part * k + 1, (part + 1) * k)]
    return _merged([first, *rest], int(part), k)


def _load_one(directory: Path, manifest: dict, part: int, view: str, verify: bool,
              whole: TypedGraph | None = None) -> TypedPartition:
    """Part ``part`` as written, memory-mapped; ``whole``: the whole topology, already loaded."""
    schema, book = manifest_schema(manifest), manifest_book(manifest)
    reader = _Reader(directory, manifest["files"], verify)
    counts, stored = book.counts(part), numpy_dtype(manifest["feature_dtype"])
    dims = [manifest["feature_dim"][name] for name in schema.node_types]
    features = {name: None if d is None else reader.array(f"part{part}/features.{name}.npy", stored, (int(n), d))
                for name, d, n in zip(schema.node_types, dims, counts)}
    target = schema.type_id(manifest["target_type"])
    lo, hi = book.node_range(target, part)
    labels = reader.array(f"part{part}/labels.npy", np.int64, (hi - lo,))
    splits = {name: reader.ids(f"part{part}/{name}.npy", lo, hi, manifest["split_sizes"][name][part])
              for name in SPLITS}
    if whole is not None:
        topology: TypedGraph | TypedPartRows = whole
    elif view == "whole":
        n, rows = schema.num_nodes, schema.row_layout().num_rows
        indptr = reader.array("topology/indptr.npy", np.int64, (n + 1,))
        indices = reader.array("topology/indices.npy", None, (manifest["num_edges"],))
        rel_indptr = reader.array("topology/rel_indptr.npy", np.int64, (rows + 1,))
        topology = _checked(directory, lambda: TypedGraph(
            node_types=schema.node_types, type_offsets=schema.type_offsets, relations=schema.relations,
            graph=CSCGraph(indptr=indptr, indices=indices, num_nodes=n), rel_indptr=rel_indptr))
    else:
        rows = int(part_row_start(schema, book, part)[-1])
        rel_indptr = reader.array(f"part{part}/rel_indptr.npy", np.int64, (rows + 1,))
        indices = reader.array(f"part{part}/indices.npy", None, (manifest["edges"][part],))
        topology = _checked(directory, lambda: TypedPartRows(schema=schema, book=book, part=part,
                                                             rel_indptr=rel_indptr, indices=indices))
    return TypedPartition(dataset_name=str(manifest["dataset"]), book=book, part=part, view=view, topology=topology,
                          features=features, target_type=manifest["target_type"], labels=labels,
                          num_classes=manifest["num_classes"], **splits)


def _merged(parts: list[TypedPartition], index: int, k: int) -> TypedPartition:
    """Consecutive parts as part ``index`` of the partition whose book keeps every ``k``-th bound of each type:
    each type's rows of the parts one after the other."""
    first = parts[0]
    book = first.book.merged(k)
    topology = first.topology if first.view == "whole" else _merged_rows([p.topology for p in parts], book, index)
    features = {name: None if x is None else np.concatenate([p.features[name] for p in parts])
                for name, x in first.features.items()}
    return TypedPartition(dataset_name=first.dataset_name, book=book, part=index, view=first.view, topology=topology,
                          features=features, target_type=first.target_type,
                          labels=np.concatenate([p.labels for p in parts]), num_classes=first.num_classes,
                          **{name: np.concatenate([getattr(p, name) for p in parts]) for name in SPLITS})


def _merged_rows(rows: list[TypedPartRows], book: TypedPartitionBook, index: int) -> TypedPartRows:
    """The typed rows of consecutive parts as one part's: type by type, each part's rows of the type in turn."""
    starts = [r.row_start() for r in rows]
    bounds, indices, base = [np.zeros(1, dtype=np.int64)], [], 0
    for t in range(len(rows[0].schema.node_types)):
        for r, start in zip(rows, starts):
            piece = r.rel_indptr[start[t]:start[t + 1] + 1]
            bounds.append(piece[1:] - piece[0] + base)
            indices.append(r.indices[piece[0]:piece[-1]])
            base += int(piece[-1] - piece[0])
    return TypedPartRows(schema=rows[0].schema, book=book, part=index, rel_indptr=np.concatenate(bounds),
                         indices=np.concatenate(indices))
