"""The hook through which a layer runs on a mini-batch split across workers (split parallelism).

A layer sees either a :class:`~gnnscale.sampling.block.Block` (the whole layer is computed here) or a
:class:`SplitAwareBlock`: this worker's split of a layer (GSplit, section 3.3), which supplies the
two operations that touch edges crossing splits. The layer's code is the same for both; ``nn`` only
declares the interface and never imports the implementation (``gnnscale.distributed.split.shuffle``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class SplitAwareBlock(Protocol):
    """This worker's share of one layer: it computes the layer's output for the destinations it owns.

    Attributes:
        num_dst: destinations owned here (rows of the layer's output on this worker).
        num_src: sources owned here (rows of ``x_src``); the first ``num_dst`` are the destinations.
        num_edges: edges this worker computes in this layer.
        indptr: int64 [num_rows + 1], CSC offsets of ``indices`` over the rows this worker aggregates:
            its owned destinations first (GAT's splits have no other rows, so with ``indices`` they form
            a block over the gathered sources, which the attention kernel runs on).
        indices: int64 [num_edges], source column of every edge this worker computes, into the rows
            that :meth:`gather_sources` returns.
        edge_weight: always None: split layers are unweighted (weighted LADIES blocks train in one
            process only), so the layers normalise by :meth:`in_degrees`.
    """

    num_dst: int
    num_src: int
    num_edges: int
    indptr: Tensor
    indices: Tensor
    edge_weight: None

    def in_degrees(self) -> Tensor:
        """int64 [num_dst]: sampled in-degree of every owned destination in the whole mini-batch."""

    def dst_index(self) -> Tensor:
        """int64 [num_edges]: owned destination (row of the output) of every edge in ``indices``."""

    def aggregate_sum(self, x_src: Tensor, *, kernels: str = "auto") -> Tensor:
        """[num_src, d] -> [num_dst, d]: every owned destination's sum over all its in-edges, wherever
        their sources live (the split-aware counterpart of :func:`gnnscale.nn.layers.aggregate_sum`).
        ``kernels``: the layer's (``"auto"``, ``"numba"`` or ``"torch"``,
        :func:`gnnscale.nn.functional.resolve_kernels`), so that a model on the torch path sums with it."""

    def gather_sources(self, x_src: Tensor) -> Tensor:
        """[num_src, d] -> [num_src + num_remote, d]: ``x_src`` followed by the rows of the remote sources
        that ``indices`` reads (identity for a whole :class:`~gnnscale.sampling.block.Block`)."""

    def exchanged_ahead(self, x_src: Tensor) -> bool:
        """Whether the exchange of ``x_src`` was completed before the layer ran (layer 0's input
        features, in the loading stage): then :meth:`gather_sources` and :meth:`aggregate_sum` of
        ``x_src`` cost no communication, and GAT gathers its input rows rather than their transform."""
