"""The feature stores of a typed graph: every row in this process (:class:`TypedLocalStore`, a run in one process),
or each worker's part of every type's rows and collective fetches of the rest (:class:`TypedPartitionedStore`, the
hybrid and vanilla layouts)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import Tensor

from gnnscale.distributed.comm import Comm, check_placement, same_everywhere
from gnnscale.features.partitioned import CATEGORY
from gnnscale.graph.feature_dtype import FEATURE_DTYPES, as_tensor, half_or_float32, stored_name, torch_dtype
from gnnscale.graph.features import gather_rows
from gnnscale.graph.typed import TypedGraph, TypedSchema
from gnnscale.nn.typed_models import TypedInput, sources_by_type
from gnnscale.partition.typed import TypedPartitionBook


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
        block's sources): each type's feature rows as stored (a numba kernel that releases the GIL; half precision
        stays half, the model widens it), or its local ids."""
        by_type = sources_by_type(node_ids, self.graph)
        rows = {t: half_or_float32(as_tensor(gather_rows(self.features[t], ids.numpy())))
                for t, (_, ids) in by_type.items() if t in self.features}
        return TypedInput(num_src=int(node_ids.shape[0]), positions={t: pos for t, (pos, _) in by_type.items()},
                          features=rows, ids={t: ids for t, (_, ids) in by_type.items() if t not in self.features})


