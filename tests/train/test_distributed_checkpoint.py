"""Distributed checkpoints end to end (real torchrun launches, gloo on 127.0.0.1): a run killed mid-epoch
and resumed from rank 0's checkpoint ends exactly like an uninterrupted one (losses of every iteration,
accuracies, final weights), the hybrid layout continues on another worker count at an epoch boundary,
and what cannot be honoured is one line naming the setting before training starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import read_manifest, write_partition_dir
from gnnscale.train.dist_checkpoint import check_resume, decode, run_identity
from gnnscale.train.checkpoint import newest_complete, read_payload
from gnnscale.nn import ModelConfig
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs_config import DGSConfig
from launch import LAUNCH_TIMEOUT_S, Launch, run_launch, torchrun

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
EPOCHS = 3
# Dropout on (per-worker masks must be redrawn exactly), small batches: many iterations per epoch.
ARGS = ["--fanouts", "4,3", "--model", "sage", "--hidden", "16", "--dropout", "0.5", "--batch-size", "32",
        "--lr", "0.01", "--seed", "3", "--threads", "1"]
LAYOUT_CASES = [pytest.param("hybrid"), pytest.param("vanilla", marks=pytest.mark.slow),
                pytest.param("split", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    """METIS partitions of one small dataset into 1 and 2 parts."""
    dataset = make_synthetic(SyntheticConfig(**SMALL))
    root = tmp_path_factory.mktemp("parts")
    for p in (1, 2):
        write_partition_dir(dataset, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (1, 2)}


def launch_args(partition: Path, layout: str, *extra: str) -> list[str]:
    return ["--partitions", str(partition), "--layout", layout, *ARGS, *extra]


def run_ok(nproc: int, *args: str) -> str:
    run = run_launch(torchrun(nproc, *args))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    return output


def kill_mid_epoch(partition: Path, layout: str, ckpt: Path) -> dict:
    """Launch with a checkpoint after every iteration; once rank 0 has saved a step inside epoch 1 or
    later, freeze the workers (SIGSTOP: no further save), and kill them if the file still holds a
    mid-epoch step (else let them go on and look again). Returns the checkpoint's payload."""
    launch = Launch(torchrun(2, *launch_args(partition, layout, "--epochs", str(EPOCHS), "--checkpoint", str(ckpt),
                                             "--checkpoint-every", "1", "--quiet")))
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            assert launch.proc.poll() is None, f"the run ended before it was killed:\n{launch.tail()}"
            # The newest complete save, as a resume picks it (a save renames the old file aside first).
            found = newest_complete(ckpt)
            payload = None if found is None else found.payload
            if payload is not None and payload["epoch"] >= 1 and payload["step"] > 0:
                workers = launch.worker_pids()
                for pid in workers:
                    os.kill(pid, signal.SIGSTOP)
                payload = newest_complete(ckpt).payload  # frozen: this is the last save
                if payload["step"] > 0:
                    return payload
                for pid in workers:
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)  # polling a file another process writes (no sleep-based synchronisation)
        raise AssertionError(f"no mid-epoch checkpoint within {LAUNCH_TIMEOUT_S} s:\n{launch.tail()}")
    finally:
        launch.stop()


@pytest.fixture(scope="module")
def interrupted(partitions, tmp_path_factory):
    """``interrupted(layout)``: an uninterrupted run (saving at epoch ends), and a run killed mid-epoch
    then resumed; their metrics, weights and the resume's output. Run once per layout."""
    runs: dict[str, dict] = {}

    def get(layout: str) -> dict:
        if layout not in runs:
            d = tmp_path_factory.mktemp(layout)
            run_ok(2, *launch_args(partitions[2], layout, "--epochs", str(EPOCHS), "--metrics-out", str(d / "full.json"),
                                   "--save-model", str(d / "full.pt"), "--checkpoint", str(d / "full.ckpt"), "--quiet"))
            killed_at = kill_mid_epoch(partitions[2], layout, d / "killed.ckpt")
            # The resume saves into the file it continues: keep the mid-epoch one for the tests of refusals.
            # Frozen between a save's two renames, only the previous save is whole: the resume takes it.
            resumed_from = newest_complete(d / "killed.ckpt").path
            shutil.copy(resumed_from, d / "mid_epoch.ckpt")
            output = run_ok(2, *launch_args(partitions[2], layout, "--epochs", str(EPOCHS), "--checkpoint",
                                            str(d / "killed.ckpt"), "--resume", "--metrics-out", str(d / "resumed.json"),
                                            "--save-model", str(d / "resumed.pt")))
            runs[layout] = {"dir": d, "killed_at": killed_at, "resume_output": output, "resumed_from": resumed_from,
                            "full": json.loads((d / "full.json").read_text()),
                            "resumed": json.loads((d / "resumed.json").read_text()),
                            "full_weights": torch.load(d / "full.pt")["state_dict"],
                            "resumed_weights": torch.load(d / "resumed.pt")["state_dict"]}
        return runs[layout]

    return get


