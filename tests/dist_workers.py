"""Worker functions for tests/distributed/test_distributed.py, run in spawned processes (one process group per run).

Every worker function takes ``(rank, world_size, port)``, asserts inside, always closes its process
group in a ``finally``, and returns a small picklable result. :func:`entry` reports the result or the
traceback to the parent through a pipe; a failing worker also exits with code 1.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from gnnscale.graph.feature_dtype import decode, encode
from gnnscale.distributed import (AgreementFailure, Comm, HybridSampler, PeerFailure, VanillaSampler, init_for_test,
                                  init_from_env, shutdown)
from gnnscale.distributed.typed_sampling import TypedHybridSampler, TypedVanillaSampler
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.features.typed import TypedLocalStore, TypedPartitionedStore
from gnnscale.graph.csc import CSCGraph, csc_from_coo
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.typed_directory import load_typed_partition
from gnnscale.sampling import Block, derive_key, sample_blocks
from gnnscale.sampling.typed import TypedBlock, TypedNeighborSampler, sample_typed_blocks

NUM_NODES = 500
FEATURE_DIM = 8
PG_TIMEOUT_S = 20.0  # a hung peer fails a collective after this long (the default 120 s is too slow for tests)
DEAD_RANK = 1


def entry(fn, rank: int, world_size: int, port: int, conn) -> None:
    """Process target: run ``fn`` and send ``("ok", result)`` or ``("error", traceback)`` to the parent."""
    numba.set_num_threads(1)  # several workers share 2 cores
    torch.set_num_threads(1)
    try:
        result = fn(rank, world_size, port)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        conn.close()
        raise
    conn.send(("ok", result))
    conn.close()
    # The work is done, checked and reported, and ``fn`` has destroyed its process group. Leave without
    # the interpreter's finalisation: once in several full-suite runs, a C++ thread pool (the numba or
    # torch layer a background thread used) aborted there ("terminate called without an active
    # exception", exit -6) after a worker had passed. End-to-end exits are still checked by the torchrun
    # tests, which launch the real CLI.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------------
# data: the same graph, features and partition in every worker
# ---------------------------------------------------------------------------------------------------


def make_graph() -> CSCGraph:
    """500 nodes, in-degrees 0..30 (mean ~15), 25 nodes without in-edges spread over all parts."""
    rng = np.random.default_rng(2024)
    degrees = rng.integers(0, 31, size=NUM_NODES)
    degrees[rng.choice(NUM_NODES, 25, replace=False)] = 0
    dst = np.repeat(np.arange(NUM_NODES), degrees)
    src = rng.integers(0, NUM_NODES, size=dst.shape[0])
    return csc_from_coo(src, dst, NUM_NODES)


def make_features() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((NUM_NODES, FEATURE_DIM)).astype(np.float32)


def make_book(world_size: int) -> PartitionBook:
    """Contiguous, slightly uneven ranges of ids."""
    return PartitionBook(offsets=np.linspace(0, NUM_NODES, world_size + 1).astype(np.int64))


def part_rows(graph: CSCGraph, book: PartitionBook, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of the part's nodes: (indptr int64 [n_p + 1], indices with global ids)."""
    lo, hi = book.node_range(rank)
    start, stop = graph.indptr[lo], graph.indptr[hi]
    return graph.indptr[lo : hi + 1] - start, graph.indices[start:stop]


