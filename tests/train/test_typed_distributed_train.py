"""Typed graphs trained by torchrun workers over a typed partition of the mag-shaped graph (gloo on 127.0.0.1): one
worker trains exactly as one process, hybrid and vanilla workers train identically with 2 vs 2L rounds per
iteration, a resumed run equals the uninterrupted one, and a broken part stops every worker with its name."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.inference.evaluate import evaluate_full
from gnnscale.nn.model_file import load_model
from gnnscale.nn.typed_models import TypedModelConfig
from gnnscale.partition.typed_directory import write_typed_partition_dir
from gnnscale.train import TrainConfig, fit
from gnnscale.train.checkpoints.files import read_payload
from gnnscale.train.inputs import seeded_model
from launch import run_launch, torchrun

SCALE = 0.003  # about 2,200 papers (1,888 for training), 3,400 authors, 26 institutions, 180 fields
TRAIN_ARGS = ["--model", "rgcn", "--hidden", "16", "--batch-size", "128", "--epochs", "2", "--lr", "0.01",
              "--seed", "3", "--threads", "1", "--quiet"]
TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=SCALE)


@pytest.fixture(scope="module")
def partitions(mag, tmp_path_factory) -> dict[int, Path]:
    """Typed partition directories of the mag-shaped graph, by number of parts (METIS)."""
    root = tmp_path_factory.mktemp("typed_parts")
    for p in (1, 2, 4):
        write_typed_partition_dir(mag, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (1, 2, 4)}


def train(nproc: int, partition: Path, out: Path, *args: str) -> dict:
    """Rank 0's metrics of one launch of ``nproc`` workers."""
    run = run_launch(torchrun(nproc, "--partitions", str(partition), "--metrics-out", str(out), *TRAIN_ARGS, *args))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def launched(partitions, tmp_path_factory):
    """``launched(nproc, layout, fanouts)``: rank 0's metrics of one launch, run once per module."""
    runs: dict[tuple, dict] = {}
    scratch = tmp_path_factory.mktemp("typed_metrics")

    def get(nproc: int, layout: str, fanouts: str) -> dict:
        if (nproc, layout, fanouts) not in runs:
            runs[nproc, layout, fanouts] = train(nproc, partitions[nproc], scratch / f"{layout}{nproc}_{fanouts}.json",
                                                 "--layout", layout, "--fanouts", fanouts)
        return runs[nproc, layout, fanouts]

    return get


# Half a minute and more on 2 cores: the slow tier (tests/train/test_distributed_train.py proves the claim for a
# graph of one type in the default one).
@pytest.mark.slow
@pytest.mark.parametrize("nproc, fanouts", [(2, "4,3"), (4, "4,3,2")])
def test_hybrid_and_vanilla_train_identically_with_2_vs_2L_rounds(launched, nproc, fanouts):
    hybrid, vanilla = launched(nproc, "hybrid", fanouts), launched(nproc, "vanilla", fanouts)
    layers = len(fanouts.split(","))
    for h, v in zip(hybrid["history"], vanilla["history"], strict=True):
        # Same keys, same typed blocks, same rows of every type: the layouts differ only in communication.
        assert (h["loss"], h["iteration_losses"], h["val_acc"], h["test_acc"], h["sampled_edges"]) == \
            (v["loss"], v["iteration_losses"], v["val_acc"], v["test_acc"], v["sampled_edges"])
        # Every node type's rows in one exchange: 2 feature rounds, whatever the number of types.
        assert (h["rounds_per_iteration"]["sample"], h["rounds_per_iteration"]["feature"]) == (0, 2)
        assert (v["rounds_per_iteration"]["sample"], v["rounds_per_iteration"]["feature"]) == (2 * (layers - 1), 2)
        assert h["rounds_per_iteration"]["grad"] == v["rounds_per_iteration"]["grad"] == 1
        assert h["bytes_per_iteration"]["sample"] == 0 < v["bytes_per_iteration"]["sample"]
        assert h["bytes_per_iteration"]["feature"] == v["bytes_per_iteration"]["feature"] > 0


