"""Worker functions for tests/distributed/test_split_distributed.py (split parallelism on real processes).

Every worker samples the same mini-batch with the same key, runs the model on its split with the
cooperative layers, and compares with the single-process model on the whole mini-batch, which it
computes itself (same blocks, same weights: every worker holds the same reference).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import cache_workers
from dist_workers import make_book, make_graph
from gnnscale.distributed import (SHUFFLE_FOR_MODEL, Comm, CooperativeBlock, cooperative_blocks, init_for_test,
                                  shutdown, split_blocks, split_loss, all_reduce_gradients,
                                  exchange_input_ahead)
from gnnscale.distributed.device_policy import step_comm
from gnnscale.features.own_rows import own_rows_store
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.train.stages import CopyStage
from gnnscale.train.steps import Batch, Step
from gnnscale.train.tasks.node import NodeTargets

PG_TIMEOUT_S = 60.0
FEATURE_DIM = 6
NUM_CLASSES = 3
SEEDS_PER_WORKER = 12
FANOUTS = {2: (4, 3), 3: (4, 3, 2)}
STEPS = 2
LR = 0.5  # large, so that a wrong gradient in step 1 shows in step 2's loss
CONFIGS = [(name, layers) for name in ("sage", "gcn", "gat") for layers in (2, 3)]


def _data(num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal((num_nodes, FEATURE_DIM)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, NUM_CLASSES, num_nodes))
    return x, y


def _model(name: str, layers: int) -> torch.nn.Module:
    torch.manual_seed(5)  # the same weights in every worker and in the reference
    return build_model(ModelConfig(name=name, in_dim=FEATURE_DIM, hidden_dim=4, num_classes=NUM_CLASSES,
                                   num_layers=layers, dropout=0.0, heads=2, out_heads=2))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def check_split_training(rank: int, world_size: int, port: int) -> dict:
    """Every model and depth: STEPS SGD steps split-parallel vs single-process; returns the comm totals."""
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        total = {}
        for name, layers in CONFIGS:
            _train_and_compare(comm, name, layers, total)
        _check_sage_on_source_features(comm)
        for name in ("sage", "gcn", "gat"):
            _check_input_exchange_ahead(comm, name)
        for name in ("sage", "gcn", "gat"):
            _check_torch_kernels(comm, name)
        for name in ("sage", "gat"):
            _check_device_path_on_cpu_tensors(comm, name)
        for name in ("sage", "gat"):
            _check_worker_without_seeds(comm, name)
            _check_bfloat16_wire(comm, name)
        _check_errors(comm)
        total["num_cached"] = cache_workers.check_cache(comm)
        return total
    finally:
        shutdown()


def _train_and_compare(comm: Comm, name: str, layers: int, total: dict) -> None:
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    reference, split_model = _model(name, layers), _model(name, layers)
    lo, hi = book.node_range(comm.rank)
    batch = SEEDS_PER_WORKER * comm.world_size
    for step in range(STEPS):
        # The same P x b seeds and key on every worker: one mini-batch for all.
        seeds = np.random.default_rng(100 + step).choice(graph.num_nodes, batch, replace=False)
        blocks = sample_blocks(graph, seeds, FANOUTS[layers], key=derive_key(3, 0, step, 0))
        ref_logits = reference(blocks, x[blocks[0].src_ids])
        ref_loss = F.cross_entropy(ref_logits, y[blocks[-1].dst_ids])
        reference.zero_grad()
        ref_loss.backward()

        comm.stats.snapshot_and_reset()
        coop = cooperative_blocks(blocks, book, comm, kind=SHUFFLE_FOR_MODEL[name])
        input_ids = coop[0].split.src_ids
        assert bool(((input_ids >= lo) & (input_ids < hi)).all()), "layer-0 sources must be owned: no fetch"
        logits = split_model(coop, x[input_ids])
        seeds_here = coop[-1].split.dst_ids
        loss = split_loss(logits, y[seeds_here], batch)
        split_model.zero_grad()
        loss.backward()
        shuffle = comm.stats.snapshot_and_reset()["shuffle"]
        # Forward: one shuffle per layer. Backward: one per layer whose shuffled rows need a gradient;
        # SAGE/GCN's layer 0 shuffles sums of input features, which do not.
        expected = 2 * layers - (1 if SHUFFLE_FOR_MODEL[name] == "partial_sums" else 0)
        assert (shuffle["rounds"], shuffle["calls"]) == (expected, expected), (name, layers, shuffle)
        assert shuffle["seconds"] > 0  # what the trainer reports as shuffle time
        _add(total, "shuffle", shuffle)

        where = {int(v): i for i, v in enumerate(blocks[-1].dst_ids)}
        mine = torch.tensor([where[int(v)] for v in seeds_here], dtype=torch.int64)
        assert _rel(logits.detach(), ref_logits.detach()[mine]) < 1e-5, (name, layers, step)
        _check_edges(comm, coop, blocks)
        global_loss = loss.detach().clone()
        comm.all_reduce_(global_loss, dist.ReduceOp.SUM, "eval")  # collective: the mini-batch's loss
        assert abs(global_loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item()), (name, layers, step)
        all_reduce_gradients(split_model, comm)
        for (pname, p), q in zip(split_model.named_parameters(), reference.parameters()):
            assert _rel(p.grad, q.grad) < 1e-4, (name, layers, step, pname, _rel(p.grad, q.grad))
        _sgd_step(split_model)
        _sgd_step(reference)
    for p, q in zip(split_model.parameters(), reference.parameters()):
        assert _rel(p.detach(), q.detach()) < 1e-4, (name, layers)


def _sgd_step(model: torch.nn.Module) -> None:
    # By hand: the first torch.optim optimizer of a process imports torch._dynamo (~15 s on a busy machine).
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad


def _check_edges(comm: Comm, coop: list[CooperativeBlock], blocks) -> None:
    """Every edge of the mini-batch computed exactly once: per layer, the sum over workers."""
    counts = torch.tensor([b.split.num_edges for b in coop], dtype=torch.int64)
    comm.all_reduce_(counts, dist.ReduceOp.SUM, "eval")  # collective: edges summed over workers
    assert counts.tolist() == [b.num_edges for b in blocks]


def _check_sage_on_source_features(comm: Comm) -> None:
    """SAGE is also exact when it gathers source rows instead of shuffling partial sums."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, _ = _data(graph.num_nodes)
    model = _model("sage", 2)
    blocks = sample_blocks(graph, np.arange(0, graph.num_nodes, 7), FANOUTS[2], key=9)
    coop = cooperative_blocks(blocks, book, comm, kind="source_features")
    with torch.no_grad():
        ref = model(blocks, x[blocks[0].src_ids])
        got = model(coop, x[coop[0].split.src_ids])
    where = {int(v): i for i, v in enumerate(blocks[-1].dst_ids)}
    mine = torch.tensor([where[int(v)] for v in coop[-1].split.dst_ids], dtype=torch.int64)
    assert _rel(got, ref[mine]) < 1e-5
    comm.stats.snapshot_and_reset()


