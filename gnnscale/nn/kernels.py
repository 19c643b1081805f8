"""numba kernels of the training step: keyed dropout masks and neighbor aggregation over a Block.

**Dropout.** Element ``k`` of a tensor is kept iff a 32-bit uniform drawn from ``(key, k)`` is at
least ``round(p * 2**32)``: the mask is a pure function of the key, so it is the same whatever the
thread count and whichever thread computes it, like sampling (one SplitMix64 output per pair of
elements). ReLU is fused into the same pass, and the mask stored as one byte per element records
"kept and positive", which is all the backward pass needs.

**Aggregation.** ``out[i] = w_i * (sum_{e in in-edges(i)} x[src(e)] (+ x[i] for GCN))``, one
destination row per iteration, summed in edge order (the result does not depend on the thread count).
Every output row is written exactly once, so outputs come from ``torch.empty``: no zero-fill. The
destination's own row can be appended (``SELF_CONCAT``, GraphSAGE's ``[mean | x_i]`` for one matrix
product with ``[W_l | W_r]``) or added from the second half of the columns (``SELF_ADD``, GraphSAGE
transformed first). The backward pass runs over sources on the transposed block (a counting sort, in
edge order), so the gradient of every source row is one sum: no atomics, no zero-filled full-size
gradient for the ``x[:num_dst]`` slice, no separate add of the two paths.
"""

from __future__ import annotations

import numba
import numpy as np

from gnnscale.intrinsics import prefetch
from gnnscale.keys import GOLDEN, mix64

# How each destination's sum is scaled (w_i) and whether its own row is in the sum.
NORM_SUM = 0  # w_i = 1
NORM_MEAN = 1  # w_i = 1 / max(deg_i, 1)  (GraphSAGE mean; no neighbor -> 0)
NORM_GCN = 2  # w_i = 1 / (deg_i + 1), x_i included in the sum (random-walk norm of A + I)
# What happens with the destination's own row besides the neighbor sum.
SELF_NONE = 0
SELF_CONCAT = 1  # x [S, C] -> out [D, 2C] = [w * sum | x_i]
SELF_ADD = 2  # x [S, 2C] -> out [D, C] = w * sum(x[:, :C]) + x_i[C:]

ELEMENTS_PER_PIECE = 1 << 16  # dropout elements per unit of parallel work
HASH_BLOCK = 2048  # dropout elements whose uniforms are drawn together (a 8 KB buffer, stays in L1)
ROW_PREFETCH = 4  # edges ahead whose source row is prefetched (the reads of aggregation are random)

# The loops over a row or a block of elements are small functions of their own (not inlined): inside
# a prange body numba's code did not vectorize, and as separate functions it does (4-9x on dropout).


@numba.njit(cache=True, nogil=True)
def _draw_uniforms(out, key, first_pair):
    """``out[m]`` = the (first_pair + m)-th SplitMix64 output of ``key``: two 32-bit uniforms, one per element."""
    g = np.uint64(GOLDEN)
    for m in range(out.shape[0]):
        out[m] = mix64(key + (np.uint64(first_pair + m) + np.uint64(1)) * g)


@numba.njit(cache=True, nogil=True)
def _select(x, uniforms, out, mask, threshold, scale, relu):
    zero = x.dtype.type(0)
    for k in range(x.shape[0]):
        v = x[k]
        keep = (uniforms[k] >= threshold) & ((v > zero) | (not relu))
        mask[k] = keep
        out[k] = v * scale if keep else zero


