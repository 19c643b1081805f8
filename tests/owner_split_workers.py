"""Worker functions for tests/distributed/test_split_distributed.py: owner-driven split sampling
(:func:`gnnscale.distributed.owner_split_blocks`) against ``split_blocks`` on the whole mini-batch.

The two number the vertices and order the rows of each exchange differently (owner-driven: per-worker
discovery order; ``split_blocks``: the whole mini-batch's node-list order), so the splits are compared in
global ids: the same owned destinations and sources per layer, the same sampled degrees, the same edges
per (row, source) as multisets, the same row counts per exchange and the same vertices behind every
exchanged row. Then the cooperative layers on the owner-driven splits give the whole mini-batch's logits
and gradients.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dist_workers import make_book, make_graph
from gnnscale.distributed import (SHUFFLE_FOR_MODEL, SHUFFLE_KINDS, Comm, CooperativeBlock, OwnerSplitWorkspace,
                                  all_reduce_gradients, init_for_test, owner_split_blocks, shutdown, split_blocks,
                                  split_loss)
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import derive_key, sample_blocks
from split_workers import FANOUTS, _data, _model, _rel

PG_TIMEOUT_S = 60.0


def check_owner_split(rank: int, world_size: int, port: int) -> dict:
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        sent = received = 0
        graph, book = make_graph(), make_book(world_size)
        workspace = OwnerSplitWorkspace(book, rank)  # reused across mini-batches, as the trainer does
        cases = [(np.random.default_rng(7 + i).choice(graph.num_nodes, 40, replace=False), layers, replace)
                 for i, (layers, replace) in enumerate([(2, False), (3, False), (3, True)])]
        cases.append((np.arange(0, book.node_range(0)[1], 5), 2, False))  # every seed on rank 0
        for kind in SHUFFLE_KINDS:
            for step, (seeds, layers, replace) in enumerate(cases):
                key = derive_key(5, 1, step, 0)
                blocks = sample_blocks(graph, seeds, FANOUTS[layers], key=key, replace=replace)
                comm.stats.snapshot_and_reset()
                got, sampled = owner_split_blocks(graph, book, seeds, FANOUTS[layers], key, comm, kind=kind,
                                                  replace=replace, workspace=workspace)
                sample = comm.stats.snapshot_and_reset()["sample"]
                assert sample["rounds"] == layers, sample  # one round per hop
                sent, received = sent + sample["bytes_sent"], received + sample["bytes_received"]
                _check_same_split(got, split_blocks(blocks, book, rank, kind=kind), kind)
                total = torch.tensor([sampled], dtype=torch.int64)
                comm.all_reduce_(total, dist.ReduceOp.SUM, "eval")  # collective: edges sampled by all workers
                assert int(total) == sum(b.num_edges for b in blocks)
        for name in ("sage", "gcn", "gat"):
            _check_training_step(comm, graph, book, workspace, name)
        _check_errors(comm, graph, book)
        return {"sample": {"bytes_sent": sent, "bytes_received": received}}
    finally:
        shutdown()


def _check_same_split(got, expected, kind: str) -> None:
    assert len(got) == len(expected)
    for l, (a, b) in enumerate(zip(got, expected)):
        assert (a.kind, a.rank, a.num_dst, a.num_src) == (b.kind, b.rank, b.num_dst, b.num_src), l
        assert set(a.src_ids.tolist()) == set(b.src_ids.tolist()), l
        assert set(a.dst_ids.tolist()) == set(b.dst_ids.tolist()), l
        assert _by_id(a.dst_ids, a.degrees) == _by_id(b.dst_ids, b.degrees), l
        assert (a.plan.send_counts, a.plan.recv_counts) == (b.plan.send_counts, b.plan.recv_counts), l
        assert a.num_edges == b.num_edges, l
        assert _rows(a) == _rows(b), l
        assert _exchanged(a) == _exchanged(b), l
        if l + 1 < len(got):  # one node list: a layer's owned destinations are the next layer's sources
            assert torch.equal(got[l + 1].src_ids, a.dst_ids)


def _by_id(ids, values) -> dict:
    return dict(zip(ids.tolist(), values.tolist()))


def _column_ids(split) -> np.ndarray:
    """Global id of every source column (owned sources, then received rows)."""
    return np.concatenate([split.src_ids.numpy(), split.reference_ids.numpy()]) if split.kind == "source_features" \
        else split.src_ids.numpy()


def _row_ids(split) -> np.ndarray:
    """Global id of every row's destination (owned destinations, then partial_sums' reference rows)."""
    if split.kind == "partial_sums":
        return np.concatenate([split.dst_ids.numpy(), split.reference_ids.numpy()])
    return split.dst_ids.numpy()


def _rows(split) -> dict:
    """{destination id: Counter of source ids} over the rows this worker computes."""
    cols, rows, ptr = _column_ids(split), _row_ids(split), split.indptr.numpy()
    idx = split.indices.numpy()
    return {int(v): Counter(cols[idx[ptr[r]:ptr[r + 1]]].tolist()) for r, v in enumerate(rows)}


def _exchanged(split) -> tuple:
    """The vertex behind every row sent to / received from each worker (sets; counts compared above)."""
    plan = split.plan
    send_rows = _row_ids(split)[plan.send_index.numpy()] if split.kind == "partial_sums" \
        else split.src_ids.numpy()[plan.send_index.numpy()]
    recv_rows = split.dst_ids.numpy()[plan.recv_index.numpy()] if split.kind == "partial_sums" \
        else _column_ids(split)[plan.recv_index.numpy()]
    cut = lambda rows, counts: tuple(frozenset(x.tolist()) for x in np.split(rows, np.cumsum(counts)[:-1]))  # noqa: E731
    return cut(send_rows, plan.send_counts), cut(recv_rows, plan.recv_counts)


def _check_training_step(comm: Comm, graph, book: PartitionBook, workspace, name: str) -> None:
    """Logits, loss and summed gradients of one step on owner-driven splits == the whole mini-batch's."""
    x, y = _data(graph.num_nodes)
    reference, split_model = _model(name, 3), _model(name, 3)
    seeds = np.random.default_rng(31).choice(graph.num_nodes, 12 * comm.world_size, replace=False)
    key = derive_key(3, 2, 0, 0)
    blocks = sample_blocks(graph, seeds, FANOUTS[3], key=key)
    ref_logits = reference(blocks, x[blocks[0].src_ids])
    ref_loss = F.cross_entropy(ref_logits, y[blocks[-1].dst_ids])
    ref_loss.backward()
    splits, _ = owner_split_blocks(graph, book, seeds, FANOUTS[3], key, comm, kind=SHUFFLE_FOR_MODEL[name],
                                   workspace=workspace)
    coop = [CooperativeBlock(split=s, comm=comm) for s in splits]
    logits = split_model(coop, x[coop[0].split.src_ids])
    where = {int(v): i for i, v in enumerate(blocks[-1].dst_ids)}
    mine = torch.tensor([where[int(v)] for v in coop[-1].split.dst_ids], dtype=torch.int64)
    assert _rel(logits.detach(), ref_logits.detach()[mine]) < 1e-5, name
    loss = split_loss(logits, y[coop[-1].split.dst_ids], seeds.shape[0])
    loss.backward()
    total = loss.detach().clone()
    comm.all_reduce_(total, dist.ReduceOp.SUM, "eval")  # collective: the mini-batch's loss
    assert abs(total.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item()), name
    all_reduce_gradients(split_model, comm)
    for p, q in zip(split_model.parameters(), reference.parameters()):
        assert _rel(p.grad, q.grad) < 1e-4, name


