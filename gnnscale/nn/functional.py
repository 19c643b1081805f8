"""Autograd functions over the numba kernels of :mod:`gnnscale.nn.kernels`: keyed dropout and aggregation.

Both write every output element exactly once into ``torch.empty`` buffers and keep for the backward
pass only what it reads (a one-byte mask; the block's structure), so the step does no zero-fills and
no copies beyond the products themselves.

Kernels by device: the numba kernels take float32/float64 CPU tensors; :mod:`gnnscale.nn.torch_ops`
holds their torch-native twins, which run on any device. ``kernels="auto"`` (:func:`resolve_kernels`)
picks numba where it can and torch elsewhere (CUDA tensors, half precision); ``"torch"`` forces the
twins on the CPU too, which is how CI tests them against numba.

Under CPU autocast (``--precision bf16-mixed``) a layer's products come out in half precision; the numba
kernels take those too, widened to float32 at the kernel boundary (:func:`kernel_input`), and return
float32, which the next product casts back. Chosen over the torch path on the half tensors by speed (1
thread, products-shaped batches, GraphSAGE, forward and backward): a bfloat16 step took 91-98 ms against
127-136 ms, keyed dropout alone 23-25 ms against 78-90 ms on 24k x 128 rows, the aggregation about the
same; and the sums add in float32.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

from gnnscale.keys import GOLDEN, MASK64, mix64_py
from gnnscale.nn import attention_kernels, kernels, torch_ops
from gnnscale.sampling.block import Block

NORMS = {"sum": kernels.NORM_SUM, "mean": kernels.NORM_MEAN, "gcn": kernels.NORM_GCN}
SELF_MODES = {None: kernels.SELF_NONE, "concat": kernels.SELF_CONCAT, "add": kernels.SELF_ADD}
KERNEL_DTYPES = (torch.float32, torch.float64)
HALF_DTYPES = (torch.bfloat16, torch.float16)
KERNELS = ("auto", "numba", "torch")


def kernels_take(x: Tensor) -> bool:
    """Whether the numba kernels take ``x``: a float32/float64 CPU tensor, or a half-precision one made under
    CPU autocast (widened at the boundary, :func:`kernel_input`)."""
    if x.device.type != "cpu":
        return False
    return x.dtype in KERNEL_DTYPES or (x.dtype in HALF_DTYPES and torch.is_autocast_enabled("cpu"))


def kernel_input(x: Tensor) -> Tensor:
    """``x`` as the numba kernels read it: a half-precision tensor (CPU autocast's) widened to float32, a
    differentiable cast whose backward narrows the gradient again; float32/float64 as they are."""
    return x.float() if x.dtype in HALF_DTYPES else x


def resolve_kernels(kernels: str, x: Tensor) -> str:
    """``"numba"`` or ``"torch"``: what ``kernels`` (one of :data:`KERNELS`) stands for on ``x``. ``"auto"``
    is numba for what the kernels take (:func:`kernels_take`: float32/float64 CPU tensors, half ones under
    CPU autocast) and torch for anything else (CUDA tensors, half precision outside autocast); ``"numba"``
    on a tensor the kernels cannot take is a TypeError, not a silent fallback."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels: expected one of {KERNELS}, got {kernels!r}")
    fits = kernels_take(x)
    if kernels == "numba" and not fits:
        raise TypeError(f"kernels: the numba kernels take float32/float64 CPU tensors (half ones under CPU autocast), "
                        f"got {x.dtype} on {x.device}; use kernels='torch' or 'auto'")
    if kernels == "auto":
        return "numba" if fits else "torch"
    return kernels


def site_key(key: int, site: int) -> int:
    """The key of one dropout site (a layer's output, the input, a layer's attention weights) under a
    step's dropout key: independent streams per site, a pure function of ``(key, site)``. 63 bits, like
    every key here, so that it is also a valid int64."""
    return mix64_py((int(key) + (int(site) + 1) * GOLDEN) & MASK64) >> 1


def check_dropout_key(key) -> int:
    """Validate a step's dropout key; ``None`` draws one from torch's global generator (so code that
    seeds torch with ``torch.manual_seed`` and calls ``model(blocks, x)`` stays reproducible)."""
    if key is None:
        return int(torch.randint(2**63 - 1, ()))
    if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
        raise TypeError(f"dropout_key: expected an int, got {type(key).__name__}")
    if not 0 <= key < 2**63:
        raise ValueError(f"dropout_key: expected an int in [0, 2**63), got {key!r}")
    return int(key)