@pytest.mark.timeout(900)  # its fixture's three launches, on a busy 2-core machine
@pytest.mark.parametrize("layout", LAYOUT_CASES)
def test_a_run_killed_mid_epoch_resumes_exactly(interrupted, layout):
    run = interrupted(layout)
    epoch, step = run["killed_at"]["epoch"], run["killed_at"]["step"]
    num_batches = run["killed_at"]["num_batches"]
    assert 1 <= epoch < EPOCHS and 0 < step < num_batches
    # Every worker's sums of the interrupted epoch were saved (rank 0's file holds both).
    assert [len(w["counts"]) for w in run["killed_at"]["workers"]] == [step, step]
    assert f"resuming from {run['resumed_from']}: {epoch} of {EPOCHS} epochs done, continuing at epoch " \
           f"{epoch} step {step} of {num_batches}" in run["resume_output"]
    full, resumed = run["full"]["history"], run["resumed"]["history"]
    assert [h["epoch"] for h in resumed] == list(range(EPOCHS))
    for a, b in zip(full, resumed, strict=True):
        # Bit for bit: every iteration's loss, the epoch's, the accuracies and the sampled edges.
        assert a["iteration_losses"] == b["iteration_losses"]
        assert (a["loss"], a["train_acc"], a["val_acc"], a["test_acc"], a["sampled_edges"], a["num_batches"]) == \
            (b["loss"], b["train_acc"], b["val_acc"], b["test_acc"], b["sampled_edges"], b["num_batches"])
    assert run["full_weights"].keys() == run["resumed_weights"].keys()
    assert all(torch.equal(run["full_weights"][k], run["resumed_weights"][k]) for k in run["full_weights"])


@pytest.mark.timeout(900)
def test_hybrid_continues_on_another_worker_count_at_an_epoch_boundary(interrupted, partitions, tmp_path):
    run = interrupted("hybrid")
    # 2 workers, every epoch done; a copy, since the resume saves into the file it continues.
    ckpt = Path(shutil.copy(run["dir"] / "full.ckpt", tmp_path / "two_workers.ckpt"))
    out = tmp_path / "one.json"
    output = run_ok(1, *launch_args(partitions[1], "hybrid", "--epochs", str(EPOCHS + 1), "--checkpoint", str(ckpt),
                                    "--resume", "--metrics-out", str(out)))
    assert f"continuing at epoch {EPOCHS} step 0" in output and f"written by 2 workers on {partitions[2]}" in output
    history = json.loads(out.read_text())["history"]
    # The 2-worker epochs carried over as they were; one more epoch trained by one worker, from the
    # 2-worker model (its loss continues where the run left it, far below a fresh model's first epoch).
    assert history[:EPOCHS] == run["full"]["history"]
    assert history[EPOCHS]["epoch"] == EPOCHS and history[EPOCHS]["loss"] < run["full"]["history"][0]["loss"]


