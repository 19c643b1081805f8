"""A typed model end to end: ``gnnscale train --model rgat --save-model --eval full`` on the mag-shaped graph, then
``gnnscale predict``, whose rows are the target type's nodes. The oracle: the saved weights loaded by hand into a
TypedModel, run forward on sampled blocks that take every neighbor (fanouts above every in-degree), the accuracy
counted from its argmaxes; the model file's records and the one-line errors of a model that does not fit."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.nn import ModelConfig, TypedModel, TypedModelConfig, typed_input
from gnnscale.nn.model_file import DatasetFacts, TypedDatasetFacts, read_model_file, save_model_file
from gnnscale.nn.models import build_model
from gnnscale.sampling.typed import sample_typed_blocks

SCALE = 0.001  # about 740 papers of the mag-shaped graph
MAG = ["--dataset", "synthetic", "-o", "preset=mag", "-o", f"scale={SCALE}"]


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=SCALE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-layer R-GAT trained for one epoch by the CLI, saved, scored by --eval full into its metrics file."""
    folder = tmp_path_factory.mktemp("typed-model")
    assert main(["train", *MAG, "--model", "rgat", "--fanouts", "4,2", "--hidden", "8", "--heads", "2", "--epochs",
                 "1", "--threads", "1", "--quiet", "--eval", "full", "--save-model", str(folder / "m.pt"),
                 "--metrics-out", str(folder / "m.json")]) == 0
    return folder


def run_predict(model, out, *extra) -> int:
    return main(["predict", "--model", str(model), "--out", str(out), *MAG, "--threads", "1", *extra])


def logits_by_hand(path, ds) -> torch.Tensor:
    """The saved weights in a TypedModel built from the recorded config, forward over blocks of every neighbor of
    every paper: [papers, classes]."""
    payload = torch.load(path, weights_only=True)
    model = TypedModel(TypedModelConfig(**payload["config"]))
    model.load_state_dict(payload["state_dict"])
    model.eval()
    lo, hi = ds.target_range
    every = int(np.diff(ds.graph.graph.indptr).max()) + 1
    blocks = sample_typed_blocks(ds.graph, np.arange(lo, hi), [every, every], key=0)
    features = {t: torch.from_numpy(np.asarray(x)) for t, x in ds.features.items() if x is not None}
    with torch.no_grad():
        return model(blocks, typed_input(blocks[0], ds.graph, features))


