"""The sparse products of matrix sampling (Tripathy, Yelick, Buluç, section 4), through scipy.sparse.

A stack of ``k`` mini-batches is one selection matrix ``Q`` with a row per destination node (or, for
LADIES, a row per batch); sampling reads the rows of ``P = Q A``. ``Q`` is stored factored as
``Q = R S``: ``S`` selects the distinct nodes the stack touches (the nonzero columns of ``Q``, in node
order) and ``R`` maps each row of ``Q`` to one of them. ``S A`` is one library product, a row gather
that reads ``A`` front to back because the nodes are sorted; ``R`` is an index. This is the
sparsity-aware product of the paper's Algorithm 2 seen from one process: only the rows of ``A`` that
``Q`` needs are read (in the 1.5D layout, only those are sent), and a node that several batches
share is read once per stack, not once per batch, which is what a larger stack amortises.

``A`` here is the graph's CSC seen as a sparse matrix whose row ``v`` lists the in-neighbors of ``v``
(row = destination, column = source), so a row of ``P`` is a destination's neighborhood.

scipy over torch.sparse: on the products-shaped graph (benchmarks/bulk.py --libraries), scipy's row
gather was 10-20x faster than ``torch.sparse.mm`` of CSR matrices on CPU, and its general SpGEMM 2-3x
slower than the row gather; torch's CSR has no row ``index_select`` on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from gnnscale.graph.csc import CSCGraph


@dataclass(frozen=True, slots=True, kw_only=True)
class StackedRows:
    """The selection matrix ``Q`` of a stack of batches, one row per destination, factored ``Q = R S``.

    Args:
        nodes: int64 [num_rows]; row ``r`` of ``Q`` has its single nonzero in column ``nodes[r]``.
        batch_ptr: int64 [k + 1]; the rows of batch ``b`` are ``batch_ptr[b]:batch_ptr[b + 1]``.
        needed: int64 [num_needed]; the distinct nodes of the stack, ascending (``S``'s columns).
        inverse: int64 [num_rows]; ``nodes[r] == needed[inverse[r]]`` (``R``).
    """

    nodes: np.ndarray
    batch_ptr: np.ndarray
    needed: np.ndarray
    inverse: np.ndarray

    @property
    def num_batches(self) -> int:
        return int(self.batch_ptr.shape[0] - 1)

    def row_batch(self) -> np.ndarray:
        """int64 [num_rows]: the batch of every row."""
        return np.repeat(np.arange(self.num_batches, dtype=np.int64), np.diff(self.batch_ptr))


def stack_rows(nodes: np.ndarray, batch_ptr: np.ndarray, position: np.ndarray) -> StackedRows:
    """Factor the ``Q`` whose rows are ``nodes`` (int64; batch ``b``'s rows at
    ``batch_ptr[b]:batch_ptr[b + 1]``).

    ``position`` is a reusable int array [num_nodes], all -1 (left so). Marking the nodes in it and
    scanning it costs O(rows + num_nodes): a sort of the rows was slower from about 100k rows on,
    and a stack of many batches has millions of rows.
    """
    needed, inverse = _distinct_sorted(nodes, position)
    return StackedRows(nodes=nodes, batch_ptr=batch_ptr, needed=needed, inverse=inverse)


@numba.njit(cache=True, nogil=True)
def _distinct_sorted(nodes, position):
    """(distinct nodes ascending, index of every row's node among them). Serial: a few ns per row,
    less than waking the threads costs on a busy machine."""
    num_rows = nodes.shape[0]
    for r in range(num_rows):
        position[nodes[r]] = -2
    needed = np.empty(min(num_rows, position.shape[0]), dtype=np.int64)
    count = 0
    for v in range(position.shape[0]):
        if position[v] == -2:
            position[v] = count
            needed[count] = v
            count += 1
    inverse = np.empty(num_rows, dtype=np.int64)
    for r in range(num_rows):
        inverse[r] = position[nodes[r]]
    for i in range(count):
        position[needed[i]] = -1
    return needed[:count].copy(), inverse


def adjacency_pattern(graph: CSCGraph) -> sp.csr_matrix:
    """``A`` as a scipy CSR matrix of booleans (1 byte per edge: GraphSAGE needs only the pattern).

    Shares ``graph.indices`` when scipy accepts its dtype; scipy may narrow ``indptr`` to int32.
    """
    n = graph.num_nodes
    data = np.ones(graph.num_edges, dtype=np.bool_)
    return sp.csr_matrix((data, graph.indices, graph.indptr), shape=(n, n), copy=False)


def gcn_operator(graph: CSCGraph, *, self_loops: bool) -> sp.csr_matrix:
    """The operator LADIES estimates, float64 CSR: ``D~^-1 (A + I)`` (random-walk GCN norm with self
    loops, as the LADIES reference code and gnnscale's GCNConv) or ``D^-1 A`` (GraphSAGE's mean)."""
    return operator_rows(graph.indptr, graph.indices, 0, graph.num_nodes, self_loops=self_loops)


def operator_rows(indptr: np.ndarray, indices: np.ndarray, first_row: int, num_nodes: int, *,
                  self_loops: bool) -> sp.csr_matrix:
    """Rows ``first_row ..`` of :func:`gcn_operator`, from those rows of ``A`` alone (``indptr`` int64
    [rows + 1] from 0, ``indices`` their in-neighbors): float64 CSR [rows, num_nodes]. A row's
    normalisation needs only the row, so the owner of a block row of ``A`` (the 1.5D layout) computes
    the operator's rows bit for bit as the whole-graph operator has them."""
    rows = indptr.shape[0] - 1
    a = sp.csr_matrix((np.ones(indices.shape[0]), indices, indptr), shape=(rows, num_nodes))
    if self_loops:
        eye = sp.csr_matrix((np.ones(rows), np.arange(first_row, first_row + rows), np.arange(rows + 1)),
                            shape=(rows, num_nodes))
        a = (a + eye).tocsr()
    return row_normalize(a)


def row_normalize(m: sp.csr_matrix) -> sp.csr_matrix:
    """Every row divided by its sum (rows that sum to zero stay zero), as a new CSR matrix."""
    m = m.tocsr(copy=True)
    sums = np.asarray(m.sum(axis=1)).ravel()
    scale = np.divide(1.0, sums, out=np.zeros_like(sums, dtype=np.float64), where=sums != 0)
    m.data = m.data * np.repeat(scale, np.diff(m.indptr))
    return m


def gather_rows(a: sp.csr_matrix, stacked: StackedRows) -> sp.csr_matrix:
    """``S A``: the rows of ``A`` the stack needs, in ``stacked.needed`` order (scipy's row gather, the
    SpGEMM specialised to a selection matrix; rows keep ``A``'s column order and duplicates)."""
    return a[stacked.needed]


def batch_selection(stacked: StackedRows) -> sp.csr_matrix:
    """LADIES' ``Q`` over the needed nodes: ``k x num_needed``, row ``b`` has a one per destination
    of batch ``b`` (in the batch's order, so a batch sums its rows in the same order in any stack)."""
    ones = np.ones(stacked.nodes.shape[0])
    return sp.csr_matrix((ones, stacked.inverse, stacked.batch_ptr),
                         shape=(stacked.num_batches, stacked.needed.shape[0]))
