"""Distributed training end to end: real torchrun launches of `gnnscale train --partitions`, gloo on
127.0.0.1. Hybrid and vanilla must train identically with 2L vs 2 rounds per iteration, one worker
must equal the single-machine trainer, two "machines" must train like one, and a broken part, a
dead peer or a frozen one must stop every worker with a message naming the cause."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.feature_dtype import decode, encode
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.partition import load_partition, read_manifest, write_partition_dir
from gnnscale.train.checks import check_partition_launch
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model
from gnnscale.train.batches import epoch_batches
from launch import LAUNCH_TIMEOUT_S, Launch, rendezvous_port, run_launch, torchrun, torchrun_machine

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
TRAIN_ARGS = ["--model", "sage", "--hidden", "16", "--batch-size", "64", "--epochs", "2", "--lr", "0.01",
              "--seed", "3", "--threads", "1", "--quiet"]
# A run that is still training when a fault is injected after its first epoch.
LONG_RUN = ["--fanouts", "4,3", "--model", "sage", "--hidden", "16", "--batch-size", "16", "--epochs", "200",
            "--threads", "1"]


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


@pytest.fixture(scope="module")
def partitions(dataset, tmp_path_factory):
    """Partition directories of the small dataset, by number of parts (METIS)."""
    root = tmp_path_factory.mktemp("parts")
    for p in (1, 2, 4):
        write_partition_dir(dataset, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (1, 2, 4)}


@pytest.fixture(scope="module")
def launched(partitions, tmp_path_factory):
    """``launched(nproc, layout, fanouts)``: rank 0's metrics of one single-machine launch, run once per
    module (the two-machine test compares against the same run the layout test made)."""
    runs: dict[tuple, dict] = {}
    scratch = tmp_path_factory.mktemp("metrics")

    def get(nproc: int, layout: str, fanouts: str) -> dict:
        if (nproc, layout, fanouts) not in runs:
            out = scratch / f"{layout}{nproc}_{fanouts}.json"
            run = run_launch(torchrun(nproc, "--partitions", str(partitions[nproc]), "--layout", layout,
                                      "--metrics-out", str(out), "--fanouts", fanouts, *TRAIN_ARGS))
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            runs[nproc, layout, fanouts] = json.loads(out.read_text())
        return runs[nproc, layout, fanouts]

    return get


# 4 workers and 3 layers: the slow tier (27 s); 2 workers and 2 layers prove the same claim in the default one.
@pytest.mark.parametrize("nproc, fanouts", [(2, "4,3"), pytest.param(4, "4,3,2", marks=pytest.mark.slow)])
def test_hybrid_and_vanilla_train_identically_with_2_vs_2L_rounds(launched, nproc, fanouts):
    hybrid = launched(nproc, "hybrid", fanouts)
    vanilla = launched(nproc, "vanilla", fanouts)
    num_layers = len(fanouts.split(","))
    for h, v in zip(hybrid["history"], vanilla["history"], strict=True):
        # Same keys, same blocks, same features: the layouts differ only in communication.
        assert h["loss"] == v["loss"]
        assert (h["val_acc"], h["test_acc"], h["sampled_edges"]) == (v["val_acc"], v["test_acc"], v["sampled_edges"])
        assert h["rounds_per_iteration"]["sample"] + h["rounds_per_iteration"]["feature"] == 2
        assert v["rounds_per_iteration"]["sample"] + v["rounds_per_iteration"]["feature"] == 2 * num_layers
        assert h["rounds_per_iteration"]["grad"] == v["rounds_per_iteration"]["grad"] == 1
        assert h["bytes_per_iteration"]["sample"] == 0 < v["bytes_per_iteration"]["sample"]
        assert h["bytes_per_iteration"]["feature"] == v["bytes_per_iteration"]["feature"] > 0
        for m in (h, v):
            # Every phase was timed. Sampling and fetching run in the background stage, beside the
            # training thread, whose own phases (the step, the gradient sync, waiting for data) are
            # disjoint parts of the epoch.
            assert all(m[k] > 0 for k in ("sample_s", "fetch_s", "forward_backward_s", "grad_sync_s", "wait_s"))
            training_thread = m["forward_backward_s"] + m["grad_sync_s"] + m["wait_s"]
            assert training_thread <= m["epoch_s"], (training_thread, m["epoch_s"])
            # Rank 0's CPU over the epoch: its threads ran, at most on every core all the time.
            assert 0 < m["cpu_s"] <= m["epoch_s"] * os.cpu_count(), (m["cpu_s"], m["epoch_s"])


@pytest.mark.slow
def test_background_loading_does_not_change_distributed_training(launched, partitions, tmp_path):
    """Vanilla's loading stage is collective (remote sampling, feature fetch) and runs on its own process
    group beside the training step; run ahead (the default --prefetch 1) or not, the workers must train
    identically."""
    overlapped = launched(2, "vanilla", "4,3")
    out = tmp_path / "inline.json"
    run = run_launch(torchrun(2, "--partitions", str(partitions[2]), "--layout", "vanilla", "--metrics-out",
                              str(out), "--fanouts", "4,3", *TRAIN_ARGS, "--prefetch", "0"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    inline = json.loads(out.read_text())
    for a, b in zip(inline["history"], overlapped["history"], strict=True):
        assert (a["loss"], a["val_acc"], a["test_acc"], a["sampled_edges"]) == (b["loss"], b["val_acc"],
                                                                               b["test_acc"], b["sampled_edges"])
        assert a["rounds_per_iteration"] == b["rounds_per_iteration"]
        assert a["bytes_per_iteration"] == b["bytes_per_iteration"]
        # Without the stage, loading is on the training thread: its phases add up within the epoch.
        phases = a["sample_s"] + a["fetch_s"] + a["forward_backward_s"] + a["grad_sync_s"]
        assert phases <= a["epoch_s"] and a["wait_s"] >= a["sample_s"] + a["fetch_s"] - 1e-6


def launch_on(device: str, partitions, out: Path, *extra: str, layout: str = "hybrid") -> dict:
    """Rank 0's metrics of 2 workers of ``layout`` trained with ``--device device`` (and ``extra`` flags)."""
    run = run_launch(torchrun(2, "--partitions", str(partitions[2]), "--layout", layout, "--metrics-out", str(out),
                              "--fanouts", "4,3", *TRAIN_ARGS, "--device", device, *extra))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_device_cpu_trains_distributed_bit_for_bit_like_no_device(launched, partitions, tmp_path):
    """--device cpu on every worker, sampling on the device and feature rows held there: the model, the
    copy stage (the identity), the device sampler (the fused sampler's blocks in torch ops), the device
    feature cache in front of the partitioned store (the same rows, still two feature rounds) and the
    gradient all-reduce (no host copy) as without the flags, bit for bit."""
    on_cpu = launch_on("cpu", partitions, tmp_path / "cpu.json", "--sample-on", "device", "--gpu-cache-fraction",
                       "0.3")
    for a, b in zip(on_cpu["history"], launched(2, "hybrid", "4,3")["history"], strict=True):
        assert (a["loss"], a["iteration_losses"], a["val_acc"], a["test_acc"]) == \
            (b["loss"], b["iteration_losses"], b["val_acc"], b["test_acc"])
        assert a["rounds_per_iteration"] == b["rounds_per_iteration"]


