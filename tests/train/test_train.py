"""The training loop, checkpoints/resume, metrics JSON and the CLI, on a small synthetic graph."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.train.api import fit
from gnnscale.train.checkpoints.files import CHECKPOINT_VERSION, previous_path, read_payload, write_atomic
from gnnscale.train.config import TrainConfig
from gnnscale.sampling import NeighborSampler
from gnnscale.train.inputs import seeded_model
from gnnscale.train.metrics import write_json_atomic
from gnnscale.train.run import RunOutputs

SMALL = dict(num_nodes=1500, avg_degree=8.0, num_classes=5, feature_dim=16, seed=3)


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


def model_config(ds, name="sage", layers=2):
    return ModelConfig(name=name, in_dim=ds.feature_dim, hidden_dim=32, num_classes=ds.num_classes,
                       num_layers=layers, dropout=0.2, heads=2)


def train_config(**overrides):
    base = dict(fanouts=(5, 3), batch_size=128, epochs=2, lr=0.01, seed=7, threads=1)
    return TrainConfig(**{**base, **overrides})


def run_in_process(dataset, model_cfg, train_cfg, *, progress=True, **outputs):
    """The built-in model ``model_cfg``, initialised from the training seed, trained on ``dataset`` in this
    process by fit; ``outputs``: RunOutputs' fields."""
    return fit(seeded_model(model_cfg, train_cfg.seed), dataset, inputs="blocks", config=train_cfg,
               outputs=RunOutputs(**outputs), progress=progress)


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_training_learns_far_above_chance(dataset, name):
    report = run_in_process(dataset, model_config(dataset, name), train_config(epochs=4), progress=False)
    chance = 1 / dataset.num_classes
    assert report.final_test_acc > 2 * chance
    losses = [h["loss"] for h in report.history]
    assert losses[-1] < losses[0]


def test_fused_and_two_step_train_identically(dataset):
    """Fused sampling claims not to change training: same key, same blocks, same losses, bit for bit."""
    fused = run_in_process(dataset, model_config(dataset), train_config(sampler="fused"), progress=False)
    two_step = run_in_process(dataset, model_config(dataset), train_config(sampler="two_step"), progress=False)
    for a, b in zip(fused.history, two_step.history, strict=True):
        assert a["loss"] == b["loss"]
        assert a["val_acc"] == b["val_acc"] and a["sampled_edges"] == b["sampled_edges"]


