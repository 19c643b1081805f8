"""numba kernels of graph attention (GAT) over a Block: edge softmax and weighted sum in one pass.

For destination ``i`` and head ``h``, over its in-edges and its self edge:
``logit = LeakyReLU(score_src[j, h] + score_dst[i, h])``, ``alpha = softmax(logit)`` (shifted by the
maximum), optionally dropped out (keyed, as :mod:`gnnscale.nn.kernels`), and
``out[i, h] = sum alpha * z[j, h]``. Without the self edge (``self_edge=False``: a relation of a typed graph,
whose destinations are not rows of ``z``, as PyG's ``GATConv(add_self_loops=False)``), the softmax runs over
the in-edges only and a destination without any is 0; no row ``i`` of ``z`` or ``score_src`` is read for a
destination ``i`` then. Nothing of size edges x features is materialised: the forward
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

from gnnscale.keys import GOLDEN, mix64


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


@numba.njit(cache=True, nogil=True)
def _edge_softmax_terms(indptr, indices, score_src, sd, slope, i, h, alpha, totals):
    """Without a self edge: ``alpha[e, h]`` = exp(logit - max) over destination ``i``'s in-edges, and
    ``totals[h]`` their sum (0 for a destination without in-edges, whose weights are never divided)."""
    start, end = indptr[i], indptr[i + 1]
    if start == end:
        totals[h] = 0
        return
    peak = _leaky(score_src[indices[start], h] + sd, slope)
    for e in range(start + 1, end):
        peak = max(peak, _leaky(score_src[indices[e], h] + sd, slope))
    total = alpha.dtype.type(0)
    for e in range(start, end):
        w = math.exp(_leaky(score_src[indices[e], h] + sd, slope) - peak)
        alpha[e, h] = w
        total += w
    totals[h] = total


# Loops run edge-major inside a destination (for each edge, all heads): the source's row z[j] (H * C
# contiguous values) is read once per edge instead of once per edge and head.


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_forward(indptr, indices, z, score_src, score_dst, slope, key, threshold, scale,
                      out, alpha, alpha_self, mask, mask_self, self_edge):
    """Fill ``out`` [D, H, C], ``alpha`` [E, H], ``alpha_self`` [D, H] (softmax weights before
    dropout) and the dropout masks ``mask`` [E, H], ``mask_self`` [D, H] (uint8; all 1 without dropout,
    i.e. ``threshold == 0``). ``scale`` = 1 / (1 - p), in z's dtype. ``self_edge`` False: no self edge
    (``alpha_self`` and ``mask_self`` are 0)."""
    num_dst, heads = out.shape[0], out.shape[1]
    num_edges = indices.shape[0]
    for i in numba.prange(num_dst):
        start, end = indptr[i], indptr[i + 1]
        totals = np.empty(heads, dtype=alpha.dtype)
        for h in range(heads):  # softmax denominators: scores only, [S, H], small
            sd = score_dst[i, h]
            if not self_edge:
                _edge_softmax_terms(indptr, indices, score_src, sd, slope, i, h, alpha, totals)
                alpha_self[i, h] = 0
                mask_self[i, h] = 0
                out[i, h] = 0
                continue
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
            totals[h] = total
            a = self_exp / total
            alpha_self[i, h] = a
            keep = threshold == 0 or _kept(key, (num_edges + i) * heads + h, threshold)
            mask_self[i, h] = keep
            row = out[i, h]
            for f in range(row.shape[0]):
                row[f] = a * scale * z[i, h, f] if keep else 0
        for e in range(start, end):
            zj = z[indices[e]]
            for h in range(heads):
                a = alpha[e, h] / totals[h]
                alpha[e, h] = a
                keep = threshold == 0 or _kept(key, e * heads + h, threshold)
                mask[e, h] = keep
                if keep:
                    _axpy(out[i, h], a * scale, zj[h])


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_backward_dst(indptr, indices, z, score_src, score_dst, slope, scale, alpha, alpha_self, mask,
                           mask_self, grad, grad_logit, grad_logit_self, grad_score_dst, self_edge):
    """First backward pass, over destinations: the gradient of every logit (``grad_logit`` [E, H],
    ``grad_logit_self`` [D, H], through LeakyReLU: the gradient of the pre-activation; 0 without the
    self edge) and ``grad_score_dst`` [D, H]."""
    num_dst, heads = grad.shape[0], grad.shape[1]
    for i in numba.prange(num_dst):
        start, end = indptr[i], indptr[i + 1]
        gi = grad[i]
        # d loss / d alpha (before dropout) per edge and head, and their alpha-weighted sums (softmax backward)
        weighted = np.empty(heads, dtype=alpha.dtype)
        for h in range(heads):
            if not self_edge:
                grad_logit_self[i, h] = 0
                weighted[h] = 0
                continue
            ga = _dot(gi[h], z[i, h]) * scale if mask_self[i, h] else 0.0
            grad_logit_self[i, h] = ga
            weighted[h] = alpha_self[i, h] * ga
        for e in range(start, end):
            zj = z[indices[e]]
            for h in range(heads):
                ga = _dot(gi[h], zj[h]) * scale if mask[e, h] else 0.0
                grad_logit[e, h] = ga
                weighted[h] += alpha[e, h] * ga
        for h in range(heads):
            sd = score_dst[i, h]
            total = 0.0
            if self_edge:
                factor = 1.0 if score_src[i, h] + sd > 0 else slope
                gl = alpha_self[i, h] * (grad_logit_self[i, h] - weighted[h]) * factor
                grad_logit_self[i, h] = gl
                total = gl
            for e in range(start, end):
                factor = 1.0 if score_src[indices[e], h] + sd > 0 else slope
                gl = alpha[e, h] * (grad_logit[e, h] - weighted[h]) * factor
                grad_logit[e, h] = gl
                total += gl
            grad_score_dst[i, h] = total


@numba.njit(parallel=True, cache=True, nogil=True)
def attention_backward_src(t_indptr, t_dst, t_edge, scale, alpha, alpha_self, mask, mask_self, grad, grad_logit,
                           grad_logit_self, grad_z, grad_score_src, self_edge):
    """Second backward pass, over sources on the transposed block: ``grad_z`` [S, H, C] and
    ``grad_score_src`` [S, H]; source ``j < D`` is destination ``j``'s self edge only with ``self_edge``."""
    num_src, heads = grad_z.shape[0], grad_z.shape[1]
    num_dst = grad.shape[0]
    for j in numba.prange(num_src):
        rows = grad_z[j]
        rows[:] = 0
        for h in range(heads):
            grad_score_src[j, h] = 0
        if self_edge and j < num_dst:
            for h in range(heads):
                if mask_self[j, h]:
                    _axpy(rows[h], alpha_self[j, h] * scale, grad[j, h])
                grad_score_src[j, h] += grad_logit_self[j, h]
        for t in range(t_indptr[j], t_indptr[j + 1]):
            e = t_edge[t]
            gi = grad[t_dst[t]]
            for h in range(heads):
                if mask[e, h]:
                    _axpy(rows[h], alpha[e, h] * scale, gi[h])
                grad_score_src[j, h] += grad_logit[e, h]