def test_vanilla_on_the_device_path_trains_bit_for_bit_like_no_device(launched, partitions, tmp_path):
    """--layout vanilla with --device cpu and feature rows held on the device (the GPU cache in front of the
    partitioned store, its hot set ranked by in-degrees gathered from both parts): its sampling stays on the host
    (owners' rounds), and the run is the one without the flags, bit for bit, with the same rounds."""
    on_cpu = launch_on("cpu", partitions, tmp_path / "vanilla.json", "--gpu-cache-fraction", "0.3", layout="vanilla")
    for a, b in zip(on_cpu["history"], launched(2, "vanilla", "4,3")["history"], strict=True):
        assert (a["loss"], a["iteration_losses"], a["val_acc"], a["test_acc"]) == \
            (b["loss"], b["iteration_losses"], b["val_acc"], b["test_acc"])
        assert a["rounds_per_iteration"] == b["rounds_per_iteration"]
        assert a["bytes_per_iteration"]["feature"] < b["bytes_per_iteration"]["feature"]  # hits ask no owner


@pytest.mark.gpu
def test_vanilla_on_the_gpus_trains_like_on_the_cpu(launched, partitions, tmp_path):
    """Two vanilla workers with --device cuda (and a GPU cache): host sampling, the step on the GPU; the losses
    are the CPU run's within 1e-4."""
    on_gpu = launch_on("cuda", partitions, tmp_path / "vanilla_cuda.json", "--gpu-cache-fraction", "0.3",
                       layout="vanilla")
    on_cpu = launched(2, "vanilla", "4,3")
    np.testing.assert_allclose([h["iteration_losses"] for h in on_gpu["history"]],
                               [h["iteration_losses"] for h in on_cpu["history"]], rtol=1e-4)
    for a, b in zip(on_gpu["history"], on_cpu["history"], strict=True):
        assert abs(a["test_acc"] - b["test_acc"]) <= 0.02