def _threshold(p: float) -> np.uint32:
    """An element is dropped when its 32-bit uniform is below this: P(drop) = p to within 2**-32
    (p < 1, so the threshold fits 32 bits)."""
    return np.uint32(min(int(round(p * 2**32)), 2**32 - 1))


def _as_dtype(value: float, dtype: torch.dtype):
    """``value`` as a numpy scalar of ``dtype``, so that the kernels scale in the features' precision."""
    return np.float32(value) if dtype == torch.float32 else np.float64(value)


class _KeyedDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, p: float, key: int, relu: bool) -> Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        mask = torch.empty(x.shape, dtype=torch.uint8)
        scale = _as_dtype(1.0 / (1.0 - p), x.dtype)
        kernels.dropout_forward(x.detach().view(-1).numpy(), out.view(-1).numpy(), mask.view(-1).numpy(),
                                np.uint64(key), _threshold(p), scale, relu)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        kernels.dropout_backward(grad.view(-1).numpy(), mask.view(-1).numpy(), ctx.scale, out.view(-1).numpy())
        return out, None, None, None


def keyed_dropout(x: Tensor, p: float, key: int, *, relu: bool = False, training: bool = True,
                  kernels: str = "auto") -> Tensor:
    """Dropout (optionally after ReLU) whose mask is a pure function of ``key`` and the element index.

    Equals ``F.dropout(F.relu(x) if relu else x, p)`` in distribution; the mask does not depend on
    the thread count, nor on the kernels or the device: numba's and torch's masks are the same bits.
    Eval mode or ``p == 0``: no mask, ``relu(x)`` or ``x`` itself.

    Args:
        x: float tensor, any device.
        p: drop probability in [0, 1).
        key: int in [0, 2**63): one per step and dropout site (see :func:`site_key`).
        relu: apply max(x, 0) first (one pass instead of two).
        training: False turns dropout off.
        kernels: ``"auto"`` (numba for float32/float64 CPU tensors, else torch), ``"numba"`` or ``"torch"``
            (:func:`resolve_kernels`). Default ``"auto"``.
    """
    path = resolve_kernels(kernels, x)
    if not training or p == 0.0:
        return torch.relu(x) if relu else x
    if path == "torch":
        return torch_ops.keyed_dropout(x, float(p), int(key), relu=bool(relu))
    return _KeyedDropout.apply(kernel_input(x), float(p), int(key), bool(relu))


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, indptr: Tensor, indices: Tensor, num_dst: int, norm: int, self_mode: int) -> Tensor:
        x = x.contiguous()
        width = x.shape[1]
        out_width = 2 * width if self_mode == kernels.SELF_CONCAT else width
        if self_mode == kernels.SELF_ADD:
            out_width = width // 2
        out = x.new_empty(num_dst, out_width)
        bad = kernels.aggregate_forward(indptr.numpy(), indices.numpy(), x.detach().numpy(), out.numpy(), norm,
                                        self_mode)
        if bad:
            raise ValueError(f"block: {bad} edges have a source id outside [0, num_src={x.shape[0]})")
        ctx.save_for_backward(indptr, indices)
        ctx.meta = (x.shape, norm, self_mode)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        indptr, indices = ctx.saved_tensors
        x_shape, norm, self_mode = ctx.meta
        t_indptr, t_dst, _ = kernels.transpose_block(indptr.numpy(), indices.numpy(), x_shape[0])
        grad_x = grad.new_empty(x_shape)
        kernels.aggregate_backward(indptr.numpy(), t_indptr, t_dst, grad.contiguous().numpy(), grad_x.numpy(),
                                   norm, self_mode)
        return grad_x, None, None, None, None, None


def aggregate(block: Block, x_src: Tensor, *, norm: str = "sum", self_mode: str | None = None) -> Tensor:
    """Scaled neighbor sums with the destination's own row, in one pass (numba, float32/float64, CPU).

    ``h_i = w_i * (sum_{e in in-edges(i)} x_src[src(e)] (+ x_src[i] when norm="gcn"))`` with
    ``w_i`` = 1 (``"sum"``), 1 / max(deg_i, 1) (``"mean"``) or 1 / (deg_i + 1) (``"gcn"``); then
    ``self_mode`` None: ``h``; ``"concat"``: ``[h_i | x_src[i]]``; ``"add"``: ``x_src`` holds two
    halves ``[a | b]``, the sum runs over ``a`` and ``b[i]`` is added.

    Shapes:
        x_src [num_src, C] -> [num_dst, C] (None), [num_dst, 2C] ("concat"); [num_src, 2C] -> [num_dst, C] ("add").
    """
    if norm not in NORMS:
        raise ValueError(f"norm: expected one of {tuple(NORMS)}, got {norm!r}")
    if self_mode not in SELF_MODES:
        raise ValueError(f"self_mode: expected one of {tuple(SELF_MODES)}, got {self_mode!r}")
    if not kernels_take(x_src):
        raise TypeError(f"x_src: the numba aggregation takes float32/float64 CPU tensors (half ones under CPU "
                        f"autocast), got {x_src.dtype} on {x_src.device}")
    if self_mode == "add" and x_src.shape[1] % 2:
        raise ValueError(f"x_src: self_mode='add' needs an even number of columns, got {x_src.shape[1]}")
    return _Aggregate.apply(kernel_input(x_src), block.indptr, block.indices, block.num_dst, NORMS[norm],
                            SELF_MODES[self_mode])


