"""The numba kernels under CPU autocast (``--precision bf16-mixed``, gnnscale/nn/functional.py): a half-precision
input is widened to float32 at the kernel boundary, the sums add in float32, the output is float32 and the
gradient comes back in the input's dtype; outside autocast a half tensor still takes the torch path (or is
refused by ``kernels="numba"``).

The graph, 8 nodes, in-edges of each destination (sampled with every neighbor: fanout above every degree):

    0 <- 1, 2, 3      1 <- 0, 4      2 <- 5, 6, 7      3 <- (none)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import ModelConfig, build_model
from gnnscale.nn.functional import aggregate, attention, keyed_dropout, resolve_kernels
from gnnscale.sampling import sample_blocks

HALVES = [torch.bfloat16, torch.float16]
EDGES = {0: [1, 2, 3], 1: [0, 4], 2: [5, 6, 7], 3: []}


@pytest.fixture(scope="module")
def block():
    src = [s for d, ss in EDGES.items() for s in ss]
    dst = [d for d, ss in EDGES.items() for _ in ss]
    graph = csc_from_coo(np.array(src), np.array(dst), 8)
    (out,) = sample_blocks(graph, np.array([0, 1, 2, 3]), [10], key=1)
    return out


def half_features(rows: int, dtype: torch.dtype, dim: int = 4) -> torch.Tensor:
    return torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows)).to(dtype).requires_grad_()


@pytest.mark.parametrize("dtype", HALVES)
def test_under_cpu_autocast_auto_takes_the_kernels_for_half_tensors(dtype):
    h = torch.zeros(3, 2, dtype=dtype)
    assert resolve_kernels("auto", h) == "torch"
    with pytest.raises(TypeError, match=r"kernels: the numba kernels take float32/float64 CPU tensors \(half ones "
                                        r"under CPU autocast\)"):
        resolve_kernels("numba", h)
    with torch.autocast("cpu", dtype=dtype):
        assert resolve_kernels("auto", h) == "numba" and resolve_kernels("numba", h) == "numba"
        assert resolve_kernels("torch", h) == "torch"
        assert resolve_kernels("auto", h.to("meta")) == "torch"  # another device: the torch path


@pytest.mark.parametrize("dtype", HALVES)
def test_the_kernels_sum_half_inputs_in_float32_and_return_the_gradient_in_half(block, dtype):
    """Mean aggregation with the destination's row attached, against sums by hand over the graph above in
    float64 (the half values are exact there): the output within float32 rounding, the gradient the exact one
    in the input's dtype (within its rounding: the kernel sums in float32 before it is narrowed)."""
    x = half_features(block.num_src, dtype)
    with torch.autocast("cpu", dtype=dtype):
        out = aggregate(block, x, norm="mean", self_mode="concat")
    assert out.dtype == torch.float32
    src_ids = block.src_ids.tolist()
    values = x.detach().double()
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    expected, grad = torch.zeros(out.shape, dtype=torch.float64), torch.zeros(x.shape, dtype=torch.float64)
    for i, node in enumerate(src_ids[:block.num_dst]):
        rows = [src_ids.index(s) for s in EDGES[node]]
        for r in rows:
            expected[i, :4] += values[r] / len(rows)
            grad[r] += weight[i, :4] / len(rows)
        expected[i, 4:] = values[i]
        grad[i] += weight[i, 4:]
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6)
    (got,) = torch.autograd.grad((out.double() * weight).sum(), [x])
    assert got.dtype == dtype
    torch.testing.assert_close(got, grad.to(dtype), rtol=torch.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", HALVES)
def test_keyed_dropout_widens_half_inputs_with_the_masks_of_float32(dtype):
    x = half_features(64, dtype)
    with torch.autocast("cpu", dtype=dtype):
        out = keyed_dropout(x, 0.5, 7, relu=True)
    assert out.dtype == torch.float32
    expected = keyed_dropout(x.detach().float(), 0.5, 7, relu=True)  # the float32 kernel on the same values
    assert torch.equal(out, expected)
    kept = out != 0
    assert torch.equal(out[kept], x.detach().float()[kept] * 2.0)  # relu(x) / (1 - p), exact in float32


def test_gat_attention_widens_its_three_inputs(block):
    heads, width = 2, 3
    z = half_features(block.num_src, torch.bfloat16, heads * width).view(-1, heads, width)
    scores = half_features(block.num_src, torch.bfloat16, 2 * heads)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(block, z, scores[:, :heads], scores[:block.num_dst, heads:])
    expected = attention(block, z.detach().float(), scores.detach()[:, :heads].float(),
                         scores.detach()[:block.num_dst, heads:].float())
    assert out.dtype == torch.float32 and torch.equal(out, expected)


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_a_model_under_autocast_agrees_on_both_paths(name):
    """The whole model under bfloat16 autocast, numba kernels (widened) against the torch path (in bfloat16):
    the same logits within bfloat16's rounding, both finite, and the float32 parameters' gradients alike."""
    rng = np.random.default_rng(3)
    graph = csc_from_coo(rng.integers(0, 80, 400), rng.integers(0, 80, 400), 80, remove_self_loops=True)
    blocks = sample_blocks(graph, np.arange(0, 80, 4), [4, 3], key=5)
    x = torch.randn(blocks[0].num_src, 8, generator=torch.Generator().manual_seed(1))
    results = []
    for kernels in ("auto", "torch"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name=name, in_dim=8, hidden_dim=8, num_classes=3, num_layers=2, heads=2,
                                        dropout=0.2, kernels=kernels))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(blocks, x, dropout_key=9)
        logits.float().square().sum().backward()
        results.append((logits.float().detach(), [p.grad for p in model.parameters()]))
    (a, grads_a), (b, grads_b) = results
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    torch.testing.assert_close(a, b, rtol=3e-2, atol=3e-2)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        assert ga.dtype == torch.float32
        torch.testing.assert_close(ga, gb, rtol=5e-2, atol=5e-2)