def _check_errors(comm: Comm, graph, book: PartitionBook) -> None:
    """Bad input fails the same way on every worker, before any collective."""
    comm.stats.snapshot_and_reset()
    seeds = np.arange(10)
    with pytest.raises(ValueError, match=rf"book: expected {comm.world_size} parts \(one per worker\)"):
        owner_split_blocks(graph, make_book(comm.world_size + 1), seeds, (3, 2), 1, comm)
    with pytest.raises(ValueError, match=r"seeds: expected unique node ids"):
        owner_split_blocks(graph, book, np.array([1, 2, 1]), (3, 2), 1, comm)
    with pytest.raises(ValueError, match=r"seeds: node ids must lie in \[0, 500\)"):
        owner_split_blocks(graph, book, np.array([1, 500]), (3, 2), 1, comm)
    with pytest.raises(ValueError, match=r"kind: expected one of"):
        owner_split_blocks(graph, book, seeds, (3, 2), 1, comm, kind="edges")
    with pytest.raises(ValueError, match=r"fanouts: expected every entry >= 0, or -1 for every neighbor"):
        owner_split_blocks(graph, book, seeds, (3, -2), 1, comm)
    smaller = PartitionBook(offsets=np.linspace(0, 100, comm.world_size + 1).astype(np.int64))
    with pytest.raises(ValueError, match=r"book: expected a book of the graph's 500 nodes, got 100"):
        owner_split_blocks(graph, smaller, seeds, (3, 2), 1, comm)
    with pytest.raises(ValueError, match=r"workspace: built for another book or rank"):
        owner_split_blocks(graph, book, seeds, (3, 2), 1, comm,
                           workspace=OwnerSplitWorkspace(book, (comm.rank + 1) % comm.world_size))
    assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())