class TypedPartitionedStore:
    """Every node type's feature rows partitioned by owner (a typed partition's), and collective fetches: a typed
    model's input for a batch's sources, the typed counterpart of
    :class:`~gnnscale.features.partitioned.PartitionedFeatureStore`.

    A fetch is 2 "feature" rounds whatever the number of types: (1) every worker sends each owner one list of the
    ids it needs from it, of every type with features; (2) every owner replies with one buffer holding their rows,
    type after type, each row as stored (half precision: its bytes). The widths differ by type, so the rows cannot
    travel as one matrix; the receiver knows the ids it asked for, hence their types and how the buffer splits. A
    type without features is no part of either round: its local ids are the model's input.

    Args:
        schema: the node types and their id ranges.
        book: who owns which node; part ``p`` is worker ``p``.
        features: ``{node type: [n_t, d_t] or None}``: this worker's rows of each type (``book``'s range of the type
            for its part, in id order), numpy (possibly memory-mapped); float32, float16 or bfloat16 (as uint16),
            one dtype for all.
        comm: the collectives; construction costs one "setup" round (every worker holds the same widths and dtype).
    """

    def __init__(self, schema: TypedSchema, book: TypedPartitionBook, features: Mapping[str, np.ndarray | None],
                 comm: Comm) -> None:
        check_placement(book, comm.rank, comm)
        self.schema, self.book, self.comm, self.rank = schema, book, comm, comm.rank
        self.features = {t: x for t, x in features.items() if x is not None}
        dtypes = {stored_name(x) for x in self.features.values()}
        if len(dtypes) > 1:
            raise TypeError(f"features: expected one stored dtype for every node type, got {', '.join(sorted(dtypes))}")
        self.feature_dtype = dtypes.pop() if dtypes else "float32"
        self.widths = {t: int(x.shape[1]) if t in self.features else 0 for t, x in features.items()}
        if not same_everywhere(comm, [*self.widths.values(), FEATURE_DTYPES.index(self.feature_dtype)]):
            raise ValueError(f"features: workers hold different feature widths or dtypes; this worker has "
                             f"{self.widths} ({self.feature_dtype})")

    def gather(self, node_ids: Tensor) -> TypedInput:
        """The :class:`~gnnscale.nn.typed_models.TypedInput` of ``node_ids`` (int64 global ids, the first block's
        sources): the rows of every type with features as stored (float32, float16 or bfloat16: the model widens
        half precision), the local ids of every other.

        Collective, exactly 2 "feature" rounds, whatever the ids: every worker must call it the same number of
        times."""
        by_type = sources_by_type(node_ids.cpu(), self.schema)
        featured = [t for t in self.schema.node_types if t in self.features]
        fetched = torch.cat([by_type[t][1] + int(self.schema.type_offsets[self.schema.type_id(t)]) for t in featured]
                            or [node_ids.new_empty(0, device="cpu")])
        owners = self.book.owner(fetched)
        order = torch.argsort(owners, stable=True)  # by owner, each owner's ids still type after type
        counts = torch.bincount(owners, minlength=self.comm.world_size).tolist()
        asked_ids, asked_at = fetched[order].split(counts), order.split(counts)
        requests = [ids if j != self.rank else ids[:0] for j, ids in enumerate(asked_ids)]
        # Round 1: ask every owner for the rows we need from it (nothing of ourselves).
        asked = self.comm.all_to_allv(requests, CATEGORY)
        replies = [self._packed(ids.cpu()) for ids in asked]
        # Round 2: every owner sends back the rows it was asked for, type after type, in the order asked.
        received = self.comm.all_to_allv(replies, CATEGORY)
        first = np.cumsum([0] + [by_type[t][1].shape[0] for t in featured])  # each type's place in `fetched`
        stored = torch_dtype(self.feature_dtype)
        rows = {t: torch.empty((by_type[t][1].shape[0], self.widths[t]), dtype=stored) for t in featured}
        for j in range(self.comm.world_size):
            pieces = self._rows(asked_ids[j]) if j == self.rank else self._unpacked(received[j].cpu(), asked_ids[j])
            for t, piece in pieces.items():
                at = asked_at[j][self._type_slice(asked_ids[j], t)] - int(first[featured.index(t)])
                rows[t][at] = piece
        return TypedInput(num_src=int(node_ids.shape[0]), positions={t: pos for t, (pos, _) in by_type.items()},
                          features=rows, ids={t: ids for t, (_, ids) in by_type.items() if t not in self.features})

    def _type_slice(self, ids: Tensor, t: str) -> slice:
        """Where the ids of type ``t`` are in ``ids`` (grouped by type, in type order: a binary search for a type's
        bounds needs no more than that)."""
        k = self.schema.type_id(t)
        lo, hi = torch.searchsorted(ids, torch.tensor(self.schema.type_offsets[k:k + 2])).tolist()
        return slice(lo, hi)

    def _rows(self, ids: Tensor) -> dict[str, Tensor]:
        """As stored, this worker's rows of ``ids`` (ids it owns, type after type), by type."""
        out = {}
        for t in self.features:
            lo = self.book.node_range(self.schema.type_id(t), self.rank)[0]
            local = ids[self._type_slice(ids, t)] - lo
            out[t] = as_tensor(np.ascontiguousarray(self.features[t][local.numpy()]))  # copies just these rows
        return out

    def _packed(self, ids: Tensor) -> Tensor:
        """The reply to ``ids``: their rows, type after type, as one 1-D buffer (float32, or bytes)."""
        wide = self.feature_dtype == "float32"
        rows = [r.reshape(-1) if wide else r.contiguous().reshape(-1).view(torch.uint8) for r in self._rows(ids).values()]
        return torch.cat(rows) if rows else torch.empty(0, dtype=torch.float32 if wide else torch.uint8)

    def _unpacked(self, buffer: Tensor, ids: Tensor) -> dict[str, Tensor]:
        """The rows of each type in a reply to ``ids`` (:meth:`_packed`), in their stored dtype."""
        out, at = {}, 0
        stored = torch_dtype(self.feature_dtype)
        per_value = 1 if self.feature_dtype == "float32" else stored.itemsize  # buffer entries per stored value
        for t in self.features:
            piece = self._type_slice(ids, t)
            size = (piece.stop - piece.start) * self.widths[t] * per_value
            chunk = buffer[at:at + size]
            out[t] = (chunk if per_value == 1 else chunk.view(stored)).reshape(-1, self.widths[t])
            at += size
        return out
