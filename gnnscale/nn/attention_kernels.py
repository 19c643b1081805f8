"""numba kernels of graph attention (GAT) over a Block: edge softmax and weighted sum in one pass.

For destination ``i`` and head ``h``, over its in-edges and its self edge:
``logit = LeakyReLU(score_src[j, h] + score_dst[i, h])``, ``alpha = softmax(logit)`` (shifted by the
maximum), optionally dropped out (keyed, as :mod:`gnnscale.nn.kernels`), and
``out[i, h] = sum alpha * z[j, h]``. Nothing of size edges x features is materialised: the forward
pass keeps ``alpha`` (edges x heads) and the dropout mask; the backward pass recomputes the logits'
signs and reads ``z`` again. Its first pass (over destinations) gives the gradient of the logits and
of ``score_dst``; its second (over sources, on the transposed block) the gradients of ``z`` and
``score_src``, each row one sum in edge order: deterministic, no atomics.

Per-edge arrays are ``[num_edges, H]``; the self edge of destination ``i`` is row ``i`` of the
``[num_dst, H]`` arrays. Dropout element ids: edge ``e``, head ``h`` is ``e * H + h``; the self edge
of ``i`` is ``(num_edges + i) * H + h``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from gnnscale.sampling.keys import GOLDEN, mix64


@numba.njit(cache=True, nogil=True)
def _dot(a, b):
    total = a.dtype.type(0)
    for f in range(a.shape[0]):
        total += a[f] * b[f]
    return total


@numba.njit(cache=True, nogil=True)
def _axpy(dst, w, src):
    for f in range(dst.shape[0]):
        dst[f] += w * src[f]


@numba.njit(inline="always")
def _leaky(v, slope):
    return v if v > 0 else v * slope


@numba.njit(inline="always")
def _kept(key, element, threshold):
    """Element ``element``'s dropout draw: the low or high half of pair ``element // 2``'s SplitMix64 output."""
    h = mix64(key + (np.uint64(element // 2) + np.uint64(1)) * np.uint64(GOLDEN))
    u = (h >> np.uint64(32 * (element & 1))) & np.uint64(0xFFFFFFFF)
    return u >= threshold


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_forward(indptr, indices, z, score_src, score_dst, slope, key, threshold, scale,
                      out, alpha, alpha_self, mask, mask_self):
    """Fill ``out`` [D, H, C], ``alpha`` [E, H], ``alpha_self`` [D, H] (softmax weights before
    dropout) and the dropout masks ``mask`` [E, H], ``mask_self`` [D, H] (uint8; all 1 without dropout,
    i.e. ``threshold == 0``). ``scale`` = 1 / (1 - p), in z's dtype."""
    num_dst, heads = out.shape[0], out.shape[1]
    num_edges = indices.shape[0]
    for i in numba.prange(num_dst):
        start, end = indptr[i], indptr[i + 1]
        for h in range(heads):
            sd = score_dst[i, h]
            self_logit = _leaky(score_src[i, h] + sd, slope)
            peak = self_logit
            for e in range(start, end):
                peak = max(peak, _leaky(score_src[indices[e], h] + sd, slope))
            self_exp = math.exp(self_logit - peak)
            total = self_exp
            for e in range(start, end):
                w = math.exp(_leaky(score_src[indices[e], h] + sd, slope) - peak)
                alpha[e, h] = w
                total += w
            row = out[i, h]
            a = self_exp / total
            alpha_self[i, h] = a
            keep = threshold == 0 or _kept(key, (num_edges + i) * heads + h, threshold)
            mask_self[i, h] = keep
            for f in range(row.shape[0]):
                row[f] = a * scale * z[i, h, f] if keep else 0
            for e in range(start, end):
                a = alpha[e, h] / total
                alpha[e, h] = a
                keep = threshold == 0 or _kept(key, e * heads + h, threshold)
                mask[e, h] = keep
                if keep:
                    _axpy(row, a * scale, z[indices[e], h])


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_backward_dst(indptr, indices, z, score_src, score_dst, slope, scale, alpha, alpha_self, mask,
                           mask_self, grad, grad_logit, grad_logit_self, grad_score_dst):
    """First backward pass, over destinations: the gradient of every logit (``grad_logit`` [E, H],
    ``grad_logit_self`` [D, H], through LeakyReLU: the gradient of the pre-activation) and
    ``grad_score_dst`` [D, H]."""
    num_dst, heads = grad.shape[0], grad.shape[1]
    for i in numba.prange(num_dst):
        start, end = indptr[i], indptr[i + 1]
        for h in range(heads):
            g = grad[i, h]
            sd = score_dst[i, h]
            # d loss / d alpha (before dropout) per edge, and their alpha-weighted sum (softmax backward)
            ga_self = _dot(g, z[i, h]) * scale if mask_self[i, h] else 0.0
            weighted = alpha_self[i, h] * ga_self
            for e in range(start, end):
                ga = _dot(g, z[indices[e], h]) * scale if mask[e, h] else 0.0
                grad_logit[e, h] = ga
                weighted += alpha[e, h] * ga
            pre = score_src[i, h] + sd
            gl = alpha_self[i, h] * (ga_self - weighted) * (1.0 if pre > 0 else slope)
            grad_logit_self[i, h] = gl
            total = gl
            for e in range(start, end):
                pre = score_src[indices[e], h] + sd
                gl = alpha[e, h] * (grad_logit[e, h] - weighted) * (1.0 if pre > 0 else slope)
                grad_logit[e, h] = gl
                total += gl
            grad_score_dst[i, h] = total


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_backward_src(t_indptr, t_dst, t_edge, scale, alpha, alpha_self, mask, mask_self, grad, grad_logit,
                           grad_logit_self, grad_z, grad_score_src):
    """Second backward pass, over sources on the transposed block: ``grad_z`` [S, H, C] and
    ``grad_score_src`` [S, H]."""
    num_src, heads = grad_z.shape[0], grad_z.shape[1]
    num_dst = grad.shape[0]
    for j in numba.prange(num_src):
        for h in range(heads):
            row = grad_z[j, h]
            row[:] = 0
            total = 0.0
            if j < num_dst:
                if mask_self[j, h]:
                    _axpy(row, alpha_self[j, h] * scale, grad[j, h])
                total += grad_logit_self[j, h]
            for t in range(t_indptr[j], t_indptr[j + 1]):
                e = t_edge[t]
                if mask[e, h]:
                    _axpy(row, alpha[e, h] * scale, grad[t_dst[t], h])
                total += grad_logit[e, h]
            grad_score_src[j, h] = total
