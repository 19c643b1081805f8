"""The numba step kernels: keyed dropout and one-pass aggregation, against torch references."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import GAT, GCN, GraphSAGE, aggregate_sum
from gnnscale.nn.functional import aggregate, csr_sum, keyed_dropout, site_key, transform_first_is_cheaper
from gnnscale.sampling import Block, sample_blocks


def _graph(num_nodes=300, num_edges=2400, seed=0):
    rng = np.random.default_rng(seed)
    return csc_from_coo(rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges), num_nodes)


@pytest.fixture(scope="module", params=[False, True], ids=["noreplace", "replace"])
def block(request):
    """A middle block of a 3-hop sample: sources > destinations, some rows empty, and with
    replacement the same source repeated in a row."""
    blocks = sample_blocks(_graph(), np.arange(0, 300, 7), [4, 3, 2], key=5, replace=request.param)
    return blocks[1]


def _reference(block: Block, x: torch.Tensor, norm: str, self_mode: str | None) -> torch.Tensor:
    """The formula of ``aggregate``, with torch's index_add path."""
    c = x.shape[1] // 2 if self_mode == "add" else x.shape[1]
    total = aggregate_sum(block, x[:, :c], backend="index_add")
    degree = block.in_degrees().to(x.dtype).unsqueeze(1)
    if norm == "mean":
        total = total / degree.clamp(min=1)
    elif norm == "gcn":
        total = (total + x[: block.num_dst, :c]) / (degree + 1)
    if self_mode == "concat":
        return torch.cat([total, x[: block.num_dst]], dim=1)
    if self_mode == "add":
        return total + x[: block.num_dst, c:]
    return total