def test_predict_writes_the_target_types_rows_as_the_model_computes_them(trained, mag, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_predict(trained / "m.pt", out, "--embeddings", "1", "--chunk-size", "300") == 0
    printed = capsys.readouterr().out
    lo, hi = mag.target_range
    logits = logits_by_hand(trained / "m.pt", mag)
    probabilities = np.load(out / "probabilities.npy")
    np.testing.assert_allclose(probabilities, torch.softmax(logits, dim=1).numpy(), rtol=0, atol=1e-5)
    predictions = np.load(out / "predictions.npy")
    np.testing.assert_array_equal(predictions, logits.argmax(1).numpy())
    assert np.load(out / "embeddings.npy").shape == (hi - lo, 16)  # 2 heads of 8
    meta = json.loads((out / "meta.json").read_text())
    assert meta["rows"] == hi - lo and meta["dataset"]["target_type"] == "paper"
    assert meta["model"]["trained_on"] == {"name": mag.name, "target_type": "paper",
                                           "num_classes": mag.num_classes, "num_nodes": mag.graph.num_nodes}
    for split in ("train", "val", "test"):
        ids = getattr(mag, f"{split}_idx") - lo
        correct = int((logits.argmax(1).numpy()[ids] == mag.labels[ids]).sum())
        assert meta["metrics"][split] == {"nodes": len(ids), "accuracy": pytest.approx(correct / len(ids), abs=1e-12)}
        assert f"{split} {correct / len(ids):.4f}" in printed
    # --eval full scored the same model's validation and test nodes by the same inference.
    full = json.loads((trained / "m.json").read_text())["full_eval"]
    assert (full["val"], full["test"]) == (meta["metrics"]["val"]["accuracy"], meta["metrics"]["test"]["accuracy"])


def test_a_subset_of_the_target_type_by_local_id_gets_its_rows_in_the_order_given(trained, tmp_path):
    ids = np.array([7, 0, 300], dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    assert run_predict(trained / "m.pt", tmp_path / "all") == 0
    assert run_predict(trained / "m.pt", tmp_path / "some", "--nodes", str(tmp_path / "ids.npy"), "--logits") == 0
    np.testing.assert_array_equal(np.load(tmp_path / "some" / "nodes.npy"), ids)
    whole = np.load(tmp_path / "all" / "probabilities.npy")[ids]
    some = torch.softmax(torch.from_numpy(np.load(tmp_path / "some" / "logits.npy")), dim=1).numpy()
    np.testing.assert_allclose(some, whole, rtol=0, atol=1e-6)


def test_the_model_file_records_the_typed_config_and_reads_back(trained, mag):
    loaded = read_model_file(trained / "m.pt")
    cfg = loaded.config
    assert isinstance(loaded.model, TypedModel) and not loaded.model.training
    assert cfg.node_types == mag.graph.node_types and cfg.name == "rgat" and cfg.heads == 2
    assert cfg.relations == tuple((r.src, r.name, r.dst) for r in mag.graph.relations)
    assert cfg.feature_dims == {"paper": 128}
    assert cfg.embedding_rows == {t: mag.graph.count(t) for t in ("author", "institution", "field_of_study")}
    assert loaded.dataset == TypedDatasetFacts(name=mag.name, target_type="paper", num_classes=mag.num_classes,
                                               num_nodes=mag.graph.num_nodes)


def test_save_model_file_pairs_a_typed_config_with_typed_facts(trained, tmp_path):
    loaded = read_model_file(trained / "m.pt")
    plain = DatasetFacts(name="x", feature_dim=3, num_classes=2, num_nodes=5)
    with pytest.raises(TypeError, match="dataset: expected TypedDatasetFacts, got DatasetFacts"):
        save_model_file(tmp_path / "x.pt", loaded.model, loaded.config, plain)


@pytest.mark.parametrize("extra, message", [
    (["-o", "preset=mag", "-o", "scale=0.0015"], r"--model: \S+m.pt was trained on node counts of the types without "
                                                  r"features author \d+, institution \d+, field_of_study \d+, but "
                                                  r"dataset synthetic-mag has author \d+"),
    (["-o", "num_nodes=300"], r"--model: \S+m.pt holds typed model rgat \(node types paper, author, institution, "
                              r"field_of_study, \d+ relations .*, but dataset synthetic has one node type"),
    (MAG[2:] + ["--task", "link"], r"--task: a typed graph predicts its target type's classes \(--task node\)"),
    (MAG[2:] + ["--arch", "sage"], r"--arch: weight-only files hold models of graphs of one node type"),
], ids=["other-counts", "plain-dataset", "link", "arch"])
def test_a_model_that_does_not_fit_is_one_line(trained, tmp_path, capsys, extra, message):
    assert main(["predict", "--model", str(trained / "m.pt"), "--out", str(tmp_path / "o"), "--dataset", "synthetic",
                 *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err


def test_a_plain_model_on_a_typed_dataset_is_one_line(tmp_path, capsys):
    cfg = ModelConfig(name="sage", in_dim=128, num_classes=4, num_layers=2, hidden_dim=8)
    save_model_file(tmp_path / "plain.pt", build_model(cfg), cfg,
                    DatasetFacts(name="synthetic", feature_dim=128, num_classes=4, num_nodes=10))
    assert run_predict(tmp_path / "plain.pt", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a model of graphs of one node type, but dataset synthetic-mag is a typed graph" in err


def test_a_partitions_numbering_is_undone_in_the_embeddings_rows():
    """Types a (2 nodes, features) and b (3 nodes, an embedding); a partition renumbered b's nodes 2, 3, 4 (new)
    from the dataset's 4, 2, 3: new row 0 (dataset's node 4, local 2) goes to row 2, and so on."""
    from gnnscale.nn.typed_models import embeddings_by_dataset_id

    cfg = TypedModelConfig(name="rgcn", node_types=("a", "b"), feature_dims={"a": 3}, embedding_rows={"b": 3},
                           relations=(("b", "r", "a"),), num_classes=2, num_layers=1, hidden_dim=2)
    state = TypedModel(cfg).state_dict()
    new_to_old = np.array([1, 0, 4, 2, 3])
    moved = embeddings_by_dataset_id(state, cfg, new_to_old, np.array([0, 2, 5]))
    by_hand = state["encoder.embed.b.weight"][[1, 2, 0]]  # dataset's local 0 was new row 1, 1 new row 2, 2 new row 0
    torch.testing.assert_close(moved["encoder.embed.b.weight"], by_hand, rtol=0, atol=0)
    assert all(torch.equal(moved[k], v) for k, v in state.items() if k != "encoder.embed.b.weight")