@pytest.mark.gpu
def test_two_workers_on_the_gpus_train_like_two_on_the_cpu(launched, partitions, tmp_path):
    """Two workers with --device cuda: on one GPU they share it and reduce gradients through host memory
    over gloo; on two or more each has its own and reduces over NCCL. Either way the losses are the CPU
    run's within 1e-4 (sums in another order) and the gradient is one round per iteration."""
    on_gpu = launch_on("cuda", partitions, tmp_path / "cuda.json")
    on_cpu = launched(2, "hybrid", "4,3")
    np.testing.assert_allclose([h["loss"] for h in on_gpu["history"]], [h["loss"] for h in on_cpu["history"]],
                               rtol=1e-4)
    for a, b in zip(on_gpu["history"], on_cpu["history"], strict=True):
        assert abs(a["test_acc"] - b["test_acc"]) <= 0.02
        assert a["rounds_per_iteration"]["grad"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("feature_dtype", ["float16", "bfloat16"])
def test_half_precision_parts_train_exactly_like_float32_parts_of_the_rounded_features(dataset, tmp_path,
                                                                                      feature_dtype):
    """Half precision changes what is stored and sent, not how the workers compute: parts stored in
    float16 / bfloat16 train bit for bit like float32 parts holding the same (rounded) values, with half
    the feature bytes received per row."""
    rounded = replace(dataset, features=decode(encode(dataset.features, feature_dtype)).numpy())
    write_partition_dir(dataset, 2, "metis", tmp_path / "half", feature_dtype=feature_dtype)
    write_partition_dir(rounded, 2, "metis", tmp_path / "wide")
    metrics = {}
    for name in ("half", "wide"):
        out = tmp_path / f"{name}.json"
        run = run_launch(torchrun(2, "--partitions", str(tmp_path / name), "--layout", "hybrid", "--metrics-out",
                                  str(out), "--fanouts", "4,3", *TRAIN_ARGS))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        metrics[name] = json.loads(out.read_text())["history"]
    assert read_manifest(tmp_path / "half")["feature_dtype"] == feature_dtype
    for h, w in zip(metrics["half"], metrics["wide"], strict=True):
        assert (h["loss"], h["val_acc"], h["test_acc"], h["sampled_edges"]) == (w["loss"], w["val_acc"],
                                                                               w["test_acc"], w["sampled_edges"])
        assert h["bytes_per_iteration"]["feature"] < 0.75 * w["bytes_per_iteration"]["feature"]


@pytest.mark.slow
def test_one_worker_equals_the_single_machine_trainer(dataset, launched):
    distributed = launched(1, "hybrid", "4,3")
    model_cfg = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=dataset.num_classes,
                            num_layers=2)
    train_cfg = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=2, lr=0.01, seed=3, threads=1)
    single = fit(seeded_model(model_cfg, train_cfg.seed), dataset, inputs="blocks", config=train_cfg, progress=False)
    for d, s in zip(distributed["history"], single.history, strict=True):
        assert (d["loss"], d["train_acc"], d["val_acc"], d["test_acc"]) == (s["loss"], s["train_acc"], s["val_acc"],
                                                                         s["test_acc"])


@pytest.mark.slow
def test_two_machines_train_like_one(partitions, launched, tmp_path):
    # torchrun --nnodes 2 --node-rank 0|1 on one host: two launchers, one worker each, rendezvous on a port.
    port, out = rendezvous_port(), tmp_path / "two_machines.json"
    args = ["--partitions", str(partitions[2]), "--layout", "hybrid", "--metrics-out", str(out), "--fanouts", "4,3",
            *TRAIN_ARGS]
    machines = [Launch(torchrun_machine(rank, 2, port, *args)) for rank in (0, 1)]
    try:
        for machine in machines:
            assert machine.finish(LAUNCH_TIMEOUT_S) == 0, machine.tail()
    finally:
        for machine in machines:
            machine.stop()
    one_machine = launched(2, "hybrid", "4,3")
    two_machines = json.loads(out.read_text())
    assert two_machines["world_size"] == 2
    for a, b in zip(two_machines["history"], one_machine["history"], strict=True):
        assert (a["loss"], a["train_acc"], a["val_acc"], a["test_acc"], a["sampled_edges"]) == \
            (b["loss"], b["train_acc"], b["val_acc"], b["test_acc"], b["sampled_edges"])


