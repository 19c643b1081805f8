"""Distributed training end to end: real torchrun launches of `gnnscale train --partitions`, gloo on
127.0.0.1. Hybrid and vanilla must train identically with 2L vs 2 rounds per iteration, one worker
must equal the single-machine trainer, and a broken part or a dead worker must stop every worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.partition import write_partition_dir
from gnnscale.train.config import TrainConfig
from gnnscale.train.run import run_training

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
TRAIN_ARGS = ["--model", "sage", "--hidden", "16", "--batch-size", "64", "--epochs", "2", "--lr", "0.01",
              "--seed", "3", "--threads", "1", "--quiet"]
LAUNCH_TIMEOUT_S = 240


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
            "127.0.0.1", "--master-port", str(free_port()), "-m", "gnnscale", "train", *args]


def launch(nproc: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun(nproc, *args), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def train_metrics(partition_dir, nproc: int, layout: str, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / f"{layout}{nproc}.json"
    run = launch(nproc, "--partitions", str(partition_dir), "--layout", layout, "--metrics-out", str(out),
                 *TRAIN_ARGS, *extra)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("nproc, fanouts", [(2, "4,3"), (4, "4,3,2")])
def test_hybrid_and_vanilla_train_identically_with_2_vs_2L_rounds(partitions, nproc, fanouts, tmp_path):
    hybrid = train_metrics(partitions[nproc], nproc, "hybrid", tmp_path, "--fanouts", fanouts)
    vanilla = train_metrics(partitions[nproc], nproc, "vanilla", tmp_path, "--fanouts", fanouts)
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
        for split in ("sample_s", "fetch_s", "forward_backward_s", "grad_sync_s"):
            assert h[split] >= 0 and v[split] >= 0


def test_background_loading_does_not_change_distributed_training(partitions, tmp_path):
    """Vanilla's loading stage is collective (remote sampling, feature fetch) and runs on its own process
    group beside the training step; run ahead or not, the workers must train identically."""
    runs = {depth: train_metrics(partitions[2], 2, "vanilla", tmp_path / f"d{depth}", "--fanouts", "4,3",
                                 "--prefetch", str(depth)) for depth in (0, 2)}
    for a, b in zip(runs[0]["history"], runs[2]["history"], strict=True):
        assert (a["loss"], a["val_acc"], a["test_acc"], a["sampled_edges"]) == (b["loss"], b["val_acc"],
                                                                               b["test_acc"], b["sampled_edges"])
        assert a["rounds_per_iteration"] == b["rounds_per_iteration"]
        assert a["bytes_per_iteration"] == b["bytes_per_iteration"]


def test_one_worker_equals_the_single_machine_trainer(dataset, partitions, tmp_path):
    distributed = train_metrics(partitions[1], 1, "hybrid", tmp_path, "--fanouts", "4,3")
    model_cfg = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=dataset.num_classes,
                            num_layers=2)
    train_cfg = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=2, lr=0.01, seed=3, threads=1)
    single = run_training(dataset, model_cfg, train_cfg, progress=False)
    for d, s in zip(distributed["history"], single.history, strict=True):
        assert (d["loss"], d["train_acc"], d["val_acc"], d["test_acc"]) == (s["loss"], s["train_acc"], s["val_acc"],
                                                                         s["test_acc"])


def copy_partition(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    return dst


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
    run = launch(2, "--partitions", str(broken), "--fanouts", "4,3", *TRAIN_ARGS, "--timeout", "60")
    assert run.returncode != 0
    assert time.monotonic() - start < 120
    # Both workers say it (not only the one with the bad file), naming the rank and the file.
    assert run.stderr.count("gnnscale train: stopped: rank 1 of 2 failed") == 2, run.stderr[-3000:]
    assert run.stderr.count("part1/labels.npy") == 2


def test_a_dead_worker_stops_the_run_within_bounded_time(partitions):
    proc = subprocess.Popen(torchrun(2, "--partitions", str(partitions[2]), "--fanouts", "4,3", "--model", "sage",
                                     "--batch-size", "16", "--epochs", "200", "--threads", "1", "--timeout", "30"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        first_epoch = ""
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while "epoch   0" not in first_epoch and time.monotonic() < deadline:
            first_epoch = proc.stdout.readline()
        assert "epoch   0" in first_epoch, "training never started"
        victim = worker_pids(proc.pid)[-1]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0
        assert time.monotonic() - killed_at < 90
        assert "exitcode" in output and ("-9" in output or "SIGKILL" in output), output[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def worker_pids(launcher_pid: int) -> list[int]:
    """PIDs of the worker processes torchrun started (its children), oldest first."""
    children = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    return sorted(int(pid) for pid in children)
