"""Distributed matrix sampling (issue 8): ``--layout 1d`` and ``--layout 1.5d --replication C`` on real
processes. The 1.5D samplers must give the single-process blocks for every C (spawned workers, gloo on
127.0.0.1), 1d and 1.5d must train identically under torchrun, and bad flags must be refused clearly."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import matrix_workers
from gnnscale.distributed.matrix.grid15d import ProcessGrid, check_replication
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import write_partition_dir
from gnnscale.partition.book import PartitionBook
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts import LayoutOptions, check_layout_options, layout_options
from launch import run_launch, torchrun
from test_distributed import spawn_ok

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
TRAIN_ARGS = ["--hidden", "16", "--batch-size", "48", "--epochs", "1", "--lr", "0.01", "--seed", "3",
              "--threads", "1", "--quiet", "--bulk", "2"]


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix_parts") / "p4"
    write_partition_dir(make_synthetic(SyntheticConfig(**SMALL)), 4, "metis", out)
    return out


def test_15d_blocks_and_features_equal_the_single_process_ones_for_every_replication(partitions):
    sample_bytes = spawn_ok(functools.partial(matrix_workers.compare_15d_with_single_process, str(partitions)), 4)
    for worker in sample_bytes:
        # C = 4 is the replicated topology: every row is in the worker's own block row.
        assert worker[4] == 0, worker
    # Over all workers, the sampling bytes fall as C grows (fewer rows live in other block rows).
    totals = [sum(w[c] for w in sample_bytes) for c in (1, 2, 4)]
    assert totals[0] > totals[1] > totals[2] == 0, totals


@pytest.fixture(scope="module")
def trained(partitions, tmp_path_factory):
    """``trained(sampler, model, layout, C)``: rank 0's metrics of one 4-worker torchrun launch."""
    runs: dict[tuple, dict] = {}
    scratch = tmp_path_factory.mktemp("matrix_metrics")

    def get(sampler: str, model: str, layout: str, replication: int = 1, *flags: str) -> dict:
        """``flags``: more command-line flags (``--sample-on device``, ``--device cuda``)."""
        key = (sampler, model, layout, replication, *flags)
        if key not in runs:
            out = scratch / f"{len(runs)}.json"
            extra = ["--replication", str(replication)] if layout == "1.5d" else []
            sizes = ["--layer-size", "64", "--fanouts", "5,5"] if sampler == "ladies" else ["--fanouts", "4,3"]
            run = run_launch(torchrun(4, "--partitions", str(partitions), "--layout", layout, *extra, "--sampler",
                                      sampler, "--model", model, *sizes, "--metrics-out", str(out), *TRAIN_ARGS,
                                      *flags))
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            runs[key] = json.loads(out.read_text())
        return runs[key]

    return get


def assert_same_training(a: dict, b: dict) -> None:
    for x, y in zip(a["history"], b["history"], strict=True):
        assert x["iteration_losses"] == y["iteration_losses"]
        assert x["sampled_edges"] == y["sampled_edges"] and x["edge_metrics"] == y["edge_metrics"]
        assert (x["val_acc"], x["test_acc"]) == (y["val_acc"], y["test_acc"])


