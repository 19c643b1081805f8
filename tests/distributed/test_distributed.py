"""gnnscale/distributed with real processes: gloo on 127.0.0.1, workers spawned per run.

Each run shares one process group across many checks (spawning costs seconds); the checks
themselves live in tests/dist_workers.py and assert inside the workers. A worker that fails, dies
unexpectedly or outlives the timeout fails the test. The fetch's wire is checked in one process, beside
the feature stores (tests/features/test_partitioned.py).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import time
from dataclasses import dataclass

import pytest
import torch

import dist_workers
from launch import rendezvous_port
from gnnscale.distributed import DistContext, init_from_env
from gnnscale.graph.datasets import load_dataset
from gnnscale.partition.typed_directory import write_typed_partition_dir

RUN_TIMEOUT_S = 120.0  # bound on one whole spawned run (start-up included) on a busy 2-core machine


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one worker process did: status "ok" (result), "error" (traceback), "died" (no report)
    or "hung" (still running at the deadline, then killed)."""

    status: str
    payload: object
    exitcode: int | None


def spawn_run(fn, world_size: int, timeout_s: float = RUN_TIMEOUT_S) -> list[Outcome]:
    """Run ``fn(rank, world_size, port)`` in ``world_size`` spawned processes; every wait is bounded."""
    ctx = mp.get_context("spawn")
    port = rendezvous_port()  # rank 0 binds it: a port the kernel never hands out itself (see launch.py)
    pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]
    procs = [ctx.Process(target=dist_workers.entry, args=(fn, rank, world_size, port, pipes[rank][1]), daemon=True)
             for rank in range(world_size)]
    for proc in procs:
        proc.start()
    for _, child_end in pipes:
        child_end.close()  # so that a worker dying without a report reads as EOF here
    deadline = time.monotonic() + timeout_s
    reports: list[tuple[str, object]] = []
    try:
        for reader, _ in pipes:
            if not reader.poll(max(0.0, deadline - time.monotonic())):
                reports.append(("hung", None))
                continue
            try:
                reports.append(reader.recv())
            except EOFError:
                reports.append(("died", None))
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(10)
        for reader, _ in pipes:
            reader.close()
    return [Outcome(status, payload, proc.exitcode) for (status, payload), proc in zip(reports, procs)]


def spawn_ok(fn, world_size: int) -> list[object]:
    """Results of a run in which every worker must succeed."""
    outcomes = spawn_run(fn, world_size)
    failed = {rank: o for rank, o in enumerate(outcomes) if o.status != "ok" or o.exitcode != 0}
    assert not failed, "\n".join(f"rank {r}: {o.status}, exit code {o.exitcode}\n{o.payload or ''}"
                                 for r, o in failed.items())
    return [o.payload for o in outcomes]


# ---------------------------------------------------------------------------------------------------
# spawned runs
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_samplers_feature_store_and_agree(world_size):
    """Vanilla and hybrid blocks == sample_blocks on the full graph, 2(L-1) sample rounds per call,
    feature gather == indexing the full matrix in 2 rounds, agree() stops every worker with the
    failing rank's message (all inside the workers); here: bytes sent == bytes received overall."""
    totals = spawn_ok(dist_workers.check_everything, world_size)
    for category in ("sample", "feature", "setup"):
        sent = sum(t[category]["bytes_sent"] for t in totals)
        received = sum(t[category]["bytes_received"] for t in totals)
        assert sent == received > 0, (category, sent, received)
    assert all(t["grad"]["rounds"] == 0 for t in totals)


@pytest.mark.parametrize("world_size", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_typed_layerwise_inference_over_a_partition_equals_one_process(world_size, tmp_path):
    """Every worker's layer-wise rows of a typed model over its own nodes of every type (hybrid and vanilla view) ==
    one process's over the whole graph, and --eval full's scores over the partition == the one-process logits'."""
    dataset = load_dataset("synthetic", None, preset="mag", scale=0.003)
    write_typed_partition_dir(dataset, world_size, "metis", tmp_path / "parts")
    spawn_ok(functools.partial(dist_workers.check_typed_layerwise, str(tmp_path / "parts")), world_size)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_typed_samplers_and_feature_store(world_size, tmp_path):
    """Over a typed partition of the mag-shaped graph: vanilla and hybrid typed blocks == sample_typed_blocks on the
    whole graph (2(L-1) sample rounds, none), the typed store's input == the one-process store's in 2 feature
    rounds, every type's rows in one exchange (all inside the workers)."""
    dataset = load_dataset("synthetic", None, preset="mag", scale=0.003)
    write_typed_partition_dir(dataset, world_size, "metis", tmp_path / "parts")
    spawn_ok(functools.partial(dist_workers.check_typed, str(tmp_path / "parts")), world_size)


def test_dead_worker_makes_the_others_raise_peer_failure():
    world_size = 3
    outcomes = spawn_run(dist_workers.die_before_collective, world_size)
    dead = outcomes[dist_workers.DEAD_RANK]
    assert (dead.status, dead.exitcode) == ("died", 1)
    for rank, o in enumerate(outcomes):
        if rank == dist_workers.DEAD_RANK:
            continue
        assert (o.status, o.exitcode) == ("ok", 0), f"rank {rank}: {o.status}\n{o.payload}"
        assert o.payload["elapsed_s"] < 60
        assert f"rank {rank} of {world_size}" in o.payload["message"]
        assert "category 'feature'" in o.payload["message"] and "Stopping the run" in o.payload["message"]


# ---------------------------------------------------------------------------------------------------
# in-process
# ---------------------------------------------------------------------------------------------------

TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"])
def test_init_from_env_without_torchrun_names_the_variable(missing):
    environ = {k: v for k, v in TORCHRUN_ENV.items() if k != missing}
    with pytest.raises(ValueError, match=rf"missing {missing}; launch the workers with torchrun"):
        init_from_env("gloo", environ=environ)


def test_init_from_env_empty_environment_names_every_variable():
    with pytest.raises(ValueError, match="missing RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; .*torchrun"):
        init_from_env(environ={})


def test_init_from_env_rejects_malformed_values():
    with pytest.raises(ValueError, match=r"WORLD_SIZE must be an integer, got 'two'"):
        init_from_env("gloo", environ={**TORCHRUN_ENV, "WORLD_SIZE": "two"})
    with pytest.raises(ValueError, match=r"backend: expected one of \('gloo', 'nccl'\)"):
        init_from_env("mpi", environ=TORCHRUN_ENV)
    with pytest.raises(ValueError, match=r"rank: expected a value in \[0, 2\), got 5"):
        init_from_env("gloo", environ={**TORCHRUN_ENV, "RANK": "5"})


def test_dist_context_validates():
    with pytest.raises(ValueError, match=r"world_size: expected >= 1, got 0"):
        DistContext(rank=0, world_size=0, backend="gloo", device=torch.device("cpu"))
    with pytest.raises(TypeError, match=r"device: expected a torch.device, got str"):
        DistContext(rank=0, world_size=1, backend="gloo", device="cpu")