def csr_sum(indptr: Tensor, indices: Tensor, num_rows: int, x: Tensor, *, norm: str = "sum") -> Tensor:
    """``out[r] = w_r * sum of x[indices[e]]`` over row r's edges (numba, float32/float64, CPU), for row
    sets that are not a Block's destinations: a split's owned and reference rows (split parallelism), whose
    count may exceed ``x``'s rows, or one relation's destinations in a typed block. ``norm``: ``"sum"``
    (w_r = 1) or ``"mean"`` (w_r = 1 / max(deg_r, 1): a row without edges is 0). The backward is the same
    one-pass kernel as :func:`aggregate`'s.

    Shapes:
        indptr int64 [num_rows + 1], indices int64 [num_edges] into [0, x.shape[0]); x [n, d] -> [num_rows, d].
    """
    if norm not in ("sum", "mean"):
        raise ValueError(f"norm: expected 'sum' or 'mean', got {norm!r}")
    if not kernels_take(x):
        raise TypeError(f"x: the numba aggregation takes float32/float64 CPU tensors (half ones under CPU autocast), "
                        f"got {x.dtype} on {x.device}")
    return _Aggregate.apply(kernel_input(x), indptr, indices, num_rows, NORMS[norm], kernels.SELF_NONE)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: Tensor, score_src: Tensor, score_dst: Tensor, indptr: Tensor, indices: Tensor,
                slope: float, p: float, key: int, self_edge: bool) -> Tensor:
        z, score_src, score_dst = z.contiguous(), score_src.contiguous(), score_dst.contiguous()
        (_, heads, width), num_dst, num_edges = z.shape, score_dst.shape[0], indices.shape[0]
        out = z.new_empty(num_dst, heads, width)
        alpha, alpha_self = z.new_empty(num_edges, heads), z.new_empty(num_dst, heads)
        mask = torch.empty(num_edges, heads, dtype=torch.uint8)
        mask_self = torch.empty(num_dst, heads, dtype=torch.uint8)
        scale = _as_dtype(1.0 / (1.0 - p), z.dtype)
        threshold = _threshold(p) if p > 0 else np.uint32(0)
        attention_kernels.attention_forward(
            indptr.numpy(), indices.numpy(), z.detach().numpy(), score_src.detach().numpy(),
            score_dst.detach().numpy(), _as_dtype(slope, z.dtype), np.uint64(key), threshold, scale, out.numpy(),
            alpha.numpy(), alpha_self.numpy(), mask.numpy(), mask_self.numpy(), self_edge)
        ctx.save_for_backward(z, score_src, score_dst, indptr, indices, alpha, alpha_self, mask, mask_self)
        ctx.constants = (slope, scale, self_edge)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        z, score_src, score_dst, indptr, indices, alpha, alpha_self, mask, mask_self = ctx.saved_tensors
        slope, scale, self_edge = ctx.constants
        grad = grad.contiguous()
        grad_logit, grad_logit_self = torch.empty_like(alpha), torch.empty_like(alpha_self)
        grad_score_dst = torch.empty_like(score_dst)
        attention_kernels.attention_backward_dst(
            indptr.numpy(), indices.numpy(), z.numpy(), score_src.numpy(), score_dst.numpy(),
            _as_dtype(slope, z.dtype), scale, alpha.numpy(), alpha_self.numpy(), mask.numpy(), mask_self.numpy(),
            grad.numpy(), grad_logit.numpy(), grad_logit_self.numpy(), grad_score_dst.numpy(), self_edge)
        t_indptr, t_dst, t_edge = kernels.transpose_block(indptr.numpy(), indices.numpy(), z.shape[0])
        grad_z, grad_score_src = torch.empty_like(z), torch.empty_like(score_src)
        attention_kernels.attention_backward_src(
            t_indptr, t_dst, t_edge, scale, alpha.numpy(), alpha_self.numpy(), mask.numpy(), mask_self.numpy(),
            grad.numpy(), grad_logit.numpy(), grad_logit_self.numpy(), grad_z.numpy(), grad_score_src.numpy(),
            self_edge)
        return grad_z, grad_score_src, grad_score_dst, None, None, None, None, None, None


