"""What one worker trains on of a typed graph: a :class:`TypedPartition`, and who owns which node
(:class:`TypedPartitionBook`).

**Ids.** A typed partition keeps the typed graph's contract (type ``t`` is one range of global ids) and gives every
part one contiguous range *within every type*: ids are numbered type-major, then part, then by original id, so
part ``p`` owns ``[offsets[t, p], offsets[t, p + 1])`` of type ``t``. Ownership is two range checks (the node's
type, then the part within the type), a part's rows of type ``t`` are one slice, and its local row of a node is
the node's id minus the start of that slice.

In one process the partition is the whole dataset as one part (:func:`whole_typed_partition`); under torchrun a
worker loads its part of a typed partition directory (:mod:`gnnscale.partition.typed_directory`) with the whole
typed topology (the ``"whole"`` view, hybrid) or its part's typed rows only (``"own"``, vanilla). It offers what the
layouts and the node task read of a homogeneous :class:`~gnnscale.partition.directory.LocalPartition` (the book,
the view, the topology, the split, the labels and where they start) with features per node type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from gnnscale.graph.typed import TypedGraph, TypedSchema, parse_relation
from gnnscale.graph.typed_dataset import TypedDataset

VIEWS = ("whole", "own")


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedPartitionBook:
    """Node ownership of a typed partition: part ``p`` owns, of node type ``t``, the global ids
    ``[offsets[t, p], offsets[t, p + 1])``.

    Args:
        offsets: int64 [types, parts + 1], each row non-decreasing; row ``t`` runs from type ``t``'s first id to its
            last plus one, where row ``t + 1`` starts (``offsets[0, 0] == 0``).
    """

    offsets: np.ndarray

    def __post_init__(self) -> None:
        o = self.offsets
        if not isinstance(o, np.ndarray) or o.dtype != np.int64 or o.ndim != 2 or o.shape[0] < 1 or o.shape[1] < 2:
            raise TypeError("offsets: expected an int64 array [types, parts + 1] with at least one type and one part")
        if o[0, 0] != 0 or np.any(np.diff(o, axis=1) < 0) or np.any(o[1:, 0] != o[:-1, -1]):
            raise ValueError(f"offsets: expected each type's row to rise from where the previous type's ends (the "
                             f"first from 0), got {o.tolist()}")

    @property
    def num_parts(self) -> int:
        return int(self.offsets.shape[1] - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1, -1])

    @property
    def type_offsets(self) -> np.ndarray:
        """int64 [types + 1]: where each type's ids start, and the node count."""
        return np.append(self.offsets[:, 0], self.offsets[-1, -1])

    def node_range(self, t: int, part: int) -> tuple[int, int]:
        """The global ids ``[lo, hi)`` of type ``t`` that ``part`` owns."""
        return int(self.offsets[t, part]), int(self.offsets[t, part + 1])

    def counts(self, part: int) -> np.ndarray:
        """int64 [types]: the nodes of each type that ``part`` owns."""
        return self.offsets[:, part + 1] - self.offsets[:, part]

    def owner(self, node_ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Owning part of each node id (the same type as the input). The ranges of all (type, part) pairs lie end to
        end in id order, so one search over their starts does both range checks; of ranges that start alike, all
        but the last are empty, and the search lands on the last."""
        starts = np.ascontiguousarray(self.offsets[:, :-1]).reshape(-1)
        if isinstance(node_ids, torch.Tensor):
            where = torch.searchsorted(torch.from_numpy(starts), node_ids, right=True) - 1
        else:
            where = np.searchsorted(starts, node_ids, side="right") - 1
        return where % self.num_parts

    def merged(self, k: int) -> TypedPartitionBook:
        """The book of ``k`` consecutive parts taken as one (every ``k``-th bound of each type)."""
        return TypedPartitionBook(offsets=np.ascontiguousarray(self.offsets[:, ::k]))


def one_part_book(type_offsets: np.ndarray) -> TypedPartitionBook:
    """The book of one part owning every node."""
    offsets = np.asarray(type_offsets, dtype=np.int64)
    return TypedPartitionBook(offsets=np.stack([offsets[:-1], offsets[1:]], axis=1))


def check_owned(book: TypedPartitionBook, seeds: np.ndarray, rank: int) -> np.ndarray:
    """``seeds`` (int64 global ids), or a ValueError naming those that ``rank`` does not own."""
    foreign = seeds[book.owner(seeds) != rank]
    if foreign.shape[0]:
        shown = foreign[:10].tolist()
        more = f" (and {foreign.shape[0] - 10} more)" if foreign.shape[0] > 10 else ""
        ranges = ", ".join(f"[{lo}, {hi})" for lo, hi in
                           (book.node_range(t, rank) for t in range(book.offsets.shape[0])))
        raise ValueError(f"seeds: expected nodes owned by rank {rank}, ids in {ranges}; got {shown}{more}")
    return seeds


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedPartRows:
    """One part's typed rows: the in-edges, by relation, of the nodes it owns (the ``"own"`` view).

    Args:
        schema: the whole graph's node types, type ranges and relations.
        book: who owns which node.
        part: the part.
        rel_indptr: int64 [rows + 1] from 0: the part's typed rows, type by type: of type ``t``, its owned nodes in id
            order, each with one row per relation into ``t`` (as the whole graph's rows: :mod:`gnnscale.graph.typed`).
        indices: int32 | int64 [edges]: global source ids, each row as the whole graph's.
    """

    schema: TypedSchema
    book: TypedPartitionBook
    part: int
    rel_indptr: np.ndarray
    indices: np.ndarray

    def __post_init__(self) -> None:
        rows = int(self.row_start()[-1])
        if self.rel_indptr.dtype != np.int64 or self.rel_indptr.shape != (rows + 1,):
            raise ValueError(f"rel_indptr: expected int64 [{rows + 1}] (one bound per typed row of part {self.part}), "
                             f"got {self.rel_indptr.dtype} of shape {self.rel_indptr.shape}")
        if self.indices.ndim != 1 or self.indices.dtype not in (np.int32, np.int64):
            raise TypeError(f"indices: expected a 1-D int32/int64 array, got {self.indices.dtype}")
        if self.rel_indptr[0] != 0 or self.rel_indptr[-1] != self.indices.shape[0]:
            raise ValueError(f"rel_indptr: expected to run from 0 to len(indices) = {self.indices.shape[0]}, got "
                             f"{self.rel_indptr[0]}..{self.rel_indptr[-1]}")

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph."""
        return self.schema.num_nodes

    def row_start(self) -> np.ndarray:
        """int64 [types + 1]: where each type's rows start among the part's, and the row count."""
        return part_row_start(self.schema, self.book, self.part)


def part_row_start(schema: TypedSchema, book: TypedPartitionBook, part: int) -> np.ndarray:
    """int64 [types + 1]: where each type's rows start among ``part``'s typed rows, and their count."""
    per_node = np.diff(schema.row_layout().rel_start)
    out = np.zeros(len(schema.node_types) + 1, dtype=np.int64)
    np.cumsum(book.counts(part) * per_node, out=out[1:])
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedPartition:
    """A worker's share of a typed dataset.

    Args:
        dataset_name: the dataset's name.
        book: who owns which node.
        part: this worker's part.
        view: ``"whole"`` (``topology`` is the whole typed graph) or ``"own"`` (its part's typed rows).
        topology: a :class:`~gnnscale.graph.typed.TypedGraph` or :class:`TypedPartRows`; possibly memory-mapped.
        features: ``{node type: [n_t, d_t] or None}``, every type a key: the rows of the nodes of that type this part
            owns, in id order (float32, float16, or bfloat16 stored as uint16); None: a type without features.
        target_type: the node type the labels and the split are of.
        labels: int64 [owned nodes of the target type], by id from :attr:`label_offset` (-1: unlabeled).
        train_idx, val_idx, test_idx: int64 global ids of owned target-type nodes, sorted.
        num_classes: number of classes.
    """

    dataset_name: str
    book: TypedPartitionBook
    part: int
    view: str
    topology: TypedGraph | TypedPartRows
    features: Mapping[str, np.ndarray | None]
    target_type: str
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"view: expected one of {', '.join(VIEWS)}, got {self.view!r}")
        expected = TypedGraph if self.view == "whole" else TypedPartRows
        if not isinstance(self.topology, expected):
            raise TypeError(f"topology: view {self.view!r} needs a {expected.__name__}, got "
                            f"{type(self.topology).__name__}")
        if not 0 <= self.part < self.book.num_parts:
            raise ValueError(f"part: expected an int in [0, {self.book.num_parts}), got {self.part}")
        counts = self.book.counts(self.part)
        for t, name in enumerate(self.schema.node_types):
            x = self.features.get(name)
            if x is not None and (x.ndim != 2 or x.shape[0] != counts[t]):
                raise ValueError(f"features: {name}: expected {counts[t]} rows (the part's nodes of that type), got "
                                 f"shape {list(x.shape)}")
        target = counts[self.schema.type_id(self.target_type)]
        if self.labels.shape != (target,):
            raise ValueError(f"labels: expected {target} (the part's nodes of the target type {self.target_type!r}), "
                             f"got shape {list(self.labels.shape)}")

    @property
    def schema(self) -> TypedSchema:
        return self.topology.schema

    @property
    def label_offset(self) -> int:
        """The global id of ``labels[0]``: this part's first node of the target type."""
        return self.book.node_range(self.schema.type_id(self.target_type), self.part)[0]


def whole_typed_partition(dataset: TypedDataset) -> TypedPartition:
    """The dataset as part 0 of a one-part partition (ids unchanged, the whole typed graph)."""
    return TypedPartition(dataset_name=dataset.name, book=one_part_book(dataset.graph.type_offsets), part=0,
                          view="whole", topology=dataset.graph, features=dataset.features,
                          target_type=dataset.target_type, labels=np.asarray(dataset.labels),
                          train_idx=np.asarray(dataset.train_idx), val_idx=np.asarray(dataset.val_idx),
                          test_idx=np.asarray(dataset.test_idx), num_classes=dataset.num_classes)


def check_typed_manifest(manifest: dict, path) -> None:
    """The typed fields of a typed partition directory's manifest (:mod:`gnnscale.partition.typed_directory`):
    ValueError naming ``path`` and the field."""
    types = manifest.get("node_types")
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise ValueError(f"{path}: node_types must be a list of names, got {types!r}")
    offsets = manifest.get("type_offsets")
    if not _int_list(offsets, len(types) + 1) or offsets[0] != 0 or offsets[-1] != manifest["num_nodes"] \
            or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"{path}: type_offsets must be {len(types) + 1} ints rising from 0 to num_nodes, got "
                         f"{offsets!r}")
    relations = manifest.get("relations")
    if not isinstance(relations, list) or not all(isinstance(r, str) for r in relations):
        raise ValueError(f"{path}: relations must be a list of 'src__name__dst' names, got {relations!r}")
    if manifest.get("target_type") not in types:
        raise ValueError(f"{path}: target_type must be one of {', '.join(types)}, got {manifest.get('target_type')!r}")
    dims = manifest.get("feature_dim")
    if not isinstance(dims, dict) or sorted(dims) != sorted(types) or not all(
            d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in dims.values()):
        raise ValueError(f"{path}: feature_dim must map every node type to its width (an int > 0) or null, got "
                         f"{dims!r}")
    parts = manifest.get("part_offsets")
    k = manifest["num_parts"]
    if not isinstance(parts, list) or len(parts) != len(types) or not all(
            _int_list(row, k + 1) and row[0] == offsets[t] and row[-1] == offsets[t + 1]
            and all(b >= a for a, b in zip(row, row[1:])) for t, row in enumerate(parts)):
        raise ValueError(f"{path}: part_offsets must hold, per node type, {k + 1} ints rising over the type's ids, got "
                         f"{parts!r}")


def _int_list(value, length: int) -> bool:
    return isinstance(value, list) and len(value) == length and all(
        isinstance(x, int) and not isinstance(x, bool) for x in value)


def manifest_schema(manifest: dict) -> TypedSchema:
    """The node types, type ranges and relations a typed manifest records."""
    return TypedSchema(node_types=tuple(manifest["node_types"]),
                       type_offsets=np.asarray(manifest["type_offsets"], dtype=np.int64),
                       relations=tuple(parse_relation(r) for r in manifest["relations"]))


def manifest_book(manifest: dict) -> TypedPartitionBook:
    """Who owns which node, as a typed manifest records it."""
    return TypedPartitionBook(offsets=np.asarray(manifest["part_offsets"], dtype=np.int64))
