"""Distributed checkpoints end to end (real torchrun launches, gloo on 127.0.0.1): a run killed mid-epoch
and resumed from rank 0's checkpoint ends exactly like an uninterrupted one (losses of every iteration,
accuracies, final weights), the hybrid layout continues on another worker count at an epoch boundary,
and what cannot be honoured is one line naming the setting before training starts. Without launching:
what a resume may change, every setting classified, and the steps --checkpoint-every saves at."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest
import torch

from gnnscale.cli import build_parser, main, subcommand_parser
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import read_manifest, write_partition_dir
from gnnscale.partition.directory import MANIFEST
from gnnscale.train.checkpoints.runs import (RESUMABLE_CHANGES, Checkpointer, DistCheckpoint, check_resume, decode,
                                            one_process_identity, run_identity)
from gnnscale.train.layouts import layout_options
from gnnscale.train.layouts.registry import option_classes
from gnnscale.train.checkpoints.files import newest_complete, read_payload
from gnnscale.nn import ModelConfig
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import LayoutOptions
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.tasks.link_config import LinkConfig
from gnnscale.train.tasks.registry import task_of, task_signature
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow  # its fixture is a killed run
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
         "--checkpoint-every: expected an int >= 1, got 0"),
        (["--partitions", str(partitions[1]), "--checkpoint-every", "5"],
         "--checkpoint-every: --checkpoint-every needs --checkpoint FILE, where to save"),
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
    assert "--checkpoint-every: --checkpoint-every needs --checkpoint FILE" in capsys.readouterr().err


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
    return run_identity(partition, manifest, model, cfg, layout_options(layout), world_size)


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
        return run_identity(partitions[2], manifest, model, TrainConfig(fanouts=(4, 3), batch_size=32),
                            layout_options("hybrid", dgs=dgs), 2)

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
    own_options = identity_for(partitions[2], layout).signature["layout_options"]  # the layout's own defaults
    theirs = replace(ckpt, identity=replace(ckpt.identity, layout=layout,
                                            signature={**ckpt.identity.signature, "layout_options": own_options}))
    check_resume(theirs, path, identity_for(partitions[2], layout), EPOCHS + 1)  # same partition: accepted
    with pytest.raises(ValueError, match=rf"--layout {layout} resumes only on the same partition with the same "
                                         r"worker count \(--layout hybrid can change them"):
        check_resume(theirs, path, identity_for(partitions[1], layout, world_size=1), EPOCHS + 1)
    check_resume(ckpt, path, identity_for(partitions[1], world_size=1), EPOCHS + 1)  # hybrid: accepted


# --- what a resume may change: every setting classified --------------------------------------------------
#
# Every field of TrainConfig, LayoutOptions, every layout's own options class and DGSConfig, classified:
# "resumable" (RESUMABLE_CHANGES: a resume may change it), "refused" (a resume that changes it is refused
# with one line naming the setting and its flag), or "free" (not recorded, and changing it cannot change
# what is computed: why beside it). A new field fails test_every_setting_is_classified_for_resume until it
# has a row here. Row: (group, field, kind, the checkpoint's run, the resuming run, flag). The two runs are
# overrides of RESUME_TRAIN (group "train": TrainConfig), of layout_options("hybrid") (group "layout", and
# "layout_options" for a layout's own options, recorded whole) or of DGSConfig() under hybrid (group "dgs").
RESUME_TRAIN = dict(fanouts=(4, 3), batch_size=32, lr=0.01, seed=3, threads=1, epochs=5)


def row(group: str, name: str, kind: str, before: dict, after: dict, flag: str, marks=()):
    return pytest.param(group, name, kind, before, after, flag, marks=marks, id=f"{group}.{name}")


RESUME_TABLE = [
    row("train", "fanouts", "refused", {}, dict(fanouts=(5, 3)), "--fanouts"),
    row("train", "eval_fanouts", "refused", {}, dict(eval_fanouts=(4, 4)), "--eval-fanouts"),
    row("train", "relation_fanouts", "refused", {}, dict(relation_fanouts=("cites=2",)), "--relation-fanouts"),
    row("train", "batch_size", "refused", {}, dict(batch_size=64), "--batch-size"),
    # No flag sets it (fit's TrainConfig does): the message names the field.
    row("train", "eval_batch_size", "refused", {}, dict(eval_batch_size=1024), "TrainConfig(eval_batch_size=...)"),
    row("train", "epochs", "resumable", {}, dict(epochs=8), "--epochs"),
    row("train", "lr", "refused", {}, dict(lr=0.02), "--lr"),
    row("train", "weight_decay", "refused", {}, dict(weight_decay=5e-4), "--weight-decay"),
    row("train", "seed", "refused", {}, dict(seed=4), "--seed"),
    row("train", "threads", "resumable", {}, dict(threads=2), "--threads"),
    row("train", "sampler", "refused", {}, dict(sampler="two_step"), "--sampler"),
    row("train", "bulk", "refused", dict(sampler="matrix"), dict(sampler="matrix", bulk=4), "--bulk"),
    row("train", "layer_size", "refused", dict(sampler="ladies"), dict(sampler="ladies", layer_size=64),
        "--layer-size"),
    row("train", "replace", "refused", {}, dict(replace=True), "--replace"),
    row("train", "evaluate", "refused", {}, dict(evaluate=False), "--no-eval"),
    row("train", "prefetch", "resumable", {}, dict(prefetch=3), "--prefetch"),
    # Checkpoints hold CPU tensors, loaded into the model wherever it trains: a run written on a GPU resumes on
    # the CPU or another GPU (test_train_device.py resumes one through the code that maps devices).
    row("train", "device", "resumable", {}, dict(device="auto"), "--device"),
    # The device sampler draws the host sampler's blocks, the device cache returns the store's rows (test_train_
    # device.py: bit for bit): neither changes a number.
    row("train", "sample_on", "resumable", {}, dict(sample_on="device"), "--sample-on"),
    row("train", "gpu_cache_fraction", "resumable", {}, dict(gpu_cache_fraction=0.5), "--gpu-cache-fraction"),
    # Autocast rounds every product in the half dtype: other numbers than float32's.
    row("train", "precision", "refused", {}, dict(precision="bf16-mixed"), "--precision"),
    row("layout", "layout", "refused", {}, dict(layout="vanilla"), "--layout"),
    # A layout's own options are recorded whole: each is refused, even the two that change no number (the
    # cache holds the owners' rows as stored: test_split_train.py's test_a_cache_changes_the_bytes_not_the_
    # training; 1.5D's blocks are 1D's for every C: test_matrix_distributed.py).
    row("layout_options", "cache_fraction", "refused", {}, dict(cache_fraction=0.2), "--cache-fraction"),
    row("layout_options", "replication", "refused", dict(layout="1.5d"), dict(layout="1.5d", replication=2),
        "--replication"),
    # Owner and replicated sampling give the same edges in another row order (docs/split_parallelism.md,
    # "Canonical order"): the sums may add in another order, so a resume would not be bit for bit.
    row("layout_options", "split_sampling", "refused", dict(layout="split"),
        dict(layout="split", split_sampling="replicated"), "--split-sampling"),
    # bfloat16 on the wire rounds every exchanged row: other numbers than float32's.
    row("layout_options", "shuffle_dtype", "refused", dict(layout="split"), dict(layout="split", shuffle_dtype="bfloat16"),
        "--shuffle-dtype"),
    row("layout", "dgs", "refused", {}, dict(dgs=DGSConfig()), "--dgs"),
    row("dgs", "period", "refused", {}, dict(period=3), "--dgs-period"),
    row("dgs", "warmup", "refused", {}, dict(warmup=2), "--dgs-warmup"),
    row("dgs", "lag", "refused", {}, dict(lag=2), "--dgs-lag"),
    row("dgs", "epsilon", "refused", {}, dict(epsilon=0.2), "--dgs-epsilon"),
    row("dgs", "feature_rate", "refused", {}, dict(feature_rate=0.5), "--dgs-feature-rate"),
    row("dgs", "mode", "refused", {}, dict(mode="node"), "--dgs-mode"),
    row("dgs", "probes", "refused", {}, dict(probes=16), "--dgs-probes"),
    row("dgs", "explain_steps", "refused", {}, dict(explain_steps=7), "--dgs-explain-steps"),
    row("dgs", "explain_lr", "refused", {}, dict(explain_lr=0.1), "--dgs-explain-lr"),
    row("dgs", "clusters_per_part", "refused", {}, dict(clusters_per_part=8), "--dgs-clusters-per-part"),
    # No flag sets it (fit's DGSConfig does).
    # Recorded with the other DGS settings, so refused, though a timeout changes no number.
    row("dgs", "wait_timeout_s", "refused", {}, dict(wait_timeout_s=60.0), "DGSConfig(wait_timeout_s=...)"),
    # A link task's settings (group "link": LinkConfig, recorded with the model): each changes the batches,
    # the loss or the score that picks the best epoch.
    row("link", "edge_split", "refused", {}, dict(edge_split=(0.8, 0.1, 0.1)), "--edge-split"),
    row("link", "link_split", "refused", {}, dict(link_split="ogb_split"), "--link-split"),
    row("link", "neg_ratio", "refused", {}, dict(neg_ratio=3), "--neg-ratio"),
    row("link", "neg_sampling", "refused", {}, dict(neg_sampling="per_source"), "--neg-sampling"),
    row("link", "decoder", "refused", {}, dict(decoder="mlp"), "--decoder"),
    row("link", "link_loss", "refused", dict(neg_sampling="per_source"),
        dict(neg_sampling="per_source", link_loss="softmax"), "--link-loss"),
    row("link", "metric", "refused", {}, dict(metric="ap"), "--metric"),
    row("link", "eval_negatives", "refused", {}, dict(eval_negatives=5), "--eval-negatives"),
]
# LayoutOptions.settings is the layout's own options class: its fields are the "layout_options" rows.
RESUME_GROUPS = {"train": (TrainConfig,), "layout": (LayoutOptions,), "layout_options": option_classes(),
                 "dgs": (DGSConfig,), "link": (LinkConfig,)}


def test_every_setting_is_classified_for_resume():
    rows = [p.values for p in RESUME_TABLE]
    assert sorted((group, name) for group, name, *_ in rows) == \
           sorted({(group, f.name) for group, classes in RESUME_GROUPS.items() for cls in classes for f in fields(cls)
                   if (cls, f.name) != (LayoutOptions, "settings")})
    assert {name for _, name, kind, *_ in rows if kind == "resumable"} == set(RESUMABLE_CHANGES)
    # Every flag the table names is one of gnnscale train's.
    train = subcommand_parser(build_parser(), "train")
    options = {option for action in train._actions for option in action.option_strings}
    assert {flag for *_, flag in rows if flag.startswith("--")} <= options


def resume_settings(group: str, overrides: dict) -> tuple[TrainConfig, LayoutOptions, LinkConfig | None]:
    cfg = TrainConfig(**{**RESUME_TRAIN, **(overrides if group == "train" else {})})
    link = LinkConfig(**overrides) if group == "link" else None
    if group == "dgs":
        return cfg, layout_options("hybrid", dgs=DGSConfig(**overrides)), link
    return cfg, layout_options(**(overrides if group in ("layout", "layout_options") else {})), link


@pytest.fixture(scope="module")
def tiny_partition_dir(tmp_path_factory):
    """A partition directory as far as a run's identity reads it: the manifest (its facts and its sha256)."""
    path = tmp_path_factory.mktemp("manifest")
    manifest = {"dataset": "synthetic", "num_nodes": 100, "num_edges": 400, "feature_dim": 8, "num_classes": 4,
                "split_sizes": {"train_idx": [30, 30], "val_idx": [10, 10], "test_idx": [10, 10]}}
    (path / MANIFEST).write_text(json.dumps(manifest))
    return path, manifest


