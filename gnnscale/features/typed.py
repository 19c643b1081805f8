"""Every feature row of a typed graph in this process: the store of a typed run in one process."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch import Tensor

from gnnscale.graph.feature_dtype import decode
from gnnscale.graph.features import gather_rows
from gnnscale.graph.typed import TypedGraph
from gnnscale.nn.typed_models import TypedInput, sources_by_type


class TypedLocalStore:
    """The feature rows of every node type, read locally: a typed model's input for a batch's sources.

    Args:
        graph: the typed graph (its node types and id ranges).
        features: ``{node type: float32 [count, d_t] or None}``, numpy (possibly memory-mapped); a type with None
            has no rows (its model learns an embedding per node, read by local id).
    """

    def __init__(self, graph: TypedGraph, features: Mapping[str, np.ndarray | None]) -> None:
        self.graph = graph
        self.features = {t: x for t, x in features.items() if x is not None}

    def gather(self, node_ids: Tensor) -> TypedInput:
        """The :class:`~gnnscale.nn.typed_models.TypedInput` of ``node_ids`` (global ids of any types, the first
        block's sources): each type's feature rows (a numba kernel that releases the GIL), or its local ids."""
        by_type = sources_by_type(node_ids, self.graph)
        rows = {t: decode(gather_rows(self.features[t], ids.numpy()))
                for t, (_, ids) in by_type.items() if t in self.features}
        return TypedInput(num_src=int(node_ids.shape[0]), positions={t: pos for t, (pos, _) in by_type.items()},
                          features=rows, ids={t: ids for t, (_, ids) in by_type.items() if t not in self.features})
