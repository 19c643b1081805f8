"""How much work an iteration repeats, and how its edges fall on the partition (GSplit Tables 2 and 5).

Computed the same way for split parallelism (one mini-batch cut by the partition map) and for data
parallelism (P micro-batches, one per worker), so the two can be reported side by side:

* ``edges_computed``: edges that some worker aggregates, summed over workers and layers.
* ``minibatch_edges``: edges of the mini-batch in which every (layer, vertex) hidden feature that any
  worker computes is computed once. A split mini-batch *is* that mini-batch. For data parallelism it is
  the union of the micro-batches: every distinct (layer, destination) once with its sampled in-degree,
  which is min(fanout, degree), the same in every micro-batch that holds it, whatever the key (with
  one shared key the union is exactly the mini-batch ``sample_blocks`` draws for all the seeds).
* ``redundancy = edges_computed / minibatch_edges - 1``: 0 for split parallelism by construction.
* ``local_edge_fraction``: computed edges whose source and destination have the same owner (for a
  split, the edges that cross no worker; GSplit Table 5's "local edges").
* ``edge_skew = (max - min) / mean`` of the edges computed per worker (GSplit's definition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gnnscale.distributed.split.plan import SHUFFLE_KINDS, ShuffleKind, check_minibatch
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling.block import Block


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeMetrics:
    """Edge counts of one iteration (sum the counts over iterations with :meth:`merge` for an epoch).

    Args:
        edges_per_worker: edges each worker computes, all layers, ``num_workers`` ints.
        minibatch_edges: edges of the (union) mini-batch, all layers.
        local_edges: computed edges whose two endpoints have the same owner, summed over workers.
    """

    edges_per_worker: tuple[int, ...]
    minibatch_edges: int
    local_edges: int

    @property
    def edges_computed(self) -> int:
        return sum(self.edges_per_worker)

    @property
    def redundancy(self) -> float:
        return self.edges_computed / self.minibatch_edges - 1.0 if self.minibatch_edges else 0.0

    @property
    def local_edge_fraction(self) -> float:
        return self.local_edges / self.edges_computed if self.edges_computed else 1.0

    @property
    def edge_skew(self) -> float:
        per = np.asarray(self.edges_per_worker, dtype=np.float64)
        return float((per.max() - per.min()) / per.mean()) if per.sum() else 0.0

    def merge(self, other: "EdgeMetrics") -> "EdgeMetrics":
        """The counts of both iterations added (same number of workers)."""
        if len(other.edges_per_worker) != len(self.edges_per_worker):
            raise ValueError(f"other: expected {len(self.edges_per_worker)} workers, got {len(other.edges_per_worker)}")
        return EdgeMetrics(edges_per_worker=tuple(a + b for a, b in zip(self.edges_per_worker, other.edges_per_worker)),
                           minibatch_edges=self.minibatch_edges + other.minibatch_edges,
                           local_edges=self.local_edges + other.local_edges)

    def to_dict(self) -> dict:
        """The counts and the derived ratios, for the metrics JSON."""
        return {"edges_per_worker": list(self.edges_per_worker), "edges_computed": self.edges_computed,
                "minibatch_edges": self.minibatch_edges, "redundancy": self.redundancy,
                "local_edges": self.local_edges, "local_edge_fraction": self.local_edge_fraction,
                "edge_skew": self.edge_skew}


def split_edge_metrics(blocks: Sequence[Block], book: PartitionBook, *,
                       kind: ShuffleKind = "partial_sums") -> EdgeMetrics:
    """Metrics of split parallelism on one mini-batch (identical on every worker; no communication).

    An edge is computed by its source's owner (``"partial_sums"``) or its destination's owner
    (``"source_features"``), as :func:`gnnscale.distributed.split.split_blocks` assigns it.
    """
    if kind not in SHUFFLE_KINDS:
        raise ValueError(f"kind: expected one of {SHUFFLE_KINDS}, got {kind!r}")
    owner = book.owner(check_minibatch(blocks, book))
    per_worker = np.zeros(book.num_parts, dtype=np.int64)
    local = total = 0
    for block in blocks:
        src_owner, dst_owner = _edge_owners(block, owner)
        per_worker += np.bincount(src_owner if kind == "partial_sums" else dst_owner, minlength=book.num_parts)
        local += int(np.count_nonzero(src_owner == dst_owner))
        total += block.num_edges
    return EdgeMetrics(edges_per_worker=tuple(per_worker.tolist()), minibatch_edges=total, local_edges=local)


def data_parallel_edge_metrics(micro_batches: Sequence[Sequence[Block]], book: PartitionBook) -> EdgeMetrics:
    """Metrics of data parallelism: ``micro_batches[w]`` are the blocks worker w sampled this iteration.

    Raises ``ValueError`` when the micro-batches differ in depth, or give one (layer, vertex) two
    different sampled in-degrees (different fanouts or graphs: then there is no common mini-batch).
    """
    if isinstance(micro_batches, (Block, str)) or not isinstance(micro_batches, Sequence) or not micro_batches:
        raise ValueError("micro_batches: expected one list of blocks per worker, got "
                         f"{type(micro_batches).__name__}")
    depths = {len(blocks) for blocks in micro_batches}
    if len(depths) != 1:
        raise ValueError(f"micro_batches: expected the same number of layers in every micro-batch, got {sorted(depths)}")
    per_worker = [sum(b.num_edges for b in blocks) for blocks in micro_batches]
    local = sum(local_edges(blocks, book) for blocks in micro_batches)
    union = union_minibatch_edges([minibatch_signature(blocks) for blocks in micro_batches])
    return EdgeMetrics(edges_per_worker=tuple(per_worker), minibatch_edges=union, local_edges=local)


def local_edges(blocks: Sequence[Block], book: PartitionBook) -> int:
    """Edges of one (micro-)batch whose source and destination have the same owner, all layers."""
    owner = book.owner(check_minibatch(blocks, book))
    count = 0
    for block in blocks:
        src_owner, dst_owner = _edge_owners(block, owner)
        count += int(np.count_nonzero(src_owner == dst_owner))
    return count


def split_edge_counts(splits: Sequence) -> tuple[int, int]:
    """``(computed, local)``: the edges one worker's splits of a mini-batch aggregate (all layers), and how
    many of them cross no worker, read off the splits themselves (no pass over the edges).

    ``splits`` are :class:`gnnscale.distributed.split.SplitBlock` s of one worker. A ``"partial_sums"``
    split computes the edges of its owned sources: the local ones are those of its owned destination rows
    (the first ``num_dst`` rows); a ``"source_features"`` split computes its owned destinations' in-edges:
    the local ones read an owned source column (below ``num_src``).
    """
    computed = local = 0
    for split in splits:
        computed += split.num_edges
        if split.kind == "partial_sums":
            local += int(split.indptr[split.num_dst])
        else:
            local += int(np.count_nonzero(split.indices.numpy() < split.num_src))
    return computed, local


def minibatch_signature(blocks: Sequence[Block]) -> np.ndarray:
    """int64 [sum of num_dst, 3]: one ``(layer, destination id, sampled in-degree)`` row per destination of
    every layer of one (micro-)batch: all :func:`union_minibatch_edges` needs of it (a fraction of its edges'
    size, so it can be sent to another worker)."""
    rows = []
    for layer, block in enumerate(blocks):
        degrees = np.diff(block.indptr.numpy())
        rows.append(np.stack([np.full(block.num_dst, layer, dtype=np.int64), block.dst_ids.numpy(), degrees], axis=1))
    return np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)


def union_minibatch_edges(signatures: Sequence[np.ndarray]) -> int:
    """Edges of the union of several micro-batches (:func:`minibatch_signature` of each): every distinct
    (layer, destination) once with its sampled in-degree. Raises ``ValueError`` when one (layer, vertex)
    has two different sampled in-degrees (different fanouts or graphs: no common mini-batch)."""
    rows = np.concatenate([np.asarray(s, dtype=np.int64).reshape(-1, 3) for s in signatures])
    order = np.lexsort((rows[:, 1], rows[:, 0]))  # by layer, then destination id
    layers, ids, degrees = rows[order, 0], rows[order, 1], rows[order, 2]
    first = np.ones(ids.shape[0], dtype=bool)
    first[1:] = (ids[1:] != ids[:-1]) | (layers[1:] != layers[:-1])
    clash = ~first & (degrees != np.roll(degrees, 1))
    if np.any(clash):
        where = np.flatnonzero(clash)[0]
        raise ValueError(f"micro_batches: node {int(ids[where])} has different sampled in-degrees in layer "
                         f"{int(layers[where])} of two micro-batches; were they sampled with different fanouts or "
                         "from different graphs?")
    return int(degrees[first].sum())


def epoch_edge_metrics(iterations: Sequence[EdgeMetrics]) -> dict:
    """An epoch's edge metrics for the metrics JSON: the counts summed over ``iterations`` and the ratios
    of the sums (:meth:`EdgeMetrics.to_dict`), except ``edge_skew``: the mean of the iterations' skews
    (every iteration synchronises the workers, so the imbalance that costs time is per iteration; the
    epoch totals would average it away). ``iterations`` is how many iterations were measured."""
    if not iterations:
        return {"iterations": 0}
    total = iterations[0]
    for m in iterations[1:]:
        total = total.merge(m)
    return {**total.to_dict(), "edge_skew": float(np.mean([m.edge_skew for m in iterations])),
            "iterations": len(iterations)}


def _edge_owners(block: Block, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Owners of every edge's source and destination (int64 [num_edges] each); ``owner`` by node-list position."""
    src_owner = owner[block.indices.numpy()]
    dst_owner = np.repeat(owner[: block.num_dst], np.diff(block.indptr.numpy()))
    return src_owner, dst_owner
