"""The torch-native path (gnnscale.nn.torch_ops, kernels="torch") against the numba kernels on the CPU:
the same dropout masks bit for bit, the same layers and models within 1e-5 (forward and every gradient),
the split-aware sums too; and the whole model on the meta device, where a host sync (.item(), .numpy())
or a tensor made on the CPU fails as it would on CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.distributed import SHUFFLE_FOR_MODEL, cooperative_blocks, exchange_input_ahead, split_blocks
from gnnscale.distributed.split.shuffle import _csr_sum
from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import GATConv, GCNConv, ModelConfig, SAGEConv, build_model, torch_ops
from gnnscale.nn.functional import _KeyedDropout, attention, keyed_dropout, resolve_kernels
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import Block, sample_blocks

NUM_NODES = 60
IN_DIM = 8
TOL = dict(atol=1e-5, rtol=1e-5)  # float32: the two paths sum in another order


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads cost more than they give on a busy 2-core machine
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=[False, True], ids=["noreplace", "replace"])
def blocks(request):
    """Three blocks for 10 seeds. Nodes 50..59 have no in-edge: the seeds among them, and such nodes drawn
    as sources of deeper layers, are destinations of degree 0."""
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, NUM_NODES, 240), rng.integers(0, 50, 240)
    graph = csc_from_coo(src, dst, NUM_NODES, remove_self_loops=True)
    out = sample_blocks(graph, np.arange(0, NUM_NODES, 6), [3, 4, 5], key=11, replace=request.param)
    assert all(bool((b.in_degrees() == 0).any()) for b in out) and all(b.num_edges > 0 for b in out)
    return out


def _features(rows: int, dim: int = IN_DIM) -> torch.Tensor:
    return torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows * 100 + dim))


def _outputs_and_grads(module, call, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The output and the gradients of a fixed random projection of it w.r.t. ``inputs`` and every parameter."""
    out = call()
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    params = list(module.parameters())
    return [out.detach(), *torch.autograd.grad((out * weight).sum(), [*inputs, *params])]


def _assert_paths_agree(got: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"tensor {i} (0: output, then gradients): {m}")


# --- keyed dropout: the numba kernel's masks, bit for bit -------------------------------------------------


