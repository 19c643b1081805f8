"""Cooperative layers (GSplit, section 3.3): the split-aware aggregation behind every layer's edges.

:class:`CooperativeBlock` binds one worker's :class:`~gnnscale.distributed.split.SplitBlock` to its
:class:`~gnnscale.distributed.comm.Comm` and implements :class:`gnnscale.nn.cooperative.SplitAwareBlock`,
so the unchanged GraphSAGE, GCN and GAT layers run split-parallel:

* ``aggregate_sum`` (SAGE, GCN) on a ``"partial_sums"`` split: sum the edges held here into the owned
  and the reference rows, send every reference row to its destination's owner, add what arrives.
* ``gather_sources`` (GAT; also SAGE/GCN on a ``"source_features"`` split): send owned source rows to
  the workers whose destinations read them, append the rows that arrive.

Each is one coalesced ``all_to_allv`` forward (category ``"shuffle"``) and, when the shuffled rows need
a gradient, one backward that returns every received row's gradient to its sender: at most 2 shuffles
per layer (layer 0 of SAGE/GCN shuffles sums of input features, which need no gradient: 1). Both
sides of every exchange come from the split's plan, so no sizes are exchanged.

Layer 0's exchange can move input features, which do not depend on the parameters, so the loading
stage can complete it ahead of the training step (:func:`exchange_input_ahead`, on the loader's Comm,
category ``"feature"``: like a data-parallel fetch it moves input features): the neighbor sums of the
input features (SAGE, GCN) or the remote sources' input rows, which GAT then transforms locally. The
training step shuffles only hidden features, 2L - 2 times per iteration.

Rows can travel narrower than they are computed (``wire_dtype=torch.bfloat16``, ``--shuffle-dtype``):
every exchange, forward and backward, rounds its rows to bfloat16 for the wire (half the bytes) and
widens them on arrival, so the sums that complete a destination still add in float32. bfloat16 keeps
float32's exponent range (partial sums and small gradients neither overflow nor flush to zero) at 8
bits of mantissa; float32 on the wire (the default) keeps split training bit for bit the
single-process one, which the equivalence tests check.

On a GPU the splits, the layers' sums and every exchanged row live on the training device: the copy stage
moves each step's :class:`CooperativeBlock` s there (:meth:`CooperativeBlock.moved`), and an exchange
returns its rows where it was given them (:func:`exchange`). The Comm decides the wire: the training
step's (:func:`gnnscale.distributed.device_policy.step_comm`) is NCCL where every worker has a GPU of its
own, so the rows stay on the GPUs; gloo where workers share one, so the rows go through host memory. The
code is the same for CPU and GPU tensors (on the CPU every move is the identity).

Training on splits (:func:`split_loss`): each worker sums the cross-entropy of the seeds it owns and
divides by the global batch size; summing gradients over workers
(:func:`gnnscale.distributed.gradients.all_reduce_gradients` with divisor 1) then gives exactly the
gradient of the mean loss of the whole mini-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from gnnscale.distributed.comm import Comm, check_placement
from gnnscale.distributed.split.plan import ShuffleKind, SplitBlock, split_blocks
from gnnscale.nn import torch_ops
from gnnscale.nn.functional import csr_sum, resolve_kernels
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling.block import Block

CATEGORY = "shuffle"
WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def exchange(comm: Comm, rows: Tensor, send_counts: Sequence[int], recv_counts: Sequence[int], category: str,
             wire_dtype: torch.dtype | None) -> Tensor:
    """:meth:`Comm.exchange_rows` of [n, d] ``rows``, sent as ``wire_dtype`` (None: as they are) and
    returned in ``rows``' dtype on ``rows``' device. 16-bit rows travel as bytes: gloo has no collectives of
    16-bit types. A Comm whose tensors live elsewhere (gloo, for rows on a GPU that workers share) sends
    them through host memory: a blocking copy each way; on the Comm's own device nothing is copied."""
    if wire_dtype is None or wire_dtype == rows.dtype:
        return comm.exchange_rows(rows, send_counts, recv_counts, category).to(rows.device)
    width = rows.shape[1]
    if rows.shape[0]:
        narrow = rows.to(wire_dtype).contiguous().view(torch.uint8)  # [n, bytes per row]
    else:  # an empty tensor has no bytes to view
        narrow = rows.new_empty((0, width * torch.finfo(wire_dtype).bits // 8), dtype=torch.uint8)
    received = comm.exchange_rows(narrow, send_counts, recv_counts, category)
    if received.shape[0] == 0:
        return rows.new_empty((0, width))
    return received.to(rows.device).view(wire_dtype).to(rows.dtype)  # back as bytes: the narrow copy


class Shuffle(torch.autograd.Function):
    """``rows`` grouped by receiver -> the rows every worker sent here, grouped by sender; the backward
    sends each received row's gradient back to its sender. Collective: every worker calls it together.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, comm: Comm, send_counts: tuple[int, ...], recv_counts: tuple[int, ...],
                wire_dtype: torch.dtype | None = None) -> Tensor:
        ctx.comm, ctx.send_counts, ctx.recv_counts, ctx.wire_dtype = comm, send_counts, recv_counts, wire_dtype
        # Collective: one all_to_allv, sizes known on both sides from the plan.
        return exchange(comm, rows, send_counts, recv_counts, CATEGORY, wire_dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        # Collective: every received row's gradient back to its sender.
        back = exchange(ctx.comm, grad, ctx.recv_counts, ctx.send_counts, CATEGORY, ctx.wire_dtype)
        return back, None, None, None, None


class PartialSums(torch.autograd.Function):
    """``"partial_sums"``: [num_rows, d] partial neighbor sums (this worker's edges, owned destinations
    first, then the reference rows grouped by owner) -> [num_dst, d] complete sums of the owned
    destinations. Forward: the reference rows go to their owners, the rows received are added to the
    owned destinations (one shuffle). Backward: each owned destination's gradient is its own rows'
    gradient, and goes back, for every row received, to the worker that sent it (one shuffle).

    One Function rather than slicing, :class:`Shuffle` and ``index_add`` through autograd: the backward
    then builds the input's gradient with one concatenation instead of zero-filled full-size buffers for
    each of the three steps.
    """

    @staticmethod
    def forward(ctx, partial: Tensor, comm: Comm, num_dst: int, recv_index: Tensor, send_counts: tuple[int, ...],
                recv_counts: tuple[int, ...], wire_dtype: torch.dtype | None = None) -> Tensor:
        ctx.comm, ctx.send_counts, ctx.recv_counts, ctx.wire_dtype = comm, send_counts, recv_counts, wire_dtype
        ctx.save_for_backward(recv_index)
        # Collective: the reference rows (contiguous, grouped by owner) to their owners.
        received = exchange(comm, partial[num_dst:], send_counts, recv_counts, CATEGORY, wire_dtype)
        return partial[:num_dst].index_add(0, recv_index, received)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None, None, None, None]:
        (recv_index,) = ctx.saved_tensors
        # Collective: the gradient of every row received, back to its sender's reference row.
        grad_reference = exchange(ctx.comm, grad.index_select(0, recv_index), ctx.recv_counts, ctx.send_counts,
                                  CATEGORY, ctx.wire_dtype)
        return torch.cat([grad, grad_reference]), None, None, None, None, None, None


@dataclass(frozen=True, slots=True)
class InputAhead:
    """Layer 0's exchange of the input ``x``, completed ahead of the step (:func:`exchange_input_ahead`).

    Args:
        x: float [num_src, d], the input features it was computed from; a layer whose ``x_src`` is this
            very tensor takes ``out`` (any other input, e.g. after input dropout, is exchanged anew).
        out: ``"partial_sums"``: float [num_dst, d], every owned destination's neighbor sum over the whole
            mini-batch (:meth:`CooperativeBlock.aggregate_sum`); ``"source_features"``: float
            [num_src + num_reference, d], ``x`` then the remote sources' rows (:meth:`CooperativeBlock.gather_sources`).
    """

    x: Tensor
    out: Tensor

    def moved(self, move: Callable[[Tensor], Tensor]) -> "InputAhead":
        """Both tensors with ``move`` applied: a ``move`` that maps the batch's input to one tensor (the copy
        stage's) keeps ``x`` that very tensor, which the layer recognises."""
        return InputAhead(move(self.x), move(self.out))


@dataclass(frozen=True, slots=True, kw_only=True)
class CooperativeBlock:
    """One worker's split of one layer plus the collectives that complete it: what a layer receives in
    place of a :class:`~gnnscale.sampling.block.Block` under split parallelism.

    Args:
        split: this worker's split of the layer (``split.rank == comm.rank``).
        comm: the collectives (every worker runs the same layers in the same order).
        input_ahead: layer 0's exchange of the input features, completed ahead (see
            :func:`exchange_input_ahead`); None: the layer shuffles.
        wire_dtype: the dtype rows travel in (None: as computed; ``torch.bfloat16``: half the bytes,
            widened on arrival, see the module's docstring).
    """

    split: SplitBlock
    comm: Comm
    input_ahead: InputAhead | None = None
    wire_dtype: torch.dtype | None = None
    edge_weight: None = field(default=None, init=False)  # unweighted: see SplitAwareBlock

    def __post_init__(self) -> None:
        if not isinstance(self.split, SplitBlock):
            raise TypeError(f"split: expected a SplitBlock, got {type(self.split).__name__}")
        if not isinstance(self.comm, Comm):
            raise TypeError(f"comm: expected a Comm, got {type(self.comm).__name__}")
        if self.split.rank != self.comm.rank or len(self.split.plan.send_counts) != self.comm.world_size:
            raise ValueError(f"split: built for rank {self.split.rank} of {len(self.split.plan.send_counts)}, "
                             f"but this worker is rank {self.comm.rank} of {self.comm.world_size}")
        split = self.split
        if split.kind == "partial_sums" and sum(split.plan.send_counts) != split.num_rows - split.num_dst:
            raise ValueError(f"split: a partial_sums split sends its reference rows [num_dst, num_rows) = "
                             f"{split.num_rows - split.num_dst} rows, but its plan sends {sum(split.plan.send_counts)}")

    @property
    def num_dst(self) -> int:
        return self.split.num_dst

    @property
    def num_src(self) -> int:
        return self.split.num_src

    @property
    def num_edges(self) -> int:
        return self.split.num_edges

    @property
    def indptr(self) -> Tensor:
        return self.split.indptr

    @property
    def indices(self) -> Tensor:
        return self.split.indices

    def in_degrees(self) -> Tensor:
        return self.split.degrees

    def moved(self, move: Callable[[Tensor], Tensor]) -> "CooperativeBlock":
        """This block with ``move`` applied to every tensor of its split and of its exchange done ahead (what
        the copy stage sends to the training device); the Comm stays: its collectives take the rows wherever
        they are (:func:`exchange`)."""
        ahead = None if self.input_ahead is None else self.input_ahead.moved(move)
        return CooperativeBlock(split=self.split.moved(move), comm=self.comm, input_ahead=ahead,
                                wire_dtype=self.wire_dtype)

    def dst_index(self) -> Tensor:
        """int64 [num_edges]: row of every edge in ``indices`` (the CSC column expanded)."""
        return torch_ops.segment_ids(self.split.indptr, self.split.num_edges)

    def aggregate_sum(self, x_src: Tensor, *, kernels: str = "auto") -> Tensor:
        """[num_src, d] -> [num_dst, d]: each owned destination's neighbor sum over the whole mini-batch,
        summed by ``kernels`` (the layer's: ``"auto"``, ``"numba"`` or ``"torch"``)."""
        split, plan = self.split, self.split.plan
        if split.kind == "partial_sums" and self.exchanged_ahead(x_src):
            return self.input_ahead.out  # completed in the loading stage: no shuffle in the step
        if split.kind == "source_features":
            return _csr_sum(split.indptr, split.indices, split.num_dst, self.gather_sources(x_src), kernels)
        # owned rows, then reference rows
        partial = _csr_sum(split.indptr, split.indices, split.num_rows, x_src, kernels)
        if torch.is_grad_enabled() and partial.requires_grad:
            return PartialSums.apply(partial, self.comm, split.num_dst, plan.recv_index, plan.send_counts,
                                     plan.recv_counts, self.wire_dtype)
        return self._complete(partial, CATEGORY)

    def _complete(self, partial: Tensor, category: str) -> Tensor:
        """Partial sums without gradient (layer 0 sums input features; inference) -> the owned
        destinations' complete sums: the received rows are added in place, no copy."""
        split, plan = self.split, self.split.plan
        # Collective: the reference rows (contiguous, grouped by owner) to their owners.
        received = exchange(self.comm, partial[split.num_dst:], plan.send_counts, plan.recv_counts, category,
                            self.wire_dtype)
        return partial[: split.num_dst].index_add_(0, plan.recv_index, received)

    def exchanged_ahead(self, x_src: Tensor) -> bool:
        """Whether this layer's exchange of ``x_src`` was completed in the loading stage (no shuffle)."""
        return self.input_ahead is not None and x_src is self.input_ahead.x

    def gather_sources(self, x_src: Tensor) -> Tensor:
        """[num_src, d] -> [num_src + num_reference, d]: ``x_src``, then the remote sources' rows."""
        split, plan = self.split, self.split.plan
        if split.kind != "source_features":
            raise ValueError(f"split: this layer needs the rows of remote sources (GAT), which a split built with "
                             f"kind={split.kind!r} does not exchange; split the mini-batch with "
                             "kind='source_features' (SHUFFLE_FOR_MODEL['gat'])")
        if self.exchanged_ahead(x_src):
            return self.input_ahead.out  # received in the loading stage
        received = Shuffle.apply(x_src.index_select(0, plan.send_index), self.comm, plan.send_counts,
                                 plan.recv_counts, self.wire_dtype)
        return torch.cat([x_src, received])


def exchange_input_ahead(block: CooperativeBlock, x: Tensor, comm: Comm, *, kernels: str = "auto") -> CooperativeBlock:
    """``block`` (layer 0) with its exchange of the input features ``x`` completed now, on ``comm``: the
    loading stage's Comm, so that it runs while the previous mini-batch trains. A ``"partial_sums"``
    split gets its destinations' complete neighbor sums (the same kernel and order as
    :meth:`CooperativeBlock.aggregate_sum` in the step: the same training, bitwise); a
    ``"source_features"`` split gets the remote sources' rows of ``x`` (GAT then transforms them itself).
    Category ``"feature"``: it replaces data parallelism's fetch of remote input features, and the
    training step's ``"shuffle"`` rounds stay those of hidden features. Collective: every worker calls
    it together.

    It runs where ``x`` lives: rows read from the host are summed there (and the result copied to the GPU
    with the batch); rows a GPU cache returned are summed on that GPU, the split's tensors taken there
    first (the copy stage then finds them in place), and only the exchanged rows cross to the host
    when ``comm`` is gloo.

    Args:
        block: this worker's layer-0 split.
        x: float [block.num_src, d], the input features of its sources, on any device; no gradient (an
            exchange done ahead cannot carry one back to ``x``).
        comm: the Comm to exchange on (``comm.rank == block.split.rank``).
        kernels: the model's (``"auto"``, ``"numba"`` or ``"torch"``): the sums done ahead are the ones
            its layer would do. Default ``"auto"``.
    """
    split = block.split
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[0] != split.num_src:
        shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x: expected [num_src={split.num_src}, d] input features, got {shape}")
    if x.requires_grad:
        raise ValueError("x: an exchange done ahead carries no gradient to x; pass features that do not require one")
    split = split.moved(lambda t: t.to(x.device))  # where x is (the identity where it is there already)
    plan = split.plan
    # Checks that comm is this split's worker.
    ahead = CooperativeBlock(split=split, comm=comm, wire_dtype=block.wire_dtype)
    with torch.no_grad():
        if split.kind == "partial_sums":
            out = ahead._complete(_csr_sum(split.indptr, split.indices, split.num_rows, x, kernels), "feature")
        else:
            # Collective: the owned rows that other workers' destinations read, to those workers.
            received = exchange(comm, x.index_select(0, plan.send_index), plan.send_counts, plan.recv_counts,
                                "feature", block.wire_dtype)
            out = torch.cat([x, received])
    return CooperativeBlock(split=split, comm=block.comm, input_ahead=InputAhead(x, out), wire_dtype=block.wire_dtype)


def _csr_sum(indptr: Tensor, indices: Tensor, num_rows: int, x: Tensor, kernels: str) -> Tensor:
    """``out[r] = sum of x[indices[e]]`` over row r's edges: [num_cols, d] -> [num_rows, d]."""
    if resolve_kernels(kernels, x) == "numba":
        # The one-pass numba kernels of whole blocks: forward+backward took 0.65-0.8x the time of torch's
        # CSR product on split-sized layers (1 thread; 4k-60k rows, 5-15 edges each, 100-256 columns).
        return csr_sum(indptr, indices, num_rows, x)
    # The torch path (CUDA tensors, half/bfloat16, or kernels="torch"): gather and index_add.
    return torch_ops.segment_sum(indptr, indices, num_rows, x)


def cooperative_blocks(blocks: Sequence[Block], book: PartitionBook, comm: Comm, *,
                       kind: ShuffleKind = "partial_sums") -> list[CooperativeBlock]:
    """This worker's split of every layer of one mini-batch, ready to replace ``blocks`` in a model.

    Args:
        blocks: the mini-batch, identical on every worker (same seeds, same key, ``sample_blocks``).
        book: node ownership, one part per worker (``book.num_parts == comm.world_size``).
        comm: this worker's collectives.
        kind: ``SHUFFLE_FOR_MODEL[model_name]``.

    No communication: every worker splits the same mini-batch locally.
    """
    check_placement(book, comm.rank, comm)
    return [CooperativeBlock(split=s, comm=comm) for s in split_blocks(blocks, book, comm.rank, kind=kind)]


def split_loss(logits: Tensor, labels: Tensor, global_batch_size: int) -> Tensor:
    """This worker's share of the mini-batch's mean cross-entropy: the sum over its own seeds divided by
    the number of seeds of the whole mini-batch. Summed over workers: the mean loss of the mini-batch.

    Args:
        logits: float [num_owned_seeds, num_classes], the model's output on this worker's split.
        labels: int64 [num_owned_seeds], in the order of the last split's ``dst_ids``.
        global_batch_size: seeds of the whole mini-batch (P x b), > 0.
    """
    if not isinstance(global_batch_size, int) or isinstance(global_batch_size, bool) or global_batch_size <= 0:
        raise ValueError(f"global_batch_size: expected a positive int (seeds of the whole mini-batch), "
                         f"got {global_batch_size!r}")
    if logits.dim() != 2 or labels.shape != (logits.shape[0],):
        raise ValueError(f"labels: expected shape [{logits.shape[0]}] (one per row of logits), got "
                         f"{list(labels.shape)} for logits {list(logits.shape)}")
    return F.cross_entropy(logits, labels, reduction="sum") / global_batch_size