def dist_identity(partition, cfg: TrainConfig, options: LayoutOptions, link: LinkConfig | None = None):
    """The identity check_launch gives a 2-worker run of these settings."""
    path, manifest = partition
    model = ModelConfig(name="sage", in_dim=8, hidden_dim=16, num_classes=4, num_layers=2)
    return run_identity(path, manifest, task_signature(asdict(model), *task_of(link)), cfg, options, 2)


def resume_outcome(path_kind: str, partition, before: tuple, after: tuple) -> None:
    """Resume the run of settings ``before`` with settings ``after`` (single process or distributed), through
    the check each path runs at start-up; ValueError where it refuses."""
    (cfg0, options0, link0), (cfg1, options1, link1) = before, after
    ckpt = Path("run.ckpt")
    if path_kind == "single":
        data, model = {"dataset": "synthetic", "num_nodes": 100}, {"name": "sage", "hidden_dim": 16}
        saved = DistCheckpoint(identity=one_process_identity(data, task_signature(model, *task_of(link0)), cfg0), epoch=1,
                               step=0, num_batches=3, model_state={}, optimizer_state={}, history=[], workers=[],
                               layout_state={})
        check_resume(saved, ckpt, one_process_identity(data, task_signature(model, *task_of(link1)), cfg1), cfg1.epochs)
        return
    saved = DistCheckpoint(identity=dist_identity(partition, cfg0, options0, link0), epoch=1, step=0, num_batches=3,
                           model_state={}, optimizer_state={}, history=[], workers=[], layout_state={})
    check_resume(saved, ckpt, dist_identity(partition, cfg1, options1, link1), cfg1.epochs)


