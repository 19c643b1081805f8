"""The torch-native path: the numba kernels' operations in torch ops, on any device (CUDA included).

Each function here is the twin of a kernel in :mod:`gnnscale.nn.functional` with the same arguments and
the same result up to summation order (tests/nn/test_torch_path.py checks 1e-5, forward and every
gradient). Nothing here leaves the inputs' device: no numpy, no ``.item()``, every new tensor is made
with ``device=`` of its input, and ``repeat_interleave`` is told its output size, so a CUDA step
never waits on the host. Autograd differentiates them; no custom backward.

**Keyed dropout** draws the numba kernels' very masks (:mod:`gnnscale.nn.kernels`): element ``k`` is
kept iff the 32-bit half ``k % 2`` of ``mix64(key + (k // 2 + 1) * GOLDEN)`` is at least
``round(p * 2**32)``, hashed in int64 ops by :mod:`gnnscale.torch_keys`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnscale.torch_keys import GOLDEN64, LOW32, mix64


def dropout_keep(numel: int, key: int, p: float, device: torch.device) -> Tensor:
    """bool [numel]: which elements keyed dropout keeps, the numba kernels' masks bit for bit.

    Element ``k`` reads half ``k % 2`` (low first, as the kernels' little-endian view) of pair
    ``k // 2``'s draw ``mix64(key + (k // 2 + 1) * GOLDEN)``; it is kept iff that 32-bit uniform is at
    least ``min(round(p * 2**32), 2**32 - 1)``. ``key`` is in [0, 2**63), so it is a valid int64.
    """
    threshold = min(int(round(p * 2**32)), 2**32 - 1)
    pairs = torch.arange(1, (numel + 1) // 2 + 1, dtype=torch.int64, device=device)
    draws = mix64(pairs.mul_(GOLDEN64).add_(key))  # [pairs] uint64 bits
    low = (draws & LOW32) >= threshold
    high = ((draws >> 32) & LOW32) >= threshold
    return torch.stack([low, high], dim=1).view(-1)[:numel]


def keyed_dropout(x: Tensor, p: float, key: int, *, relu: bool = False) -> Tensor:
    """:func:`gnnscale.nn.functional.keyed_dropout`'s training-mode twin: ``relu(x)`` (or ``x``) times
    ``1 / (1 - p)`` where kept, else 0. The same masks and, in float32/float64, the same bits.

    Args: x: float tensor of any shape and device (elements numbered in row-major order); p in (0, 1);
    key: int in [0, 2**63); relu: drop non-positive elements too (ReLU fused, as the kernel).
    """
    keep = dropout_keep(x.numel(), key, p, x.device).view(x.shape)
    if relu:
        keep &= x > 0
    # The kernel's scale is 1 / (1 - p) in x's dtype; torch multiplies a float tensor by a Python
    # float in that dtype too, so the kept values are the kernel's bits. where, not a product with
    # the mask: a dropped inf or NaN gives 0, as the kernel's, and so does its gradient.
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


def segment_ids(indptr: Tensor, num_edges: int) -> Tensor:
    """int64 [num_edges]: the row of every edge of CSR offsets ``indptr`` [num_rows + 1]
    (``repeat_interleave(arange(num_rows), indptr.diff())``, its size given: no device sync)."""
    rows = torch.arange(indptr.shape[0] - 1, device=indptr.device)
    return torch.repeat_interleave(rows, indptr.diff(), output_size=num_edges)


def segment_sum(indptr: Tensor, indices: Tensor, num_rows: int, x: Tensor, weight: Tensor | None = None) -> Tensor:
    """``out[r] = sum of x[indices[e]] (* weight[e])`` over row r's edges: the twin of
    :func:`~gnnscale.nn.functional.csr_sum` (and of :func:`~gnnscale.nn.functional.aggregate`'s sum).

    Shapes:
        indptr int64 [num_rows + 1]; indices int64 [num_edges] into [0, n); x float [n, d];
        weight [num_edges] or None -> [num_rows, d]; rows without edges are zeros.
    """
    messages = x.index_select(0, indices)
    if weight is not None:
        messages = messages * weight.to(x.dtype).unsqueeze(1)
    return x.new_zeros(num_rows, x.shape[1]).index_add_(0, segment_ids(indptr, indices.shape[0]), messages)


def softmax_with_self(logit_edge: Tensor, logit_self: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over each destination's in-edges plus its self edge, per head.

    Args:
        logit_edge: [num_edges, H]; logit_self: [num_dst, H]; dst: int64 [num_edges] destination of each edge.

    Returns ``(alpha_edge [num_edges, H], alpha_self [num_dst, H])``; every destination's weights sum to 1.
    Every destination has its self edge, so no segment is empty and the denominator is >= 1.
    """
    index = dst.unsqueeze(1).expand_as(logit_edge)
    # Subtracting the per-destination max keeps exp() finite (the kernel shifts by the same max); it
    # cancels in the ratio, so it is detached (the softmax gradient does not depend on it).
    shift = logit_self.detach().scatter_reduce(0, index, logit_edge.detach(), reduce="amax", include_self=True)
    exp_edge = (logit_edge - shift[dst]).exp()
    exp_self = (logit_self - shift).exp()
    denom = exp_self.index_add(0, dst, exp_edge)
    return exp_edge / denom[dst], exp_self / denom


def softmax_by_destination(logit_edge: Tensor, dst: Tensor, num_dst: int) -> Tensor:
    """Softmax over each destination's in-edges, per head (no self edge): [num_edges, H] -> [num_edges, H].
    A destination without in-edges has no weights to normalise, so no empty segment is ever divided."""
    index = dst.unsqueeze(1).expand_as(logit_edge)
    # The per-destination max, detached as in softmax_with_self; -inf only where no edge reads it.
    shift = logit_edge.new_full((num_dst, logit_edge.shape[1]), float("-inf")).scatter_reduce(
        0, index, logit_edge.detach(), reduce="amax", include_self=True)
    exp_edge = (logit_edge - shift[dst]).exp()
    denom = logit_edge.new_zeros(num_dst, logit_edge.shape[1]).index_add(0, dst, exp_edge)
    return exp_edge / denom[dst]


def attention(indptr: Tensor, indices: Tensor, z: Tensor, score_src: Tensor, score_dst: Tensor, *,
              negative_slope: float, dropout: float, key: int, self_edge: bool = True) -> Tensor:
    """GAT's attention-weighted sum, the twin of :func:`gnnscale.nn.functional.csr_attention`: per head,
    ``alpha = softmax(LeakyReLU(score_src[j] + score_dst[i]))`` over ``N(i) ∪ {i}`` (``self_edge``) or
    ``N(i)``, keyed dropout on ``alpha`` (element ids as the kernel's: edge ``e``, head ``h`` is
    ``e * H + h``, then the self edges), ``out_i = sum alpha_ij z_j``. Messages are gathered per edge
    ([num_edges, H, C]) and summed with ``index_add``; without the self edge a destination without
    in-edges is 0.

    Shapes:
        indptr int64 [num_dst + 1]; indices int64 [num_edges] into [0, num_src); z float [num_src, H, C];
        score_src [num_src, H]; score_dst [num_dst, H] -> [num_dst, H, C].
    """
    num_dst, num_edges = score_dst.shape[0], indices.shape[0]
    dst = segment_ids(indptr, num_edges)
    leaky = torch.nn.functional.leaky_relu
    logit_edge = leaky(score_src.index_select(0, indices) + score_dst.index_select(0, dst), negative_slope)
    if self_edge:
        logit_self = leaky(score_src[:num_dst] + score_dst, negative_slope)
        alpha_edge, alpha_self = softmax_with_self(logit_edge, logit_self, dst)
        if dropout > 0:
            # Edges, then self edges, as one [E + num_dst, H] tensor: the element ids the kernel drops.
            dropped = keyed_dropout(torch.cat([alpha_edge, alpha_self]), dropout, key)
            alpha_edge, alpha_self = dropped[:num_edges], dropped[num_edges:]
        start = alpha_self.unsqueeze(-1) * z[:num_dst]
    else:
        alpha_edge = softmax_by_destination(logit_edge, dst, num_dst)
        if dropout > 0:
            alpha_edge = keyed_dropout(alpha_edge, dropout, key)
        start = z.new_zeros(num_dst, z.shape[1], z.shape[2])
    messages = alpha_edge.unsqueeze(-1) * z.index_select(0, indices)  # [E, H, C]
    return start.index_add(0, dst, messages)
