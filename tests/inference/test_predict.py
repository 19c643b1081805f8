"""``gnnscale predict``: a trained model's outputs for every node, by node id; its errors; the metrics."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import gnnscale
from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.inference.metrics import check_metric, f1_macro, roc_auc, score

from test_inference import CORA_DIR, needs_cora, pyg_forward

SYNTH = ["--dataset", "synthetic", "-o", "num_nodes=600", "-o", "feature_dim=8", "-o", "num_classes=4"]
CORA = ["--dataset", "cora", "--data-dir", str(CORA_DIR)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-layer GraphSAGE trained for one epoch on the small synthetic graph, saved by the CLI."""
    path = tmp_path_factory.mktemp("model") / "sage.pt"
    assert main(["train", *SYNTH, "--fanouts", "4,3", "--hidden", "8", "--epochs", "1", "--threads", "1",
                 "--quiet", "--save-model", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def synthetic():
    return load_dataset("synthetic", None, num_nodes=600, feature_dim=8, num_classes=4)


def run_predict(model, out, *extra) -> int:
    return main(["predict", "--model", str(model), "--out", str(out), *SYNTH, "--threads", "1", *extra])


def test_predict_writes_every_node_by_id(trained, synthetic, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_predict(trained, out, "--embeddings", "1", "--chunk-size", "100") == 0
    assert "wrote 600 rows" in capsys.readouterr().out
    model = gnnscale.load_model(trained)
    want = pyg_forward(model, synthetic.graph, torch.from_numpy(synthetic.features)).detach()
    probabilities = np.load(out / "probabilities.npy", mmap_mode="r")
    np.testing.assert_allclose(probabilities, torch.softmax(want, dim=1).numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    predictions = np.load(out / "predictions.npy")
    assert predictions.dtype == np.int64 and predictions.shape == (600,)
    np.testing.assert_array_equal(predictions, np.asarray(probabilities).argmax(axis=1))
    assert np.load(out / "embeddings.npy").shape == (600, 8)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["rows"] == 600 and meta["model"]["config"]["name"] == "sage"
    assert sorted(meta["files"]) == ["embeddings.npy", "meta.json", "predictions.npy", "probabilities.npy"]
    test = synthetic.test_idx
    assert meta["metrics"]["test"] == {"nodes": int(test.size),
                                       "accuracy": float(np.mean(predictions[test] == synthetic.labels[test]))}
    assert sorted(p.name for p in out.iterdir()) == sorted(meta["files"])  # no temporary files left


def test_a_node_subset_gets_its_rows_in_the_order_given(trained, tmp_path):
    assert run_predict(trained, tmp_path / "all", "--logits", "--embeddings", "1") == 0
    nodes = np.array([599, 3, 250, 3])
    np.save(tmp_path / "nodes.npy", nodes)
    assert run_predict(trained, tmp_path / "some", "--logits", "--embeddings", "1", "--nodes",
                       str(tmp_path / "nodes.npy")) == 0
    for name in ("logits.npy", "embeddings.npy"):
        every, some = np.load(tmp_path / "all" / name), np.load(tmp_path / "some" / name)
        np.testing.assert_allclose(some, every[nodes], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.load(tmp_path / "some" / "nodes.npy"), nodes)
    (tmp_path / "ids.txt").write_text("599\n3\n")
    assert run_predict(trained, tmp_path / "text", "--nodes", str(tmp_path / "ids.txt")) == 0
    assert np.load(tmp_path / "text" / "predictions.npy").shape == (2,)


def test_overwrite_replaces_earlier_outputs_and_drops_stale_ones(trained, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_predict(trained, out, "--embeddings", "1") == 0
    assert run_predict(trained, out) == 2
    assert f"gnnscale predict: error: --out: {out} is not empty; pass --overwrite" in capsys.readouterr().err
    assert run_predict(trained, out, "--overwrite", "--logits") == 0
    assert sorted(p.name for p in out.iterdir()) == ["logits.npy", "meta.json", "predictions.npy"]


@needs_cora
def test_a_model_that_does_not_fit_the_dataset_is_one_line(trained, tmp_path, capsys):
    assert main(["predict", "--model", str(trained), "--out", str(tmp_path / "o"), *CORA]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"gnnscale predict: error: --model: {trained} was trained on synthetic (8 features, 4 classes), but "
            "dataset cora has 1433 features and 7 classes") in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


@pytest.mark.parametrize("extra, message", [
    (["--embeddings", "2"], r"--embeddings: the model has 2 layers, so its hidden layers are 1 \.\. 1; got 2"),
    (["--metric", "roc_auc"], r"--metric: roc_auc ranks the scores of two classes, but the dataset has 4"),
    (["--nodes", "{tmp}/missing.npy"], r"--nodes: no file at \S+missing.npy"),
    (["--arch", "sage", "--hidden", "16"], r"--model: \S+sage.pt holds model sage \(8 features -> hidden 8"),
    (["--chunk-size", "0"], r"--chunk-size: expected a positive int, got 0"),
])
def test_bad_input_is_one_line_naming_the_flag(trained, tmp_path, capsys, extra, message):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert run_predict(trained, tmp_path / "o", *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err


def test_a_missing_model_file_fails_before_the_dataset_loads(tmp_path, capsys):
    assert main(["predict", "--model", str(tmp_path / "none.pt"), "--out", str(tmp_path / "o"), "--dataset", "cora",
                 "--data-dir", str(tmp_path / "no-data")]) == 2
    assert f"--model: no model file at {tmp_path / 'none.pt'}" in capsys.readouterr().err


def test_a_file_that_is_not_a_model_is_one_line_without_weights_only(tmp_path, capsys):
    not_a_model = tmp_path / "NOT_A_MODEL"
    torch.save(torch.nn.Linear(2, 2), not_a_model)
    assert main(["predict", "--model", str(not_a_model), "--out", str(tmp_path / "o"), *SYNTH]) == 2
    err = capsys.readouterr().err
    assert err == (f"gnnscale predict: error: --model: {not_a_model} is not a gnnscale model file (those are written "
                   "by train --save-model): it holds Python objects other than tensors and plain data, which "
                   "gnnscale never loads (loading them could run code)\n")


def test_a_weight_only_file_predicts_with_its_flags(trained, tmp_path, capsys):
    old = tmp_path / "old.pt"
    torch.save(torch.load(trained)["state_dict"], old)
    assert run_predict(old, tmp_path / "a") == 2
    assert "holds weights only" in capsys.readouterr().err
    assert run_predict(old, tmp_path / "a", "--arch", "sage", "--hidden", "8", "--layers", "2") == 0
    assert run_predict(trained, tmp_path / "b") == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "probabilities.npy"),
                                  np.load(tmp_path / "b" / "probabilities.npy"))


# --- metrics -------------------------------------------------------------------------------------------

def test_f1_macro_by_hand():
    labels = np.array([0, 0, 1, 1, 2])
    predicted = np.array([0, 1, 1, 1, 0])
    # class 0: TP 1, FP 1, FN 1 -> 0.5; class 1: TP 2, FP 1, FN 0 -> 0.8; class 2: TP 0, FN 1 -> 0.
    assert f1_macro(labels, predicted) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    assert f1_macro(labels, labels) == 1.0


def test_roc_auc_by_hand():
    labels = np.array([0, 0, 1, 1])
    assert roc_auc(labels, np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    assert roc_auc(labels, np.array([0.5, 0.5, 0.5, 0.5])) == pytest.approx(0.5)  # ties count half
    assert roc_auc(labels, np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert np.isnan(roc_auc(np.array([1, 1]), np.array([0.2, 0.3])))
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.65, 0.35], [0.2, 0.8]])
    assert score("roc_auc", labels, probs) == pytest.approx(0.75)
    assert score("accuracy", labels, probs) == pytest.approx(0.75)


def test_check_metric_names_what_is_wrong():
    assert check_metric("roc_auc", 2) == "roc_auc"
    with pytest.raises(ValueError, match=r"metric: expected one of \('accuracy', 'roc_auc', 'f1_macro'\), got 'auc'"):
        check_metric("auc", 2)


# --- train --eval full ---------------------------------------------------------------------------------

def test_train_eval_full_scores_what_predict_scores(tmp_path, capsys):
    model, metrics = tmp_path / "m.pt", tmp_path / "m.json"
    assert main(["train", *SYNTH, "--fanouts", "4,3", "--hidden", "8", "--epochs", "1", "--threads", "1", "--quiet",
                 "--eval", "full", "--metric", "f1_macro", "--save-model", str(model), "--metrics-out",
                 str(metrics)]) == 0
    out = capsys.readouterr().out
    full = json.loads(metrics.read_text())["full_eval"]
    assert f"full-graph evaluation (layer-wise, every neighbor): validation f1_macro {full['val']:.4f}" in out
    assert run_predict(model, tmp_path / "p", "--metric", "f1_macro") == 0
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert (full["val"], full["test"]) == (meta["metrics"]["val"]["f1_macro"], meta["metrics"]["test"]["f1_macro"])


@pytest.mark.parametrize("extra, message", [
    (["--metric", "f1_macro"], r"--metric: f1_macro scores the full predictions of --eval full"),
    (["--eval", "full", "--metric", "roc_auc"], r"--metric: roc_auc ranks the scores of two classes"),
])
def test_train_metric_errors_name_the_flag(tmp_path, capsys, extra, message):
    assert main(["train", *SYNTH, "--fanouts", "4,3", "--epochs", "1", "--threads", "1", "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err


@pytest.mark.parametrize("extra, message", [
    (["--eval", "full", "--layout", "split"], r"--eval: full evaluation over a partition runs with --layout hybrid "
                                              r"or vanilla, not split"),
    (["--eval", "full", "--metric", "roc_auc"], r"--metric: roc_auc ranks every score together"),
])
def test_train_eval_full_over_a_partition_refuses_what_it_cannot_do(tmp_path, capsys, extra, message):
    assert main(["train", "--partitions", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