def resume_paths(group: str) -> list[str]:
    return ["single", "distributed"] if group in ("train", "link") else ["distributed"]


@pytest.mark.parametrize("group, name, kind, before, after, flag", RESUME_TABLE)
def test_a_resume_that_changes_a_setting_is_refused_naming_it(tiny_partition_dir, group, name, kind, before,
                                                               after, flag):
    old, new = resume_settings(group, before), resume_settings(group, after)
    for path_kind in resume_paths(group):
        resume_outcome(path_kind, tiny_partition_dir, old, old)  # the same settings: accepted
        if kind != "refused":
            resume_outcome(path_kind, tiny_partition_dir, old, new)
            continue
        if name == "layout":
            message = re.escape("was written with --layout hybrid, this run has --layout vanilla; resume with "
                                "--layout hybrid")
        elif group == "layout":  # dgs on or off
            message = rf"was written with {name}=.*, this run has {name}=.*; resume with the same {flag} as"
        elif group == "layout_options":
            was, now = (asdict(s[1].settings)[name] for s in (old, new))
            message = re.escape(f"was written with layout_options.{name}={was!r}, this run has "
                                f"layout_options.{name}={now!r}; resume with the same {flag} as")
        else:
            was, now = (asdict({"train": s[0], "dgs": s[1].dgs, "link": s[2]}[group])[name] for s in (old, new))
            key = "model.link" if group == "link" else group  # a link task's settings go with its model's
            message = re.escape(f"was written with {key}.{name}={was!r}, this run has {key}.{name}={now!r}; "
                                f"resume with the same {flag} as")
        with pytest.raises(ValueError, match=message):
            resume_outcome(path_kind, tiny_partition_dir, old, new)


