"""The products of matrix sampling in torch ops, on any device (CUDA included): the device twin of
:mod:`gnnscale.sampling.matrix.products`.

A stack of ``k`` batches is factored as on the host, ``Q = R S`` (:func:`stack_on_device`: ``S`` selects
the stack's distinct nodes ``needed``, ascending, ``R`` maps every row to one of them), and the two
products keep the host's specialisations:

- ``S A`` is a row gather, not an SpGEMM: :class:`DeviceRows` says where each needed row starts in the
  arrays that hold it, so the gather copies nothing (1D: the matrix held on the device,
  :class:`DeviceMatrix`; 1.5D: the rows the process column sent, copied to the device once per hop). A
  row keeps ``A``'s column order and its repeated entries, which the keyed draw reads by position: an
  SpGEMM with a selection matrix would sort and merge them (cuSPARSE takes no repeated columns).
- LADIES' ``R (S P ∘ S P)`` is an SpGEMM: ``torch.sparse.mm`` of two CSR tensors
  (:func:`batch_probabilities`), cuSPARSE's on CUDA, MKL's on the CPU.

Host syncs: each sizes an array from a sum the device computed (marked ``host sync`` where they occur).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling.device import DeviceTopology
from gnnscale.sampling.matrix.sage import check_stack

@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRows:
    """Rows of a sparse matrix on one device, each a slice of one pair of arrays: row ``q`` is
    ``indices[start[q]:start[q] + length[q]]`` (its values likewise).

    Args:
        start: int64 [num_rows].
        length: int64 [num_rows].
        indices: int32 | int64 [*]: column ids (global node ids).
        values: float64 [*] of the same length, or None for a pattern (GraphSAGE's ``A``).
    """

    start: Tensor
    length: Tensor
    indices: Tensor
    values: Tensor | None

    @classmethod
    def from_scipy(cls, m: sp.csr_matrix, device: torch.device, *, with_values: bool) -> "DeviceRows":
        """The rows of a host CSR matrix, copied to ``device`` (indptr widened to int64)."""
        matrix = DeviceMatrix.from_scipy(m, device, with_values=with_values)
        start = matrix.indptr[:-1]
        return cls(start=start, length=matrix.indptr[1:] - start, indices=matrix.indices, values=matrix.values)


@runtime_checkable
class RowSource(Protocol):
    """Where a device matrix sampler reads the rows of ``S A``: a matrix held on the device (:class:`DeviceMatrix`)
    or rows fetched from other workers (the 1.5D layout's process column)."""

    num_nodes: int
    device: torch.device

    def gather(self, needed: Tensor) -> DeviceRows:
        """The rows ``needed`` (int64, ascending, on the device), in that order (collective where fetched)."""


class DeviceMatrix:
    """A CSR matrix ``[num_nodes, num_nodes]`` held on a device: the graph's CSC as ``A`` (its row ``v`` lists the
    in-neighbors of ``v``; GraphSAGE reads its pattern) or LADIES' operator (float64 values).

    Args:
        indptr: int64 [num_nodes + 1].
        indices: int32 | int64 [nnz] (a graph's int32 ids stay int32: half the bytes).
        values: float64 [nnz], or None for a pattern.
        num_nodes: rows and columns.
    """

    def __init__(self, indptr: Tensor, indices: Tensor, values: Tensor | None, num_nodes: int) -> None:
        self.indptr, self.indices, self.values, self.num_nodes = indptr, indices, values, int(num_nodes)

    @classmethod
    def pattern(cls, graph: CSCGraph, device: torch.device) -> "DeviceMatrix":
        """The graph's ``A`` (its pattern) on ``device``, index dtypes kept."""
        topology = DeviceTopology.from_graph(graph, device)
        return cls(topology.indptr, topology.indices, None, graph.num_nodes)

    @classmethod
    def from_scipy(cls, m: sp.csr_matrix, device: torch.device, *, with_values: bool) -> "DeviceMatrix":
        """A host CSR matrix (with its float64 values, or its pattern) on ``device``, ``indptr`` widened to int64."""
        indptr = torch.from_numpy(np.asarray(m.indptr, dtype=np.int64)).to(device)
        values = torch.from_numpy(np.asarray(m.data, dtype=np.float64)).to(device) if with_values else None
        return cls(indptr, torch.from_numpy(m.indices).to(device), values, m.shape[1])

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    def gather(self, needed: Tensor) -> DeviceRows:
        """``S A``: where the rows ``needed`` lie in this matrix's arrays (two gathers of ``indptr``, no copy of
        the rows)."""
        start = self.indptr.index_select(0, needed)
        return DeviceRows(start=start, length=self.indptr.index_select(0, needed + 1) - start, indices=self.indices,
                          values=self.values)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceStack:
    """A stack of ``k`` batches' node lists on a device, factored as the host's ``StackedRows``.

    Args:
        nodes: int64 [num_rows]; batch ``b``'s nodes are ``nodes[batch_ptr[b]:batch_ptr[b + 1]]``.
        batch_ptr: ``k + 1`` host ints.
        row_batch: int64 [num_rows], the batch of every row.
        needed: int64 [num_needed], the distinct nodes, ascending (``S``).
        inverse: int64 [num_rows], ``nodes[r] == needed[inverse[r]]`` (``R``).
    """

    nodes: Tensor
    batch_ptr: list[int]
    row_batch: Tensor
    needed: Tensor
    inverse: Tensor

    @property
    def num_batches(self) -> int:
        return len(self.batch_ptr) - 1

    def batch_ptr_tensor(self) -> Tensor:
        return torch.tensor(self.batch_ptr, dtype=torch.int64, device=self.nodes.device)


def stack_on_device(nodes: Tensor, batch_ptr: list[int]) -> DeviceStack:
    """Factor the stack whose rows are ``nodes`` (batch ``b``'s at ``batch_ptr[b]:batch_ptr[b + 1]``); the
    host's ``stack_rows`` gives the same ``needed`` and ``inverse``."""
    needed, inverse = torch.unique(nodes, sorted=True, return_inverse=True)
    sizes = torch.tensor(np.diff(batch_ptr), dtype=torch.int64, device=nodes.device)
    row_batch = torch.repeat_interleave(torch.arange(len(batch_ptr) - 1, device=nodes.device), sizes,
                                        output_size=nodes.shape[0])
    return DeviceStack(nodes=nodes, batch_ptr=list(batch_ptr), row_batch=row_batch, needed=needed, inverse=inverse)


def check_stack_on(device: torch.device, num_nodes: int, seeds_list, keys) -> tuple[Tensor, list[int], Tensor]:
    """The host samplers' validation of a stack (the same errors), then its seeds and keys on ``device``:
    ``(nodes int64 [rows], batch_ptr k + 1 host ints, keys int64 [k])``."""
    batches, keys = check_stack(num_nodes, seeds_list, keys)
    batch_ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([b.shape[0] for b in batches], out=batch_ptr[1:])
    nodes = torch.from_numpy(np.concatenate(batches)).to(device)
    return nodes, batch_ptr.tolist(), torch.from_numpy(keys).to(device)


def expand(counts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Items with ``counts[i]`` slots each: ``(ptr int64 [n + 1], item int64 [total], slot int64 [total])``,
    slot ``t`` belonging to item ``item[t]`` at position ``slot[t]`` in it (``ptr`` the counts' prefix sum).
    One host sync: the total sizes the arrays."""
    ptr = torch.zeros(counts.shape[0] + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    total = int(ptr[-1])  # host sync: sizes the slot arrays
    item = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts, output_size=total)
    return ptr, item, torch.arange(total, device=counts.device) - ptr.index_select(0, item)


def batch_probabilities(rows: DeviceRows, stack: DeviceStack, num_nodes: int) -> Tensor:
    """LADIES' ``row_normalize(R (S P ∘ S P))`` (the host's ``layer_probabilities``): a sparse CSR tensor
    ``[k, num_nodes]`` of float64 whose row ``b`` holds ``p_j ∝ sum_{i in dst_b} P_ij^2``.

    ``S P ∘ S P`` is coalesced first (columns sorted, a row's repeated columns summed) and ``R``'s columns
    are sorted within each batch: cuSPARSE's SpGEMM takes no repeated columns. The sums run in another
    order than scipy's, so the values equal the host's within rounding (docs/matrix_sampling.md).
    """
    device, k, num_needed = stack.nodes.device, stack.num_batches, stack.needed.shape[0]
    _, row, slot = expand(rows.length)
    at = rows.start.index_select(0, row) + slot
    values = rows.values.index_select(0, at)
    order = torch.argsort(stack.row_batch * num_needed + stack.inverse)
    with warnings.catch_warnings():
        # torch says once per process that its CSR tensors are in beta: nothing a user of the sampler can act on.
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        squared = torch.sparse_coo_tensor(torch.stack([row, rows.indices.index_select(0, at).long()]),
                                          values * values, (num_needed, num_nodes),
                                          check_invariants=False).coalesce().to_sparse_csr()
        selection = torch.sparse_csr_tensor(stack.batch_ptr_tensor(), stack.inverse.index_select(0, order),
                                            torch.ones(stack.nodes.shape[0], dtype=torch.float64, device=device),
                                            (k, num_needed), check_invariants=False)
        product = torch.sparse.mm(selection, squared)  # the SpGEMM: cuSPARSE on CUDA
        crow, sums = product.crow_indices(), product.values()
        entry_row = torch.repeat_interleave(torch.arange(k, device=device), crow[1:] - crow[:-1],
                                            output_size=sums.shape[0])
        total = torch.zeros(k, dtype=torch.float64, device=device).index_add_(0, entry_row, sums)
        scale = torch.where(total != 0, 1.0 / total, 0.0)  # as row_normalize: times the reciprocal of the row sum
        return torch.sparse_csr_tensor(crow, product.col_indices(), sums * scale.index_select(0, entry_row),
                                       (k, num_nodes), check_invariants=False)
