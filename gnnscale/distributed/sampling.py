"""Sampling in the two distributed layouts of FastSample (section 3.3).

* Vanilla: every worker holds only the in-edges of the nodes it owns. Hop 0 (the seeds, owned here)
  is sampled locally; every later hop costs 2 rounds: (a) each worker sends every owner its key and
  the nodes whose neighbors it wants, (b) each owner samples them with the *requester's* key and
  replies with the count and the chosen neighbors (global ids) of each. ``2(L - 1)`` rounds for L hops.
* Hybrid: the topology is replicated, so sampling is local: 0 rounds.

Neighbor choice depends only on ``(key, hop, node)`` (:mod:`gnnscale.keys`) and the relabel
is the fused sampler's, so both return blocks identical to
``sample_blocks(full_graph, seeds, fanouts, key=key)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np
import torch

from gnnscale.distributed.comm import Comm, check_placement, same_everywhere
from gnnscale.graph.csc import CSCGraph, validate_csc
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import BatchSampler, Block, NeighborSampler, blocks_from_hops, check_fanouts, check_key, check_seeds
# Inlines choose.py's functions: numba's cache notices only a change to this file (see choose.py).
from gnnscale.sampling.choose import choose_neighbors, count_and_offsets
from gnnscale.sampling.fused import SamplerWorkspace, expand_hops, grow_nodes, relabel_all

CATEGORY = "sample"


@numba.njit(parallel=True, cache=True, nogil=True)
def _sample_rows(indptr, indices, first_id, nodes, fanout, replace, key, hop):
    """Sample owned ``nodes`` (global ids) from a part's rows (row = node - first_id).

    Returns ``(offsets int64 [n + 1], chosen int64 [offsets[-1]])``: node ``i``'s neighbors (global
    ids) are ``chosen[offsets[i]:offsets[i + 1]]``, exactly what the full-graph sampler draws.
    """
    offsets = count_and_offsets(indptr, nodes, first_id, fanout, replace)
    chosen = np.empty(offsets[-1], dtype=np.int64)
    for i in numba.prange(nodes.shape[0]):
        choose_neighbors(indptr, indices, nodes[i] - first_id, nodes[i], fanout, replace, key, hop, chosen,
                         offsets[i])
    return offsets, chosen


@numba.njit(cache=True, nogil=True)
def _scatter_lists(positions, counts, values, num_dst):
    """Lay out per-node lists in CSC order of the destinations.

    ``positions[k]`` is the destination slot of list ``k``, which has ``counts[k]`` entries; the lists
    lie back to back in ``values``. Returns ``(indptr int64 [num_dst + 1], indices int64 [len(values)])``.
    """
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    for k in range(positions.shape[0]):
        indptr[positions[k] + 1] = counts[k]
    for i in range(num_dst):
        indptr[i + 1] += indptr[i]
    out = np.empty(values.shape[0], dtype=np.int64)
    src = 0
    for k in range(positions.shape[0]):
        dst = indptr[positions[k]]
        for q in range(counts[k]):
            out[dst + q] = values[src + q]
        src += counts[k]
    return indptr, out


class VanillaSampler(BatchSampler):
    """Distributed neighbor sampling when each worker holds only its own nodes' in-edges.

    Args:
        book: node ownership (``book.num_parts == comm.world_size``).
        rank: this worker (``comm.rank``).
        local_indptr: int64 [n_p + 1]; in-edges of owned node ``v`` are
            ``local_indices[local_indptr[v - lo]:local_indptr[v - lo + 1]]`` with ``lo = book.node_range(rank)[0]``.
        local_indices: int32 or int64 [num_local_edges], global source ids, in the full graph's order.
        fanouts: neighbors per node per hop, from the seeds outwards; the same on every worker.
        comm: the collectives; construction costs one "setup" round (checks fanouts agree).
        replace: sample with replacement.
        any_seeds: seeds may be any nodes, not only owned ones (link prediction: a pair's source and its
            negatives live anywhere); hop 0 then asks the owners too, 2 rounds more. The same on every worker.

    Keeps an O(num_nodes) mapping array, like :class:`gnnscale.sampling.NeighborSampler`.
    """

    def __init__(self, book: PartitionBook, rank: int, local_indptr: np.ndarray, local_indices: np.ndarray,
                 fanouts: Sequence[int], comm: Comm, replace: bool = False, any_seeds: bool = False) -> None:
        check_placement(book, rank, comm)
        lo, hi = book.node_range(rank)
        # The part's rows form a CSC matrix with hi - lo rows whose ids are global.
        validate_csc(local_indptr, local_indices, hi - lo, check_ids=False)
        if local_indices.shape[0] and (int(local_indices.min()) < 0 or int(local_indices.max()) >= book.num_nodes):
            raise ValueError(f"local_indices: expected global ids in [0, {book.num_nodes}), got range "
                             f"[{int(local_indices.min())}, {int(local_indices.max())}]")
        self.book = book
        self.rank = rank
        self.comm = comm
        self.indptr = local_indptr
        self.indices = local_indices
        self.fanouts = check_fanouts(fanouts)
        self.replace = bool(replace)
        self.any_seeds = bool(any_seeds)
        self.workspace = SamplerWorkspace(book.num_nodes)
        self._lo, self._hi = lo, hi
        self._check_same_fanouts()

    def sample(self, seeds, key: int) -> list[Block]:
        """Blocks in model order, identical to ``sample_blocks(full_graph, seeds, fanouts, key=key)``.

        Collective: ``2 * (len(fanouts) - 1)`` "sample" rounds (``2 * len(fanouts)`` with ``any_seeds``);
        every worker must call it the same number of times (with its own seeds and key).

        Args:
            seeds: int tensor/array [batch], unique node ids owned by this worker (any nodes with ``any_seeds``).
            key: this batch's random key (:func:`gnnscale.sampling.derive_key`), in [0, 2**63).
        """
        seeds = check_seeds(seeds, self.book.num_nodes)
        if not self.any_seeds:
            _check_owned(seeds, self._lo, self._hi, self.rank)
        key = check_key(key)

        def sample_hop(nodes, num_dst, num_known, fanout, hop):
            indptr, chosen = self._sample_hop(nodes[:num_dst], fanout, key, hop)
            nodes = grow_nodes(nodes, num_known, num_known + chosen.shape[0])
            return indptr, chosen, nodes, relabel_all(chosen, self.workspace.node_map, nodes, num_known)

        return blocks_from_hops(*expand_hops(seeds, self.fanouts, self.workspace, sample_hop))

    def _sample_hop(self, dst: np.ndarray, fanout: int, key: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        """CSC ``(indptr, chosen global ids)`` of one hop; hops after the first cost 2 rounds."""
        if hop == 0 and not self.any_seeds:  # the seeds are owned here, on every worker: no round
            return self._sample_mine(dst, fanout, key, hop)

        def answer(requester: int, msg: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            offsets, chosen = self._answer(requester, msg, fanout, hop)
            return np.diff(offsets), (chosen,)

        def mine(nodes: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            offsets, chosen = self._sample_mine(nodes, fanout, key, hop)
            return np.diff(offsets), (chosen,)

        indptr, (chosen,) = owner_lists(self.comm, self.book.owner(dst), dst, self._header(key), answer, mine)
        return indptr, chosen

    # Hooks for samplers that send more than the key (DGS sends its mask version too).

    def _header(self, key: int) -> list[int]:
        """The int64 words that precede the node ids of a request: the requester's key."""
        return [key]

    def _answer(self, requester: int, msg: np.ndarray, fanout: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, chosen)`` for a request (``_header`` words, then owned node ids) from ``requester``."""
        return self._sample_owned(msg[1:], fanout, int(msg[0]), hop)

    def _sample_mine(self, nodes: np.ndarray, fanout: int, key: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, chosen)`` for this worker's own requests (its seeds, its owned destinations)."""
        return self._sample_owned(nodes, fanout, key, hop)

    def _sample_owned(self, nodes: np.ndarray, fanout: int, key: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, chosen)`` of owned ``nodes`` (int64 global ids) under ``key``; see :func:`_sample_rows`."""
        return _sample_rows(self.indptr, self.indices, self._lo, nodes, fanout, self.replace, key, hop)

    def _check_same_fanouts(self) -> None:
        """One "setup" round: owners sample on behalf of requesters with their own fanouts, so all must agree."""
        if not same_everywhere(self.comm, [len(self.fanouts), *self.fanouts, int(self.replace)]):
            raise ValueError(f"fanouts: expected the same fanouts and replace on every worker; they differ "
                             f"(this worker: fanouts={list(self.fanouts)}, replace={self.replace})")


class HybridSampler(BatchSampler):
    """Sampling in the hybrid layout: the whole topology on every worker, so no communication (0 rounds).

    The same contract as :class:`VanillaSampler` (seeds owned by this worker; same key, same blocks),
    so the trainer switches layouts by switching samplers.

    Args:
        graph: the full topology.
        book: node ownership (seeds must lie in ``book.node_range(rank)``).
        rank: this worker.
        fanouts, replace, method: as for :class:`gnnscale.sampling.NeighborSampler` (``"two_step"``
            is the reference sampler, for comparisons).
        sampler: the sampler of the owned seeds, instead of a NeighborSampler of ``method`` (the device
            sampler, :mod:`gnnscale.sampling.device`: the same blocks, drawn on a GPU).
        any_seeds: seeds may be any nodes, not only owned ones (link prediction).
    """

    def __init__(self, graph: CSCGraph, book: PartitionBook, rank: int, fanouts: Sequence[int],
                 replace: bool = False, method: str = "fused", sampler: BatchSampler | None = None,
                 any_seeds: bool = False) -> None:
        if not isinstance(book, PartitionBook):
            raise TypeError(f"book: expected a PartitionBook, got {type(book).__name__}")
        if book.num_nodes != graph.num_nodes:
            raise ValueError(f"book: expected it to cover the graph's {graph.num_nodes} nodes, got {book.num_nodes}")
        if not 0 <= rank < book.num_parts:
            raise ValueError(f"rank: expected a part in [0, {book.num_parts}), got {rank}")
        self.book = book
        self.rank = rank
        self.sampler = NeighborSampler(graph, fanouts, replace=replace, method=method) if sampler is None else sampler
        self.any_seeds = bool(any_seeds)
        self._lo, self._hi = book.node_range(rank)

    def sample(self, seeds, key: int) -> list[Block]:
        """Blocks in model order; no collective."""
        checked = check_seeds(seeds, self.book.num_nodes)
        if not self.any_seeds:
            _check_owned(checked, self._lo, self._hi, self.rank)
        return self.sampler.sample(seeds, key)


_EMPTY = torch.empty(0, dtype=torch.int64)

# What an owner answers for a request (the requester's rank, then its message: header words and node ids), and
# what this worker draws for its own nodes: per node the length of its list, and one int64 array per column of
# the lists (the chosen neighbors; a typed graph's, their relations too), end to end.
Lists = tuple[np.ndarray, tuple[np.ndarray, ...]]


def owner_lists(comm: Comm, owners: np.ndarray, dst: np.ndarray, header: list[int],
                answer: Callable[[int, np.ndarray], Lists], mine: Callable[[np.ndarray], Lists],
                width: int = 1) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Per-node lists of ``dst`` drawn where each node lives: 2 "sample" rounds (collective).

    (a) Every worker sends each other owner ``header`` and the nodes of ``dst`` it owns (``owners``: the owner of
    each); (b) each owner replies with :data:`Lists` for them (``answer``), while this worker draws its own nodes'
    (``mine``); the lists have ``width`` columns. Returns ``(indptr int64 [len(dst) + 1], columns)``: node
    ``dst[i]``'s list is ``column[indptr[i]:indptr[i + 1]]`` of each column, in the order of ``dst`` (CSC order).
    """
    world, rank = comm.world_size, comm.rank
    positions = [np.flatnonzero(owners == p) for p in range(world)]
    # Round (a): to every other owner, the header and the nodes we need drawn (nothing if none).
    requests = [_request(header, dst[positions[p]]) if p != rank else _EMPTY for p in range(world)]
    asked = comm.all_to_allv(requests, CATEGORY)
    replies = []
    for p in range(world):
        msg = asked[p].cpu().numpy()
        if p == rank or msg.shape[0] == 0:
            replies.append(_EMPTY)
            continue
        counts, columns = answer(p, msg)
        replies.append(torch.from_numpy(np.concatenate([counts, *columns])))
    # Round (b): per requested node the length of its list, then each column of all lists.
    answered = comm.all_to_allv(replies, CATEGORY)
    counts, columns = [], []
    for p in range(world):
        if p == rank:
            c, cols = mine(dst[positions[p]])
        else:
            msg = answered[p].cpu().numpy()
            n = positions[p].shape[0]
            c = msg[:n]
            m = int(c.sum())
            cols = tuple(msg[n + i * m:n + (i + 1) * m] for i in range(width))
        counts.append(c)
        columns.append(cols)
    order, sizes = np.concatenate(positions), np.concatenate(counts)
    lists = [_scatter_lists(order, sizes, np.concatenate([cols[i] for cols in columns]), dst.shape[0])
             for i in range(width)]
    return lists[0][0], tuple(values for _, values in lists)


def _request(header: list[int], nodes: np.ndarray) -> torch.Tensor:
    """int64 [len(header) + len(nodes)]: the header (the key, ...), then the nodes; empty when there is
    nothing to ask."""
    if nodes.shape[0] == 0:
        return _EMPTY
    return torch.from_numpy(np.concatenate([np.array(header, dtype=np.int64), nodes]))


def _check_owned(seeds: np.ndarray, lo: int, hi: int, rank: int) -> np.ndarray:
    foreign = seeds[(seeds < lo) | (seeds >= hi)]
    if foreign.shape[0]:
        shown = foreign[:10].tolist()
        more = f" (and {foreign.shape[0] - 10} more)" if foreign.shape[0] > 10 else ""
        raise ValueError(f"seeds: expected nodes owned by rank {rank}, ids in [{lo}, {hi}); got {shown}{more}")
    return seeds