@pytest.mark.parametrize("bulk", [1, 3])
def test_matrix_sampler_trains_like_fused(dataset, bulk):
    """The matrix sampler draws the fused blocks and --bulk only groups the sampling: same losses."""
    fused = run_in_process(dataset, model_config(dataset), train_config(sampler="fused"), progress=False)
    matrix = run_in_process(dataset, model_config(dataset), train_config(sampler="matrix", bulk=bulk), progress=False)
    for a, b in zip(fused.history, matrix.history, strict=True):
        assert a["loss"] == b["loss"] and a["sampled_edges"] == b["sampled_edges"]
    assert [h["num_bulks"] for h in matrix.history] == [-(-h["num_batches"] // bulk) for h in matrix.history]


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_ladies_trains_gcn_and_sage_and_bulk_changes_nothing(dataset, name):
    cfg = train_config(sampler="ladies", layer_size=64, epochs=3)
    one = run_in_process(dataset, model_config(dataset, name), cfg, progress=False)
    bulk = run_in_process(dataset, model_config(dataset, name), replace(cfg, bulk=4), progress=False)
    assert [h["loss"] for h in one.history] == [h["loss"] for h in bulk.history]
    assert one.final_test_acc > 2 / dataset.num_classes
    assert one.history[-1]["loss"] < one.history[0]["loss"]
    assert all(h["seconds_per_bulk"] > 0 and h["sampled_edges_per_s"] > 0 for h in bulk.history)


def test_ladies_refuses_gat(dataset):
    with pytest.raises(ValueError, match="sampler.*ladies.*gat"):
        run_in_process(dataset, model_config(dataset, "gat"), train_config(sampler="ladies"), progress=False)


def test_same_seed_same_run_other_seed_other_run(dataset):
    a = run_in_process(dataset, model_config(dataset), train_config(), progress=False)
    b = run_in_process(dataset, model_config(dataset), train_config(), progress=False)
    c = run_in_process(dataset, model_config(dataset), train_config(seed=8), progress=False)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    assert [h["loss"] for h in a.history] != [h["loss"] for h in c.history]


def test_resume_continues_exactly(dataset, tmp_path):
    full = run_in_process(dataset, model_config(dataset), train_config(epochs=3), progress=False,
                          checkpoint=tmp_path / "full.pt")
    ckpt = tmp_path / "part.pt"
    run_in_process(dataset, model_config(dataset), train_config(epochs=1), progress=False, checkpoint=ckpt)
    resumed = run_in_process(dataset, model_config(dataset), train_config(epochs=3), progress=False,
                             checkpoint=ckpt, resume=True)
    assert [h["epoch"] for h in resumed.history] == [0, 1, 2]
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in full.history]
    a = read_payload(tmp_path / "full.pt")["model_state"]
    b = read_payload(ckpt)["model_state"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_mid_epoch_checkpoint_of_one_process_resumes_exactly(dataset, tmp_path):
    """checkpoint_every saves one process's run mid-epoch too (the distributed run's checkpointer): the
    save before the epoch's end (kept as .prev) continues exactly like the uninterrupted run."""
    full = run_in_process(dataset, model_config(dataset), train_config(epochs=2), progress=False)
    ckpt = tmp_path / "c.ckpt"
    run_in_process(dataset, model_config(dataset), train_config(epochs=1), progress=False, checkpoint=ckpt,
                   checkpoint_every=2)
    mid = tmp_path / "mid.ckpt"
    mid.write_bytes(previous_path(ckpt).read_bytes())
    assert (read_payload(mid)["epoch"], read_payload(mid)["step"] > 0) == (0, True)
    resumed = run_in_process(dataset, model_config(dataset), train_config(epochs=2), progress=False, checkpoint=mid,
                             resume=True)
    assert [h["iteration_losses"] for h in resumed.history] == [h["iteration_losses"] for h in full.history]


def test_a_single_process_checkpoint_of_an_older_version_is_one_clear_line(dataset, tmp_path):
    ckpt = tmp_path / "old.pt"
    write_atomic(ckpt, {"version": CHECKPOINT_VERSION, "kind": "single", "epochs_done": 1, "history": []})
    with pytest.raises(ValueError, match=r"^checkpoint: .*old.pt was written by an older version of gnnscale .*; "
                                         r"start afresh with --overwrite$"):
        run_in_process(dataset, model_config(dataset), train_config(), progress=False, checkpoint=ckpt, resume=True)


def test_save_model_writes_the_best_validation_epoch_unless_asked_for_the_last(dataset, tmp_path):
    """The final line names the best-validation epoch: the model file holds its weights, also when the run
    resumed from a checkpoint written after it; save_model_at="last" writes the last epoch's."""
    cfg, model_cfg = train_config(epochs=8, lr=0.05), model_config(dataset)
    best = run_in_process(dataset, model_cfg, cfg, progress=False, model_out=tmp_path / "best.pt")
    last_epoch = best.history[-1]["epoch"]
    assert best.saved_epoch == best.best_epoch != last_epoch  # a run whose best epoch is not its last
    last = run_in_process(dataset, model_cfg, cfg, progress=False, model_out=tmp_path / "last.pt",
                          save_model_at="last")
    assert last.saved_epoch == last_epoch
    # The run stopped at the best epoch: its last weights are the best epoch's.
    run_in_process(dataset, model_cfg, replace(cfg, epochs=best.best_epoch + 1), progress=False,
                   model_out=tmp_path / "stopped.pt", save_model_at="last")
    ckpt = tmp_path / "c.ckpt"
    run_in_process(dataset, model_cfg, replace(cfg, epochs=best.best_epoch + 2), progress=False, checkpoint=ckpt)
    resumed = run_in_process(dataset, model_cfg, cfg, progress=False, checkpoint=ckpt, resume=True,
                             model_out=tmp_path / "resumed.pt")
    assert resumed.saved_epoch == best.best_epoch
    weights = {name: torch.load(tmp_path / f"{name}.pt")["state_dict"] for name in ("best", "last", "stopped",
                                                                                     "resumed")}

    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    assert same(weights["best"], weights["stopped"]) and same(weights["resumed"], weights["stopped"])
    assert not same(weights["best"], weights["last"])


def test_save_model_at_is_best_or_last():
    with pytest.raises(ValueError, match=r"save_model_at: expected one of \('best', 'last'\).*'final'"):
        RunOutputs(save_model_at="final")


def test_resume_refuses_other_settings_and_bad_files(dataset, tmp_path):
    ckpt = tmp_path / "c.pt"
    run_in_process(dataset, model_config(dataset), train_config(epochs=1), progress=False, checkpoint=ckpt)
    with pytest.raises(ValueError, match="checkpoint.*train"):
        run_in_process(dataset, model_config(dataset), train_config(epochs=2, lr=0.5), progress=False,
                       checkpoint=ckpt, resume=True)
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # a partial file
    with pytest.raises(ValueError, match="checkpoint"):
        run_in_process(dataset, model_config(dataset), train_config(epochs=2), progress=False,
                       checkpoint=ckpt, resume=True)
    with pytest.raises(ValueError, match="checkpoint"):
        run_in_process(dataset, model_config(dataset), train_config(), progress=False,
                       checkpoint=tmp_path / "missing.pt", resume=True)
    assert not list(tmp_path.glob(".*tmp*")), "no temporary checkpoint file may be left behind"


def test_metrics_json_has_the_time_split_per_epoch(dataset, tmp_path):
    out = tmp_path / "m.json"
    cpu_before = time.process_time()
    run_in_process(dataset, model_config(dataset), train_config(), progress=False, metrics_out=out)
    cpu_spent = time.process_time() - cpu_before
    metrics = json.loads(out.read_text())
    assert len(metrics["history"]) == 2
    # The epochs' CPU (every thread of this process) is a part of what the whole call spent.
    assert all(epoch["cpu_s"] > 0 for epoch in metrics["history"])
    assert sum(epoch["cpu_s"] for epoch in metrics["history"]) <= cpu_spent
    for epoch in metrics["history"]:
        for field in ("sample_s", "fetch_s", "forward_backward_s", "loss", "train_acc", "val_acc", "test_acc",
                      "sampled_edges_per_s"):
            assert field in epoch
        assert epoch["sampled_edges"] > 0 and epoch["sampled_edges_per_s"] > 0
        # The training step and its waits for data are sequential on the training thread.
        assert epoch["forward_backward_s"] + epoch["wait_s"] <= epoch["epoch_s"] + 1e-6
    assert metrics["dataset"]["num_nodes"] == SMALL["num_nodes"]


def test_without_background_loading_the_phases_add_up(dataset, tmp_path):
    """prefetch=0 samples and gathers on the training thread: then the wait is exactly that work."""
    out = tmp_path / "m.json"
    run_in_process(dataset, model_config(dataset), train_config(prefetch=0), progress=False, metrics_out=out)
    for epoch in json.loads(out.read_text())["history"]:
        assert epoch["sample_s"] + epoch["fetch_s"] + epoch["forward_backward_s"] <= epoch["epoch_s"] + 1e-6
        assert epoch["wait_s"] >= epoch["sample_s"] + epoch["fetch_s"] - 1e-6


@pytest.mark.parametrize("name", ["sage", "gat"])
def test_background_loading_does_not_change_training(dataset, name):
    """The overlapped stage claims not to change training: same losses and accuracies, bit for bit."""
    runs = [run_in_process(dataset, model_config(dataset, name), train_config(prefetch=depth), progress=False)
            for depth in (0, 1, 3)]
    for other in runs[1:]:
        for a, b in zip(runs[0].history, other.history, strict=True):
            assert a["loss"] == b["loss"] and a["val_acc"] == b["val_acc"] and a["test_acc"] == b["test_acc"]
            assert a["sampled_edges"] == b["sampled_edges"]


def test_empty_training_set_is_an_error(dataset):
    empty = replace(dataset, train_idx=np.empty(0, dtype=np.int64))
    with pytest.raises(ValueError, match="train_idx"):
        run_in_process(empty, model_config(dataset), train_config(), progress=False)


@pytest.mark.parametrize("overrides, field", [
    (dict(fanouts=(-2, 5)), "fanouts"), (dict(fanouts=(5, -3)), "fanouts"), (dict(batch_size=0), "batch_size"),
    (dict(lr=0.0), "lr"), (dict(sampler="magic"), "sampler"), (dict(eval_fanouts=(5,)), "eval_fanouts"),
    (dict(sampler="matrix", bulk=0), "bulk.*--bulk"), (dict(sampler="ladies", bulk=-2), "bulk.*--bulk"),
    (dict(sampler="matrix", bulk=2.5), "bulk.*--bulk"), (dict(sampler="fused", bulk=4), "bulk.*--sampler matrix"),
    (dict(sampler="ladies", layer_size=0), "layer_size.*--layer-size"),
    (dict(sampler="matrix", layer_size=64), "layer_size.*--sampler ladies"),
    (dict(sampler="ladies", replace=True), "replace"),
    (dict(prefetch=-1), "prefetch"),
])
def test_train_config_errors_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        train_config(**overrides)


def test_layers_and_fanouts_must_agree(dataset):
    with pytest.raises(ValueError, match="fanouts"):
        run_in_process(dataset, model_config(dataset, layers=3), train_config(), progress=False)


SYNTH = ["--dataset", "synthetic", "-o", "num_nodes=800", "-o", "feature_dim=8", "-o", "num_classes=4"]


@pytest.mark.parametrize("argv, message", [
    (["train", "--dataset", "imagenet"], "dataset"),
    (["train", *SYNTH, "--model", "transformer"], "model"),
    (["train", *SYNTH, "--fanouts", "-2,5"], "fanouts"),
    (["train", *SYNTH, "--fanouts", "10,5", "--layers", "3"], "layers"),
    (["train", "--dataset", "cora"], "root|data.dir"),
    (["train", "--dataset", "cora", "--data-dir", "/nonexistent/folder"], "ind.cora|nonexistent"),
    (["info", "--dataset", "synthetic", "-o", "num_nodes=-5"], "num_nodes"),
    (["train", "--partitions", "/nonexistent", "--layout", "vanilla", "--sampler", "two_step"], "sampler"),
    # Not launched: how to launch it, with the launcher, rather than which of torchrun's variables are missing.
    (["train", "--partitions", "/nonexistent"], r"launch them with python -m gnnscale.launch --standalone "
                                                  r"--nproc-per-node P -m gnnscale train --partitions /nonexistent"),
    (["train", *SYNTH, "--sampler", "matrix", "--bulk", "0"], "--bulk: expected an int >= 1, got 0"),
    (["train", *SYNTH, "--bulk", "8"], "--bulk 8 needs --sampler matrix or ladies"),
    (["train", *SYNTH, "--sampler", "ladies", "--layer-size", "-1"], "--layer-size: expected an int >= 1, got -1"),
    (["train", *SYNTH, "--sampler", "fused", "--layer-size", "64"], "--layer-size applies to --sampler ladies"),
    (["train", *SYNTH, "--sampler", "ladies", "--model", "gat"], "ladies.*gat"),
    (["train", "--partitions", "/nonexistent", "--sampler", "matrix"], "--sampler matrix runs distributed with --layout 1d"),
])
def test_cli_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gnnscale {argv[0]}: error:")
    assert __import__("re").search(message, err), err


def test_cli_train_writes_metrics_and_resumes(tmp_path, capsys):
    argv = ["train", *SYNTH, "--fanouts", "4,3", "--epochs", "1", "--threads", "1", "--quiet",
            "--metrics-out", str(tmp_path / "m.json"), "--checkpoint", str(tmp_path / "c.pt")]
    assert main(argv) == 0
    assert "test accuracy" in capsys.readouterr().out
    assert main([*argv[:-4], "--epochs", "2", "--checkpoint", str(tmp_path / "c.pt"), "--resume"]) == 0
    assert len(read_payload(tmp_path / "c.pt")["history"]) == 2


CLI_TRAIN = ["train", *SYNTH, "--fanouts", "4,3", "--threads", "1", "--quiet"]


def test_cli_checkpoint_is_never_overwritten_without_overwrite(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    assert main([*CLI_TRAIN, "--epochs", "1", "--checkpoint", str(ckpt)]) == 0
    first = ckpt.read_bytes()
    capsys.readouterr()
    # Another model on the same path: refused before any work, the file untouched.
    assert main([*CLI_TRAIN, "--model", "gcn", "--epochs", "1", "--checkpoint", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert err == (f"gnnscale train: error: --checkpoint: {ckpt} already exists; pass --resume to continue that run, "
                   "or --overwrite to start over and replace it\n")
    assert ckpt.read_bytes() == first
    assert main([*CLI_TRAIN, "--model", "gcn", "--epochs", "1", "--checkpoint", str(ckpt), "--overwrite"]) == 0
    assert read_payload(ckpt)["signature"]["model"]["name"] == "gcn"


def test_cli_resume_says_from_which_epoch_and_names_a_changed_setting(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    train = [a for a in CLI_TRAIN if a != "--quiet"]
    assert main([*CLI_TRAIN, "--epochs", "1", "--checkpoint", str(ckpt)]) == 0
    capsys.readouterr()
    assert main([*train, "--epochs", "2", "--checkpoint", str(ckpt), "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"resuming from {ckpt}: 1 of 2 epochs done, continuing at epoch 1" in out
    assert "epoch   0" not in out and "epoch   1" in out
    # One setting changed: the message names it, both values and the flag, not two whole configs.
    assert main([*CLI_TRAIN, "--epochs", "3", "--lr", "0.5", "--checkpoint", str(ckpt), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gnnscale train: error: --checkpoint: {ckpt} was written with train.lr=0.003, this run has "
                   "train.lr=0.5; resume with the same --lr as the run that wrote it\n")
    assert main([*CLI_TRAIN, "--epochs", "3", "--hidden", "64", "--checkpoint", str(ckpt), "--resume"]) == 2
    assert "model.hidden_dim=128, this run has model.hidden_dim=64; resume with the same --hidden" in \
        capsys.readouterr().err
    # Nothing left to train: said before training, with the flag to change.
    assert main([*CLI_TRAIN, "--epochs", "2", "--checkpoint", str(ckpt), "--resume"]) == 2
    assert "already holds 2 trained epochs; pass --epochs above 2" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--resume"], r"resume: --resume needs --checkpoint FILE"),
    (["--checkpoint", "{tmp}/none.pt", "--resume"], r"checkpoint: no file at .*none.pt to resume from"),
    (["--metrics-out", "{tmp}"], r"--metrics-out: .* is a directory; give a file path \(--metrics-out FILE\)"),
    (["--metrics-out", "{tmp}/exists.json"], r"--metrics-out: .*exists.json already exists; pass --overwrite"),
    (["--metrics-out", "{tmp}/exists.json/m.json"], r"--metrics-out: cannot write .*: .*exists.json is a file"),
    (["--checkpoint", "{tmp}"], r"checkpoint: .* is a directory; give a file path \(--checkpoint FILE\)"),
    (["--checkpoint", "{tmp}/exists.json"], r"checkpoint: .*exists.json already exists; pass --resume to continue"),
    (["--partitions", "{tmp}", "--dataset", "cora"], r"partitions: --dataset cannot be used with --partitions"),
    (["--partitions", "{tmp}", "--data-dir", "x", "-o", "num_nodes=5"],
     r"partitions: --data-dir and -o cannot be used with --partitions"),
], ids=["resume-alone", "resume-missing", "metrics-dir", "metrics-exists", "metrics-under-file", "checkpoint-dir",
        "checkpoint-exists", "partitions-dataset", "partitions-data-dir"])
def test_cli_output_paths_and_flag_conflicts_fail_before_any_work(tmp_path, capsys, argv, message):
    (tmp_path / "exists.json").write_text("{}")
    before = sorted(tmp_path.iterdir())
    # A dataset that would take long to build: the checks must come first.
    slow = ["train", "--epochs", "1", "--quiet"] + ([] if "--partitions" in argv else ["-o", "num_nodes=5000000"])
    assert main([*slow, *(a.replace("{tmp}", str(tmp_path)) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert sorted(tmp_path.iterdir()) == before and (tmp_path / "exists.json").read_text() == "{}"


def test_cli_train_with_kernels_torch_gives_the_numba_losses(tmp_path, capsys):
    """The whole model on the torch path (--kernels torch, CPU): per-epoch losses within 1e-4 of numba's
    (the same batches and dropout masks; sums in another order). A resume may not switch kernels: the
    numbers would differ in the last bits, and a resumed run is the uninterrupted one bit for bit."""
    losses = {}
    for kernels in ("numba", "torch"):
        out, ckpt = tmp_path / f"{kernels}.json", tmp_path / f"{kernels}.pt"
        argv = [*CLI_TRAIN, "--epochs", "2", "--kernels", kernels, "--metrics-out", str(out), "--checkpoint", str(ckpt)]
        assert main(argv) == 0
        losses[kernels] = [epoch["loss"] for epoch in json.loads(out.read_text())["history"]]
    assert len(losses["torch"]) == 2
    np.testing.assert_allclose(losses["torch"], losses["numba"], rtol=1e-4, atol=0)
    capsys.readouterr()
    resume = [*CLI_TRAIN, "--epochs", "3", "--checkpoint", str(tmp_path / "numba.pt"), "--resume"]
    assert main([*resume, "--kernels", "torch"]) == 2
    assert "model.kernels='numba', this run has model.kernels='torch'; resume with the same --kernels" in \
        capsys.readouterr().err


def test_gat_with_attention_dropout_trains_alike_on_both_kernels(dataset):
    losses = {}
    for kernels in ("numba", "torch"):
        model_cfg = replace(model_config(dataset, "gat"), attn_dropout=0.3, input_dropout=0.1, kernels=kernels)
        report = run_in_process(dataset, model_cfg, train_config(epochs=2, fanouts=(4, 3)), progress=False)
        losses[kernels] = [h["loss"] for h in report.history]
    np.testing.assert_allclose(losses["torch"], losses["numba"], rtol=1e-4, atol=0)


def test_metrics_out_into_a_directory_leaves_no_stray_file(tmp_path):
    with pytest.raises(ValueError, match="exists and is not a regular file"):
        write_json_atomic(tmp_path, {"a": 1})
    assert list(tmp_path.parent.glob(f".{tmp_path.name}.tmp*")) == []


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for default in ("(default: 10,5)", "(default: 512)", "(default: sage)", "(default: 0.003)", "(default: 120)",
                    "(default: hybrid)", "(default: owner)", "(default: 30)"):
        assert default in out
    assert "(default: None)" not in out and "(default: False)" not in out


def test_reprs_are_short():
    ds = make_synthetic(SyntheticConfig(num_nodes=3000, feature_dim=8, seed=1))
    blocks = NeighborSampler(ds.graph, [5, 5]).sample(torch.from_numpy(ds.train_idx), key=1)
    for obj in (ds, ds.graph, *blocks):
        text = repr(obj)
        assert "\n" not in text and len(text) < 200 and "tensor" not in text and "array" not in text, text
    assert repr(blocks[-1]) == (f"Block(num_src={blocks[-1].num_src}, num_dst={ds.train_idx.size}, "
                                f"num_edges={blocks[-1].num_edges}, device=cpu)")


@pytest.mark.slow
def test_python_dash_m_gnnscale_info():
    out = subprocess.run([sys.executable, "-m", "gnnscale", "info", *SYNTH, "--json"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    info = json.loads(out)
    assert info["num_nodes"] == 800 and info["topology_bytes"] > 0 and info["feature_bytes"] == 800 * 8 * 4