@numba.njit(parallel=True, cache=True, nogil=True)
def dropout_forward(x, out, mask, key, threshold, scale, relu):
    """``out = x * scale`` where kept (and, with ``relu``, positive), else 0; ``mask`` = 1 there.

    Args: x, out: float [n] (flat views); mask: uint8 [n]; key: uint64; threshold: uint32, an element
    is dropped when its 32-bit uniform is below it; scale: 1 / (1 - p) in x's dtype; relu: fuse max(x, 0).
    Element ``k`` uses half ``k % 2`` of pair ``k // 2``'s draw, whatever piece or thread computes it.
    """
    n = x.shape[0]
    for piece in numba.prange((n + ELEMENTS_PER_PIECE - 1) // ELEMENTS_PER_PIECE):
        pairs = np.empty(HASH_BLOCK // 2, dtype=np.uint64)
        uniforms = pairs.view(np.uint32)  # little-endian: element 2m is the low half of pair m
        end = min(piece * ELEMENTS_PER_PIECE + ELEMENTS_PER_PIECE, n)
        for lo in range(piece * ELEMENTS_PER_PIECE, end, HASH_BLOCK):
            hi = min(lo + HASH_BLOCK, end)
            _draw_uniforms(pairs[: (hi - lo + 1) // 2], key, lo // 2)
            _select(x[lo:hi], uniforms[: hi - lo], out[lo:hi], mask[lo:hi], threshold, scale, relu)


@numba.njit(cache=True, nogil=True)
def _masked_scale(grad, mask, scale, out):
    zero = grad.dtype.type(0)
    for k in range(grad.shape[0]):
        out[k] = grad[k] * scale if mask[k] else zero


@numba.njit(parallel=True, cache=True, nogil=True)
def dropout_backward(grad, mask, scale, out):
    """``out = grad * scale`` where ``mask``, else 0 (the gradient of :func:`dropout_forward`)."""
    n = grad.shape[0]
    for piece in numba.prange((n + ELEMENTS_PER_PIECE - 1) // ELEMENTS_PER_PIECE):
        lo = piece * ELEMENTS_PER_PIECE
        hi = min(lo + ELEMENTS_PER_PIECE, n)
        _masked_scale(grad[lo:hi], mask[lo:hi], scale, out[lo:hi])


@numba.njit(inline="always")
def _denominator(norm, degree):
    """w_i = 1 / this (an int; the caller converts it to the features' dtype before dividing)."""
    if norm == NORM_MEAN:
        return max(degree, 1)
    if norm == NORM_GCN:
        return degree + 1
    return 1


@numba.njit(cache=True, nogil=True)
def _copy(dst, src):
    for f in range(dst.shape[0]):
        dst[f] = src[f]


@numba.njit(cache=True, nogil=True)
def _add(dst, src):
    for f in range(dst.shape[0]):
        dst[f] += src[f]


@numba.njit(cache=True, nogil=True)
def _add_scaled(dst, w, src):
    for f in range(dst.shape[0]):
        dst[f] += w * src[f]


@numba.njit(cache=True, nogil=True)
def _scale(dst, w):
    for f in range(dst.shape[0]):
        dst[f] *= w


@numba.njit(parallel=True, cache=True, nogil=True)
def aggregate_forward(indptr, indices, x, out, norm, self_mode):
    """Fill ``out`` [num_dst, C or 2C]; see the module docstring. Returns the number of edges whose
    source id is outside [0, num_src) (they are skipped; the caller raises)."""
    num_dst, num_src, width = out.shape[0], x.shape[0], x.shape[1]
    c = width // 2 if self_mode == SELF_ADD else width
    flat = x.reshape(num_src * width)  # a view, for prefetching by element offset
    one = x.dtype.type(1)
    bad = 0
    for i in numba.prange(num_dst):
        start, end = indptr[i], indptr[i + 1]
        row = out[i, :c]
        if norm == NORM_GCN:
            _copy(row, x[i, :c])
        else:
            row[:] = 0
        for e in range(start, end):
            if e + ROW_PREFETCH < end:
                prefetch(flat, indices[e + ROW_PREFETCH] * width)
            j = indices[e]
            if j < 0 or j >= num_src:
                bad += 1
            else:
                _add(row, x[j, :c])
        if norm != NORM_SUM:
            _scale(row, one / x.dtype.type(_denominator(norm, end - start)))
        if self_mode == SELF_CONCAT:
            _copy(out[i, c:], x[i])
        elif self_mode == SELF_ADD:
            _add(row, x[i, c:])
    return bad


@numba.njit(cache=True, nogil=True)
def transpose_block(indptr, indices, num_src):
    """The block's edges grouped by source: ``(t_indptr int64 [num_src + 1], t_dst int64 [num_edges],
    t_edge int64 [num_edges])``; the out-edges of source ``j`` are ``t_edge[t_indptr[j]:t_indptr[j + 1]]``
    (edge ids, in edge order) towards destinations ``t_dst[...]``. Sources must lie in [0, num_src)."""
    t_indptr = np.zeros(num_src + 1, dtype=np.int64)
    for e in range(indices.shape[0]):
        t_indptr[indices[e] + 1] += 1
    for j in range(num_src):
        t_indptr[j + 1] += t_indptr[j]
    fill = t_indptr[:-1].copy()
    t_dst = np.empty(indices.shape[0], dtype=np.int64)
    t_edge = np.empty(indices.shape[0], dtype=np.int64)
    for i in range(indptr.shape[0] - 1):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            t_dst[fill[j]] = i
            t_edge[fill[j]] = e
            fill[j] += 1
    return t_indptr, t_dst, t_edge


@numba.njit(parallel=True, cache=True, nogil=True)
def aggregate_backward(indptr, t_indptr, t_dst, grad, grad_x, norm, self_mode):
    """Fill ``grad_x`` [num_src, C or 2C], the gradient of :func:`aggregate_forward` for ``grad``
    [num_dst, C or 2C]: every source row is the sum over its out-edges, plus its own term if it is a
    destination."""
    num_src, num_dst = grad_x.shape[0], grad.shape[0]
    c = grad.shape[1] // 2 if self_mode == SELF_CONCAT else grad.shape[1]
    one = grad.dtype.type(1)
    for j in numba.prange(num_src):
        row = grad_x[j, :c]
        row[:] = 0
        for t in range(t_indptr[j], t_indptr[j + 1]):
            i = t_dst[t]
            _add_scaled(row, one / grad.dtype.type(_denominator(norm, indptr[i + 1] - indptr[i])), grad[i, :c])
        if j < num_dst:
            if norm == NORM_GCN:
                _add_scaled(row, one / grad.dtype.type(_denominator(norm, indptr[j + 1] - indptr[j])), grad[j, :c])
            if self_mode == SELF_CONCAT:
                _add(row, grad[j, c:])
            elif self_mode == SELF_ADD:
                _copy(grad_x[j, c:], grad[j])
        elif self_mode == SELF_ADD:
            grad_x[j, c:] = 0
