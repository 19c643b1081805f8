"""What a newcomer meets at the command line: ``--version``, ``info``'s summary, error lines that name
the flag typed, repartitioning advice that fits the partition, and clean output in logs (no progress
bars, no bulk figures for a sampler without bulks, no PyTorch warning about read-only arrays)."""

from __future__ import annotations

import importlib.metadata
import io
import json
import re
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnscale
from gnnscale.files import atomic_write
from gnnscale.cli import main, name_the_flag, report
from gnnscale.graph.dataset import format_bytes, format_float
from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.graph.storage import save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import write_partition_dir
from gnnscale.train.checkpoints.files import (CHECKPOINT_KIND, CHECKPOINT_VERSION, newest_complete, previous_path,
                                       read_payload, write_atomic)

SYNTH = ["--dataset", "synthetic", "-o", "num_nodes=800", "-o", "feature_dim=8", "-o", "num_classes=4"]
TRAIN = ["train", *SYNTH, "--fanouts", "4,3", "--epochs", "1", "--threads", "1"]
TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def test_version_is_the_installed_one(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0, "gnnscale --version is refused"
    installed = importlib.metadata.version("gnnscale")  # pyproject.toml's version, as installed
    assert capsys.readouterr().out == f"gnnscale {installed}\n"
    assert gnnscale.__version__ == installed


@pytest.mark.parametrize("value, text", [
    (3.8980797636632203, "3.90"), (15.002, "15.0"), (97.01000000000022, "97.0"), (0.001234, "0.00123"),
    (999.96, "1,000"), (15002.5, "15,002"), (float("inf"), "inf"),
])
def test_floats_are_shown_to_3_significant_digits(value, text):
    assert format_float(value) == text


@pytest.mark.parametrize("count, text", [
    (512, "512 B"), (340_048, "340 kB"), (1_280_000, "1.28 MB"), (999_999_999, "1.00 GB"), (2_450_000_000, "2.45 GB"),
])
def test_byte_counts_are_shown_in_kb_mb_gb(count, text):
    assert format_bytes(count) == text


def test_info_is_an_aligned_summary_and_json_on_request(capsys):
    assert main(["info", *SYNTH]) == 0
    out = capsys.readouterr().out
    assert not out.startswith("{"), "gnnscale info printed JSON without --json"
    lines = out.splitlines()
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines)
    assert rows["nodes"] == "800" and rows["features"] == "25.6 kB", rows  # 800 x 8 float32
    assert len({len(line) - len(line.split("  ")[-1].lstrip()) for line in lines}) == 1, lines  # one value column
    assert not re.search(r"\d\.\d{4,}", "\n".join(lines)), lines  # no raw floats such as 3.8980797636632203
    assert main(["info", *SYNTH, "--json"]) == 0
    summary = load_dataset("synthetic", None, num_nodes=800, feature_dim=8, num_classes=4).summary()
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(summary))  # full precision


@pytest.mark.parametrize("argv, line", [
    (["train", "--batch-size", "0"], "--batch-size: expected an int >= 1, got 0"),
    (["train", "--hidden", "0"], "--hidden: expected a positive int, got 0"),
    (["train", "--fanouts", "10,5", "--layers", "3"], "--layers: 3 layers but 2 fanouts ((10, 5))"),
    (["train", "--dropout", "1.5"], "--dropout: expected a probability in [0, 1), got 1.5"),
    (["info", "--dataset", "imagenet"],
     f"--dataset: unknown dataset 'imagenet'; known datasets: {', '.join(DATASETS)}"),
    (["partition", "--parts", "0", "--out", "{tmp}/p"], "--parts: expected an int in [1, num_nodes = 800], got 0"),
    # Also naming its flag in brackets: named once, not "--bulk: ... (--bulk)".
    (["train", "--sampler", "matrix", "--bulk", "0"], "--bulk: expected an int >= 1, got 0"),
    # A dataset option the user typed as -o seed=...: its own name, not --seed's.
    (["train", "-o", "seed=-1"], "seed: expected >= 0, got -1"),
], ids=["batch-size", "hidden", "layers", "dropout", "dataset", "parts", "named-already", "dataset-option"])
def test_errors_name_the_flag_the_user_typed(tmp_path, capsys, argv, line):
    command, *rest = argv
    extra = {"train": ["--quiet"], "info": [], "partition": ["--overwrite"]}[command]
    assert main([command, *SYNTH, *extra, *(a.replace("{tmp}", str(tmp_path)) for a in rest)]) == 2
    err = capsys.readouterr().err
    assert err == f"gnnscale {command}: error: {line}\n", err


