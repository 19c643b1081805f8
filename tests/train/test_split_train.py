"""Split-parallel training end to end (`torchrun -m gnnscale train --layout split`), the feature cache and
the per-epoch edge metrics, on real processes (gloo on 127.0.0.1).

* Split training on P workers equals the single-process trainer with batch size P x b on the same
  relabelled graph: the same loss in every iteration (relative difference < 1e-5 over 20 iterations),
  the same parameters (< 1e-4), the same full-neighborhood evaluation; every edge computed exactly once.
* The edge metrics of every layout equal an independent recomputation from re-sampled batches.
* A feature cache changes what crosses the network, never what is trained.
* A worker killed during split training stops every other worker with a clear error within --timeout.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnscale.cli import main as cli_main
from gnnscale.distributed.comm import CATEGORIES
from gnnscale.distributed import SHUFFLE_FOR_MODEL, data_parallel_edge_metrics, split_edge_metrics
from gnnscale.distributed.edge_metrics import epoch_edge_metrics
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.partition import load_partition, write_partition_dir
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model
from gnnscale.train.layouts import check_layout_options, layout_options
from gnnscale.train.layouts.data_parallel import UNION_ITERATIONS
from gnnscale.train.batches import epoch_batches
from gnnscale.train.layouts.split import exchanges_input_ahead
from gnnscale.train.run import RunOutputs
from launch import rendezvous_port, torchrun

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
MINIBATCH = 72  # seeds per iteration over all workers: 720 training nodes -> 10 iterations per epoch
EPOCHS = 2  # 20 iterations
FANOUTS = (4, 3)
FULL = "1000,1000"  # above every degree of the small graph: evaluation sees whole neighborhoods, no sampling
SEED = 3
LAUNCH_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    """METIS partition directories of the small synthetic dataset, by number of parts."""
    dataset = make_synthetic(SyntheticConfig(**SMALL))
    root = tmp_path_factory.mktemp("split_parts")
    for p in (2, 4):
        write_partition_dir(dataset, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (2, 4)}


def relabelled_dataset(partition_dir: Path, num_parts: int) -> NodeDataset:
    """The partitioned graph as one dataset (relabelled ids, the parts' rows in order): what the
    single-process trainer must see to draw the same mini-batches as split training."""
    parts = [load_partition(partition_dir, p, "whole") for p in range(num_parts)]

    def joined(name: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(p, name)) for p in parts])

    return NodeDataset(name="relabelled", graph=parts[0].topology, features=joined("features"),
                       labels=joined("labels"), train_idx=joined("train_idx"), val_idx=joined("val_idx"),
                       test_idx=joined("test_idx"), num_classes=parts[0].num_classes)


def model_args(model: str) -> list[str]:
    return ["--model", model, "--hidden", "8", "--heads", "2", "--dropout", "0", "--input-dropout", "0",
            "--attn-dropout", "0"]


def launch_training(nproc: int, partition_dir: Path, out: Path, *args: str) -> dict:
    """One torchrun launch of `gnnscale train --partitions`; rank 0's metrics JSON."""
    cmd = torchrun(nproc, "--partitions", str(partition_dir), "--fanouts", ",".join(map(str, FANOUTS)),
                   "--seed", str(SEED), "--lr", "0.01", "--threads", "1", "--quiet", "--metrics-out", str(out), *args)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def relative(a, b) -> float:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def split_cases():
    # The trainer runs are slow-tier, to keep the default tier short: there, the split blocks and training of
    # spawned workers are tested against the whole mini-batch and one process (test_split_distributed.py).
    cases = [(2, "sage", "owner"), (2, "gat", "owner"), (4, "gat", "owner"), (4, "sage", "owner"),
             (2, "sage", "replicated"), (4, "gat", "replicated")]
    return [pytest.param(*case, id="-".join(map(str, case))) for case in cases]


@pytest.mark.slow
@pytest.mark.parametrize("nproc, model, sampling", split_cases())
def test_split_training_equals_the_single_process_trainer(partitions, nproc, model, sampling, tmp_path):
    run = launch_training(nproc, partitions[nproc], tmp_path / "split.json", "--layout", "split",
                          "--split-sampling", sampling,
                          "--batch-size", str(MINIBATCH // nproc), "--epochs", str(EPOCHS), "--eval-fanouts", FULL,
                          "--save-model", str(tmp_path / "split.pt"), *model_args(model))
    dataset = relabelled_dataset(partitions[nproc], nproc)
    model_cfg = ModelConfig(name=model, in_dim=dataset.feature_dim, hidden_dim=8, num_classes=dataset.num_classes,
                            num_layers=len(FANOUTS), dropout=0.0, heads=2)
    train_cfg = TrainConfig(fanouts=FANOUTS, eval_fanouts=(1000, 1000), batch_size=MINIBATCH, epochs=EPOCHS, lr=0.01,
                            seed=SEED, threads=1)
    single = fit(seeded_model(model_cfg, train_cfg.seed), dataset, inputs="blocks", config=train_cfg,
                 outputs=RunOutputs(model_out=tmp_path / "single.pt"), progress=False)

    losses = [(d, s) for dh, sh in zip(run["history"], single.history, strict=True)
              for d, s in zip(dh["iteration_losses"], sh["iteration_losses"], strict=True)]
    assert len(losses) == EPOCHS * math.ceil(dataset.train_idx.size / MINIBATCH) == 20
    assert max(abs(d - s) / abs(s) for d, s in losses) < 1e-5
    split_state = torch.load(tmp_path / "split.pt")["state_dict"]
    single_state = torch.load(tmp_path / "single.pt")["state_dict"]
    for name, value in single_state.items():
        assert relative(split_state[name], value) < 1e-4, name
    for d, s in zip(run["history"], single.history):
        # Whole neighborhoods at inference: the same parameters classify every node the same way.
        assert (d["val_acc"], d["test_acc"]) == (s["val_acc"], s["test_acc"])
        rounds = d["rounds_per_iteration"]
        # Layer 0's exchange of input features (SAGE: sums; GAT: 8-wide rows, narrower than 2 x 16 of W x)
        # completes in the loading stage, one feature round; the step shuffles hidden features both ways.
        assert exchanges_input_ahead(model_cfg)
        # Owner sampling: one round per hop (the cross edges), on the loading stage's group.
        sample_rounds = len(FANOUTS) if sampling == "owner" else 0
        assert (rounds["sample"], rounds["feature"], rounds["shuffle"], rounds["grad"]) == \
            (sample_rounds, 1, 2 * len(FANOUTS) - 2, 1)
        assert d["bytes_per_iteration"]["feature"] > 0 and d["bytes_per_iteration"]["shuffle"] > 0
        assert 0 < d["shuffle_s"] < d["forward_backward_s"]
    check_split_edge_metrics(run, dataset, partitions[nproc], nproc, model, sampling)


def test_layer_0_exchange_runs_ahead_when_it_moves_no_more_than_the_step_would():
    sage = ModelConfig(name="sage", in_dim=100, hidden_dim=256, num_classes=47, num_layers=3)
    assert exchanges_input_ahead(sage) and exchanges_input_ahead(replace(sage, name="gcn"))
    assert not exchanges_input_ahead(replace(sage, input_dropout=0.2))  # the step draws the input's masks
    assert exchanges_input_ahead(replace(sage, name="gat", hidden_dim=256, heads=8))  # 100 <= 2 x 2048
    cora_gat = ModelConfig(name="gat", in_dim=1433, hidden_dim=8, num_classes=7, num_layers=2, heads=8)
    assert not exchanges_input_ahead(cora_gat)  # 1433 > 2 x 64
    # One layer: layer 0 is the output layer, out_heads x num_classes wide.
    assert exchanges_input_ahead(replace(cora_gat, in_dim=14, num_layers=1))  # 14 <= 2 x 1 x 7
    assert not exchanges_input_ahead(replace(cora_gat, in_dim=15, num_layers=1))


def check_split_edge_metrics(run: dict, dataset: NodeDataset, partition_dir: Path, nproc: int, model: str,
                             sampling: str) -> None:
    """Redundancy exactly 0, every count equal to split_edge_metrics on the re-sampled mini-batches, and
    rank 0's sampled edges: the whole mini-batch's (replicated) or its own destinations' in-edges (owner)."""
    book = load_partition(partition_dir, 0, "whole").book
    train_idx = torch.from_numpy(dataset.train_idx)
    num_batches = math.ceil(train_idx.numel() / MINIBATCH)
    for epoch, h in enumerate(run["history"]):
        minibatches = [sample_blocks(dataset.graph, seeds, FANOUTS, key=derive_key(SEED, epoch, step, 0))
                       for step, seeds in enumerate(epoch_batches(train_idx, num_batches, SEED, epoch))]
        expected = [split_edge_metrics(blocks, book, kind=SHUFFLE_FOR_MODEL[model]) for blocks in minibatches]
        got = h["edge_metrics"]
        assert got == epoch_edge_metrics(expected)  # the same counts, so the same ratios to the last bit
        assert got["redundancy"] == 0.0 and got["edges_computed"] == got["minibatch_edges"]
        rank0 = sum(int(b.in_degrees()[torch.from_numpy(book.owner(b.dst_ids.numpy()) == 0)].sum())
                    for blocks in minibatches for b in blocks)
        assert h["sampled_edges"] == (rank0 if sampling == "owner" else got["minibatch_edges"])
        assert got["iterations"] == num_batches


@pytest.mark.slow
def test_a_bfloat16_wire_halves_the_exchanged_bytes_and_trains_alike(partitions, tmp_path):
    """--shuffle-dtype bfloat16: every split exchange (layer 0's sums, the hidden shuffles both ways)
    sends exactly half the bytes, and training follows the float32 run closely but not bit for bit
    (the rows are rounded to 8 bits of mantissa on the wire, and summed in float32)."""
    common = ["--layout", "split", "--batch-size", str(MINIBATCH // 2), "--epochs", "1", *model_args("sage")]
    wide = launch_training(2, partitions[2], tmp_path / "f32.json", *common)
    narrow = launch_training(2, partitions[2], tmp_path / "bf16.json", *common, "--shuffle-dtype", "bfloat16")
    for w, n in zip(wide["history"], narrow["history"], strict=True):
        for category in ("feature", "shuffle"):
            assert n["bytes_per_iteration"][category] == w["bytes_per_iteration"][category] / 2 > 0, category
        assert n["rounds_per_iteration"] == w["rounds_per_iteration"]
        assert set(n["memory"]) == {"peak_rss_bytes_max"} and 50 * 2**20 < n["memory"]["peak_rss_bytes_max"] < 2**33
        losses = list(zip(w["iteration_losses"], n["iteration_losses"], strict=True))
        assert max(abs(a - b) / a for a, b in losses) < 0.01, losses
        assert any(a != b for a, b in losses)


def test_the_device_path_on_cpu_tensors_trains_the_host_split_bit_for_bit(partitions, tmp_path):
    """What a GPU run does differently, on the CPU: the layers' torch path (--kernels torch) and each worker's
    hottest own rows read through the device cache (--gpu-cache-fraction, GSplit's per-GPU caches). The same
    losses in every iteration and the same accuracies as the host split with the same kernels, bit for bit;
    the cache holds 0.25 x 1,200 rows on each worker, 600 in all, and serves more than half the rows read
    though it holds half of them (the hottest are read most)."""
    common = ["--layout", "split", "--batch-size", str(MINIBATCH // 2), "--epochs", "1", "--kernels", "torch",
              *model_args("sage")]
    host = launch_training(2, partitions[2], tmp_path / "host.json", *common)
    device = launch_training(2, partitions[2], tmp_path / "device.json", *common, "--gpu-cache-fraction", "0.25")
    for h, d in zip(host["history"], device["history"], strict=True):
        assert (d["loss"], d["iteration_losses"], d["val_acc"], d["test_acc"]) == \
               (h["loss"], h["iteration_losses"], h["val_acc"], h["test_acc"])
        assert d["rounds_per_iteration"] == h["rounds_per_iteration"]
        assert "gpu_cache" not in h
        cache = d["gpu_cache"]
        assert (cache["fraction"], cache["rows"]) == (0.25, 600)
        assert cache["hits"] == round(cache["hit_rate"] * cache["requests"]) and 0.5 < cache["hit_rate"] < 1


@pytest.mark.gpu
@pytest.mark.parametrize("model, cache", [("sage", "0"), ("gat", "0.5")])
def test_split_on_cuda_trains_like_the_cpu_run(partitions, tmp_path, model, cache):
    """Two workers on CUDA (sharing the GPU when only one is visible: the shuffles go through host memory over
    gloo; one GPU each: over NCCL): the model, the layers' sums and the step on the GPU, the splits and rows
    copied there, with or without the rows cached there. The losses of every iteration within 1e-4 of the CPU
    run's (sums in another order), the same rounds, the accuracies alike."""
    common = ["--layout", "split", "--batch-size", str(MINIBATCH // 2), "--epochs", "2", *model_args(model)]
    cpu = launch_training(2, partitions[2], tmp_path / "cpu.json", *common)
    gpu = launch_training(2, partitions[2], tmp_path / "gpu.json", *common, "--device", "cuda",
                          "--gpu-cache-fraction", cache)
    assert gpu["train"]["device"].startswith("cuda")
    for c, g in zip(cpu["history"], gpu["history"], strict=True):
        np.testing.assert_allclose(g["iteration_losses"], c["iteration_losses"], rtol=1e-4)
        assert g["rounds_per_iteration"] == c["rounds_per_iteration"]
        assert abs(g["val_acc"] - c["val_acc"]) <= 0.02 and abs(g["test_acc"] - c["test_acc"]) <= 0.02
        assert g["edge_metrics"] == c["edge_metrics"]  # the same splits: sampled on the host either way


@pytest.mark.slow
def test_a_cache_changes_the_bytes_not_the_training(partitions, tmp_path):
    """Hybrid without a cache vs vanilla with one (the layouts train identically, tested elsewhere): the same
    losses and accuracies, exactly 2 feature rounds, fewer feature bytes; and the data-parallel edge metrics
    equal data_parallel_edge_metrics on the re-sampled micro-batches."""
    common = ["--batch-size", "40", "--epochs", "1", *model_args("sage")]
    plain = launch_training(2, partitions[2], tmp_path / "hybrid.json", "--layout", "hybrid", *common)
    cached = launch_training(2, partitions[2], tmp_path / "cached.json", "--layout", "vanilla", "--cache-fraction",
                             "0.2", *common)
    for p, c in zip(plain["history"], cached["history"], strict=True):
        assert (p["loss"], p["iteration_losses"], p["val_acc"], p["test_acc"]) == \
               (c["loss"], c["iteration_losses"], c["val_acc"], c["test_acc"])
        assert p["rounds_per_iteration"]["feature"] == c["rounds_per_iteration"]["feature"] == 2
        assert c["bytes_per_iteration"]["feature"] < 0.8 * p["bytes_per_iteration"]["feature"]
        assert "cache" not in p and 0.2 < c["cache"]["hit_rate"] <= 1 and c["cache"]["rows_per_worker"] == 240
        assert p["edge_metrics"] == c["edge_metrics"]
        # Every layout reports its largest worker's peak resident memory (no "held" bytes: matrix layouts only).
        assert set(p["memory"]) == set(c["memory"]) == {"peak_rss_bytes_max"}
        assert 50 * 2**20 < p["memory"]["peak_rss_bytes_max"] < 2**33
    check_data_parallel_edge_metrics(plain, partitions[2], 2, 40)


def check_data_parallel_edge_metrics(run: dict, partition_dir: Path, nproc: int, batch_size: int) -> None:
    parts = [load_partition(partition_dir, p, "whole") for p in range(nproc)]
    graph, book = parts[0].topology, parts[0].book
    train = [torch.from_numpy(np.array(p.train_idx)) for p in parts]
    num_batches = max(math.ceil(t.numel() / batch_size) for t in train)
    for epoch, h in enumerate(run["history"]):
        batches = [epoch_batches(t, num_batches, SEED, epoch, rank) for rank, t in enumerate(train)]
        expected = [data_parallel_edge_metrics([sample_blocks(graph, batches[r][step], FANOUTS,
                                                              key=derive_key(SEED, epoch, step, r))
                                                for r in range(nproc)], book)
                    for step in range(min(num_batches, UNION_ITERATIONS))]
        got = h["edge_metrics"]
        assert got == epoch_edge_metrics(expected)  # the same counts, so the same ratios to the last bit
        assert got["redundancy"] > 0 and got["iterations"] == min(num_batches, UNION_ITERATIONS)


def test_split_sampling_outside_the_split_layout_is_one_clear_line(partitions, capsys):
    argv = ["train", "--partitions", str(partitions[2]), "--layout", "hybrid", "--split-sampling", "replicated"]
    assert cli_main(argv) == 2  # before any worker starts
    assert "--split-sampling: applies to --layout split, got --layout hybrid" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"split_sampling: expected one of \('owner', 'replicated'\)"):
        check_layout_options(layout_options("split", split_sampling="edges"), TrainConfig())
    assert cli_main(["train", "--split-sampling", "owner"]) == 2
    assert "--split-sampling: applies to a distributed run" in capsys.readouterr().err
    argv = ["train", "--partitions", str(partitions[2]), "--layout", "vanilla", "--shuffle-dtype", "bfloat16"]
    assert cli_main(argv) == 2
    assert "--shuffle-dtype: applies to --layout split, got --layout vanilla" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"shuffle_dtype: expected one of \('float32', 'bfloat16'\)"):
        check_layout_options(layout_options("split", shuffle_dtype="float16"), TrainConfig())
    assert cli_main(["train", "--shuffle-dtype", "bfloat16"]) == 2
    assert "--shuffle-dtype: applies to a distributed run" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--layout", "split", "--cache-fraction", "0.2"], "cache_fraction: applies to --layout hybrid or vanilla, got "
                                                       "--layout split"),
    (["--layout", "hybrid", "--cache-fraction", "1.5"], r"cache_fraction: expected a fraction of all nodes in \[0, 1\], "
                                                        r"got 1.5"),
])
def test_bad_cache_options_are_one_clear_line(partitions, capsys, argv, message):
    assert cli_main(["train", "--partitions", str(partitions[2]), *argv]) == 2  # before any worker starts
    assert capsys.readouterr().err.startswith("gnnscale train: error: ")
    with pytest.raises(ValueError, match=message):
        check_layout_options(layout_options(argv[1], cache_fraction=float(argv[3])), TrainConfig())


def test_cache_fraction_without_partitions_is_an_error(capsys):
    assert cli_main(["train", "--cache-fraction", "0.1"]) == 2
    assert "--cache-fraction: applies to a distributed run" in capsys.readouterr().err


@pytest.mark.slow
def test_a_worker_killed_during_split_training_stops_the_others(partitions, tmp_path):
    """Four `gnnscale train --layout split` processes (started without torchrun, so that nothing but gnnscale
    itself can stop the survivors); rank 2 is killed mid-training. Each survivor must stop with the
    collective it was in named, well within --timeout. Which one that is depends on where the kill lands:
    mostly a shuffle or the gradient all-reduce, but on a loaded machine also the loading stage's rounds
    or the epoch's closing all-reduce of the metrics; each names its category."""
    port, timeout_s = rendezvous_port(), 30
    args = [sys.executable, "-m", "gnnscale", "train", "--partitions", str(partitions[4]), "--layout", "split",
            "--fanouts", "4,3", "--batch-size", "8", "--epochs", "1000", "--threads", "1", "--no-eval",
            "--timeout", str(timeout_s), *model_args("sage")]
    procs = []
    for rank in range(4):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "4",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        first = ""
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while "epoch   0" not in first and time.monotonic() < deadline and procs[0].poll() is None:
            first = procs[0].stdout.readline()
        assert "epoch   0" in first, "training never started: " + procs[0].stderr.read()[-3000:]
        time.sleep(0.5)  # into epoch 1's iterations
        procs[2].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        for rank in (0, 1, 3):
            _, err = procs[rank].communicate(timeout=timeout_s + 60)
            assert procs[rank].returncode == 1, err[-3000:]
            stopped = re.search(rf"gnnscale train: stopped: rank {rank} of 4: collective (.+?) \(category '(\w+)'\) "
                                r"failed: .*another worker died or did not answer within --timeout", err)
            assert stopped is not None, err[-3000:]
            assert stopped[2] in CATEGORIES, stopped[0]
        assert time.monotonic() - killed_at < timeout_s
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
