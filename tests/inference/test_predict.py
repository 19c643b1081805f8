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
from gnnscale.inference.distributed import evaluate_full_distributed, metric_counts, metric_from_counts
from gnnscale.inference.metrics import accuracy, check_metric, f1_macro, roc_auc, score

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


@pytest.mark.parametrize("metric", ["accuracy", "f1_macro"])
def test_the_metrics_of_a_node_subset_are_those_of_its_rows(trained, synthetic, tmp_path, metric):
    """--nodes in no order, with nodes of every split among them: meta.json's metric of a split is the one
    of the rows of predictions.npy whose node is in that split, against those nodes' labels."""
    nodes = np.random.default_rng(4).permutation(600)[:400]
    np.save(tmp_path / "nodes.npy", nodes)
    assert run_predict(trained, tmp_path / "some", "--metric", metric, "--nodes", str(tmp_path / "nodes.npy")) == 0
    meta = json.loads((tmp_path / "some" / "meta.json").read_text())
    predictions = np.load(tmp_path / "some" / "predictions.npy")
    by_rows = accuracy if metric == "accuracy" else f1_macro
    for split in ("train", "val", "test"):
        rows = np.flatnonzero(np.isin(nodes, getattr(synthetic, f"{split}_idx")))
        assert 0 < rows.size < getattr(synthetic, f"{split}_idx").size and np.any(np.diff(nodes[rows]) < 0), split
        want = by_rows(synthetic.labels[nodes[rows]], predictions[rows])
        assert meta["metrics"][split] == {"nodes": int(rows.size), metric: want}, split


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


def test_device_cpu_predicts_the_same_bits_as_no_device(trained, tmp_path):
    assert run_predict(trained, tmp_path / "default", "--logits", "--embeddings", "1", "--chunk-size", "100") == 0
    assert run_predict(trained, tmp_path / "cpu", "--logits", "--embeddings", "1", "--chunk-size", "100",
                       "--device", "cpu") == 0
    for name in ("logits.npy", "embeddings.npy", "predictions.npy"):
        np.testing.assert_array_equal(np.load(tmp_path / "cpu" / name), np.load(tmp_path / "default" / name))
    assert json.loads((tmp_path / "cpu" / "meta.json").read_text())["device"] == "cpu"


