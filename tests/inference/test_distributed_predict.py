"""``gnnscale predict --partitions`` under torchrun (gloo on 127.0.0.1): every worker computes its part's
nodes; the outputs, by original node id, equal the single-process run's and PyG's dense forward."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

import gnnscale
from gnnscale.cli import main
from gnnscale.graph.planetoid import load_planetoid
from gnnscale.nn import ModelConfig
from gnnscale.nn.model_file import DatasetFacts, save_model_file
from gnnscale.partition import write_partition_dir

from launch import run_launch
from test_inference import CORA_DIR, pyg_forward
from test_model_file import CONFIGS, random_model

pytestmark = pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").exists(), reason="Cora not found")


@pytest.fixture(scope="module")
def cora():
    return load_planetoid(CORA_DIR, "cora")


@pytest.fixture(scope="module")
def setup(cora, tmp_path_factory):
    """Cora partitioned by METIS into 2 and 4 parts, and a random-weight model file per architecture."""
    root = tmp_path_factory.mktemp("dist_predict")
    parts = {p: root / f"p{p}" for p in (2, 4)}
    for p, directory in parts.items():
        write_partition_dir(cora, p, "metis", directory)
    facts = DatasetFacts(name="cora", feature_dim=cora.feature_dim, num_classes=cora.num_classes,
                         num_nodes=cora.graph.num_nodes)
    models = {}
    for name in ("sage", "gcn", "gat"):
        cfg = ModelConfig(in_dim=cora.feature_dim, num_classes=cora.num_classes, **CONFIGS[name])
        models[name] = save_model_file(root / f"{name}.pt", random_model(cfg), cfg, facts)
    return parts, models


def torchrun_predict(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", "gnnscale", "predict", "--threads", "1", *args]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name, layout, workers, num_parts", [
    # A launch takes 10-40 s on a 2-core machine: every case runs in the slow tier.
    pytest.param("gcn", "hybrid", 2, 2, marks=pytest.mark.slow),
    pytest.param("gcn", "vanilla", 2, 2, marks=pytest.mark.slow),
    pytest.param("gcn", "hybrid", 4, 4, marks=pytest.mark.slow),
    pytest.param("sage", "vanilla", 4, 4, marks=pytest.mark.slow),
    pytest.param("gat", "hybrid", 2, 2, marks=pytest.mark.slow),
    # Two parts per worker: each holds parts 2w and 2w + 1 as one.
    pytest.param("sage", "vanilla", 2, 4, marks=pytest.mark.slow),
])
def test_partitioned_predict_equals_single_process_and_pyg(cora, setup, tmp_path, name, layout, workers, num_parts):
    parts, models = setup
    out = tmp_path / "dist"
    run = run_launch(torchrun_predict(workers, "--model", str(models[name]), "--partitions", str(parts[num_parts]),
                                      "--layout", layout, "--out", str(out), "--logits", "--embeddings", "1",
                                      "--chunk-size", "300"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "wrote 2708 rows" in run.stdout
    assert main(["predict", "--model", str(models[name]), "--out", str(tmp_path / "single"), "--dataset", "cora",
                 "--data-dir", str(CORA_DIR), "--logits", "--embeddings", "1", "--threads", "1"]) == 0
    for file in ("logits.npy", "embeddings.npy"):
        np.testing.assert_allclose(np.load(out / file), np.load(tmp_path / "single" / file), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(np.load(out / "predictions.npy"), np.load(tmp_path / "single" / "predictions.npy"))
    # Indexed by original id: row v is Cora's node v, as PyG's forward over the unpartitioned graph has it.
    want = pyg_forward(gnnscale.load_model(models[name]), cora.graph, torch.from_numpy(cora.features)).detach().numpy()
    np.testing.assert_allclose(np.load(out / "logits.npy"), want, rtol=0, atol=1e-5)
    meta = json.loads((out / "meta.json").read_text())
    single = json.loads((tmp_path / "single" / "meta.json").read_text())
    assert meta["workers"] == workers and meta["layout"] == layout
    assert meta["metrics"] == single["metrics"]
    assert sorted(p.name for p in out.iterdir()) == sorted(meta["files"])  # no staging or temporary files left


def test_dataset_flags_with_partitions_are_one_line(setup, tmp_path, capsys):
    parts, models = setup
    assert main(["predict", "--model", str(models["gcn"]), "--partitions", str(parts[2]), "--out",
                 str(tmp_path / "o"), "--dataset", "cora"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --partitions: --dataset cannot be used with --partitions" in err


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_distributed_eval_full_scores_what_predict_scores(setup, tmp_path):
    parts, _ = setup
    model, metrics = tmp_path / "m.pt", tmp_path / "m.json"
    run = run_launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                      "-m", "gnnscale", "train", "--partitions", str(parts[2]), "--layout", "vanilla", "--model", "gcn",
                      "--fanouts", "5,5", "--hidden", "8", "--batch-size", "32", "--epochs", "1", "--threads", "1",
                      "--quiet", "--eval", "full", "--metric", "f1_macro", "--save-model", str(model),
                      "--metrics-out", str(metrics)])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    full = json.loads(metrics.read_text())["full_eval"]
    assert f"validation f1_macro {full['val']:.4f}, test f1_macro {full['test']:.4f}" in run.stdout
    assert main(["predict", "--model", str(model), "--out", str(tmp_path / "p"), "--dataset", "cora", "--data-dir",
                 str(CORA_DIR), "--metric", "f1_macro", "--threads", "1"]) == 0
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert full["val"] == pytest.approx(meta["metrics"]["val"]["f1_macro"], abs=1e-12)
    assert full["test"] == pytest.approx(meta["metrics"]["test"]["f1_macro"], abs=1e-12)


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_partitioned_predict_on_cuda_equals_the_cpu_run(setup, tmp_path):
    """Two workers on one GPU machine (sharing its GPU when it has one): each computes on cuda:LOCAL_RANK
    modulo the GPUs visible, and the outputs are the single-process CPU run's up to rounding."""
    parts, models = setup
    out = tmp_path / "dist"
    run = run_launch(torchrun_predict(2, "--model", str(models["gat"]), "--partitions", str(parts[2]), "--out",
                                      str(out), "--logits", "--embeddings", "1", "--chunk-size", "300",
                                      "--device", "cuda"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert main(["predict", "--model", str(models["gat"]), "--out", str(tmp_path / "single"), "--dataset", "cora",
                 "--data-dir", str(CORA_DIR), "--logits", "--embeddings", "1", "--threads", "1"]) == 0
    for file in ("logits.npy", "embeddings.npy"):
        np.testing.assert_allclose(np.load(out / file), np.load(tmp_path / "single" / file), rtol=0, atol=1e-5)
    assert json.loads((out / "meta.json").read_text())["device"] == "cuda"