def copy_partition(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_broken_part_file_stops_every_worker_with_its_name(partitions, tmp_path, damage):
    broken = copy_partition(partitions[2], tmp_path / "broken")
    target = broken / "part1" / "labels.npy"
    if damage == "corrupt":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    else:
        target.unlink()
    start = time.monotonic()
    run = run_launch(torchrun(2, "--partitions", str(broken), "--fanouts", "4,3", *TRAIN_ARGS, "--timeout", "60"))
    assert run.returncode != 0
    assert time.monotonic() - start < 120
    output = run.stdout + run.stderr
    # Said once on the terminal (by the first worker of the machine, not once per worker), naming the
    # rank and the file, and again in torchrun's failure summary for each worker.
    said = re.findall(r"^gnnscale train: stopped: rank 1 of 2 failed.*$", output, re.MULTILINE)
    assert len(said) == 1 and "part1/labels.npy" in said[0], output[-3000:]
    assert len(re.findall(r"traceback : gnnscale train: stopped: rank 1 of 2 failed .*part1/labels.npy", output)) == 2


@pytest.mark.slow
def test_a_peer_dead_on_another_machine_stops_this_one_through_the_collective_wrapper(partitions):
    # Two "machines": torchrun on machine 1 sees its worker die and stops, but nothing tells machine
    # 0's torchrun. Only gnnscale's collective wrapper can stop rank 0: its collective fails, Comm._run
    # raises PeerFailure, the CLI says so and exits. A wrapper that hung instead would fail this test.
    port = rendezvous_port()
    args = ["--partitions", str(partitions[2]), *LONG_RUN, "--timeout", "120"]
    machines = [Launch(torchrun_machine(rank, 2, port, *args)) for rank in (0, 1)]
    try:
        machines[0].wait_for("epoch   0", LAUNCH_TIMEOUT_S)  # training is under way on both
        (victim,) = machines[1].worker_pids()
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        line = machines[0].wait_for("gnnscale train: stopped:", 60)
        assert re.match(r"gnnscale train: stopped: rank 0 of 2: collective .* failed: .*; another worker died", line)
        assert machines[0].finish(60) != 0 and machines[1].finish(60) != 0
        assert time.monotonic() - killed_at < 90
        # torchrun's own summary on machine 0 names the cause too (the worker's error file).
        assert "traceback : gnnscale train: stopped: rank 0 of 2: collective" in machines[0].text()
    finally:
        for machine in machines:
            machine.stop()


# Long enough that start-up on a busy machine (workers import torch at different speeds, and the
# timeout also bounds joining the run) never trips it; the freeze is what must.
FREEZE_TIMEOUT_S = 30


@pytest.mark.slow  # waits out the 30 s timeout by design
def test_a_frozen_peer_stops_the_others_within_the_timeout(partitions):
    # SIGSTOP: the peer is alive but silent, so torchrun sees nothing wrong. The others must stop on
    # their own after --timeout, saying why.
    launch = Launch(torchrun(2, "--partitions", str(partitions[2]), *LONG_RUN, "--timeout", str(FREEZE_TIMEOUT_S)))
    try:
        launch.wait_for("epoch   0", LAUNCH_TIMEOUT_S)
        survivor, victim = launch.worker_pids()
        os.kill(victim, signal.SIGSTOP)
        frozen_at = time.monotonic()
        line = launch.wait_for("gnnscale train: stopped:", FREEZE_TIMEOUT_S + 60)
        detected = time.monotonic() - frozen_at
        assert re.match(r"gnnscale train: stopped: rank 0 of 2: collective .* failed: Timed out", line), line
        # The collective gives up after --timeout, not before (the peer may be mid-iteration), and
        # well within a bound after it.
        assert FREEZE_TIMEOUT_S - 10 <= detected <= FREEZE_TIMEOUT_S + 40, detected
        # torchrun notices the survivor has exited and turns to the frozen worker.
        launch.wait_for(f"Sending process {victim} closing signal SIGTERM", 60)
        assert not os.path.exists(f"/proc/{survivor}") or " Z " in open(f"/proc/{survivor}/stat").read()
        # A stopped process cannot act on SIGTERM: torchrun SIGKILLs it after 30 s (measured by
        # benchmarks/faults.py); here the test does it at once.
        os.kill(victim, signal.SIGKILL)
        assert launch.finish(60) != 0
    finally:
        launch.stop()


@pytest.mark.slow
def test_a_worker_count_that_does_not_divide_the_part_count_is_refused(partitions):
    run = run_launch(torchrun(3, "--partitions", str(partitions[4]), "--fanouts", "4,3", *TRAIN_ARGS))
    output = run.stdout + run.stderr
    said = re.findall(r"^gnnscale train: error: .*$", output, re.MULTILINE)
    assert run.returncode != 0
    assert said == [f"gnnscale train: error: --partitions: {partitions[4]} has 4 parts, which 3 workers cannot "
                    "share equally (each worker holds the same number of consecutive parts); launch 1, 2, 4 "
                    "workers, or repartition with gnnscale partition --parts 3"], output[-3000:]


@pytest.mark.slow
def test_two_workers_on_four_parts_train_identically_in_hybrid_and_vanilla(partitions, tmp_path):
    """Each worker holds two consecutive parts as one: hybrid reads their features and the whole
    topology, vanilla their in-edges, concatenated; same keys, so the same blocks and losses."""
    runs = {}
    for layout in ("hybrid", "vanilla"):
        out = tmp_path / f"{layout}.json"
        run = run_launch(torchrun(2, "--partitions", str(partitions[4]), "--layout", layout, "--metrics-out",
                                  str(out), "--fanouts", "4,3", *TRAIN_ARGS))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        runs[layout] = json.loads(out.read_text())
    manifest = read_manifest(partitions[4])
    assert runs["hybrid"]["world_size"] == 2
    for h, v in zip(runs["hybrid"]["history"], runs["vanilla"]["history"], strict=True):
        assert (h["loss"], h["val_acc"], h["sampled_edges"]) == (v["loss"], v["val_acc"], v["sampled_edges"])
        assert np.isfinite(h["loss"]) and h["bytes_per_iteration"]["feature"] > 0
    # Every training node is some worker's: 2 workers, each with parts 2w and 2w + 1's training nodes.
    train = manifest["split_sizes"]["train_idx"]
    assert runs["hybrid"]["history"][0]["num_batches"] == -(-max(train[0] + train[1], train[2] + train[3]) // 64)


@pytest.fixture(scope="module")
def uneven(dataset, tmp_path_factory):
    """Two parts with 2 and 3 training nodes (5 training nodes, randomly assigned)."""
    few = replace(dataset, train_idx=np.array([10, 200, 400, 700, 1100], dtype=np.int64))
    path = tmp_path_factory.mktemp("uneven") / "p2"
    write_partition_dir(few, 2, "random", path, seed=1)
    return path


def test_disagreeing_batch_counts_are_refused_with_a_batch_size_that_works(uneven, monkeypatch, capsys):
    train = read_manifest(uneven)["split_sizes"]["train_idx"]
    assert sorted(train) == [2, 3]
    small, large = train.index(2), train.index(3)
    # --batch-size 1: the part with 3 training nodes needs 3 iterations, the other has only 2 seeds.
    expected = (f"with --batch-size 1, part {large} (3 training nodes) needs 3 iterations per epoch, but "
                f"part {small} has only 2 training nodes and every worker runs the same iterations; use --batch-size "
                "2 or more")
    with pytest.raises(ValueError, match=re.escape(expected)):
        check_partition_launch(uneven, 2, batch_size=1)
    # The size it names works: 2 iterations on each worker, none of them empty.
    check_partition_launch(uneven, 2, batch_size=2)
    for part in (0, 1):
        seeds = torch.from_numpy(load_partition(uneven, part).train_idx.copy())
        assert all(batch.numel() > 0 for batch in epoch_batches(seeds, 2, seed=0, epoch=0, rank=part))
    # From the command line under torchrun's environment: one line, before joining the run.
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--partitions", str(uneven), "--batch-size", "1", "--quiet"]) == 2
    # Either --method balances training nodes to within one: only fewer parts give each more.
    assert capsys.readouterr().err == f"gnnscale train: error: --batch-size: {expected}, or repartition with fewer --parts " \
                                      "(gnnscale partition already gives each of the 2 parts 2 or 3 of the 5 " \
                                      "training nodes, with either --method)\n"
