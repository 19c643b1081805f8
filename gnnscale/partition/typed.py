"""What one worker trains on of a typed graph: a :class:`TypedPartition`.

In one process it is the whole dataset, one part (:func:`whole_typed_partition`). It offers what the layouts and
the node task read of a homogeneous :class:`~gnnscale.partition.directory.LocalPartition` (the book, the view, the
topology, the split, the labels and where they start) with the typed graph as its topology and features per node
type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gnnscale.graph.typed import TypedGraph
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.partition.book import PartitionBook


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedPartition:
    """A worker's share of a typed dataset.

    Args:
        dataset_name: the dataset's name.
        book: node ranges of all parts over the global ids.
        part: this worker's part.
        view: ``"whole"``: the topology is the whole typed graph.
        topology: the typed graph.
        features: ``{node type: float32 [count, d_t] or None}`` (None: a type without features).
        target_type: the node type the labels and the split are of.
        labels: int64 [count of the target type], by local id (-1: unlabeled).
        train_idx, val_idx, test_idx: int64 global ids of the target type, sorted.
        num_classes: number of classes.
    """

    dataset_name: str
    book: PartitionBook
    part: int
    view: str
    topology: TypedGraph
    features: Mapping[str, np.ndarray | None]
    target_type: str
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if self.view != "whole":
            raise ValueError(f"view: a typed partition holds the whole topology ('whole'), got {self.view!r}")

    @property
    def node_offset(self) -> int:
        return int(self.book.offsets[self.part])

    @property
    def label_offset(self) -> int:
        """The global id of ``labels[0]``: the target type's first node."""
        return self.topology.node_range(self.target_type)[0]


def whole_typed_partition(dataset: TypedDataset) -> TypedPartition:
    """The dataset as part 0 of a one-part partition (ids unchanged, the whole typed graph)."""
    n = dataset.graph.num_nodes
    return TypedPartition(dataset_name=dataset.name, book=PartitionBook(offsets=np.array([0, n], dtype=np.int64)),
                          part=0, view="whole", topology=dataset.graph, features=dataset.features,
                          target_type=dataset.target_type, labels=np.asarray(dataset.labels),
                          train_idx=np.asarray(dataset.train_idx), val_idx=np.asarray(dataset.val_idx),
                          test_idx=np.asarray(dataset.test_idx), num_classes=dataset.num_classes)