TORCHRUN_ENV = {"LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def launched_as(monkeypatch, rank: int, world_size: int) -> None:
    """This process as torchrun's worker ``rank``: enough for the checks made before joining the run."""
    for name, value in {**TORCHRUN_ENV, "RANK": str(rank), "WORLD_SIZE": str(world_size)}.items():
        monkeypatch.setenv(name, value)


def test_what_a_launch_cannot_honour_is_one_line_before_training(interrupted, partitions, tmp_path, monkeypatch,
                                                                  capsys):
    run = interrupted("hybrid")
    ckpt, killed = run["dir"] / "full.ckpt", run["dir"] / "mid_epoch.ckpt"
    before = ckpt.read_bytes()
    single = tmp_path / "single.ckpt"
    assert main(["train", "--dataset", "synthetic", "-o", "num_nodes=300", "--epochs", "1", "--checkpoint",
                 str(single), "--quiet"]) == 0
    capsys.readouterr()
    launched_as(monkeypatch, 0, 1)
    cases = [
        # A mid-epoch checkpoint cannot move to another worker count.
        (["--partitions", str(partitions[1]), "--checkpoint", str(killed), "--resume"],
         f"--checkpoint: {killed} was written mid-epoch (epoch {run['killed_at']['epoch']}, step "
         f"{run['killed_at']['step']}) by 2 workers on --partitions {partitions[2]}; a mid-epoch checkpoint resumes "
         "only with the same --partitions and worker count (--nproc-per-node)"),
        # An existing checkpoint is neither continued nor replaced without being told which.
        (["--partitions", str(partitions[1]), "--checkpoint", str(ckpt)],
         f"--checkpoint: {ckpt} already exists; pass --resume to continue that run, or --overwrite to start over and "
         "replace it"),
        (["--partitions", str(partitions[1]), "--checkpoint", str(single), "--resume"],
         f"--checkpoint: {single} was written by a single-process run (--dataset synthetic); resume it without "
         "--partitions"),
        (["--partitions", str(partitions[1]), "--checkpoint-every", "0", "--checkpoint", str(tmp_path / "new.ckpt")],
         "checkpoint_every: expected an int >= 1 (--checkpoint-every), got 0"),
        (["--partitions", str(partitions[1]), "--checkpoint-every", "5"],
         "checkpoint_every: --checkpoint-every needs --checkpoint FILE, where to save"),
    ]
    for argv, expected in cases:
        assert main(["train", *ARGS, "--epochs", str(EPOCHS), "--quiet", *argv]) == 2
        assert capsys.readouterr().err == f"gnnscale train: error: {expected}\n"
    assert ckpt.read_bytes() == before
    monkeypatch.delenv("RANK")
    # A single-process run cannot continue a distributed checkpoint, nor save mid-epoch.
    assert main(["train", "--dataset", "synthetic", "-o", "num_nodes=300", "--epochs", str(EPOCHS + 1),
                 "--checkpoint", str(ckpt), "--resume", "--quiet"]) == 2
    assert capsys.readouterr().err == (f"gnnscale train: error: --checkpoint: {ckpt} was written by a distributed run "
                                       "(2 workers, --layout hybrid); resume it with torchrun and --partitions\n")
    assert main(["train", "--dataset", "synthetic", "--checkpoint-every", "5", "--quiet"]) == 2
    assert "checkpoint_every: --checkpoint-every is for distributed runs (--partitions)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def saved(interrupted):
    """The epoch-boundary checkpoint of the 2-worker hybrid run, and that run's identity."""
    path = interrupted("hybrid")["dir"] / "full.ckpt"
    return path, decode(read_payload(path))


def identity_for(partition: Path, layout: str = "hybrid", world_size: int = 2, **train):
    manifest = read_manifest(partition)
    cfg = replace(TrainConfig(fanouts=(4, 3), batch_size=32, lr=0.01, seed=3, threads=1), **train)
    model = ModelConfig(name="sage", in_dim=manifest["feature_dim"], hidden_dim=16, num_classes=manifest["num_classes"],
                        num_layers=2, dropout=0.5)
    return run_identity(partition, manifest, model, cfg, layout, world_size)


@pytest.mark.parametrize("change, message", [
    (dict(layout="split"), r"written with --layout hybrid, this run has --layout split; resume with --layout hybrid"),
    (dict(train={"lr": 0.5}), r"written with train.lr=0.01, this run has train.lr=0.5; resume with the same --lr"),
    (dict(data={"num_edges": 1}), r"written on another dataset \(num_edges=\d+, this run's --partitions .* has "
                                  r"num_edges=1\); resume with a partition of the same dataset"),
    (dict(epochs=EPOCHS), rf"epochs: .* already holds {EPOCHS} trained epochs; pass --epochs above {EPOCHS}"),
])
def test_what_cannot_be_honoured_is_named(saved, partitions, change, message):
    path, ckpt = saved
    run = identity_for(partitions[2], change.get("layout", "hybrid"), **change.get("train", {}))
    if "data" in change:
        run = replace(run, data={**run.data, **change["data"]})
    check_resume(ckpt, path, identity_for(partitions[2]), EPOCHS + 1)  # the same run: accepted
    with pytest.raises(ValueError, match=message):
        check_resume(ckpt, path, run, change.get("epochs", EPOCHS + 1))


def test_a_dgs_checkpoint_from_before_the_explanation_settings_resumes_with_the_settings_it_ran_with(partitions):
    """Checkpoints record --dgs-explain-steps and --dgs-explain-lr since the default became 5 steps at
    0.6; one written before (10 at 0.3, recorded nowhere) must name the value to resume with."""
    def identity(dgs):
        manifest = read_manifest(partitions[2])
        model = ModelConfig(name="sage", in_dim=manifest["feature_dim"], hidden_dim=16,
                            num_classes=manifest["num_classes"], num_layers=2)
        return run_identity(partitions[2], manifest, model, TrainConfig(fanouts=(4, 3), batch_size=32), "hybrid", 2,
                            dgs)

    old = identity(DGSConfig(explain_steps=10, explain_lr=0.3))
    fields = ("signature", "layout", "world_size", "data", "partition")
    payload = {**{k: getattr(old, k) for k in fields}, "epoch": 1, "step": 0, "num_batches": 3, "model_state": {},
               "optimizer_state": {}, "history": [], "workers": [], "layout_state": {}}
    payload["signature"] = {**old.signature, "dgs": {k: v for k, v in old.signature["dgs"].items()
                                                      if not k.startswith("explain_")}}
    ckpt, path = decode(payload), Path("old.ckpt")
    with pytest.raises(ValueError, match=r"written with dgs.explain_lr=0.3, this run has dgs.explain_lr=0.6; resume "
                                         r"with the same --dgs-explain-lr"):
        check_resume(ckpt, path, identity(DGSConfig()), 2)
    check_resume(ckpt, path, old, 2)  # --dgs-explain-steps 10 --dgs-explain-lr 0.3: accepted


@pytest.mark.parametrize("layout", ["vanilla", "split"])
def test_only_hybrid_moves_to_another_partition(saved, partitions, layout):
    path, ckpt = saved
    theirs = replace(ckpt, identity=replace(ckpt.identity, layout=layout))
    check_resume(theirs, path, identity_for(partitions[2], layout), EPOCHS + 1)  # same partition: accepted
    with pytest.raises(ValueError, match=rf"--layout {layout} resumes only on the same partition with the same "
                                         r"worker count \(--layout hybrid can change them"):
        check_resume(theirs, path, identity_for(partitions[1], layout, world_size=1), EPOCHS + 1)
    check_resume(ckpt, path, identity_for(partitions[1], world_size=1), EPOCHS + 1)  # hybrid: accepted


def torchrun_restarting(nproc: int, max_restarts: int, *args: str) -> list[str]:
    """``torchrun --max-restarts``: when a worker dies, torchrun stops the others and starts the group
    again with the same command line."""
    command = torchrun(nproc, *args)
    at = command.index("-m", 3)  # gnnscale's own -m, after torchrun's options
    return [*command[:at], "--max-restarts", str(max_restarts), *command[at:]]


# DGS: period 3, so that the kill lands between refreshes and the masks must come back from the checkpoint.
# hybrid-dgs takes ~80 s (its explainer replays the steps since the last refresh): the slow tier.
CRASH_CASES = [pytest.param("hybrid", ()),
               pytest.param("hybrid", ("--dgs", "--dgs-period", "3"), id="hybrid-dgs", marks=pytest.mark.slow),
               pytest.param("vanilla", (), marks=pytest.mark.slow),
               pytest.param("vanilla", ("--dgs", "--dgs-period", "3"), id="vanilla-dgs", marks=pytest.mark.slow),
               pytest.param("split", (), marks=pytest.mark.slow),
               pytest.param("1d", ("--sampler", "matrix", "--bulk", "4"), id="1d-bulk4", marks=pytest.mark.slow),
               pytest.param("1.5d", ("--sampler", "matrix", "--replication", "2"), id="1.5d", marks=pytest.mark.slow)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("layout, extra", CRASH_CASES)
def test_a_crashed_run_finishes_by_itself_with_the_uninterrupted_weights(partitions, layout, extra, tmp_path):
    """torchrun --max-restarts 2 with --resume auto: the first start finds no checkpoint and starts afresh;
    one worker is SIGKILLed once a mid-epoch checkpoint exists, torchrun restarts the group, every worker
    resumes from the newest complete checkpoint (DGS: with the masks it sampled with), and the final weights
    are the uninterrupted run's."""
    epochs = "30"  # a few seconds: room to kill it mid-run
    run_ok(2, *launch_args(partitions[2], layout, "--epochs", epochs, "--save-model", str(tmp_path / "full.pt"),
                           "--quiet", *extra))
    ckpt, model = tmp_path / "auto.ckpt", tmp_path / "auto.pt"
    args = launch_args(partitions[2], layout, "--epochs", epochs, "--checkpoint", str(ckpt), "--resume", "auto",
                       "--checkpoint-every", "5", "--save-model", str(model), *extra)
    launch = Launch(torchrun_restarting(2, 2, *args))
    try:
        launch.wait_for("no checkpoint yet: starting afresh (--resume auto)", LAUNCH_TIMEOUT_S)
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while time.monotonic() < deadline:  # polling a file another process writes
            found = newest_complete(ckpt)
            if found is not None and found.payload["epoch"] >= 2 and found.payload["step"] > 0:
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"no mid-epoch checkpoint in epoch 2 or later:\n{launch.tail()}")
        os.kill(launch.worker_pids()[-1], signal.SIGKILL)
        assert launch.finish(LAUNCH_TIMEOUT_S) == 0, launch.tail()
        assert re.search(r"resuming from \S+auto.ckpt\S*: \d+ of 30 epochs done, continuing at epoch \d+ step \d+",
                         launch.text()), launch.tail()
    finally:
        launch.stop()
    weights, full = torch.load(model)["state_dict"], torch.load(tmp_path / "full.pt")["state_dict"]
    assert weights.keys() == full.keys() and all(torch.equal(weights[k], full[k]) for k in full)