def attention(block: Block, z: Tensor, score_src: Tensor, score_dst: Tensor, *, negative_slope: float = 0.2,
              dropout: float = 0.0, key: int = 0) -> Tensor:
    """GAT's attention-weighted sum over each destination's in-edges and self edge, in one pass (numba).

    ``alpha_ij = softmax_j(LeakyReLU(score_src[j] + score_dst[i]))`` per head over ``N(i) ∪ {i}``,
    dropped out with probability ``dropout`` (keyed by ``key``, see :func:`keyed_dropout`), and
    ``out_i = sum_j alpha_ij z_j``. No tensor of size edges x features is materialised.

    Shapes:
        z float [num_src, H, C]; score_src [num_src, H]; score_dst [num_dst, H] -> [num_dst, H, C].
    """
    return csr_attention(block.indptr, block.indices, z, score_src, score_dst, negative_slope=negative_slope,
                         dropout=dropout, key=key)


def csr_attention(indptr: Tensor, indices: Tensor, z: Tensor, score_src: Tensor, score_dst: Tensor, *,
                  negative_slope: float = 0.2, dropout: float = 0.0, key: int = 0, self_edge: bool = True) -> Tensor:
    """:func:`attention` over CSC offsets of any row set: ``indptr`` [num_dst + 1] over the destinations,
    ``indices`` into the rows of ``z``. With ``self_edge`` (a Block: destination ``i`` is source ``i``) the
    softmax runs over ``N(i) ∪ {i}``; without it (one relation of a typed block, whose destinations are
    not rows of ``z``) over ``N(i)`` only, and a destination without in-edges gets 0. The twin of
    :func:`gnnscale.nn.torch_ops.attention`; dropout element ids as there.

    Shapes:
        z float [num_src, H, C]; score_src [num_src, H]; score_dst [num_dst, H] -> [num_dst, H, C].
    """
    if not kernels_take(z):
        raise TypeError(f"z: the numba attention takes float32/float64 CPU tensors (half ones under CPU autocast), "
                        f"got {z.dtype} on {z.device}")
    num_src, heads, num_dst = z.shape[0], z.shape[1], indptr.shape[0] - 1
    if score_src.shape != (num_src, heads) or score_dst.shape != (num_dst, heads):
        raise ValueError(f"score_src, score_dst: expected [{num_src}, {heads}] and [{num_dst}, {heads}], "
                         f"got {list(score_src.shape)} and {list(score_dst.shape)}")
    if self_edge and num_dst > num_src:
        raise ValueError(f"z: a self edge reads destination i's row of z, but z has {num_src} rows for "
                         f"{num_dst} destinations")
    if indices.shape[0] and (int(indices.min()) < 0 or int(indices.max()) >= num_src):
        raise ValueError(f"block: edges have a source id outside [0, num_src={num_src})")
    return _Attention.apply(kernel_input(z), kernel_input(score_src), kernel_input(score_dst), indptr, indices,
                            float(negative_slope), float(dropout), int(key), bool(self_edge))


def transform_first_is_cheaper(block: Block, in_dim: int, out_dim: int, *, self_width: int = 1) -> bool:
    """Whether transforming every source before aggregating costs fewer multiply-adds than aggregating
    first and transforming the destinations.

    Aggregate first: ``E * in`` (sums) + ``D * (self_width * in) * out`` (product).
    Transform first: ``S * in * (self_width * out)`` (product over all sources) + ``E * out`` (sums).
    ``self_width`` is 2 for GraphSAGE (its root weight rides along in the same product), else 1.
    Sampled blocks have many more sources than destinations, so aggregate-first wins there; transform-first
    wins when sources and destinations nearly coincide and edges are many (full neighborhoods, ``out < in``).
    """
    if not isinstance(self_width, numbers.Integral) or self_width < 1:
        raise ValueError(f"self_width: expected an int >= 1, got {self_width!r}")
    e, s, d = block.num_edges, block.num_src, block.num_dst
    aggregate_first = e * in_dim + d * self_width * in_dim * out_dim
    transform_first = s * in_dim * self_width * out_dim + e * out_dim
    return transform_first < aggregate_first
