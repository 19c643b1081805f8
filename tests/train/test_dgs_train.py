"""DGS in the trainer: option checks (clear errors naming the flag), the layout's schedule and its
failures on real processes (spawned gloo workers, tests/dgs_train_workers.py), `torchrun -m gnnscale train
--dgs --device cpu` (the device path) against the run without it, and, in the slow tier, end to end: hybrid ==
vanilla with DGS (same blocks, same losses), plain sampling for the first W + D iterations, fewer feature bytes
after. The `gpu` test trains DGS on CUDA against the CPU run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import dgs_train_workers
from gnnscale.cli import EXIT_BAD_INPUT, build_parser, main
from gnnscale.cli.train import read_train_settings
from gnnscale.distributed.dgs.explainer import ExplainConfig
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import write_partition_dir
from gnnscale.train.checkpoints.files import flag_of
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts import LayoutOptions, check_layout_options, layout_options
from gnnscale.train.layouts.dgs import DGSConfig
from gnnscale.train.layouts.dgs_config import DGSSchedule
from launch import run_launch, torchrun
from test_distributed import spawn_run

TIMEOUT_S = 400.0  # spawned workers import torch and compile the DGS kernel: slow on a busy machine


@pytest.mark.parametrize("kwargs, match", [
    (dict(period=0), r"period: expected an int >= 1 \(--dgs-period\), got 0"),
    (dict(epsilon=1.5), r"epsilon: expected a number in \[0, 1\] \(--dgs-epsilon\), got 1.5"),
    (dict(feature_rate=0.0), r"feature_rate: expected a number in \(0, 1\] \(--dgs-feature-rate\), got 0.0"),
    (dict(feature_rate=True), r"feature_rate: expected a number"),
    (dict(mode="nodes"), r"mode: expected one of \('both', 'node', 'feature'\) \(--dgs-mode\), got 'nodes'"),
    (dict(warmup=-1), r"warmup: expected an int >= 0 \(--dgs-warmup\), got -1"),
    (dict(lag=0), r"lag: expected an int in \[1, --dgs-period = 30\] \(--dgs-lag\), got 0"),
    (dict(period=5, lag=6), r"lag: expected an int in \[1, --dgs-period = 5\] \(--dgs-lag\), got 6"),
    (dict(probes=0), r"probes: expected an int >= 1 \(--dgs-probes\), got 0"),
    (dict(explain_steps=0), r"explain_steps: expected an int >= 1 \(--dgs-explain-steps\), got 0"),
    (dict(explain_lr=0.0), r"explain_lr: expected a finite number > 0 \(--dgs-explain-lr\), got 0.0"),
    (dict(explain_lr=float("nan")), r"explain_lr: expected a finite number > 0"),
])
def test_bad_dgs_settings_name_the_flag(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DGSConfig(**kwargs)


def test_dgs_needs_a_layout_that_fetches_features():
    cfg = TrainConfig(fanouts=(5, 3), batch_size=8)
    with pytest.raises(ValueError, match=r"dgs: --dgs needs a layout that fetches features \(--layout hybrid or "
                                         r"vanilla\), got --layout split"):
        check_layout_options(LayoutOptions(layout="split", dgs=DGSConfig()), cfg)
    with pytest.raises(ValueError, match=r"dgs: --dgs and --cache-fraction"):
        check_layout_options(layout_options("hybrid", cache_fraction=0.1, dgs=DGSConfig()), cfg)
    check_layout_options(LayoutOptions(layout="vanilla", dgs=DGSConfig()), cfg)


@pytest.mark.parametrize("argv, match", [
    (["--dgs"], r"--dgs: applies to a distributed run; add --partitions DIR"),
    (["--dgs-period", "5"], r"--dgs-period: given without --dgs; add --dgs"),
    (["--dgs-warmup", "7", "--dgs-lag", "2"], r"--dgs-warmup, --dgs-lag: given without --dgs; add --dgs"),
    (["--dgs-probes", "16"], r"--dgs-probes: given without --dgs; add --dgs"),
    (["--dgs-explain-steps", "10"], r"--dgs-explain-steps: given without --dgs; add --dgs"),
])
def test_cli_refuses_dgs_without_partitions_or_dgs_flags_without_dgs(argv, match, capsys):
    assert main(["train", "--dataset", "synthetic", "-o", "num_nodes=200", *argv]) == EXIT_BAD_INPUT
    assert re.search(match, capsys.readouterr().err)


def dgs_settings(args) -> DGSConfig:
    return read_train_settings(args).layout.dgs


def test_dgs_probes_reach_the_config_and_a_changed_dgs_setting_names_its_flag():
    args = build_parser().parse_args(["train", "--partitions", "P", "--dgs", "--dgs-probes", "16"])
    assert dgs_settings(args).probes == 16
    assert dgs_settings(build_parser().parse_args(["train", "--partitions", "P", "--dgs"])).probes is None
    assert dgs_settings(build_parser().parse_args(["train", "--partitions", "P", "--dgs"])) == DGSConfig()
    args = build_parser().parse_args(["train", "--partitions", "P", "--dgs", "--dgs-explain-steps", "10",
                                      "--dgs-explain-lr", "0.3"])
    assert dgs_settings(args).explain_config(seed=4) == ExplainConfig(epochs=10, lr=0.3, seed=4)
    # A checkpoint written with other DGS settings: the error names the flag to resume with.
    assert flag_of("dgs.probes") == "--dgs-probes" and flag_of("dgs.period") == "--dgs-period"
    assert flag_of("train.lr") == "--lr"


def simulated_schedule(warmup: int, period: int, lag: int, iterations: int) -> list[tuple[int | None, list[int]]]:
    """Per iteration t: (the explained iteration whose masks t samples with, the explained iterations a
    run resumed before t still needs), by playing the schedule's rule forward: the model after s
    iterations is explained for s = warmup, warmup + period, ...; its masks are used from s + lag."""
    explained = [s for s in range(iterations) if s >= warmup and (s - warmup) % period == 0]
    out = []
    for t in range(iterations):
        usable = [s for s in explained if s + lag <= t]
        in_use = usable[-1] if usable else None
        pending = [s for s in explained if s <= t < s + lag]
        out.append((in_use, sorted({*pending, *([] if in_use is None else [in_use])})))
    return out


@pytest.mark.parametrize("warmup, period, lag", [(10, 30, 10), (0, 1, 1), (1, 2, 1), (2, 3, 3), (30, 30, 30), (7, 5, 2)])
def test_the_schedule_matches_its_rule_played_forward(warmup, period, lag):
    schedule = DGSSchedule(warmup=warmup, period=period, lag=lag)
    simulated = simulated_schedule(warmup, period, lag, 200)
    for t, (in_use, needed) in enumerate(simulated):
        assert schedule.in_use(t) == in_use, t
        assert schedule.needed(t) == needed, t
        previous = simulated[t - 1][0] if t else None
        assert schedule.refresh_at(t) == (in_use if in_use != previous else None), t
    assert DGSConfig(period=period, warmup=warmup, lag=lag).schedule == schedule


def test_the_default_schedule_explains_early_and_short_periods_shorten_the_lag():
    assert DGSConfig().schedule == DGSSchedule(warmup=5, period=30, lag=5)
    assert DGSConfig(period=3).schedule == DGSSchedule(warmup=5, period=3, lag=3)
    assert DGSConfig().schedule.in_use(9) is None and DGSConfig().schedule.in_use(10) == 5


@pytest.mark.slow
def test_the_layout_follows_the_schedule_and_the_masks_on_two_workers():
    outcomes = spawn_run(dgs_train_workers.check_dgs_layout, 2, timeout_s=TIMEOUT_S)
    failed = {r: o for r, o in enumerate(outcomes) if o.status != "ok" or o.exitcode != 0}
    assert not failed, "\n".join(f"rank {r}: {o.status}\n{o.payload or ''}" for r, o in failed.items())
    for o in outcomes:
        assert [(t, m) for t, m, _ in o.payload["seen"]] == [(2, 1), (3, 1), (4, 3), (5, 3), (6, 5), (7, 5)]
        assert any(remote for *_, remote in o.payload["seen"]), "no remote row was narrowed"


@pytest.mark.slow
def test_a_failed_explanation_or_foreign_masks_stop_every_worker():
    outcomes = spawn_run(dgs_train_workers.check_dgs_failures, 2, timeout_s=TIMEOUT_S)
    failed = {r: o for r, o in enumerate(outcomes) if o.status != "ok" or o.exitcode != 0}
    assert not failed, "\n".join(f"rank {r}: {o.status}\n{o.payload or ''}" for r, o in failed.items())
    # The same messages everywhere, but for the line naming the worker that raised.
    same = [[re.sub(r"\(this is rank \d\)", "", m) for m in o.payload["messages"]] for o in outcomes]
    assert same[0] == same[1]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    dataset = make_synthetic(SyntheticConfig(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=16, seed=5))
    out = tmp_path_factory.mktemp("dgs") / "p2"
    write_partition_dir(dataset, 2, "metis", out)
    return out


@pytest.fixture(scope="module")
def launched(parts, tmp_path_factory):
    """``launched(layout, *flags)``: rank 0's metrics of one launch of two workers, run once per module."""
    runs: dict[tuple, dict] = {}
    scratch = tmp_path_factory.mktemp("dgs_metrics")

    def get(layout: str, *extra: str) -> dict:
        if (layout, *extra) not in runs:
            out = scratch / f"{len(runs)}.json"
            run = run_launch(torchrun(2, "--partitions", str(parts), "--layout", layout, "--metrics-out", str(out),
                                      "--fanouts", "4,3", "--model", "sage", "--hidden", "16", "--batch-size", "32",
                                      "--epochs", "2", "--lr", "0.01", "--seed", "3", "--threads", "1", "--quiet",
                                      *extra))
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            runs[(layout, *extra)] = json.loads(out.read_text())
        return runs[(layout, *extra)]

    return get


