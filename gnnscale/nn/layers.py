"""GNN layers over one :class:`~gnnscale.sampling.block.Block`: SAGE (mean), GCN (random-walk norm), GAT.

Every layer maps ``(block, x_src [num_src, in]) -> [num_dst, out]``. The destination features are the
first ``num_dst`` rows of ``x_src`` (the Block convention), so no layer takes a separate ``x_dst``.

Neighbor sums go through :func:`aggregate_sum`. On CPU a ``torch.sparse`` CSR matrix built straight
from the block's ``(indptr, indices)`` beat gathering messages and ``index_add_``: on a block of 100k
edges, 60k sources, 10k destinations and 100-256 dims, 3-13x in the forward pass and 3.5-6x forward
plus backward. The index_add path stays as the reference and as the fallback for dtypes the CPU CSR
kernel lacks (half, bfloat16).
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.nn.cooperative import SplitAwareBlock
from gnnscale.sampling.block import Block

Backend = Literal["auto", "csr", "index_add"]
BACKENDS = ("auto", "csr", "index_add")
_CSR_DTYPES = (torch.float32, torch.float64)


def aggregate_sum(block: Block, x_src: Tensor, *, backend: Backend = "auto") -> Tensor:
    """Sum of in-neighbor features: ``out[i] = sum_{e in in-edges(i)} x_src[indices[e]]``, each term
    times ``block.edge_weight[e]`` when the block carries weights.

    Args:
        block: the message-flow graph.
        x_src: float [num_src, d] source features.
        backend: ``"csr"`` (sparse CSR times dense), ``"index_add"`` (gather + ``index_add_``), or
            ``"auto"`` (CSR for float32/float64, else index_add). Both give the same result.

    Shapes:
        x_src [num_src, d] -> [num_dst, d]; destinations without in-edges get zeros.
    """
    if isinstance(block, SplitAwareBlock):  # split parallelism: sums over edges crossing workers
        return block.aggregate_sum(x_src)
    if backend == "auto":
        backend = "csr" if x_src.dtype in _CSR_DTYPES else "index_add"
    weight = block.edge_weight
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
    if backend == "index_add":
        out = x_src.new_zeros(block.num_dst, x_src.shape[1])
        messages = x_src[block.indices]
        if weight is not None:
            messages = messages * weight.to(x_src.dtype).unsqueeze(1)
        return out.index_add_(0, block.dst_index(), messages)
    raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


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
    return block.gather_sources(x_src) if isinstance(block, SplitAwareBlock) else x_src


def _in_degrees(block: Block, like: Tensor) -> Tensor:
    """Sampled in-degrees as a [num_dst, 1] column in ``like``'s dtype, for row scaling."""
    return block.in_degrees().to(like.dtype).unsqueeze(1)