def assert_blocks_equal(got: list[Block], expected: list[Block]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.num_dst == e.num_dst
        assert torch.equal(g.indptr, e.indptr)
        assert torch.equal(g.indices, e.indices)
        assert torch.equal(g.src_ids, e.src_ids)


def add_stats(total: dict, snap: dict) -> dict:
    for cat, counts in snap.items():
        for name, value in counts.items():
            total.setdefault(cat, {}).setdefault(name, 0)
            total[cat][name] += value
    return snap


def only(snap: dict, category: str) -> dict:
    """The counts of ``category`` (its seconds left out: timings differ from call to call), after
    checking every other category is zero."""
    for cat, counts in snap.items():
        if cat != category:
            assert not any(counts.values()), f"unexpected {cat} traffic: {counts}"
    return {key: value for key, value in snap[category].items() if key != "seconds"}


# ---------------------------------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------------------------------


def check_everything(rank: int, world_size: int, port: int) -> dict:
    """Samplers, feature store and agree on one process group (joined through init_from_env).

    Returns the run's total comm counts per category, for the parent's sent == received check.
    """
    environ = {"RANK": str(rank), "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "LOCAL_RANK": str(rank)}
    ctx = init_from_env("gloo", timeout_s=PG_TIMEOUT_S, environ=environ)
    try:
        assert (ctx.rank, ctx.world_size, ctx.backend, ctx.device.type) == (rank, world_size, "gloo", "cpu")
        comm = Comm(ctx)
        total: dict = {}
        check_samplers(comm, total)
        check_feature_store(comm, total)
        check_agree(comm, total)
        return total
    finally:
        shutdown()


def check_samplers(comm: Comm, total: dict) -> None:
    rank, world_size = comm.rank, comm.world_size
    graph, book = make_graph(), make_book(world_size)
    lo, hi = book.node_range(rank)
    indptr, indices = part_rows(graph, book, rank)
    rng = np.random.default_rng(100 + rank)
    for fanouts, replace in (((5, 3), False), ((4, 3, 2), False), ((3, 2), True)):
        vanilla = VanillaSampler(book, rank, indptr, indices, fanouts, comm, replace=replace)
        hybrid = HybridSampler(graph, book, rank, fanouts, replace=replace)
        add_stats(total, comm.stats.snapshot_and_reset())  # the samplers' setup rounds
        for step in range(2):
            seeds = torch.from_numpy(rng.choice(np.arange(lo, hi), 10 + 5 * rank + step, replace=False))
            key = derive_key(11, 0, step, rank)
            expected = sample_blocks(graph, seeds, fanouts, key=key, replace=replace)

            assert_blocks_equal(vanilla.sample(seeds, key), expected)
            counts = only(add_stats(total, comm.stats.snapshot_and_reset()), "sample")
            assert counts["rounds"] == 2 * (len(fanouts) - 1), counts
            assert counts["calls"] == 4 * (len(fanouts) - 1), counts

            assert_blocks_equal(hybrid.sample(seeds, key), expected)
            assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())
    foreign = torch.tensor([lo, (hi % NUM_NODES)])  # hi is the next part's first node (or node 0)
    for sampler in (vanilla, hybrid):
        with pytest.raises(ValueError, match=rf"seeds: expected nodes owned by rank {rank}.*\[{hi % NUM_NODES}\]"):
            sampler.sample(foreign, 1)


def check_feature_store(comm: Comm, total: dict) -> None:
    rank, world_size = comm.rank, comm.world_size
    full, book = make_features(), make_book(world_size)
    lo, hi = book.node_range(rank)
    rng = np.random.default_rng(200 + rank)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "features.npy"
        np.save(path, full[lo:hi])
        for local in (np.load(path, mmap_mode="r"), torch.from_numpy(full[lo:hi].copy())):
            store = PartitionedFeatureStore(book, rank, local, comm)
            add_stats(total, comm.stats.snapshot_and_reset())
            cases = {
                "across owners": rng.choice(NUM_NODES, 60 + rank, replace=False),
                "all local": rng.choice(np.arange(lo, hi), 20, replace=False),
                "repeats, none on rank 0": rng.integers(0, NUM_NODES, size=0 if rank == 0 else 40),
            }
            for name, ids in cases.items():
                got = store.gather(torch.from_numpy(ids))
                torch.testing.assert_close(got, torch.from_numpy(full[ids]), rtol=0, atol=0, msg=name)
                counts = only(add_stats(total, comm.stats.snapshot_and_reset()), "feature")
                assert (counts["rounds"], counts["calls"]) == (2, 4), (name, counts)
                size_bytes = 2 * 8 * (world_size - 1)  # two size exchanges, one int64 per peer
                if name == "all local":  # every worker asks only itself: sizes travel, no payload
                    assert counts["bytes_sent"] == counts["bytes_received"] == size_bytes, counts
                if name == "across owners":
                    assert counts["bytes_sent"] > size_bytes and counts["bytes_received"] > size_bytes, counts
                    across, float32_received = ids, counts["bytes_received"]
    # Half-precision parts: rows arrive widened to float32, equal to the stored (rounded) values, and the
    # rows this worker received took exactly half the bytes (same ids, same requests, same sizes).
    remote = int(np.count_nonzero((across < lo) | (across >= hi)))
    for dtype in ("float16", "bfloat16"):
        store = PartitionedFeatureStore(book, rank, encode(full[lo:hi], dtype), comm)
        add_stats(total, comm.stats.snapshot_and_reset())
        got = store.gather(torch.from_numpy(across))
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, decode(encode(full[across], dtype)), rtol=0, atol=0, msg=dtype)
        counts = only(add_stats(total, comm.stats.snapshot_and_reset()), "feature")
        assert float32_received - counts["bytes_received"] == remote * full.shape[1] * 2, (dtype, counts)