def test_a_missing_partition_directory_names_the_flag_and_the_command_that_writes_one(tmp_path, monkeypatch, capsys):
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--partitions", str(tmp_path / "none"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gnnscale train: error: --partitions: expected a partition directory (`gnnscale partition --out "
                   f"DIR` writes one), got {tmp_path / 'none'}, which is missing\n"), err


def test_a_flag_is_named_once():
    flags = {"batch_size": "--batch-size"}
    assert name_the_flag("batch_size: got 0", flags) == "--batch-size: got 0"
    assert name_the_flag("--batch-size: got 0", flags) == "--batch-size: got 0"
    assert name_the_flag("batch_size: expected 1 (--batch-size)", flags) == "--batch-size: expected 1"
    assert name_the_flag("seed: expected >= 0", flags) == "seed: expected >= 0"  # no flag of this command


@pytest.mark.parametrize("method", ["metis", "random"])
def test_the_advice_for_a_part_without_training_nodes_fits_the_partition(tmp_path, monkeypatch, capsys, method):
    # One training node for two parts: no --method or --seed helps (both spread training nodes evenly).
    full = make_synthetic(SyntheticConfig(num_nodes=400, feature_dim=4, seed=1))
    one = replace(full, train_idx=full.train_idx[:1].copy())
    write_partition_dir(one, 2, method, tmp_path / "p2")
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--partitions", str(tmp_path / "p2"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("the dataset has only 1 training node for 2 parts: repartition with --parts 1 or fewer, "
                        "or give the dataset more training nodes\n"), err
    assert "--method" not in err, err


def test_progress_bars_only_on_a_terminal(monkeypatch, capsys):
    assert main(TRAIN) == 0
    err = capsys.readouterr().err
    assert err == "", f"a progress bar went to a stderr that is no terminal: {err[:80]!r}"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(TRAIN) == 0
    monkeypatch.undo()
    assert "epoch 0" in terminal.getvalue(), "no progress bar on a terminal"