def _check_input_exchange_ahead(comm: Comm, name: str) -> None:
    """Layer 0's exchange completed ahead (the loading stage's exchange_input_ahead): one feature round,
    then the step shuffles only hidden features. SAGE/GCN: logits and gradients bitwise those of the step
    that shuffles layer 0 itself (the same sums); GAT transforms the received input rows itself (equal to
    rounding). Another input tensor (input dropout) makes the layer shuffle anew."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    blocks = sample_blocks(graph, np.arange(0, graph.num_nodes, 3), FANOUTS[3], key=12)
    coop = cooperative_blocks(blocks, book, comm, kind=SHUFFLE_FOR_MODEL[name])
    x_in = x[coop[0].split.src_ids]
    labels, batch = y[coop[-1].split.dst_ids], blocks[-1].num_dst
    comm.stats.snapshot_and_reset()
    ahead = [exchange_input_ahead(coop[0], x_in, comm), *coop[1:]]
    counts = comm.stats.snapshot_and_reset()
    assert (counts["feature"]["rounds"], counts["shuffle"]["rounds"]) == (1, 0)
    runs = {}
    for label, layers, features in (("in step", coop, x_in), ("ahead", ahead, x_in), ("copy", ahead, x_in.clone())):
        model = _model(name, 3)
        logits = model(layers, features)
        split_loss(logits, labels, batch).backward()
        # Summed over workers: with GAT ahead, a remote row's share of W's gradient is taken where it is read.
        all_reduce_gradients(model, comm)
        runs[label] = (logits.detach(), [p.grad for p in model.parameters()], comm.stats.snapshot_and_reset())
    in_step = 6 if name == "gat" else 5  # SAGE/GCN's layer 0 shuffles no gradient
    assert [runs[k][2]["shuffle"]["rounds"] for k in runs] == [in_step, 4, in_step]
    for label in ("ahead", "copy"):
        reference, got = runs["in step"], runs[label]
        if name == "gat" and label == "ahead":  # W [x; x_remote] against [W x; W x_remote]: rounding only
            assert _rel(got[0], reference[0]) < 1e-6, label
            assert all(_rel(g, h) < 1e-5 for g, h in zip(got[1], reference[1])), label
        else:
            assert torch.equal(got[0], reference[0]), (name, label)
            assert all(torch.equal(g, h) for g, h in zip(got[1], reference[1])), (name, label)
    with pytest.raises(ValueError, match=r"x: an exchange done ahead carries no gradient"):
        exchange_input_ahead(coop[0], x_in.clone().requires_grad_(), comm)
    with pytest.raises(ValueError, match=rf"x: expected \[num_src={coop[0].num_src}, d\] input features"):
        exchange_input_ahead(coop[0], x_in[1:], comm)
    assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())


def _check_torch_kernels(comm: Comm, name: str) -> None:
    """kernels="torch": the split-aware sums (partial sums and gathered rows, layer 0's exchanged ahead) on
    the torch path against the single-process numba model: the same logits and summed gradients within
    1e-5. No dropout: a split numbers its rows otherwise than the whole mini-batch, so its masks differ
    whatever the kernels (tests/nn/test_torch_path.py checks the masks)."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    blocks = sample_blocks(graph, np.arange(0, graph.num_nodes, 3), FANOUTS[3], key=21)
    models = {}
    for kernels in ("numba", "torch"):
        torch.manual_seed(5)
        models[kernels] = build_model(ModelConfig(name=name, in_dim=FEATURE_DIM, hidden_dim=4, num_classes=NUM_CLASSES,
                                                  num_layers=3, dropout=0.0, heads=2, out_heads=2, kernels=kernels))
    reference = models["numba"](blocks, x[blocks[0].src_ids])
    F.cross_entropy(reference, y[blocks[-1].dst_ids]).backward()
    coop = cooperative_blocks(blocks, book, comm, kind=SHUFFLE_FOR_MODEL[name])
    x_in = x[coop[0].split.src_ids]
    coop[0] = exchange_input_ahead(coop[0], x_in, comm, kernels="torch")
    logits = models["torch"](coop, x_in)
    split_loss(logits, y[coop[-1].split.dst_ids], blocks[-1].num_dst).backward()
    all_reduce_gradients(models["torch"], comm)
    where = {int(v): i for i, v in enumerate(blocks[-1].dst_ids)}
    mine = torch.tensor([where[int(v)] for v in coop[-1].split.dst_ids], dtype=torch.int64)
    assert _rel(logits.detach(), reference.detach()[mine]) < 1e-5, name
    for p, q in zip(models["torch"].parameters(), models["numba"].parameters()):
        assert _rel(p.grad, q.grad) < 1e-5, (name, _rel(p.grad, q.grad))
    comm.stats.snapshot_and_reset()


def _check_device_path_on_cpu_tensors(comm: Comm, name: str) -> None:
    """The path a GPU run takes, on CPU tensors: the training step's Comm (step_comm), this worker's rows
    through the device cache of its own part, layer 0's exchange where those rows are, each step's batch
    through the copy stage's map (a stand-in copy: every tensor becomes a new one, as on a GPU) and the
    torch kernels. STEPS SGD steps give the host split's losses, logits and gradients bit for bit."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    lo, hi = book.node_range(comm.rank)
    step = step_comm(comm, torch.device("cpu"))  # collective; the CPU: the main group itself
    assert step is comm
    rows = own_rows_store(x[lo:hi].numpy(), np.diff(graph.indptr)[lo:hi], graph.num_nodes, 0.2, torch.device("cpu"))
    assert 0 < rows.num_cached < hi - lo  # some rows served by the cache, some read from the part
    runs = {}
    for path in ("host", "device"):
        torch.manual_seed(5)
        model = build_model(ModelConfig(name=name, in_dim=FEATURE_DIM, hidden_dim=4, num_classes=NUM_CLASSES,
                                        num_layers=3, dropout=0.0, heads=2, out_heads=2, kernels="torch"))
        out = runs[path] = {"losses": [], "logits": [], "grads": []}
        comm.stats.snapshot_and_reset()
        for i in range(STEPS):
            blocks = sample_blocks(graph, np.arange(i, graph.num_nodes, 4), FANOUTS[3], key=derive_key(3, 0, i, 0))
            coop = cooperative_blocks(blocks, book, step, kind=SHUFFLE_FOR_MODEL[name])
            ids = coop[0].split.src_ids
            x_in = x[ids] if path == "host" else rows.gather(ids - lo)
            coop[0] = exchange_input_ahead(coop[0], x_in, comm, kernels="torch")
            batch = Batch(step=Step(items=torch.arange(0), key=0), blocks=coop, x=x_in,
                          targets=NodeTargets(y[coop[-1].split.dst_ids]), sampled_edges=0, comm={})
            if path == "device":
                batch = _through_the_copy_stage(batch)
            logits = model(batch.blocks, batch.x)
            loss = split_loss(logits, batch.y, blocks[-1].num_dst)
            model.zero_grad()
            loss.backward()
            all_reduce_gradients(model, step)
            global_loss = loss.detach().clone()
            comm.all_reduce_(global_loss, dist.ReduceOp.SUM, "eval")  # collective: the mini-batch's loss
            out["losses"].append(global_loss)
            out["logits"].append(logits.detach())
            out["grads"].append([p.grad.clone() for p in model.parameters()])
            _sgd_step(model)
        out["shuffle"] = comm.stats.snapshot_and_reset()["shuffle"]["rounds"]
    host, device = runs["host"], runs["device"]
    assert all(torch.equal(a, b) for a, b in zip(device["losses"], host["losses"], strict=True)), name
    assert all(torch.equal(a, b) for a, b in zip(device["logits"], host["logits"], strict=True)), name
    assert all(torch.equal(g, h) for gs, hs in zip(device["grads"], host["grads"], strict=True)
               for g, h in zip(gs, hs, strict=True)), name
    assert device["shuffle"] == host["shuffle"] == STEPS * 4  # hidden features only: 2L - 2 per step


def _through_the_copy_stage(batch: Batch) -> Batch:
    """``batch`` as the copy stage sends it to a device, with a stand-in copy on the CPU: every tensor of every
    split, of layer 0's exchange done ahead, the input rows and the targets become new tensors, each once; the
    input held twice (the batch's and the exchange's) stays one tensor."""
    sent: dict[int, torch.Tensor] = {}

    def copy(t: torch.Tensor) -> torch.Tensor:
        assert id(t) not in sent, "a tensor is copied once"
        sent[id(t)] = t
        return t.clone()

    moved, model_input = CopyStage.map_tensors((batch, batch), copy)
    assert model_input is moved
    ahead = batch.blocks[0].input_ahead
    assert ahead.x is batch.x and moved.blocks[0].input_ahead.x is moved.x  # the layer recognises its input
    expected = [batch.x, batch.y, ahead.out]
    for block in batch.blocks:
        split = block.split
        expected += [split.src_ids, split.degrees, split.indptr, split.indices, split.reference_ids,
                     split.plan.send_index, split.plan.recv_index]
    assert sorted(sent) == sorted({id(t) for t in expected})
    for a, b in zip(moved.blocks, batch.blocks, strict=True):
        assert a.split.indptr is not b.split.indptr and torch.equal(a.split.indptr, b.split.indptr)
        assert (a.comm, a.num_dst, a.split.plan.send_counts) == (b.comm, b.num_dst, b.split.plan.send_counts)
    return moved


def _check_worker_without_seeds(comm: Comm, name: str) -> None:
    """All seeds owned by rank 0: the others output no rows, yet take part in every backward shuffle."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    reference, split_model = _model(name, 2), _model(name, 2)
    seeds = np.arange(0, book.node_range(0)[1], 5)
    blocks = sample_blocks(graph, seeds, FANOUTS[2], key=4)
    F.cross_entropy(reference(blocks, x[blocks[0].src_ids]), y[blocks[-1].dst_ids]).backward()
    coop = cooperative_blocks(blocks, book, comm, kind=SHUFFLE_FOR_MODEL[name])
    logits = split_model(coop, x[coop[0].split.src_ids])
    assert logits.shape[0] == (seeds.shape[0] if comm.rank == 0 else 0)
    split_loss(logits, y[coop[-1].split.dst_ids], seeds.shape[0]).backward()
    all_reduce_gradients(split_model, comm)
    for p, q in zip(split_model.parameters(), reference.parameters()):
        assert _rel(p.grad, q.grad) < 1e-4, name
    comm.stats.snapshot_and_reset()


def _check_bfloat16_wire(comm: Comm, name: str) -> None:
    """wire_dtype=bfloat16: every exchange (forward and backward) sends exactly half the bytes of the
    float32 one, and the logits and gradients stay within bfloat16 rounding of the exact ones."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, y = _data(graph.num_nodes)
    blocks = sample_blocks(graph, np.arange(0, graph.num_nodes, 3), FANOUTS[3], key=13)
    coop = cooperative_blocks(blocks, book, comm, kind=SHUFFLE_FOR_MODEL[name])
    x_in, labels = x[coop[0].split.src_ids], y[coop[-1].split.dst_ids]
    comm.stats.snapshot_and_reset()
    runs = {}
    for wire in (None, torch.bfloat16):
        layers = [replace(b, wire_dtype=wire) for b in coop]
        layers[0] = exchange_input_ahead(layers[0], x_in, comm)
        model = _model(name, 3)
        logits = model(layers, x_in)
        split_loss(logits, labels, blocks[-1].num_dst).backward()
        runs[wire] = (logits.detach(), [p.grad for p in model.parameters()], comm.stats.snapshot_and_reset())
    (exact, exact_grads, wide), (rounded, grads, narrow) = runs[None], runs[torch.bfloat16]
    for category in ("feature", "shuffle"):
        assert narrow[category]["rounds"] == wide[category]["rounds"] > 0
        assert 2 * narrow[category]["bytes_sent"] == wide[category]["bytes_sent"], (name, category)
    assert not torch.equal(rounded, exact) and _rel(rounded, exact) < 2e-2, (name, _rel(rounded, exact))
    # The whole gradient: a few attention parameters' gradients are tiny sums of cancelling terms.
    flat, exact_flat = torch.cat([g.view(-1) for g in grads]), torch.cat([h.view(-1) for h in exact_grads])
    assert _rel(flat, exact_flat) < 2e-2, (name, _rel(flat, exact_flat))


def _check_errors(comm: Comm) -> None:
    """Bad input fails the same way on every worker, before any collective."""
    graph, book = make_graph(), make_book(comm.world_size)
    x, _ = _data(graph.num_nodes)
    blocks = sample_blocks(graph, np.arange(10), FANOUTS[2], key=1)
    wrong_parts = make_book(comm.world_size + 1)
    with pytest.raises(ValueError, match=rf"book: expected {comm.world_size} parts \(one per worker\), "
                                         rf"got {comm.world_size + 1}"):
        cooperative_blocks(blocks, wrong_parts, comm)
    smaller = PartitionBook(offsets=np.linspace(0, 100, comm.world_size + 1).astype(np.int64))
    with pytest.raises(ValueError, match=r"blocks: node ids must lie in \[0, 100\).*another graph"):
        cooperative_blocks(blocks, smaller, comm)
    other = (comm.rank + 1) % comm.world_size
    with pytest.raises(ValueError, match=rf"split: built for rank {other} .* this worker is rank {comm.rank}"):
        CooperativeBlock(split=split_blocks(blocks, book, other)[0], comm=comm)
    coop = cooperative_blocks(blocks, book, comm, kind="partial_sums")
    with pytest.raises(ValueError, match=r"kind='partial_sums' does not exchange.*kind='source_features'"):
        _model("gat", 2)(coop, x[coop[0].split.src_ids])
    empty = [torch.zeros(0)] * comm.world_size
    with pytest.raises(ValueError, match=r"recv_rows: expected non-negative ints, got \[-1"):
        comm.all_to_allv(empty, "shuffle", recv_rows=[-1] + [0] * (comm.world_size - 1))
    with pytest.raises(ValueError, match=rf"recv_rows: expected world_size = {comm.world_size} row counts"):
        comm.all_to_allv(empty, "shuffle", recv_rows=[0])
    with pytest.raises(ValueError, match=r"rows: expected sum\(send_rows\) = 3 rows, got 2"):
        comm.exchange_rows(torch.zeros(2, 4), [3] + [0] * (comm.world_size - 1), [0] * comm.world_size, "shuffle")
    with pytest.raises(ValueError, match=rf"send_rows: expected world_size = {comm.world_size} row counts"):
        comm.exchange_rows(torch.zeros(2, 4), [2], [0] * comm.world_size, "shuffle")
    assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())


def _add(total: dict, category: str, counts: dict) -> None:
    for key, value in counts.items():
        total.setdefault(category, {}).setdefault(key, 0)
        total[category][key] += value