# --- when --checkpoint-every saves ------------------------------------------------------------------------


def saves_at(every: int | None, num_batches: int, epochs: int, start: tuple[int, int] = (0, 0)) -> tuple:
    """(mid-epoch saves, epoch-end saves) as global steps, of a run resumed at ``start`` (epoch, steps done): the
    loop asks Checkpointer.due after every iteration and saves anyway after every epoch."""
    saver = Checkpointer(Path("run.ckpt"), every, identity=None, comm=None, num_batches=num_batches)
    mid, ends = [], []
    for epoch in range(start[0], epochs):
        for steps_done in range(start[1] + 1 if epoch == start[0] else 1, num_batches + 1):
            if saver.due(epoch, steps_done):
                mid.append(epoch * num_batches + steps_done)
        ends.append((epoch + 1) * num_batches)
    return mid, ends


def test_checkpoint_every_5_over_epochs_of_3_batches_saves_at_global_steps_5_10_15():
    """Steps count from the run's first step, across epochs: 5 and 10 fall inside epochs 1 and 3, 15 is the end of
    epoch 4 (saved there anyway, not twice), and so on."""
    mid, ends = saves_at(5, 3, 7)
    assert mid == [5, 10, 20]
    assert ends == [3, 6, 9, 12, 15, 18, 21]
    assert sorted(set(mid) | set(ends)) == [3, 5, 6, 9, 10, 12, 15, 18, 20, 21]
    assert not set(mid) & set(ends)
    assert {5, 10, 15, 20} <= set(mid) | set(ends)  # every 5th global step is saved
    # Resumed mid-epoch at global step 5 (epoch 1, 2 of 3 steps done): the same steps after it.
    assert saves_at(5, 3, 7, start=(1, 2)) == ([10, 20], ends[1:])
    # every=1 saves after every iteration but the last of an epoch; no --checkpoint-every: epoch ends only.
    assert saves_at(1, 3, 2)[0] == [1, 2, 4, 5]
    assert saves_at(None, 3, 2)[0] == []


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


@pytest.mark.slow
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