def check_agree(comm: Comm, total: dict) -> None:
    comm.agree(True, "")
    failing = comm.world_size - 1
    ok = comm.rank != failing
    message = "" if ok else f"part {failing}: features.npy sha256 mismatch (corrupt partition file)"
    expected = rf"rank {failing} of {comm.world_size} failed \(setup\): rank {failing}: part {failing}: features.npy"
    with pytest.raises(AgreementFailure, match=expected) as info:
        comm.agree(ok, message)
    assert list(info.value.failures) == [failing]
    counts = only(add_stats(total, comm.stats.snapshot_and_reset()), "setup")
    assert counts["rounds"] == 2


def die_before_collective(rank: int, world_size: int, port: int) -> dict:
    """Rank DEAD_RANK exits right before a feature fetch; the others must raise PeerFailure."""
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        book = make_book(world_size)
        lo, hi = book.node_range(rank)
        store = PartitionedFeatureStore(book, rank, make_features()[lo:hi], comm)  # a setup round: all are up
        if rank == DEAD_RANK:
            os._exit(1)
        start = time.monotonic()
        with pytest.raises(PeerFailure) as info:
            store.gather(torch.arange(NUM_NODES))
        return {"elapsed_s": time.monotonic() - start, "message": str(info.value)}
    finally:
        shutdown()


def checkpoint_save_categories(rank: int, world_size: int, port: int) -> list[str]:
    """Every worker saves one checkpoint (rank 0 writes it to a folder of its own); returns the categories
    of the save's collectives on this worker."""
    from gnnscale.train.checkpoints.runs import Checkpointer, RunIdentity

    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        categories: list[str] = []
        run = comm._run
        comm._run = lambda op, category, fn: categories.append(category) or run(op, category, fn)
        torch.manual_seed(0)  # the same weights on every worker, as after broadcast_model
        model = torch.nn.Linear(2, 2)
        identity = RunIdentity(signature={}, layout="hybrid", world_size=world_size, data={}, partition={})
        with tempfile.TemporaryDirectory() as folder:
            Checkpointer(Path(folder) / "run.ckpt", None, identity, comm, 4).save(
                model, torch.optim.Adam(model.parameters()), epoch=1, step=0, history=[], worker_state={},
                layout_state={})
            assert (Path(folder) / "run.ckpt").is_file() == (rank == 0)
        return categories
    finally:
        shutdown()


# ---------------------------------------------------------------------------------------------------
# a typed graph: the typed samplers and feature store over a typed partition directory
# ---------------------------------------------------------------------------------------------------


def assert_typed_blocks_equal(got: list[TypedBlock], expected: list[TypedBlock]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.num_dst == e.num_dst and torch.equal(g.src_ids, e.src_ids)
        for a, b in zip(g.relations, e.relations, strict=True):
            assert torch.equal(a.dst, b.dst) and torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)


def check_typed(directory: str, rank: int, world_size: int, port: int) -> None:
    """Over the typed partition ``directory`` (one part per worker): vanilla and hybrid typed blocks ==
    sample_typed_blocks on the whole graph, 2(L-1) sample rounds for vanilla and none for hybrid; the typed
    feature store's input == the one-process store's over every part's rows, in 2 feature rounds."""
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        check_typed_samplers(comm, directory)
        check_typed_store(comm, directory)
    finally:
        shutdown()


def check_typed_samplers(comm: Comm, directory: str) -> None:
    rank = comm.rank
    whole, own = load_typed_partition(directory, rank, "whole"), load_typed_partition(directory, rank, "own")
    graph, book = whole.topology, whole.book
    rng = np.random.default_rng(300 + rank)
    authors = np.arange(*book.node_range(graph.type_id("author"), rank))
    for fanouts, replace in (((5, 3), False), ((4, 3, 2), False), ((3, 2), True)):
        vanilla = TypedVanillaSampler(own.topology, fanouts, comm, replace=replace)
        hybrid = TypedHybridSampler(TypedNeighborSampler(graph, fanouts, replace=replace), book, rank)
        comm.stats.snapshot_and_reset()  # the samplers' setup round
        for step in range(2):
            # Owned papers (the training seeds) and owned authors: seeds of any type this worker owns.
            seeds = np.concatenate([rng.choice(whole.train_idx, 10 + 5 * rank + step, replace=False),
                                    rng.choice(authors, 3, replace=False)])
            key = derive_key(11, 0, step, rank)
            expected = sample_typed_blocks(graph, seeds, fanouts, key=key, replace=replace)
            assert_typed_blocks_equal(vanilla.sample(torch.from_numpy(seeds), key), expected)
            counts = only(comm.stats.snapshot_and_reset(), "sample")
            assert (counts["rounds"], counts["calls"]) == (2 * (len(fanouts) - 1), 4 * (len(fanouts) - 1)), counts
            assert_typed_blocks_equal(hybrid.sample(seeds, key), expected)
            assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())
    foreign = book.node_range(0, (rank + 1) % comm.world_size)[0]  # the next part's first paper
    for sampler in (vanilla, hybrid):
        with pytest.raises(ValueError, match=rf"seeds: expected nodes owned by rank {rank}, .*got \[{foreign}\]"):
            sampler.sample(np.array([int(whole.train_idx[0]), foreign]), 1)