def test_device_cuda_without_cuda_is_one_line(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only machine, even on a GPU one
    assert run_predict(trained, tmp_path / "o", "--device", "cuda") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("gnnscale predict: error: --device: cuda asks for a GPU and none is available here")
    assert not (tmp_path / "o").exists()
    assert run_predict(trained, tmp_path / "o", "--device", "tpu") == 2
    assert "--device: expected cpu, cuda, cuda:N or auto, got 'tpu'" in capsys.readouterr().err


@pytest.mark.gpu
def test_predict_on_cuda_equals_predict_on_cpu(trained, tmp_path):
    for device in ("cpu", "cuda"):
        assert run_predict(trained, tmp_path / device, "--logits", "--embeddings", "1", "--chunk-size", "100",
                           "--device", device) == 0
    for name in ("logits.npy", "embeddings.npy"):
        np.testing.assert_allclose(np.load(tmp_path / "cuda" / name), np.load(tmp_path / "cpu" / name),
                                   rtol=0, atol=1e-5)
    assert json.loads((tmp_path / "cuda" / "meta.json").read_text())["device"].startswith("cuda")


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


# (labels, predicted, num_classes, accuracy, f1_macro), every value by hand. Per class F1 = 2 TP / (2 TP + FP + FN),
# averaged over the classes that occur in the labels or the predictions (never over the other classes).
BY_HAND = [
    # class 0: TP 1, FN 1 -> 2/3; class 1, predicted but never a label: FP 1 -> 0.
    pytest.param([0, 0], [0, 1], 2, 1 / 2, (2 / 3 + 0) / 2, id="predicted-never-a-label"),
    # the same with classes 2 and 3 in neither: they do not count.
    pytest.param([0, 0], [0, 1], 4, 1 / 2, (2 / 3 + 0) / 2, id="classes-in-neither-ignored"),
    # class 0: TP 1, FP 1, FN 1 -> 1/2; class 1: TP 2, FP 1 -> 4/5; class 2, a label never predicted: FN 1 -> 0.
    pytest.param([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], 3, 3 / 5, (1 / 2 + 4 / 5 + 0) / 3, id="label-never-predicted"),
    # class 1: FN 2 -> 0; class 2: FP 2 -> 0; class 3: TP 1 -> 1.
    pytest.param([1, 1, 3], [2, 2, 3], 4, 1 / 3, (0 + 0 + 1) / 3, id="all-wrong-but-one"),
    pytest.param([2, 0, 1], [2, 0, 1], 3, 1.0, 1.0, id="all-right"),
]


@pytest.mark.parametrize("labels, predicted, num_classes, acc, f1", BY_HAND)
def test_accuracy_and_f1_macro_by_hand_on_both_paths(labels, predicted, num_classes, acc, f1):
    """The single-process metrics and the distributed counts (one worker) give the values by hand."""
    labels, predicted = np.array(labels), np.array(predicted)
    assert accuracy(labels, predicted) == pytest.approx(acc, rel=1e-15)
    assert f1_macro(labels, predicted) == pytest.approx(f1, rel=1e-15)
    counts = metric_counts(labels, predicted, num_classes)
    assert metric_from_counts("accuracy", counts, num_classes) == pytest.approx(acc, rel=1e-15)
    assert metric_from_counts("f1_macro", counts, num_classes) == pytest.approx(f1, rel=1e-15)


def test_no_nodes_score_nan_on_both_paths():
    none = np.zeros(0, dtype=np.int64)
    assert np.isnan(accuracy(none, none)) and np.isnan(f1_macro(none, none))
    counts = metric_counts(none, none, 3)
    assert np.isnan(metric_from_counts("accuracy", counts, 3)) and np.isnan(metric_from_counts("f1_macro", counts, 3))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_distributed_counts_summed_over_workers_equal_the_single_process_metrics(workers, seed):
    """Each worker's counts of its share of the nodes, summed (the all-reduce), give the metric of all of
    them: classes 0 .. 4, class 4 predicted but never a label, class 5 of 6 in neither."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, 200)
    predicted = np.where(rng.random(200) < 0.6, labels, rng.integers(0, 5, 200))
    assert 4 in predicted and 4 not in labels
    shares = np.array_split(np.arange(200), workers)
    counts = sum(metric_counts(labels[s], predicted[s], 6) for s in shares)
    assert metric_from_counts("accuracy", counts, 6) == accuracy(labels, predicted)
    assert metric_from_counts("f1_macro", counts, 6) == pytest.approx(f1_macro(labels, predicted), rel=1e-15)


def test_the_distributed_path_refuses_roc_auc_by_name():
    with pytest.raises(ValueError, match=r"metric: a distributed --eval full reports accuracy or f1_macro, got "
                                         r"'roc_auc' \(for roc_auc, run gnnscale predict --partitions"):
        evaluate_full_distributed(None, None, None, "roc_auc")


@pytest.mark.parametrize("labels, scores, auc", [
    # every pair (positive, negative): 1 when the positive scores higher, 1/2 for a tie, 0 otherwise.
    pytest.param([0, 1, 0, 1], [0.2, 0.2, 0.7, 0.7], (1 / 2 + 0 + 1 + 1 / 2) / 4, id="ties-across-classes"),
    # positives 0.5, 0.5, 0.9 against negatives 0.1, 0.5: (1 + 1/2) + (1 + 1/2) + (1 + 1) over 6 pairs.
    pytest.param([0, 0, 1, 1, 1], [0.1, 0.5, 0.5, 0.5, 0.9], 5 / 6, id="ties-within-and-across"),
    pytest.param([1, 0, 1, 0], [0.3, 0.3, 0.3, 0.3], 1 / 2, id="all-tied"),
    pytest.param([1, 1, 0], [0.1, 0.2, 0.3], 0.0, id="reversed"),
])
def test_roc_auc_with_ties_by_hand(labels, scores, auc):
    labels, scores = np.array(labels), np.array(scores)
    assert roc_auc(labels, scores) == pytest.approx(auc, rel=1e-15)
    # score() ranks the second column, the positive class's probability.
    assert score("roc_auc", labels, np.stack([1 - scores, scores], axis=1)) == pytest.approx(auc, rel=1e-15)


@pytest.mark.parametrize("labels", [[1, 1, 1], [0, 0], []])
def test_roc_auc_of_a_split_without_both_classes_is_nan_not_a_number_that_looks_like_a_score(labels):
    """No (positive, negative) pair to rank: undefined, reported as NaN (as accuracy of no nodes), never
    0, 1/2 or 1; the distributed path refuses roc_auc altogether (above)."""
    labels = np.array(labels, dtype=np.int64)
    assert np.isnan(roc_auc(labels, np.linspace(0, 1, labels.size)))


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