@pytest.mark.slow
def test_relation_fanouts_draw_alike_in_hybrid_and_vanilla(launched, partitions, tmp_path):
    # Hybrid builds the one-process sampler, vanilla its owners' rounds: both must read --relation-fanouts.
    own = ["--fanouts", "4,3", "--relation-fanouts", "cites=1", "writes=0,2"]
    hybrid = train(2, partitions[2], tmp_path / "hybrid.json", "--layout", "hybrid", *own)
    vanilla = train(2, partitions[2], tmp_path / "vanilla.json", "--layout", "vanilla", *own)
    every = launched(2, "hybrid", "4,3")  # the same run with 4,3 for every relation
    for h, v, e in zip(hybrid["history"], vanilla["history"], every["history"], strict=True):
        assert (h["iteration_losses"], h["sampled_edges"]) == (v["iteration_losses"], v["sampled_edges"])
        assert h["sampled_edges"] < e["sampled_edges"]


def typed_model(ds, seed: int):
    dims = {t: d for t, d in ds.feature_dims.items() if d is not None}
    return seeded_model(TypedModelConfig.for_graph(ds.graph, feature_dims=dims, name="rgcn", num_classes=ds.num_classes,
                                                   num_layers=2, hidden_dim=16), seed)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["hybrid", "vanilla"])
def test_one_worker_trains_exactly_as_one_process(mag, launched, layout):
    # A one-part partition keeps the dataset's ids, so its worker draws the one-process run's batches and blocks.
    distributed = launched(1, layout, "4,3")
    cfg = TrainConfig(fanouts=(4, 3), batch_size=128, epochs=2, lr=0.01, seed=3, threads=1)
    single = fit(typed_model(mag, cfg.seed), mag, inputs="blocks", config=cfg, progress=False)
    for d, s in zip(distributed["history"], single.history, strict=True):
        assert (d["iteration_losses"], d["train_acc"], d["val_acc"], d["test_acc"]) == \
            (s["iteration_losses"], s["train_acc"], s["val_acc"], s["test_acc"])


@pytest.mark.slow
def test_a_resumed_run_equals_the_uninterrupted_one(launched, partitions, tmp_path, monkeypatch, capsys):
    whole = launched(2, "hybrid", "4,3")
    ckpt = tmp_path / "run.ckpt"
    args = ["--layout", "hybrid", "--fanouts", "4,3", "--checkpoint", str(ckpt)]
    train(2, partitions[2], tmp_path / "first.json", *args, "--epochs", "1", "--checkpoint-every", "3")
    resumed = train(2, partitions[2], tmp_path / "resumed.json", *args, "--resume")
    for a, b in zip(resumed["history"], whole["history"], strict=True):
        assert (a["iteration_losses"], a["val_acc"], a["test_acc"]) == \
            (b["iteration_losses"], b["val_acc"], b["test_acc"])
    # Another partition numbers the nodes otherwise: the authors' embedding rows would no longer be theirs.
    for name, value in {**TORCHRUN_ENV, "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--partitions", str(partitions[1]), *TRAIN_ARGS, "--epochs", "3", "--fanouts", "4,3",
                 "--checkpoint", str(ckpt), "--resume"]) == 2
    assert "a typed model's embeddings (its node types without features) hold a row per node id" in \
        capsys.readouterr().err


@pytest.mark.slow
def test_a_broken_part_stops_every_worker_with_its_name(partitions, tmp_path):
    broken = Path(shutil.copytree(partitions[2], tmp_path / "broken"))
    target = broken / "part1" / "features.paper.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    run = run_launch(torchrun(2, "--partitions", str(broken), "--fanouts", "4,3", *TRAIN_ARGS, "--timeout", "60"))
    assert run.returncode != 0
    output = run.stdout + run.stderr
    said = re.findall(r"^gnnscale train: stopped: rank 1 of 2 failed.*$", output, re.MULTILINE)
    assert len(said) == 1 and "part1/features.paper.npy: file is corrupt" in said[0], output[-3000:]