def check_typed_store(comm: Comm, directory: str) -> None:
    rank = comm.rank
    own = load_typed_partition(directory, rank, "own")
    schema, book, graph = own.schema, own.book, load_typed_partition(directory, rank, "whole").topology
    # The oracle: the one-process store over every part's rows, end to end (each type in id order).
    parts = [load_typed_partition(directory, q, "own") for q in range(comm.world_size)]
    every = {t: None if x is None else np.concatenate([p.features[t] for p in parts]) for t, x in own.features.items()}
    rng = np.random.default_rng(400 + rank)
    cases = {"across owners and types": rng.choice(schema.num_nodes, 300 + rank, replace=False),
             "none on rank 0": rng.choice(schema.num_nodes, 0 if rank == 0 else 50, replace=False)}
    for dtype in ("float32", "bfloat16"):
        rows = {t: None if x is None else encode(x, dtype) for t, x in own.features.items()}
        store = TypedPartitionedStore(schema, book, rows, comm)
        reference = TypedLocalStore(graph, {t: None if x is None else encode(x, dtype) for t, x in every.items()})
        comm.stats.snapshot_and_reset()
        for name, ids in cases.items():
            got, want = store.gather(torch.from_numpy(ids)), reference.gather(torch.from_numpy(ids))
            assert got.num_src == want.num_src
            # Rows arrive as stored (the model widens half precision): half the bytes to move and keep.
            assert {v.dtype for v in got.features.values()} == {getattr(torch, dtype)}, (dtype, name)
            for field in ("positions", "features", "ids"):
                a, b = getattr(got, field), getattr(want, field)
                assert a.keys() == b.keys() and all(torch.equal(a[t], b[t]) for t in a), (dtype, name, field)
            counts = only(comm.stats.snapshot_and_reset(), "feature")
            assert (counts["rounds"], counts["calls"]) == (2, 4), (dtype, name, counts)


def check_typed_layerwise(directory: str, rank: int, world_size: int, port: int) -> None:
    """Over the typed partition ``directory``: every worker's layer-wise rows of R-GCN, R-SAGE and R-GAT, in the
    hybrid and the vanilla view, == the one-process typed_layerwise_inference over the whole graph and every part's
    rows; its --eval full scores == those of the one-process logits."""
    from gnnscale.inference.typed_distributed import (evaluate_full_typed_distributed, own_ids,
                                                      typed_distributed_layerwise)
    from gnnscale.inference.typed_layerwise import typed_layerwise_inference
    from gnnscale.nn.typed_models import TypedModel, TypedModelConfig

    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        whole = load_typed_partition(directory, rank, "whole")
        parts = [load_typed_partition(directory, q, "own") for q in range(world_size)]
        every = {t: None if x is None else np.concatenate([p.features[t] for p in parts])
                 for t, x in whole.features.items()}
        dims = {t: x.shape[1] for t, x in every.items() if x is not None}
        for name in ("rgcn", "rsage", "rgat"):
            torch.manual_seed(0)  # the same weights on every worker
            model = TypedModel(TypedModelConfig.for_graph(whole.schema, feature_dims=dims, name=name, num_layers=2,
                                                          num_classes=whole.num_classes, hidden_dim=8, heads=2))
            with tempfile.TemporaryDirectory() as tmp:
                # The oracle: one process over the whole graph, rows by global id.
                expected = np.load(typed_layerwise_inference(model, whole.topology, every, tmp)[-1])
                for view in ("whole", "own"):
                    part = load_typed_partition(directory, rank, view)
                    work = Path(tmp) / view
                    work.mkdir()
                    got = np.load(typed_distributed_layerwise(model, part, comm, work, chunk_size=97)[-1])
                    np.testing.assert_allclose(got, expected[own_ids(part)], rtol=1e-5, atol=1e-5,
                                               err_msg=f"{name}, {view}")
                    scores = evaluate_full_typed_distributed(model, part, comm)
                    for split in ("val", "test"):
                        nodes = np.concatenate([getattr(p, f"{split}_idx") for p in parts])
                        labels = np.concatenate([p.labels[getattr(p, f"{split}_idx") - p.label_offset]
                                                 for p in parts])
                        accuracy = float((expected[nodes].argmax(axis=1) == labels).mean())
                        assert scores[split] == pytest.approx(accuracy), (name, view, split)
    finally:
        shutdown()