class SAGEConv(nn.Module):
    """GraphSAGE layer, mean aggregator: ``out_i = lin_l(mean_{j in N_s(i)} x_j) + lin_r(x_i)``.

    Same parameters as PyG's ``SAGEConv(aggr="mean")``: ``lin_l`` (with bias) on the neighbor mean,
    ``lin_r`` (no bias) on the node itself. A destination with no sampled neighbor aggregates to zero.
    The mean is taken before ``lin_l``: a block has many more sources than destinations, so the
    matrix product runs on ``num_dst`` rows instead of ``num_src``. A block with ``edge_weight``
    (LADIES, rows summing to one) replaces the mean by the weighted sum.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        bias: add a learnable bias (in ``lin_l``). Default True.
        backend: aggregation backend, see :func:`aggregate_sum`. Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, *, backend: Backend = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.backend = in_dim, out_dim, backend
        self.lin_l = nn.Linear(in_dim, out_dim, bias=bias)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block: Block, x_src: Tensor) -> Tensor:
        check_input(block, x_src, self.in_dim)
        neigh_sum = aggregate_sum(block, x_src, backend=self.backend)
        if block.edge_weight is None:
            neigh_mean = neigh_sum / _in_degrees(block, neigh_sum).clamp(min=1)
        else:  # row-normalised weights (LADIES): the weighted sum is the neighbor mean's estimate
            neigh_mean = neigh_sum
        return self.lin_l(neigh_mean) + self.lin_r(x_src[: block.num_dst])

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, backend={self.backend!r}"


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

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, *, backend: Backend = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.backend = in_dim, out_dim, backend
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None

    def forward(self, block: Block, x_src: Tensor) -> Tensor:
        check_input(block, x_src, self.in_dim)
        if block.edge_weight is None:
            # The self term is x_src[:num_dst] (x_dst); the "+1" in the degree counts it.
            total = aggregate_sum(block, x_src, backend=self.backend) + x_src[: block.num_dst]
            out = self.lin(total / (_in_degrees(block, total) + 1))
        else:  # weighted blocks (LADIES) carry the whole normalised operator, self loops included
            out = self.lin(aggregate_sum(block, x_src, backend=self.backend))
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, backend={self.backend!r}"


class GATConv(nn.Module):
    """Graph attention layer (Velickovic et al.) over ``N_s(i) ∪ {i}``.

    ``z = W x`` with one weight shared by sources and destinations (as in the paper), per head
    ``e_ij = LeakyReLU(a_src . z_j + a_dst . z_i)``, ``alpha_ij = softmax_j(e_ij)`` over the incoming
    edges of ``i`` plus a self edge ``i -> i`` (``x_i`` is ``x_src[i]`` by the Block convention), and
    ``out_i = sum_j alpha_ij z_j``; heads are concatenated or averaged, then the bias is added.

    Attention weights are per edge and per head and need gradients, so messages are gathered and
    summed with ``index_add_``: the CSR kernel has one value per edge, and its gradient for the values
    came back with the wrong length when a row repeats a source (sampling with replacement).

    Args:
        in_dim: input feature size.
        out_dim: feature size per head.
        heads: number of attention heads. Default 1.
        concat: concatenate heads (output ``heads * out_dim``) or average them (``out_dim``). Default True.
        negative_slope: LeakyReLU slope. Default 0.2.
        attn_dropout: dropout on the normalised attention weights during training. Default 0.0.
        bias: add a learnable bias. Default True.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, heads * out_dim] (concat) or [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, attn_dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout: expected a probability in [0, 1), got {attn_dropout}")
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

    def forward(self, block: Block, x_src: Tensor) -> Tensor:
        check_input(block, x_src, self.in_dim)
        if block.edge_weight is not None:
            raise ValueError("block: GATConv computes its own edge weights (attention) and cannot use a block's "
                             "edge_weight (LADIES blocks); train GAT with --sampler fused or matrix")
        nd, H, C = block.num_dst, self.heads, self.out_dim
        z = gather_sources(block, self.lin(x_src)).view(-1, H, C)  # [num_src (+ remote), H, C]
        score_src = (z * self.att_src).sum(-1)                   # [num_src, H]
        score_dst = (z[:nd] * self.att_dst).sum(-1)              # [num_dst, H]
        src, dst = block.indices, block.dst_index()
        logit_edge = F.leaky_relu(score_src[src] + score_dst[dst], self.negative_slope)  # [E, H]
        logit_self = F.leaky_relu(score_src[:nd] + score_dst, self.negative_slope)      # [num_dst, H]
        alpha_edge, alpha_self = _softmax_with_self(logit_edge, logit_self, dst)
        if self.training and self.attn_dropout > 0:
            alpha_edge = F.dropout(alpha_edge, self.attn_dropout, training=True)
            alpha_self = F.dropout(alpha_self, self.attn_dropout, training=True)
        messages = (alpha_edge.unsqueeze(-1) * z[src]).view(-1, H * C)
        out = (alpha_self.unsqueeze(-1) * z[:nd]).view(nd, H * C).index_add(0, dst, messages)
        out = out.view(nd, H * C) if self.concat else out.view(nd, H, C).mean(dim=1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}"


def _softmax_with_self(logit_edge: Tensor, logit_self: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over each destination's in-edges plus its self edge, per head.

    Args:
        logit_edge: [num_edges, H]; logit_self: [num_dst, H]; dst: int64 [num_edges] destination of each edge.

    Returns ``(alpha_edge [num_edges, H], alpha_self [num_dst, H])``; every destination's weights sum to 1.
    Every destination has its self edge, so no segment is empty and the denominator is >= 1.
    """
    index = dst.unsqueeze(1).expand_as(logit_edge)
    # Subtracting the per-destination max keeps exp() finite; it cancels in the ratio, so it is detached
    # (the softmax gradient does not depend on it).
    shift = logit_self.detach().scatter_reduce(0, index, logit_edge.detach(), reduce="amax", include_self=True)
    exp_edge = (logit_edge - shift[dst]).exp()
    exp_self = (logit_self - shift).exp()
    denom = exp_self.index_add(0, dst, exp_edge)
    return exp_edge / denom[dst], exp_self / denom