@pytest.mark.slow
def test_a_model_saved_over_a_partition_holds_its_embeddings_by_the_datasets_ids(mag, partitions, tmp_path):
    """The last epoch's weights of a 2-worker run: in its checkpoint by the partition's ids, in its model file by the
    dataset's (the partition's new_to_old.npy undone); every other weight the same; predict reads the file, and the
    run's --eval full over the partition scores what one process scores with the file on the dataset."""
    model_file, ckpt = tmp_path / "m.pt", tmp_path / "run.ckpt"
    metrics = train(2, partitions[2], tmp_path / "m.json", "--layout", "hybrid", "--fanouts", "4,3", "--epochs", "1",
                    "--save-model", str(model_file), "--save-model-at", "last", "--checkpoint", str(ckpt),
                    "--eval", "full")
    one_process = evaluate_full(load_model(model_file), mag)
    for split in ("val", "test"):
        assert metrics["full_eval"][split] == pytest.approx(one_process[split]), (metrics["full_eval"], one_process)
    saved = torch.load(model_file, weights_only=True)["state_dict"]
    trained = read_payload(ckpt)["model_state"]
    new_to_old = np.load(partitions[2] / "new_to_old.npy")
    for t in ("author", "institution", "field_of_study"):
        lo, hi = mag.graph.node_range(t)
        key = f"encoder.embed.{t}.weight"
        assert torch.equal(saved[key][new_to_old[lo:hi] - lo], trained[key])
    assert all(torch.equal(saved[k], v) for k, v in trained.items() if ".embed." not in k)
    assert main(["predict", "--model", str(model_file), "--out", str(tmp_path / "p"), "--dataset", "synthetic",
                 "-o", "preset=mag", "-o", f"scale={SCALE}", "--threads", "1", "--embeddings", "1"]) == 0
    # predict --partitions: each worker its own papers, written by the dataset's local id; the oracle is the
    # one-process predict above, on the dataset.
    for layout in ("hybrid", "vanilla"):
        out = tmp_path / f"p-{layout}"
        run = run_launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                          "gnnscale", "predict", "--threads", "1", "--model", str(model_file), "--partitions",
                          str(partitions[2]), "--layout", layout, "--out", str(out), "--embeddings", "1"])
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        for name in ("probabilities.npy", "embeddings.npy"):
            np.testing.assert_allclose(np.load(out / name), np.load(tmp_path / "p" / name), rtol=1e-4, atol=1e-5)
        assert np.array_equal(np.load(out / "predictions.npy"), np.load(tmp_path / "p" / "predictions.npy"))
        meta, one = (json.loads((d / "meta.json").read_text()) for d in (out, tmp_path / "p"))
        assert meta["rows"] == one["rows"] == mag.graph.count("paper") and meta["dataset"]["target_type"] == "paper"
        for split in ("train", "val", "test"):
            assert meta["metrics"][split]["accuracy"] == pytest.approx(one["metrics"][split]["accuracy"]), split


@pytest.mark.parametrize("argv, line", [
    (["--model", "sage"], "--model: the partitions hold a typed graph (several node types), which --model rgcn or "
                          "rsage or rgat trains; got --model sage"),
    (["--model", "rgcn", "--fanouts", "4,3", "--layout", "1d"],
     "--layout: --model rgcn trains a typed graph in one process or with --layout hybrid or vanilla, got --layout 1d"),
])
def test_what_a_typed_launch_cannot_honour_is_one_line(partitions, monkeypatch, capsys, argv, line):
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    args = [a for a in TRAIN_ARGS if a not in ("--model", "rgcn")]
    assert main(["train", "--partitions", str(partitions[2]), *args, *argv]) == 2
    assert capsys.readouterr().err == f"gnnscale train: error: {line}\n"


def test_predict_over_a_typed_partition_refuses_what_a_typed_model_cannot_take_in_one_line(partitions, tmp_path,
                                                                                          monkeypatch, capsys):
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    args = ["predict", "--partitions", str(partitions[2]), "--model", str(tmp_path / "m.pt"), "--out",
            str(tmp_path / "out")]
    assert main([*args, "--arch", "sage"]) == 2
    assert capsys.readouterr().err.startswith("gnnscale predict: error: --arch: weight-only files hold models of "
                                              "graphs of one node type; a typed model's file describes itself")