@pytest.mark.parametrize("key", [0, 1, 0x5DEECE66D, 2**62 + 977, 2**63 - 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keyed_dropout_masks_and_gradients_are_the_kernels_bits(key, dtype):
    for shape in [(1,), (7,), (64, 33), (3, 4, 5)]:
        for p in (0.05, 0.5, 0.93):
            for relu in (False, True):
                x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(key % 1000))
                x.view(-1)[0] = float("nan")  # dropped or not, both give the same bits
                kernel = _KeyedDropout.apply(x.requires_grad_(), p, key, relu)
                ours = keyed_dropout(x, p, key, relu=relu, kernels="torch")
                assert torch.equal(kernel.isnan(), ours.isnan())
                assert torch.equal(kernel.nan_to_num(7.0), ours.nan_to_num(7.0)), (shape, p, relu)
                grad = torch.randn(shape, dtype=dtype)
                (g_kernel,), (g_ours,) = torch.autograd.grad(kernel, x, grad), torch.autograd.grad(ours, x, grad)
                assert torch.equal(g_kernel, g_ours), (shape, p, relu)


def test_the_torch_path_keeps_one_minus_p_on_a_non_contiguous_tensor():
    x = torch.ones(300, 400).t()  # numbered in row-major order of the view, as .contiguous() would be
    out = keyed_dropout(x, 0.3, 42, kernels="torch")
    assert torch.equal(out, keyed_dropout(x.contiguous(), 0.3, 42, kernels="numba"))
    assert abs(float((out > 0).float().mean()) - 0.7) < 0.01


def test_kernels_resolve_by_tensor_and_are_checked():
    x = torch.zeros(2, 2)
    assert resolve_kernels("auto", x) == "numba" and resolve_kernels("torch", x) == "torch"
    assert resolve_kernels("auto", x.to(torch.bfloat16)) == "torch"
    assert resolve_kernels("auto", x.to("meta")) == "torch"  # any device other than the CPU: torch
    with pytest.raises(TypeError, match="kernels: the numba kernels take float32/float64 CPU tensors"):
        keyed_dropout(x.half(), 0.5, 1, kernels="numba")
    with pytest.raises(ValueError, match=r"kernels: expected one of \('auto', 'numba', 'torch'\), got 'gpu'"):
        keyed_dropout(x, 0.5, 1, kernels="gpu")
    with pytest.raises(ValueError, match="kernels: expected one of"):
        ModelConfig(in_dim=2, num_classes=2, num_layers=1, kernels="cuda")


# --- layers: torch path == numba path, forward and every gradient ------------------------------------------


def _layer_pair(kind: str, order: str):
    """(numba layer, torch layer) with the same parameters."""
    if kind == "sage":
        make = lambda backend: SAGEConv(IN_DIM, 5, backend=backend, **({"order": order} if backend == "numba" else {}))
    elif kind == "gcn":
        make = lambda backend: GCNConv(IN_DIM, 5, backend=backend, **({"order": order} if backend == "numba" else {}))
    else:
        make = lambda backend: GATConv(IN_DIM, 4, heads=3, concat=kind == "gat_concat", attn_dropout=0.3,
                                       backend=backend)
    fast = make("numba")
    ours = make("torch")
    ours.load_state_dict(fast.state_dict())
    return fast.train(), ours.train()


@pytest.mark.parametrize("kind, order", [("sage", "aggregate_first"), ("sage", "transform_first"),
                                         ("gcn", "aggregate_first"), ("gcn", "transform_first"),
                                         ("gat_concat", None), ("gat_mean", None)])
def test_layer_torch_path_matches_numba(blocks, kind, order):
    torch.manual_seed(0)
    fast, ours = _layer_pair(kind, order)
    extra = {"dropout_key": 99} if kind.startswith("gat") else {}  # attention dropout 0.3, the same masks
    for block in blocks:
        x = _features(block.num_src).requires_grad_()
        expected = _outputs_and_grads(fast, lambda: fast(block, x, **extra), [x])
        _assert_paths_agree(_outputs_and_grads(ours, lambda: ours(block, x, **extra), [x]), expected)


def test_attention_is_finite_and_the_kernels_on_logit_gaps_of_120():
    # Destinations 0, 1, 2; sources 0..4 (destinations first). Edges 0 <- 3, 1 <- 4, 2 <- 3, 2 <- 4; one head,
    # one channel. With score_dst = 10, the logits (LeakyReLU of positive sums: the sums themselves) are
    #   0: self 10,  edge from 3: 130          -> alpha 1 on node 3:            out = z[3] = 2.0
    #   1: self 130, edge from 4: 10           -> alpha 1 on itself:            out = z[1] = -1.0
    #   2: self 130, from 3: 130, from 4: 10   -> alpha 1/2 on itself and on 3: out = (3.0 + 2.0) / 2
    # exp(120) overflows float32: only a shift by each destination's largest logit keeps them finite.
    block = Block(indptr=torch.tensor([0, 1, 2, 4]), indices=torch.tensor([3, 4, 3, 4]),
                  src_ids=torch.arange(5), num_dst=3)
    inputs = [torch.tensor([0.5, -1.0, 3.0, 2.0, -4.0]).view(5, 1, 1), torch.tensor([[0.0], [120.0], [120.0],
              [120.0], [0.0]]), torch.full((3, 1), 10.0)]
    results = {}
    for kernels in ("numba", "torch"):
        z, score_src, score_dst = (t.clone().requires_grad_() for t in inputs)
        if kernels == "numba":
            out = attention(block, z, score_src, score_dst)
        else:
            out = torch_ops.attention(block.indptr, block.indices, z, score_src, score_dst, negative_slope=0.2,
                                      dropout=0.0, key=0)
        grads = torch.autograd.grad((out * torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)).sum(), [z, score_src, score_dst])
        results[kernels] = [out.detach(), *grads]
        assert all(bool(t.isfinite().all()) for t in results[kernels]), kernels
    # By hand, the loss weighting the outputs 1, 2, 3: dz = each node's alpha times its destination's weight;
    # a saturated softmax passes no gradient to its logits, and at node 2 the two tied logits get
    # 3 * alpha * (z - out) = 3 * 1/2 * (3.0 - 2.5) = 0.75 (itself) and 3 * 1/2 * (2.0 - 2.5) = -0.75 (node 3).
    out, dz, dscore_src, dscore_dst = results["numba"]
    torch.testing.assert_close(out.view(3), torch.tensor([2.0, -1.0, 2.5]))
    torch.testing.assert_close(dz.view(5), torch.tensor([0.0, 2.0, 1.5, 2.5, 0.0]))
    torch.testing.assert_close(dscore_src.view(5), torch.tensor([0.0, 0.0, 0.75, -0.75, 0.0]))
    torch.testing.assert_close(dscore_dst.view(3), torch.zeros(3))
    _assert_paths_agree(results["torch"], results["numba"])


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_model_with_kernels_torch_matches_numba_with_every_dropout(blocks, name):
    """Input, hidden and attention dropout all on: the same keys draw the same masks on both paths."""
    grads = {}
    for kernels in ("numba", "torch"):
        torch.manual_seed(1)
        model = build_model(ModelConfig(name=name, in_dim=IN_DIM, hidden_dim=6, num_classes=3, num_layers=3,
                                        heads=2, out_heads=2, dropout=0.5, input_dropout=0.2, attn_dropout=0.3,
                                        kernels=kernels))
        x = _features(blocks[0].num_src).requires_grad_()
        grads[kernels] = _outputs_and_grads(model, lambda: model(blocks, x, dropout_key=2024), [x])
    _assert_paths_agree(grads["torch"], grads["numba"])