@pytest.mark.parametrize("norm", ["sum", "mean", "gcn"])
@pytest.mark.parametrize("self_mode", [None, "concat", "add"])
def test_aggregate_and_its_gradient_match_the_reference(block, norm, self_mode):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(block.num_src, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    out, expected = aggregate(block, x, norm=norm, self_mode=self_mode), _reference(block, x, norm, self_mode)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    weight = torch.randn(expected.shape, dtype=torch.float64, generator=gen)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    (expected_grad,) = torch.autograd.grad((expected * weight).sum(), x)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_aggregate_gradcheck(block):
    x = torch.randn(block.num_src, 4, dtype=torch.float64, requires_grad=True)
    for norm, self_mode in (("mean", "concat"), ("gcn", None), ("mean", "add")):
        assert torch.autograd.gradcheck(lambda t: aggregate(block, t, norm=norm, self_mode=self_mode), (x,))


def test_aggregate_is_the_same_whatever_the_thread_count(block, restore_threads):
    x = torch.randn(block.num_src, 33)
    numba.set_num_threads(1)
    one = aggregate(block, x, norm="mean", self_mode="concat")
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    assert torch.equal(one, aggregate(block, x, norm="mean", self_mode="concat"))


def test_aggregate_rejects_bad_input(block):
    x = torch.randn(block.num_src, 4)
    with pytest.raises(ValueError, match="norm"):
        aggregate(block, x, norm="max")
    with pytest.raises(ValueError, match="self_mode"):
        aggregate(block, x, self_mode="stack")
    with pytest.raises(ValueError, match="even number of columns"):
        aggregate(block, torch.randn(block.num_src, 5), self_mode="add")
    with pytest.raises(TypeError, match="x_src: .*float32/float64"):
        aggregate(block, x.to(torch.bfloat16))
    broken = Block(indptr=block.indptr, indices=block.indices + block.num_src, src_ids=block.src_ids,
                   num_dst=block.num_dst)
    with pytest.raises(ValueError, match=r"block: \d+ edges have a source id outside \[0, num_src="):
        aggregate(broken, x)


def test_csr_sum_matches_index_add_with_more_rows_than_sources():
    """A split's rows (owned + reference) can outnumber the sources; rows without edges sum to 0."""
    gen = torch.Generator().manual_seed(3)
    num_rows, num_src = 9, 5
    indptr = torch.tensor([0, 2, 2, 5, 6, 6, 8, 9, 11, 12])
    indices = torch.randint(num_src, (12,), generator=gen)
    x = torch.randn(num_src, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    dst = torch.repeat_interleave(torch.arange(num_rows), indptr.diff())
    expected = torch.zeros(num_rows, 4, dtype=torch.float64).index_add(0, dst, x[indices])
    torch.testing.assert_close(csr_sum(indptr, indices, num_rows, x), expected)
    assert torch.autograd.gradcheck(lambda t: csr_sum(indptr, indices, num_rows, t), (x,))
    with pytest.raises(TypeError, match="float32/float64"):
        csr_sum(indptr, indices, num_rows, x.detach().half())


def test_transform_first_only_where_it_is_cheaper():
    # A sampled block: many more sources than destinations -> aggregate first.
    blocks = sample_blocks(_graph(), np.arange(0, 300, 7), [4, 3], key=1)
    assert not transform_first_is_cheaper(blocks[0], 256, 256)
    # Full neighborhoods of every node (sources = destinations), many edges, out < in -> transform first.
    full = Block(indptr=torch.arange(0, 301 * 40, 40), indices=torch.randint(0, 300, (300 * 40,)),
                 src_ids=torch.arange(300), num_dst=300)
    assert transform_first_is_cheaper(full, 256, 16)
    assert not transform_first_is_cheaper(full, 16, 256)
    # GraphSAGE's root weight doubles the product of both orders; with it the same block still flips.
    assert transform_first_is_cheaper(full, 256, 16, self_width=2)


# --- dropout ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keyed_dropout_is_mask_times_scale(relu, dtype):
    x = torch.randn(257, 33, dtype=dtype, requires_grad=True)  # odd sizes: the last uniform pair is split
    y = keyed_dropout(x, 0.3, key=11, relu=relu)
    kept = y != 0
    base = torch.relu(x) if relu else x
    torch.testing.assert_close(y, base * kept / 0.7)
    grad = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, grad)
    torch.testing.assert_close(dx, grad * kept / 0.7)
    if relu:
        assert not bool(kept[x.detach() <= 0].any())


def test_keyed_dropout_gradcheck():
    x = torch.randn(20, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: keyed_dropout(t, 0.4, 3, relu=True), (x,))


def test_keyed_dropout_keeps_one_minus_p():
    # 10^6 Bernoulli(0.7) draws: the kept fraction is within 5 standard deviations (0.0023) of 0.7.
    x = torch.ones(1000, 1000)
    kept = float((keyed_dropout(x, 0.3, 123) != 0).float().mean())
    assert abs(kept - 0.7) < 5 * (0.7 * 0.3 / 1e6) ** 0.5


def test_keyed_dropout_depends_only_on_key(restore_threads):
    x = torch.randn(300, 700)
    numba.set_num_threads(1)
    one_thread = keyed_dropout(x, 0.5, 99)
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    assert torch.equal(one_thread, keyed_dropout(x, 0.5, 99))
    assert not torch.equal(one_thread, keyed_dropout(x, 0.5, 100))
    # Element k's draw does not depend on the tensor's size: a prefix of the elements has the same mask.
    flat = x.reshape(-1)
    assert torch.equal(keyed_dropout(flat[:1001], 0.5, 99), one_thread.reshape(-1)[:1001])


def test_keyed_dropout_off_in_eval_and_at_zero():
    x = torch.randn(5, 4)
    assert keyed_dropout(x, 0.5, 1, training=False) is x
    assert keyed_dropout(x, 0.0, 1) is x
    torch.testing.assert_close(keyed_dropout(x, 0.5, 1, relu=True, training=False), torch.relu(x))


def test_site_keys_differ_and_stay_63_bit():
    keys = {site_key(2**63 - 1, site) for site in range(1000)}
    assert len(keys) == 1000 and all(0 <= k < 2**63 for k in keys)


# --- models: the step's dropout key ----------------------------------------------------------------


@pytest.mark.parametrize("model_class", [GraphSAGE, GCN, GAT])
def test_model_dropout_is_a_function_of_the_key(model_class):
    blocks = sample_blocks(_graph(), np.arange(0, 300, 11), [4, 3], key=2)
    extra = {"attn_dropout": 0.3} if model_class is GAT else {}
    torch.manual_seed(0)
    model = model_class(8, 16, 3, 2, dropout=0.5, input_dropout=0.2, **extra)
    x = torch.randn(blocks[0].num_src, 8)
    first = model(blocks, x, dropout_key=5)
    torch.manual_seed(123)  # torch's generator plays no part when a key is given
    assert torch.equal(first, model(blocks, x, dropout_key=5))
    assert not torch.equal(first, model(blocks, x, dropout_key=6))
    # Without a key the masks come from torch's generator: reproducible by seeding it.
    torch.manual_seed(7)
    a = model(blocks, x)
    torch.manual_seed(7)
    assert torch.equal(a, model(blocks, x))
    model.eval()
    assert torch.equal(model(blocks, x), model(blocks, x, dropout_key=5))


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2**63, ValueError), (1.5, TypeError), (True, TypeError)])
def test_model_rejects_bad_dropout_key(bad, error):
    blocks = sample_blocks(_graph(), np.arange(0, 300, 11), [4, 3], key=2)
    model = GraphSAGE(8, 16, 3, 2)
    with pytest.raises(error, match="dropout_key"):
        model(blocks, torch.randn(blocks[0].num_src, 8), dropout_key=bad)


def test_fused_relu_dropout_equals_torch_ops_with_the_same_mask():
    # The model's fused ReLU + dropout equals F.relu then dropout with the mask the key selects.
    x = torch.randn(64, 32)
    mask = keyed_dropout(torch.ones_like(x), 0.5, 9) != 0
    torch.testing.assert_close(keyed_dropout(x, 0.5, 9, relu=True), F.relu(x) * mask / 0.5)


def test_attention_gradcheck_with_dropout(block):
    from gnnscale.nn.functional import attention

    gen = torch.Generator().manual_seed(4)
    z = torch.randn(block.num_src, 2, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    score_src = torch.randn(block.num_src, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    score_dst = torch.randn(block.num_dst, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: attention(block, *t, dropout=0.3, key=8), (z, score_src, score_dst))
    with pytest.raises(ValueError, match="score_src, score_dst"):
        attention(block, z, score_src[1:], score_dst)