@pytest.mark.parametrize("sampler, bulk_text", [
    (["--sampler", "fused"], None),
    # 4 batches of 120 seeds, so that a bulk holds 2 (an epoch of one batch samples a bulk of 1).
    (["--sampler", "matrix", "--bulk", "2", "--batch-size", "120"], "ms per bulk of 2"),
], ids=["fused", "matrix-bulk-2"])
def test_the_epoch_line_mentions_bulks_only_when_sampling_in_bulks(capsys, sampler, bulk_text):
    assert main([*TRAIN, *sampler]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch"))
    assert (bulk_text in line) if bulk_text else ("bulk" not in line), line


@pytest.mark.slow
def test_training_on_memory_mapped_arrays_warns_nothing(tmp_path):
    ds = make_synthetic(SyntheticConfig(num_nodes=400, feature_dim=4, seed=1))
    save_dataset(ds, tmp_path / "ds")  # loaded back memory-mapped, read-only
    # In a fresh process: PyTorch raises this warning once per process, so an earlier test could hide it.
    run = subprocess.run([sys.executable, "-W", "error:The given NumPy array is not writable", "-m", "gnnscale",
                          "train", "--dataset", "dir", "--data-dir", str(tmp_path / "ds"), "--fanouts", "4,3",
                          "--epochs", "1", "--threads", "1", "--quiet"],
                         capture_output=True, text=True, timeout=240)
    said = run.stderr.strip().splitlines()
    assert run.returncode == 0 and "Warning" not in run.stderr, said[-1] if said else run.returncode


@pytest.mark.slow
def test_the_command_imports_without_full_collections_and_freezes_what_it_imported():
    """Start-up costs every process of a launch: the cyclic collector's full passes over the imports'
    long-lived objects cost about a second of CPU per worker. The command makes none while importing and
    freezes what it imported, so that later passes skip it."""
    probe = ("import gc, sys\n"
             "full = []\n"
             "gc.callbacks.append(lambda phase, info: phase == 'stop' and info['generation'] == 2 and full.append(1))\n"
             "sys.argv = ['gnnscale', '--version']\n"
             "import gnnscale.__main__ as entry\n"
             "try:\n"
             "    entry.main()\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(len(full), gc.get_freeze_count(), gc.isenabled())\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    full, frozen, enabled = run.stdout.split()[-3:]
    assert (full, enabled) == ("0", "True") and int(frozen) > 100_000, run.stdout


def test_an_output_that_is_not_a_regular_file_is_never_replaced(tmp_path):
    """A device, a directory or a socket at an output path is refused before anything is written (run as
    root, a rename over /dev/full would replace the device node)."""
    target = tmp_path / "a_dir"
    target.mkdir()
    with pytest.raises(ValueError, match=r"a_dir: exists and is not a regular file"):
        atomic_write(target, lambda f: f.write(b"x"))
    assert target.is_dir() and not list(tmp_path.glob(".*tmp*"))
    with pytest.raises(ValueError, match=r"/dev/null: exists and is not a regular file"):
        atomic_write("/dev/null", lambda f: f.write(b"x"))


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("old")

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"m.json: could not write it \(No space left on device\)"):
        atomic_write(path, fail)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_a_kept_previous_file_never_leaves_the_path_missing(tmp_path):
    """A reader polling a checkpoint while another process saves it must always find a file there: the
    previous version is kept by a hard link, not by renaming the path away (seen: a FileNotFoundError in
    a reader between the two renames)."""
    path, previous = tmp_path / "c.ckpt", tmp_path / "c.ckpt.prev"
    atomic_write(path, lambda f: f.write(b"0"))
    missing, done = [], threading.Event()

    def poll():
        while not done.is_set():
            if not path.exists():
                missing.append(1)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for i in range(1, 300):
            atomic_write(path, lambda f: f.write(str(i).encode()), keep_previous=previous)
    finally:
        done.set()
        reader.join()
    assert not missing
    assert (path.read_text(), previous.read_text()) == ("299", "298")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt", "c.ckpt.prev"]


def test_a_file_system_without_hard_links_still_keeps_the_previous_file(tmp_path, monkeypatch):
    path, previous = tmp_path / "c.ckpt", tmp_path / "c.ckpt.prev"
    atomic_write(path, lambda f: f.write(b"old"))

    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr("gnnscale.files.os.link", no_links)
    atomic_write(path, lambda f: f.write(b"new"), keep_previous=previous)
    assert (path.read_text(), previous.read_text()) == ("new", "old")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt", "c.ckpt.prev"]


def test_a_checkpoint_renamed_away_while_it_is_read_falls_back_to_the_previous_one(tmp_path, monkeypatch):
    """Between a reader's is_file() and its read, a save in another process may have moved the newest
    checkpoint away (on a file system without hard links): that is a missing file, not a crash."""
    ckpt = tmp_path / "c.ckpt"
    write_atomic(ckpt, {"version": CHECKPOINT_VERSION, "kind": CHECKPOINT_KIND, "epoch": 1})
    write_atomic(ckpt, {"version": CHECKPOINT_VERSION, "kind": CHECKPOINT_KIND, "epoch": 2})
    read_bytes = Path.read_bytes

    def vanished(self):
        if self == ckpt:
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", vanished)
    found = newest_complete(ckpt)
    assert found.path == previous_path(ckpt) and found.payload["epoch"] == 1


def test_the_torchrun_error_file_is_whole_or_absent(tmp_path, monkeypatch, capsys):
    """torchrun's agent fails outright (no restart) on an error file it cannot parse; a worker stopped
    while it writes one must leave no half file behind."""
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    report("first line", same_on_every_worker=False)
    written = json.loads(error_file.read_text())
    assert written["message"]["message"] == "first line"

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # a signal arriving while the record is written

    monkeypatch.setattr("gnnscale.cli.entry.json.dumps", stopped)
    monkeypatch.setattr("gnnscale.cli.entry.json.dump", stopped)
    with pytest.raises(KeyboardInterrupt):
        report("second line", same_on_every_worker=False)
    assert json.loads(error_file.read_text()) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json"]
    assert capsys.readouterr().err == "first line\n"


@pytest.mark.parametrize("argv, message", [
    (["--layout", "split"], "gnnscale train: error: --layout split: applies to a distributed run; add --partitions"),
    (["--layout", "1.5d"], "gnnscale train: error: --layout 1.5d: applies to a distributed run"),
    (["--timeout", "30"], "gnnscale train: error: --timeout: applies to a distributed run"),
    (["--layout", "split", "--shuffle-dtype", "bfloat16"], "gnnscale train: error: --layout split, --shuffle-dtype: "
                                                           "applies to a distributed run"),
    (["--data-dir", "somewhere"], "gnnscale train: error: --data-dir: --dataset synthetic is generated, it reads no"),
])
def test_a_flag_only_a_distributed_run_reads_is_refused_without_partitions(argv, message, capsys):
    assert main([*TRAIN, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


@pytest.mark.parametrize("outputs", [("--metrics-out", "--checkpoint"), ("--checkpoint", "--save-model"),
                                     ("--metrics-out", "--save-model")])
def test_two_outputs_naming_one_file_are_refused_before_training(outputs, tmp_path, capsys):
    target = tmp_path / "x"
    argv = [arg for flag in outputs for arg in (flag, str(target))]
    assert main([*TRAIN, *argv]) == 2
    assert f"{outputs[0]} and {outputs[1]} both name {target}" in capsys.readouterr().err
    assert not target.exists()


def test_save_model_is_checked_before_any_work(tmp_path, capsys):
    existing = tmp_path / "model.pt"
    existing.write_bytes(b"keep me")
    assert main([*TRAIN, "--save-model", str(existing)]) == 2
    assert f"{existing} already exists; pass --overwrite to replace it, or choose another --save-model" in \
        capsys.readouterr().err
    assert existing.read_bytes() == b"keep me"
    assert main([*TRAIN, "--save-model", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([*TRAIN, "--save-model", "/dev/null"]) == 2
    assert "/dev/null is not a regular file" in capsys.readouterr().err


def nan_dataset(tmp_path, rows=(3, 17)):
    dataset = make_synthetic(SyntheticConfig(num_nodes=800, feature_dim=8, num_classes=4))
    features = np.array(dataset.features)
    features[list(rows), 1] = np.nan
    return replace(dataset, features=features)


def test_nan_features_are_refused_at_load_naming_the_rows(tmp_path, capsys):
    saved = save_dataset(nan_dataset(tmp_path), tmp_path / "nan")
    for command in (["train", "--fanouts", "4,3", "--epochs", "1"], ["partition", "--parts", "2", "--out",
                                                                    str(tmp_path / "parts")]):
        assert main([*command, "--dataset", "dir", "--data-dir", str(saved)]) == 2
        err = capsys.readouterr().err
        assert "features: 2 rows hold NaN or Inf (rows 3, 17)" in err and err.count("\n") == 1, err
    assert not (tmp_path / "parts").exists()


def test_a_loss_that_becomes_nan_stops_the_run_saying_when(tmp_path, capsys):
    """A learning rate so large that the weights overflow: the run stops at the first non-finite epoch
    with one line, and the metrics file keeps the epochs before it."""
    metrics = tmp_path / "m.json"
    argv = [*TRAIN, "--epochs", "30", "--lr", "1e30", "--metrics-out", str(metrics), "--quiet"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    found = re.search(r"gnnscale train: stopped: loss: became (nan|inf|-inf) at epoch (\d+) iteration (\d+)", err)
    assert found is not None and err.count("\n") == 1, err
    kept = json.loads(metrics.read_text())["history"]
    assert len(kept) == int(found[2]) and all(np.isfinite(h["loss"]) for h in kept)


def test_a_resumed_run_continues_its_metrics_file(tmp_path):
    metrics, ckpt = tmp_path / "m.json", tmp_path / "c.pt"
    outputs = ["--metrics-out", str(metrics), "--checkpoint", str(ckpt), "--quiet"]
    assert main([*TRAIN, "--epochs", "2", *outputs]) == 0
    first = json.loads(metrics.read_text())["history"]
    assert main([*TRAIN, "--epochs", "3", *outputs, "--resume"]) == 0
    resumed = json.loads(metrics.read_text())["history"]
    assert [h["epoch"] for h in resumed] == [0, 1, 2] and resumed[:2] == first


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_checkpoint_falls_back_to_the_previous_one(damage, tmp_path, capsys):
    """Every save keeps the one before: a truncated or altered newest checkpoint is detected (checksum) and
    the run resumes from the previous save, saying so, and still ends where the uninterrupted run ends."""
    full, ckpt = tmp_path / "full.json", tmp_path / "c.pt"
    assert main([*TRAIN, "--epochs", "3", "--quiet", "--metrics-out", str(full)]) == 0
    assert main([*TRAIN, "--epochs", "2", "--quiet", "--checkpoint", str(ckpt)]) == 0
    data = bytearray(ckpt.read_bytes())
    if damage == "truncate":
        del data[len(data) // 2:]
    else:
        data[len(data) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    resumed = tmp_path / "resumed.json"
    assert main([*TRAIN, "--epochs", "3", "--checkpoint", str(ckpt), "--resume", "--metrics-out", str(resumed)]) == 0
    captured = capsys.readouterr()
    assert f"checkpoint: {ckpt} is damaged (its checksum does not match: truncated or altered); resuming from the " \
           f"previous one, {ckpt}.prev" in captured.err
    assert f"resuming from {ckpt}.prev: 1 of 3 epochs done" in captured.out
    expected = [h["loss"] for h in json.loads(full.read_text())["history"]]
    assert [h["loss"] for h in json.loads(resumed.read_text())["history"]] == expected


def test_resume_auto_starts_afresh_without_a_checkpoint_and_resumes_with_one(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    assert main([*TRAIN, "--epochs", "1", "--checkpoint", str(ckpt), "--resume", "auto"]) == 0
    assert main([*TRAIN, "--epochs", "2", "--checkpoint", str(ckpt), "--resume", "auto"]) == 0
    assert f"resuming from {ckpt}: 1 of 2 epochs done" in capsys.readouterr().out
    assert main([*TRAIN, "--resume", "later"]) == 2
    assert "argument --resume: invalid choice: 'later' (choose from 'auto')" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_is_one_line_saying_what_was_saved(tmp_path):
    """SIGINT in the middle of a run: one line on stderr naming the checkpoint and the metrics file, no
    traceback, exit status 130; the checkpoint resumes."""
    ckpt, metrics = tmp_path / "c.pt", tmp_path / "m.json"
    cmd = [sys.executable, "-m", "gnnscale", *TRAIN, "--epochs", "1000", "--checkpoint", str(ckpt), "--metrics-out",
           str(metrics)]
    # A shell's background job starts with SIGINT ignored, and Python keeps it so (CI may run the tests
    # that way): the child gets SIGINT's default back, as a process started from a terminal has it.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        epochs = 0
        for line in proc.stdout:  # the second epoch's line: the first epoch's checkpoint is saved
            epochs += line.startswith("epoch")
            if epochs == 2:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [f"gnnscale train: interrupted (Ctrl-C); {ckpt} holds the last checkpoint "
                                        f"(continue with --resume); {metrics} holds the metrics of the finished epochs"]
    assert read_payload(ckpt)["epoch"] >= 1  # whole: the interrupt never cuts a save short
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.slow
def test_ctrl_c_keeps_the_best_model_so_far(tmp_path):
    """SIGINT after a few epochs with --save-model: the model file holds the best-validation epoch so far, named
    on the last line; its weights are those an uninterrupted run has after that epoch (bit for bit), and that
    epoch's validation accuracy is the highest of the epoch lines printed."""
    model = tmp_path / "m.pt"
    cmd = [sys.executable, "-m", "gnnscale", *TRAIN, "--epochs", "1000", "--save-model", str(model)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    try:
        for line in proc.stdout:  # three epochs finished: a best one to keep
            lines.append(line)
            if sum(seen.startswith("epoch") for seen in lines) == 3:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    (line,) = err.strip().splitlines()
    found = re.fullmatch(rf"gnnscale train: interrupted \(Ctrl-C\); {re.escape(str(model))} holds the model of "
                         r"epoch (\d+) \(the best validation so far\)", line)
    assert found, line
    best = int(found.group(1))
    # Every epoch whose weights the run kept was printed first: the best one scores highest among them.
    val = [float(re.search(r" val (\S+) ", seen).group(1)) for seen in lines + out.splitlines(True)
           if seen.startswith("epoch")]
    assert best < len(val) and val[best] == max(val)
    last = tmp_path / "last.pt"
    assert main([*TRAIN, "--epochs", str(best + 1), "--save-model", str(last), "--save-model-at", "last",
                 "--quiet"]) == 0
    saved, expected = (torch.load(path, weights_only=True)["state_dict"] for path in (model, last))
    assert saved.keys() == expected.keys() and all(torch.equal(saved[k], expected[k]) for k in saved)


@pytest.mark.parametrize("argv, line", [
    (["--fanouts", "-3,5"], "gnnscale train: error: --fanouts: "),
    (["--metric", "auc"], "gnnscale train: error: --metric: expected one of accuracy, roc_auc, f1_macro for a node "
                          "task, got 'auc'"),
    (["--epochs", "x"], "gnnscale train: error: argument --epochs: expected an int, got 'x'"),
    (["--sampler", "gibbs"], "gnnscale train: error: argument --sampler: invalid choice: 'gibbs'"),
    (["--partitions", "P", "--layout", "hybrid", "--replication", "2"],
     "gnnscale train: error: --replication: applies to --layout 1.5d, got --layout hybrid"),
    (["--dgs-mode", "node"], "gnnscale train: error: --dgs-mode: given without --dgs; add --dgs"),
    (["--relation-fanouts", "cites=2"], "gnnscale train: error: --relation-fanouts: a relation's own fanouts need a "
                                        "typed graph and --model rgcn or rsage or rgat; --model sage trains one edge "
                                        "type (use --fanouts)"),
], ids=["negative-fanout", "metric", "epochs", "sampler", "layout-option", "dgs-option", "relation-fanouts"])
def test_a_bad_flag_value_is_one_line_naming_the_flag_without_the_usage(argv, line, capsys):
    assert main(["train", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1 and "usage:" not in err, err


def test_an_unknown_flag_points_to_the_subcommands_help(capsys):
    assert main(["train", "--epochz", "3"]) == 2
    assert capsys.readouterr().err == ("gnnscale train: error: unrecognized arguments: --epochz 3 (see gnnscale train "
                                       "--help)\n")
    assert main(["info", "--bogus"]) == 2
    assert capsys.readouterr().err == ("gnnscale info: error: unrecognized arguments: --bogus (see gnnscale info "
                                       "--help)\n")


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path):
    """`gnnscale info | head`: the pipe's reader closes before the command writes. Like a Unix tool, the
    command stops without a traceback or an error line (the shell's status for SIGPIPE, 141)."""
    proc = subprocess.Popen([sys.executable, "-m", "gnnscale", "info", *SYNTH, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the dataset is even built: every write the command makes meets a closed pipe
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.decode()) == (141, "")


@pytest.fixture(scope="module")
def node_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.pt"
    assert main([*TRAIN, "--quiet", "--save-model", str(path)]) == 0
    return path


@pytest.mark.parametrize("earlier", [False, True], ids=["new-out", "earlier-outputs"])
def test_an_interrupted_predict_leaves_out_as_it_was_and_says_so(node_model, tmp_path, monkeypatch, capsys,
                                                                 earlier):
    """Ctrl-C (or SIGTERM) while predict computes: no --out folder where there was none (not even an empty
    one), an earlier run's outputs untouched, no staging folder left, and one line that says so."""
    out = tmp_path / "out"
    predict = ["predict", "--model", str(node_model), "--out", str(out), *SYNTH, "--threads", "1"]
    if earlier:
        assert main([*predict, "--logits"]) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        capsys.readouterr()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("gnnscale.inference.predict.layerwise_inference", interrupted)
    assert main([*predict, "--overwrite", "--embeddings", "1"]) == 130
    assert capsys.readouterr().err == (f"gnnscale predict: interrupted (Ctrl-C); {out} is as it was and the temporary "
                                       "files were removed\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out"] if earlier else [])
    if earlier:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_predict_writes_the_outputs_of_every_registered_task():
    # A task added to the registry is one predict --task value too, with its own flags' rules and run.
    from gnnscale.cli.predict import OUTPUTS
    from gnnscale.train.tasks.registry import TASKS

    assert set(OUTPUTS) == set(TASKS)