# Explanations after 2, 5, 8, ... iterations, each used 2 iterations later; remote rows on half the dimensions.
DGS = ("--dgs", "--dgs-period", "3", "--dgs-warmup", "2", "--dgs-lag", "2", "--dgs-feature-rate", "0.5")
# What DGS decided in an epoch (its masks' effect on sampling and the fetch), not its timings.
DGS_DECISIONS = ("feature_bytes", "remote_nodes", "dims_sent_mean", "refreshes", "mask_iteration", "staleness_mean")


@pytest.mark.timeout(900)  # two launches of two workers
def test_dgs_on_the_device_path_trains_bit_for_bit_like_the_host_run(launched):
    """--dgs --device cpu: the model and its step on the training device, batches through the copy stage (the
    identity on the CPU), the explainer on a CPU copy of the model taken after the step, DGS's sampling and
    fetch on the host: the DGS run without --device, bit for bit, with the same masks (the same remote
    nodes, dimensions and bytes)."""
    host, device = launched("hybrid", *DGS), launched("hybrid", *DGS, "--device", "cpu")
    assert device["train"]["device"] == "cpu"
    for a, b in zip(device["history"], host["history"], strict=True):
        assert (a["iteration_losses"], a["val_acc"], a["test_acc"]) == (b["iteration_losses"], b["val_acc"],
                                                                       b["test_acc"])
        assert {k: a["dgs"][k] for k in DGS_DECISIONS} == {k: b["dgs"][k] for k in DGS_DECISIONS}
    assert host["history"][-1]["dgs"]["refreshes"] > 0


