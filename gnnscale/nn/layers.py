"""GNN layers over one :class:`~gnnscale.sampling.block.Block`: SAGE (mean), GCN (random-walk norm), GAT.

Every layer maps ``(block, x_src [num_src, in]) -> [num_dst, out]``. The destination features are the
first ``num_dst`` rows of ``x_src`` (the Block convention), so no layer takes a separate ``x_dst``.

Backends. ``"numba"`` (the default for float32/float64 on CPU) aggregates with the one-pass kernels of
:mod:`gnnscale.nn.functional`: GraphSAGE and GCN scale, sum and attach the destination's own row in
one pass, and their backward writes each source's gradient once (no zero-filled slice gradient, no
separate add). ``"torch"`` is the torch-native path of :mod:`gnnscale.nn.torch_ops`, which runs on
any device: segment sums with ``index_add`` (``"index_add"`` is the same path under its older name),
GAT's softmax by destination, the same keyed dropout masks. ``"auto"`` is numba for float32/float64
CPU tensors and torch for anything else (CUDA tensors, half, bfloat16). ``"csr"`` (a ``torch.sparse``
CSR matrix straight from the block's ``(indptr, indices)``) is a second torch reference for SAGE and
GCN. Two kinds of block take other paths (:func:`uses_kernels`): a split block
(:class:`~gnnscale.nn.cooperative.SplitAwareBlock`, split parallelism), whose edges cross workers and
which SAGE and GCN aggregate through its own hook (with the layer's kernels), while GAT runs its
attention on the split's edges over the gathered sources; and a block with ``edge_weight`` (LADIES),
which the numba kernels have no weights for (weighted sums: the CSR product, or ``index_add`` on the
torch path).

Order. GraphSAGE and GCN are linear before their nonlinearity, so ``W (A x)`` = ``A (W x)``: they
aggregate first (sums over ``in`` columns, product over the destinations) or transform first (product
over every source, sums over ``out`` columns), whichever costs fewer multiply-adds for the block's
shape (:func:`~gnnscale.nn.functional.transform_first_is_cheaper`); ``order=`` forces one.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.nn import torch_ops
from gnnscale.nn.cooperative import SplitAwareBlock
from gnnscale.nn.functional import (aggregate, attention, check_dropout_key, resolve_kernels, site_key,
                                    transform_first_is_cheaper)
from gnnscale.sampling.block import Block

Backend = Literal["auto", "numba", "torch", "csr", "index_add"]
BACKENDS = ("auto", "numba", "torch", "csr", "index_add")
Order = Literal["auto", "aggregate_first", "transform_first"]
ORDERS = ("auto", "aggregate_first", "transform_first")
GAT_BACKENDS = ("auto", "numba", "torch", "index_add")  # no CSR product: see GATConv


def resolve_backend(backend: Backend, x: Tensor) -> str:
    """The aggregation ``backend`` stands for on ``x``: ``"numba"``, ``"csr"`` or ``"index_add"`` (the
    torch path's segment sums: ``"torch"``, and ``"auto"`` on anything but a float32/float64 CPU tensor)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend in ("csr", "index_add"):
        return backend
    return "numba" if resolve_kernels(backend, x) == "numba" else "index_add"


def kernels_of(backend: Backend) -> str:
    """The :data:`~gnnscale.nn.functional.KERNELS` value of a layer's ``backend``: what a split block's
    hook and keyed dropout run (``"csr"`` and ``"index_add"`` are torch paths)."""
    return backend if backend in ("auto", "numba") else "torch"


def uses_kernels(backend: Backend, block: Block | SplitAwareBlock, x: Tensor) -> bool:
    """Whether SAGE and GCN take their numba path: the numba backend on a whole, unweighted block. A
    split block aggregates through its own hook (its edges cross workers) and a weighted block (LADIES)
    through the torch reference, which the kernels do not replace (they have no per-edge weight). GAT
    refuses weighted blocks and runs its attention kernel on split blocks too."""
    return (resolve_backend(backend, x) == "numba" and not is_split(block)
            and block.edge_weight is None)


def is_split(block: Block | SplitAwareBlock) -> bool:
    """Whether ``block`` is a worker's split of a layer. A whole :class:`Block` answers at once: an
    ``isinstance`` against the runtime-checkable protocol inspects its members (about 15 us a call), and
    a layer asks several times per forward."""
    return not isinstance(block, Block) and isinstance(block, SplitAwareBlock)


def _check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
    return order


def aggregate_sum(block: Block, x_src: Tensor, *, backend: Backend = "auto") -> Tensor:
    """Sum of in-neighbor features: ``out[i] = sum_{e in in-edges(i)} x_src[indices[e]]``, each term
    times ``block.edge_weight[e]`` when the block carries weights.

    Args:
        block: the message-flow graph.
        x_src: float [num_src, d] source features.
        backend: ``"numba"`` (one pass per destination row), ``"csr"`` (sparse CSR times dense),
            ``"torch"`` or ``"index_add"`` (gather + ``index_add_``, any device), or ``"auto"`` (numba for
            float32/float64 on CPU, else the torch path). All give the same result; a weighted block takes
            ``"csr"`` for ``"numba"`` and a split block its own ``aggregate_sum`` with these kernels.

    Shapes:
        x_src [num_src, d] -> [num_dst, d]; destinations without in-edges get zeros.
    """
    if is_split(block):  # split parallelism: sums over edges crossing workers
        return block.aggregate_sum(x_src, kernels=kernels_of(backend))
    backend = resolve_backend(backend, x_src)
    weight = block.edge_weight
    if backend == "numba":
        if weight is None:
            return aggregate(block, x_src, norm="sum")
        backend = "csr"  # the kernels have no per-edge weight: weighted blocks take torch's CSR product
    if backend == "csr":
        if weight is None:
            values = torch.ones(block.num_edges, dtype=x_src.dtype, device=x_src.device)
        else:
            values = weight.to(x_src.dtype)
        with warnings.catch_warnings():
            # torch warns once per process that CSR support is "beta"; sparse @ dense is all we use.
            warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
            adj = torch.sparse_csr_tensor(block.indptr, block.indices, values, (block.num_dst, block.num_src),
                                          check_invariants=False)
        return adj @ x_src
    return torch_ops.segment_sum(block.indptr, block.indices, block.num_dst, x_src, weight)


def check_input(block: Block, x_src: Tensor, in_dim: int) -> None:
    """Raise ``ValueError`` naming ``x_src`` unless it is [block.num_src, in_dim]."""
    if not isinstance(block, (Block, SplitAwareBlock)):
        raise TypeError(f"block: expected a Block or a SplitAwareBlock, got {type(block).__name__}")
    if x_src.dim() != 2 or x_src.shape[0] != block.num_src or x_src.shape[1] != in_dim:
        raise ValueError(f"x_src: expected shape [num_src={block.num_src}, in_dim={in_dim}], "
                         f"got {list(x_src.shape)}")


def gather_sources(block: Block | SplitAwareBlock, x_src: Tensor) -> Tensor:
    """The rows of every source the block's edges read: ``x_src`` itself, plus for a split block the
    rows of its remote sources (one shuffle, see :class:`~gnnscale.nn.cooperative.SplitAwareBlock`)."""
    return block.gather_sources(x_src) if is_split(block) else x_src


def _in_degrees(block: Block, like: Tensor) -> Tensor:
    """Sampled in-degrees as a [num_dst, 1] column in ``like``'s dtype, for row scaling."""
    return block.in_degrees().to(like.dtype).unsqueeze(1)


class SAGEConv(nn.Module):
    """GraphSAGE layer, mean aggregator: ``out_i = lin_l(mean_{j in N_s(i)} x_j) + lin_r(x_i)``.

    Same parameters as PyG's ``SAGEConv(aggr="mean")``: ``lin_l`` (with bias) on the neighbor mean,
    ``lin_r`` (no bias) on the node itself. A destination with no sampled neighbor aggregates to zero.
    With the numba backend both weights act in one product: aggregate first computes
    ``[mean_i | x_i] @ [W_l | W_r]^T`` over the destinations (a block has many more sources than
    destinations, so this is the usual choice); transform first computes ``x @ [W_l; W_r]^T`` over
    every source and then ``mean(first half) + own second half``. A block with ``edge_weight``
    (LADIES, rows summing to one) replaces the mean by the weighted sum, and a split block
    (:class:`~gnnscale.nn.cooperative.SplitAwareBlock`) aggregates through its hook; both take the
    torch path (mean before ``lin_l``).

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        bias: add a learnable bias (in ``lin_l``). Default True.
        backend: aggregation backend, see :func:`aggregate_sum`. Default ``"auto"``.
        order: ``"auto"`` (the cheaper for each block's shape), ``"aggregate_first"`` or
            ``"transform_first"`` (numba backend only). Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, *, backend: Backend = "auto",
                 order: Order = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.backend, self.order = in_dim, out_dim, backend, _check_order(order)
        self.lin_l = nn.Linear(in_dim, out_dim, bias=bias)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block: Block, x_src: Tensor) -> Tensor:
        check_input(block, x_src, self.in_dim)
        if not uses_kernels(self.backend, block, x_src):
            neigh_sum = aggregate_sum(block, x_src, backend=self.backend)
            if block.edge_weight is None:
                neigh_mean = neigh_sum / _in_degrees(block, neigh_sum).clamp(min=1)
            else:  # row-normalised weights (LADIES): the weighted sum is the neighbor mean's estimate
                neigh_mean = neigh_sum
            return self.lin_l(neigh_mean) + self.lin_r(x_src[: block.num_dst])
        if _transform_first(self.order, block, self.in_dim, self.out_dim, self_width=2):
            z = F.linear(x_src, torch.cat([self.lin_l.weight, self.lin_r.weight], dim=0))  # [num_src, 2 out]
            out = aggregate(block, z, norm="mean", self_mode="add")
            return out if self.lin_l.bias is None else out + self.lin_l.bias
        h = aggregate(block, x_src, norm="mean", self_mode="concat")  # [num_dst, 2 in] = [mean | x_dst]
        return F.linear(h, torch.cat([self.lin_l.weight, self.lin_r.weight], dim=1), self.lin_l.bias)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, backend={self.backend!r}, order={self.order!r}"


def _transform_first(order: str, block: Block, in_dim: int, out_dim: int, *, self_width: int = 1) -> bool:
    if order == "auto":
        return transform_first_is_cheaper(block, in_dim, out_dim, self_width=self_width)
    return order == "transform_first"


class GCNConv(nn.Module):
    """GCN aggregator that stays well defined under sampling (GraphSAGE-GCN, DGL ``aggregator_type="gcn"``).

    ``h_i = W (x_i + sum_{j in N_s(i)} x_j) / (|N_s(i)| + 1) + b``: the random-walk normalised
    ``D~^-1 (A + I)`` over the *sampled* neighborhood. The symmetric norm of Kipf & Welling,
    ``1 / sqrt(deg(i) deg(j))``, needs the degree of every source ``j``; inside a sampled block a source
    only shows the edges that were drawn towards this batch's destinations, so its degree there is
    neither its true degree nor anything the sampler controls. Using the true graph degree instead
    would bias the estimate (a neighbor of degree 1000 seen with fanout 10). The row norm depends only
    on the destination's own sampled neighbors, so it is an unbiased mean over ``N_s(i) ∪ {i}``.
    A block with ``edge_weight`` (LADIES) carries the normalised operator itself, self loops as
    edges: ``h_i = W sum_e w_e x_j + b``.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        bias: add a learnable bias. Default True.
        backend: aggregation backend, see :func:`aggregate_sum`. Default ``"auto"``.
        order: ``"auto"``, ``"aggregate_first"`` or ``"transform_first"``, as :class:`SAGEConv`.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, *, backend: Backend = "auto",
                 order: Order = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.backend, self.order = in_dim, out_dim, backend, _check_order(order)
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None

    def forward(self, block: Block, x_src: Tensor) -> Tensor:
        check_input(block, x_src, self.in_dim)
        if not uses_kernels(self.backend, block, x_src):
            if block.edge_weight is None:
                # The self term is x_src[:num_dst] (x_dst); the "+1" in the degree counts it.
                total = aggregate_sum(block, x_src, backend=self.backend) + x_src[: block.num_dst]
                out = self.lin(total / (_in_degrees(block, total) + 1))
            else:  # weighted blocks (LADIES) carry the whole normalised operator, self loops included
                out = self.lin(aggregate_sum(block, x_src, backend=self.backend))
            return out if self.bias is None else out + self.bias
        if _transform_first(self.order, block, self.in_dim, self.out_dim):
            out = aggregate(block, self.lin(x_src), norm="gcn")
            return out if self.bias is None else out + self.bias
        return F.linear(aggregate(block, x_src, norm="gcn"), self.lin.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, backend={self.backend!r}, order={self.order!r}"


class GATConv(nn.Module):
    """Graph attention layer (Velickovic et al.) over ``N_s(i) ∪ {i}``.

    ``z = W x`` with one weight shared by sources and destinations (as in the paper), per head
    ``e_ij = LeakyReLU(a_src . z_j + a_dst . z_i)``, ``alpha_ij = softmax_j(e_ij)`` over the incoming
    edges of ``i`` plus a self edge ``i -> i`` (``x_i`` is ``x_src[i]`` by the Block convention), and
    ``out_i = sum_j alpha_ij z_j``; heads are concatenated or averaged, then the bias is added.

    Attention dropout draws its masks from a key (:func:`~gnnscale.nn.functional.keyed_dropout`):
    ``forward(..., dropout_key=k)``; without one, a key is drawn from torch's global generator.

    With the numba backend (float32/float64 on CPU) the edge softmax and the weighted sum are one
    kernel per pass (:func:`~gnnscale.nn.functional.attention`): nothing of size edges x features is
    materialised. The torch path (``backend="torch"`` or ``"index_add"``; ``"auto"`` on CUDA and for
    other dtypes, :func:`~gnnscale.nn.torch_ops.attention`) takes the softmax by destination with
    ``scatter_reduce``/``index_add``, gathers messages per edge and sums them with ``index_add``, on any
    device; torch's CSR kernel cannot serve here: it has one value per edge, and its gradient for the
    values came back with the wrong length when a row repeats a source.

    Args:
        in_dim: input feature size.
        out_dim: feature size per head.
        heads: number of attention heads. Default 1.
        concat: concatenate heads (output ``heads * out_dim``) or average them (``out_dim``). Default True.
        negative_slope: LeakyReLU slope. Default 0.2.
        attn_dropout: dropout on the normalised attention weights during training. Default 0.0.
        bias: add a learnable bias. Default True.
        backend: ``"auto"`` (numba for float32/float64 on CPU, else torch), ``"numba"``, ``"torch"`` or
            ``"index_add"`` (the torch path's older name). Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, heads * out_dim] (concat) or [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, attn_dropout: float = 0.0, bias: bool = True, *,
                 backend: Backend = "auto") -> None:
        super().__init__()
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout: expected a probability in [0, 1), got {attn_dropout}")
        if backend not in GAT_BACKENDS:
            raise ValueError(f"backend: expected one of {GAT_BACKENDS}, got {backend!r}")
        self.backend = backend
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.negative_slope, self.attn_dropout = negative_slope, attn_dropout
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        # Glorot bound of a [heads, out_dim] attention vector seen as a (1 x out_dim) weight per head.
        bound = math.sqrt(6.0 / (1 + self.out_dim))
        nn.init.uniform_(self.att_src, -bound, bound)
        nn.init.uniform_(self.att_dst, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, block: Block, x_src: Tensor, *, dropout_key: int | None = None) -> Tensor:
        check_input(block, x_src, self.in_dim)
        if block.edge_weight is not None:
            raise ValueError("block: GATConv computes its own edge weights (attention) and cannot use a block's "
                             "edge_weight (LADIES blocks); train GAT with --sampler fused or matrix")
        nd, H, C = block.num_dst, self.heads, self.out_dim
        p = self.attn_dropout if self.training else 0.0
        key = check_dropout_key(dropout_key) if p > 0 else 0
        # Whole and split blocks alike: a split's edges end at its owned destinations and read the
        # gathered rows (its own sources first, then the remote ones), a block's CSC layout.
        z = self._source_rows(block, x_src)                                      # [num_src (+ remote), H * C]
        # Both scores in one product with block-diagonal [H * C, H] attention vectors: no [S, H, C] temporary.
        scores = z @ torch.cat([block_diagonal(self.att_src), block_diagonal(self.att_dst)], dim=1)
        z, score_src, score_dst = z.view(-1, H, C), scores[:, :H], scores[:nd, H:]
        options = dict(negative_slope=self.negative_slope, dropout=p, key=site_key(key, 0))
        if resolve_backend(self.backend, x_src) == "numba":
            out = attention(block, z, score_src, score_dst, **options)
        else:
            out = torch_ops.attention(block.indptr, block.indices, z, score_src, score_dst, **options)
        out = out.reshape(nd, H * C) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias

    def _source_rows(self, block: Block | SplitAwareBlock, x_src: Tensor) -> Tensor:
        """``W x`` of every source the block's edges read: [num_src (+ remote sources of a split), H * C]."""
        if is_split(block) and block.exchanged_ahead(x_src):
            # Split layer 0: the remote sources' input rows arrived in the loading stage; transforming
            # them here needs no shuffle, where the rows of W x would need one each way.
            return self.lin(block.gather_sources(x_src))
        return gather_sources(block, self.lin(x_src))

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}"


def block_diagonal(att: Tensor) -> Tensor:
    """[H, C] attention vectors as the block-diagonal [H * C, H] matrix whose column h holds ``att[h]``
    in rows h * C .. h * C + C - 1, so that ``z.view(S, H * C) @ it`` is the per-head score ``(z * att).sum(-1)``."""
    return torch.block_diag(*att.unsqueeze(-1).unbind(0))