# Training at 4 workers is the slow tier (33 s for C = 2); the blocks and features of every C are
# checked in the default tier, by the spawned workers above.
@pytest.mark.slow
@pytest.mark.parametrize("replication", [1, 2])
def test_1d_and_15d_train_identically_at_4_workers(trained, replication):
    one_d = trained("matrix", "sage", "1d")
    one_half = trained("matrix", "sage", "1.5d", replication)
    assert_same_training(one_d, one_half)
    h1, h15 = one_d["history"][0], one_half["history"][0]
    hops = 2
    assert h1["rounds_per_bulk"]["sample"] == 0  # 1d: topology replicated, no sampling communication
    assert h15["rounds_per_bulk"]["sample"] == 2 * hops and h15["bytes_per_bulk"]["sample"] > 0
    assert h15["bulk"] == 2 and h15["num_bulks"] == -(-h15["num_batches"] // 2)
    assert h15["memory"]["held_bytes_max"] > 0 and h15["memory"]["peak_rss_bytes_max"] > 0


@pytest.mark.slow
def test_ladies_1d_and_15d_train_identically(trained):
    assert_same_training(trained("ladies", "gcn", "1d"), trained("ladies", "gcn", "1.5d", 2))


ON_DEVICE = ("--sample-on", "device", "--device", "cpu")


# Two more launches of 4 workers each: the slow tier, as the host runs they are compared with. The default
# tier compares the 1.5D device path's blocks with the host's on spawned workers (above).
@pytest.mark.slow
@pytest.mark.parametrize("layout, replication", [("1d", 1), ("1.5d", 2)])
def test_sampling_on_the_device_trains_like_the_host(trained, layout, replication):
    """--sample-on device (torch ops on CPU tensors, the path a GPU runs; a device feature cache in front of the
    store): 1d holds the topology on the device, 1.5d copies each hop's fetched rows there. The run is the
    host's, bit for bit, with the same sampling and feature rounds."""
    host, device = trained("matrix", "sage", layout, replication), trained("matrix", "sage", layout, replication,
                                                                         *ON_DEVICE)
    assert_same_training(device, host)
    for a, b in zip(device["history"], host["history"], strict=True):
        assert a["rounds_per_bulk"] == b["rounds_per_bulk"]


@pytest.mark.slow
def test_ladies_on_the_device_trains_like_on_the_host(trained):
    """LADIES on the device in 1.5d: the host's drawn nodes, its weights within a float32 rounding, so its
    losses within 1e-6."""
    host, device = trained("ladies", "gcn", "1.5d", 2), trained("ladies", "gcn", "1.5d", 2, *ON_DEVICE)
    for a, b in zip(device["history"], host["history"], strict=True):
        np.testing.assert_allclose(a["iteration_losses"], b["iteration_losses"], rtol=1e-6)
        assert a["sampled_edges"] == b["sampled_edges"]


@pytest.mark.gpu
@pytest.mark.parametrize("layout, replication", [("1d", 1), ("1.5d", 2)])
def test_sampling_on_cuda_trains_like_the_cpu_run(trained, layout, replication):
    """4 workers on the GPU(s), sampling there: GraphSAGE's blocks are the host's, so the losses are the CPU
    run's within 1e-4 (the model's sums in another order) and the sampled edges the same."""
    cpu = trained("matrix", "sage", layout, replication)
    gpu = trained("matrix", "sage", layout, replication, "--sample-on", "device", "--device", "cuda")
    np.testing.assert_allclose([h["iteration_losses"] for h in gpu["history"]],
                               [h["iteration_losses"] for h in cpu["history"]], rtol=1e-4)
    assert [h["sampled_edges"] for h in gpu["history"]] == [h["sampled_edges"] for h in cpu["history"]]


def test_bad_replication_is_refused_with_the_flag():
    with pytest.raises(ValueError, match=r"replication: expected a divisor of the 4 workers \(--replication one of "
                                         r"\[1, 2, 4\]\), got 3"):
        check_replication(3, 4)
    with pytest.raises(ValueError, match="replication: expected a divisor"):
        check_replication(0, 4)
    with pytest.raises(TypeError, match="replication: expected an int"):
        check_replication(2.0, 4)
    with pytest.raises(ValueError, match="replication: expected a divisor"):
        check_layout_options(layout_options("1.5d", replication=3), TrainConfig(sampler="matrix"), world_size=4)
    check_layout_options(layout_options("1.5d", replication=3), TrainConfig(sampler="matrix"))  # the launch's size not known yet
    cfg = TrainConfig(sampler="matrix", bulk=4)
    with pytest.raises(ValueError, match=r"replication: applies to --layout 1.5d, got --layout 1d"):
        check_layout_options(layout_options("1d", replication=2), cfg, world_size=4)
    with pytest.raises(ValueError, match=r"sampler: --sampler matrix runs distributed with --layout 1d or 1.5d, got "
                                         r"--layout hybrid \(which samples with --sampler fused or two_step\)"):
        check_layout_options(LayoutOptions(layout="hybrid"), cfg, world_size=4)
    with pytest.raises(ValueError, match=r"sampler: --sampler fused runs distributed with --layout hybrid or vanilla "
                                         r"or split, got --layout 1.5d \(which samples with --sampler matrix or ladies\)"):
        check_layout_options(LayoutOptions(layout="1.5d"), TrainConfig(), world_size=4)
    with pytest.raises(ValueError, match=r"--model gat"):
        check_layout_options(LayoutOptions(layout="1d"), TrainConfig(sampler="ladies"), "gat", world_size=4)


@pytest.mark.parametrize("field, value, message", [
    ("bulk", 0, r"bulk: expected an int >= 1 \(--bulk\), got 0"),
    ("layer_size", 0, r"layer_size: .*--layer-size.*0"),
])
def test_bad_bulk_and_layer_size_are_refused_with_the_flag(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(sampler="ladies", **{field: value})


@pytest.mark.slow
def test_a_bad_replication_stops_every_worker_before_training(partitions):
    run = run_launch(torchrun(2, "--partitions", str(partitions), "--layout", "1.5d", "--replication", "3",
                              "--sampler", "matrix", *TRAIN_ARGS))
    assert run.returncode != 0
    assert "replication: expected a divisor of the 2 workers (--replication one of [1, 2]), got 3" in run.stdout + run.stderr


def test_process_grid_places_block_rows():
    grid = ProcessGrid(world_size=4, replication=2, rank=3)
    assert (grid.row, grid.column, grid.num_rows) == (1, 1, 2)
    assert grid.column_ranks(1) == [1, 3]
    book = PartitionBook(offsets=np.array([0, 10, 25, 30, 42], dtype=np.int64))
    assert grid.block_book(book).offsets.tolist() == [0, 25, 42]