@pytest.mark.gpu
def test_dgs_on_cuda_trains_like_on_the_cpu(launched):
    """Two DGS workers on the GPU (sharing one, or each its own): the step there, the explanation on the CPU
    from a host copy of the GPU model's weights. Its masks come from weights within float32 rounding of the CPU
    run's, which moves no mask decision here: the losses are the CPU run's within 1e-4, the dimensions sent and
    the refreshes alike."""
    gpu, cpu = launched("hybrid", *DGS, "--device", "cuda"), launched("hybrid", *DGS)
    assert gpu["train"]["device"].startswith("cuda")
    np.testing.assert_allclose([h["iteration_losses"] for h in gpu["history"]],
                               [h["iteration_losses"] for h in cpu["history"]], rtol=1e-4)
    for a, b in zip(gpu["history"], cpu["history"], strict=True):
        for key in ("dims_sent_mean", "refreshes"):
            assert a["dgs"][key] == b["dgs"][key], key
        assert abs(a["test_acc"] - b["test_acc"]) <= 0.02


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three launches of two workers: minutes on a busy machine
def test_torchrun_dgs_hybrid_equals_vanilla_and_starts_plain(launched):
    hybrid, vanilla, plain = launched("hybrid", *DGS), launched("vanilla", *DGS), launched("hybrid")
    h_losses = [x for h in hybrid["history"] for x in h["iteration_losses"]]
    v_losses = [x for h in vanilla["history"] for x in h["iteration_losses"]]
    p_losses = [x for h in plain["history"] for x in h["iteration_losses"]]
    assert h_losses == v_losses  # same keys and masks: same blocks in both layouts
    assert h_losses[:4] == p_losses[:4] and h_losses[4:] != p_losses[4:]  # plain for the first W + D
    for h, v in zip(hybrid["history"], vanilla["history"]):
        assert h["dgs"]["remote_nodes"] == v["dgs"]["remote_nodes"]
        assert h["dgs"]["feature_bytes"] < v["dgs"]["feature_bytes"] + 1  # vanilla fetches the same rows
    last, base = hybrid["history"][-1], plain["history"][-1]
    assert last["dgs"]["refreshes"] > 0 and last["dgs"]["dims_sent_mean"] == 8
    assert last["bytes_per_iteration"]["feature"] < 0.8 * base["bytes_per_iteration"]["feature"]
