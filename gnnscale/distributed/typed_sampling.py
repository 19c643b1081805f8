"""Sampling a typed graph in the two data-parallel layouts, as :mod:`gnnscale.distributed.sampling` does for a
graph of one node type:

* Hybrid: the whole typed graph on every worker, sampled by the typed fused kernel (:mod:`gnnscale.sampling.typed`):
  0 rounds.
* Vanilla: every worker holds its part's typed rows (:class:`~gnnscale.partition.typed.TypedPartRows`). Hop 0 (the
  seeds, owned here) is drawn locally; every later hop costs 2 rounds: each worker sends every owner its key and
  the nodes it wants drawn, each owner draws them, every relation of each, with the *requester's* key and replies
  with their counts, chosen sources and relations (:func:`~gnnscale.distributed.sampling.owner_lists`).

Both give the blocks of ``TypedNeighborSampler(whole graph)`` for the same key: an owner draws a node with the same
kernel from the same stream ``(key, hop + r * RELATION_SLOT, v)`` over a copy of the same rows, and the requester
numbers the sources as the fused kernel does, in order of first appearance in the hop's CSC
(:func:`~gnnscale.sampling.typed.typed_fused_hops`).
"""

from __future__ import annotations

import numpy as np

from gnnscale.distributed.comm import Comm, check_placement, same_everywhere
from gnnscale.distributed.sampling import owner_lists
from gnnscale.partition.typed import TypedPartitionBook, TypedPartRows, check_owned
from gnnscale.sampling import BatchSampler, check_key, check_seeds
from gnnscale.sampling.fused import SamplerWorkspace
from gnnscale.sampling.typed import TypedBlock, TypedKernel, typed_blocks_from_hops, typed_fanouts, typed_fused_hops


class TypedHybridSampler(BatchSampler):
    """Sampling a typed graph in the hybrid layout: ``sampler`` (over the whole typed graph) draws the seeds this
    worker owns; no communication.

    Args:
        sampler: the typed sampler of the whole graph (the registry's fused or two-step one).
        book: who owns which node.
        rank: this worker.
    """

    def __init__(self, sampler: BatchSampler, book: TypedPartitionBook, rank: int) -> None:
        if not 0 <= rank < book.num_parts:
            raise ValueError(f"rank: expected a part in [0, {book.num_parts}), got {rank}")
        self.sampler, self.book, self.rank = sampler, book, rank

    def sample(self, seeds, key: int) -> list[TypedBlock]:
        """Typed blocks in model order; no collective."""
        check_owned(self.book, check_seeds(seeds, self.book.num_nodes), self.rank)
        return self.sampler.sample(seeds, key)


class OwnedRowsKernel(TypedKernel):
    """The typed kernels over one part's typed rows. The kernels find a node's type as the last bound at or below
    its id and its first row from its offset above that bound; over the part's rows the bounds are the part's first
    id of each type (its nodes of type ``t`` lie between its first of ``t`` and its first of ``t + 1``) and the rows
    start where the part's rows of each type do. The two-step baseline does not run on it (it reads the whole graph)."""

    def __init__(self, rows: TypedPartRows) -> None:  # not TypedKernel's: that one reads a whole graph
        layout = rows.schema.row_layout()
        self.graph = None
        self.rel_indptr, self.indices = rows.rel_indptr, rows.indices
        self.type_offsets = np.append(rows.book.offsets[:, rows.part], rows.num_nodes)
        self.row_start = rows.row_start()[:-1]
        self.rel_start, self.rel_ids = layout.rel_start, layout.rel_ids


class OwnerDraws:
    """Hops drawn where each node's rows are (what :func:`typed_fused_hops` asks of a kernel): the destinations of
    hop 0 (the seeds) here, those of later hops by their owners, with the batch's key."""

    def __init__(self, kernel: OwnedRowsKernel, book: TypedPartitionBook, comm: Comm) -> None:
        self.kernel, self.book, self.comm = kernel, book, comm

    def draw(self, nodes: np.ndarray, fanouts: np.ndarray, replace: bool, key: int,
             hop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if hop == 0:  # the seeds are owned here, on every worker: no round
            return self.kernel.draw(nodes, fanouts, replace, key, hop)

        def answer(requester: int, msg: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            # The requester's key (msg[0]) draws what it would have drawn itself.
            offsets, chosen, relation = self.kernel.draw(msg[1:], fanouts, replace, int(msg[0]), hop)
            return np.diff(offsets), (chosen, relation)

        def mine(owned: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            offsets, chosen, relation = self.kernel.draw(owned, fanouts, replace, key, hop)
            return np.diff(offsets), (chosen, relation)

        indptr, (chosen, relation) = owner_lists(self.comm, self.book.owner(nodes), nodes, [key], answer, mine,
                                                 width=2)
        return indptr, chosen, relation


class TypedVanillaSampler(BatchSampler):
    """Typed neighbor sampling when each worker holds only its part's typed rows (the vanilla layout).

    Args:
        rows: this worker's typed rows (``rows.part`` is its rank).
        fanouts: per relation and hop, seeds outwards (:func:`~gnnscale.sampling.typed.typed_fanouts`); the same on
            every worker.
        comm: the collectives; construction costs one "setup" round (checks that the fanouts agree).
        replace: draw with replacement.

    Keeps an O(num_nodes) mapping array, as :class:`~gnnscale.sampling.typed.TypedNeighborSampler`.
    """

    def __init__(self, rows: TypedPartRows, fanouts, comm: Comm, replace: bool = False) -> None:
        check_placement(rows.book, rows.part, comm)
        self.rows, self.comm, self.replace = rows, comm, bool(replace)
        self.table = typed_fanouts(rows.schema, fanouts)
        self.draws = OwnerDraws(OwnedRowsKernel(rows), rows.book, comm)
        self.workspace = SamplerWorkspace(rows.num_nodes)
        # Owners draw on behalf of requesters with their own fanouts: all must agree.
        if not same_everywhere(comm, [*self.table.shape, *self.table.reshape(-1).tolist(), int(self.replace)]):
            raise ValueError(f"fanouts: expected the same fanouts and replace on every worker; they differ (this "
                             f"worker: fanouts={self.table.tolist()}, replace={self.replace})")

    def sample(self, seeds, key: int) -> list[TypedBlock]:
        """Typed blocks in model order, identical to ``sample_typed_blocks(whole graph, seeds, fanouts, key=key)``.

        Collective: ``2 * (layers - 1)`` "sample" rounds; every worker must call it the same number of times (with its
        own seeds and key).

        Args:
            seeds: int tensor/array [batch], unique node ids owned by this worker.
            key: this batch's key (:func:`gnnscale.keys.derive_key`), in [0, 2**63).
        """
        seeds = check_owned(self.rows.book, check_seeds(seeds, self.rows.num_nodes), self.comm.rank)
        key = check_key(key)
        nodes, hops = typed_fused_hops(self.draws, seeds, self.table, key, self.replace, self.workspace)
        return typed_blocks_from_hops(nodes, hops, self.rows.schema)