@pytest.mark.parametrize("kernels", ["torch", "auto"])
@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_model_runs_on_a_device_without_host_syncs(blocks, name, kernels):
    """On the meta device, as on CUDA, ``.item()``, ``.numpy()`` and most mixes with CPU tensors raise; ``"auto"``
    takes the torch path there."""
    torch.manual_seed(2)
    model = build_model(ModelConfig(name=name, in_dim=IN_DIM, hidden_dim=4, num_classes=3, num_layers=3, heads=2,
                                    input_dropout=0.2, attn_dropout=0.3, kernels=kernels)).to("meta")
    x = torch.empty(blocks[0].num_src, IN_DIM, device="meta", requires_grad=True)
    out = model([b.to("meta") for b in blocks], x, dropout_key=5)
    out.sum().backward()
    assert out.device.type == x.grad.device.type == "meta" and out.shape == (blocks[-1].num_dst, 3)


# --- split parallelism's aggregation ------------------------------------------------------------------------


def test_split_partial_sums_torch_path_matches_numba(blocks):
    """Every worker's partial sums over its owned and reference rows (more rows than sources in some), both kernels."""
    book = PartitionBook(offsets=np.array([0, 25, NUM_NODES], dtype=np.int64))
    assert any(s.num_rows > s.num_dst for s in split_blocks(blocks, book, 0))  # reference rows to send
    for rank in (0, 1):
        for kind in ("partial_sums", "source_features"):
            for split in split_blocks(blocks, book, rank, kind=kind):
                # partial_sums: the owned sources; source_features: then the remote sources' rows received
                width = split.num_src + (0 if kind == "partial_sums" else split.reference_ids.shape[0])
                x = _features(width, 5).requires_grad_()
                results = [_outputs_and_grads(torch.nn.Module(), lambda: _csr_sum(split.indptr, split.indices,
                                                                                  split.num_rows, x, kernels), [x])
                           for kernels in ("numba", "torch")]
                _assert_paths_agree(results[1], results[0])


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_cooperative_layers_on_the_torch_path_match_numba(blocks, solo_comm, name):
    """A one-worker split through the hooks (CooperativeBlock.aggregate_sum / gather_sources, layer 0
    exchanged ahead with the model's kernels): torch == numba. The 2-worker exchange on the torch path:
    tests/split_workers.py."""
    book = PartitionBook(offsets=np.array([0, NUM_NODES], dtype=np.int64))
    grads = {}
    for kernels in ("numba", "torch"):
        coop = cooperative_blocks(blocks, book, solo_comm, kind=SHUFFLE_FOR_MODEL[name])
        x = _features(coop[0].num_src)
        coop[0] = exchange_input_ahead(coop[0], x, solo_comm, kernels=kernels)
        torch.manual_seed(3)
        model = build_model(ModelConfig(name=name, in_dim=IN_DIM, hidden_dim=4, num_classes=3, num_layers=3,
                                        heads=2, dropout=0.5, kernels=kernels))
        grads[kernels] = _outputs_and_grads(model, lambda: model(coop, x, dropout_key=7), [])
    _assert_paths_agree(grads["torch"], grads["numba"])
