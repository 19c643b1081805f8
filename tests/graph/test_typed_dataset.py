"""Typed datasets: the rules between types, features, labels and splits, the summary, the directory on disk
(memory-mapped, atomic) and ``gnnscale info`` on it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.storage import load_dataset_dir, load_graph
from gnnscale.graph.typed import typed_graph
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.graph.typed_storage import load_typed_dataset_dir, save_typed_dataset

# The tiny typed graph (local ids; edges point the way messages flow):
#
#   papers p0 p1 p2 p3, authors a0 a1 a2
#   writes:  a0 -> p0, a1 -> p0, a2 -> p1, a0 -> p3
#   cites:   p1 -> p0, p2 -> p0, p3 -> p2
#
# Global ids: papers 0..3, authors 4..6. Papers have 2-d features, authors none; labels on papers, p2 unlabeled.
COUNTS = {"paper": 4, "author": 3}
EDGES = {"author__writes__paper": ([0, 1, 2, 0], [0, 0, 1, 3]), "paper__cites__paper": ([1, 2, 3], [0, 0, 2])}
PAPER_X = np.arange(8, dtype=np.float32).reshape(4, 2)
LABELS = np.array([1, 0, -1, 2], dtype=np.int64)


def tiny(**changes) -> TypedDataset:
    fields = dict(name="tiny", graph=typed_graph(COUNTS, EDGES), features={"paper": PAPER_X}, target_type="paper",
                  labels=LABELS, train_idx=np.array([0, 1], dtype=np.int64), val_idx=np.array([3], dtype=np.int64),
                  test_idx=np.zeros(0, dtype=np.int64), num_classes=3)
    fields.update(changes)
    return TypedDataset(**fields)


def test_the_tiny_dataset_by_hand():
    ds = tiny()
    assert list(ds.features) == ["paper", "author"] and ds.features["author"] is None  # every type, in type order
    assert ds.feature_dims == {"paper": 2, "author": None}
    assert ds.target_range == (0, 4)
    assert ds.local_ids(np.array([5, 6]), "author").tolist() == [1, 2]
    assert ds.global_ids(np.array([0, 2]), "author").tolist() == [4, 6]
    summary = ds.summary()
    assert summary["node_types"] == {"paper": {"nodes": 4, "feature_dim": 2},
                                     "author": {"nodes": 3, "feature_dim": None}}
    # writes: papers' in-degrees 2, 1, 0, 1; cites: 2, 0, 1, 0.
    assert summary["relations"] == {
        "author__writes__paper": {"edges": 4, "mean_in_degree": 1.0, "max_in_degree": 2},
        "paper__cites__paper": {"edges": 3, "mean_in_degree": 0.75, "max_in_degree": 2},
    }
    assert (summary["labeled"], summary["train/val/test"], summary["feature_bytes"]) == (3, [2, 1, 0], 32)


@pytest.mark.parametrize("changes, error, match", [
    ({"features": {"venue": np.zeros((1, 2), np.float32)}}, ValueError, r"features: names node type 'venue', not one"),
    ({"features": {"author": np.zeros((4, 2), np.float32)}}, ValueError,
     r"features: author: expected shape \[3, d\] \(one row per author node\), got \[4, 2\]"),
    ({"features": {"paper": PAPER_X.astype(np.float64)}}, TypeError, r"features: paper: expected dtype float32"),
    ({"target_type": "venue"}, ValueError, r"target_type: expected one of paper, author, got 'venue'"),
    ({"labels": np.zeros(3, np.int64)}, ValueError,
     r"labels: expected one per node of the target type 'paper' \(shape \[4\]\), got shape \[3\]"),
    ({"labels": np.array([1, 0, -1, 3])}, ValueError, r"labels: expected class ids in \[0, 3\) or -1"),
    ({"labels": np.full(4, -1, np.int64), "train_idx": np.zeros(0, np.int64), "val_idx": np.zeros(0, np.int64)},
     ValueError, r"labels: the target type 'paper' has no labeled node"),
    ({"train_idx": np.array([0, 4])}, ValueError,
     r"train_idx: expected sorted unique global ids of the target type 'paper', in \[0, 4\)"),
    ({"val_idx": np.array([3, 1])}, ValueError, r"val_idx: expected sorted unique global ids"),
    ({"test_idx": np.array([2])}, ValueError, r"test_idx: contains nodes without a label"),
    ({"test_idx": np.array([2], dtype=np.int32)}, TypeError, r"test_idx: expected a 1-D int64 array"),
    ({"num_classes": 0}, ValueError, r"num_classes: expected an int >= 1, got 0"),
], ids=["unknown-type", "feature-rows", "feature-dtype", "unknown-target", "labels-of-another-type", "label-range",
        "target-without-labels", "split-outside-target", "split-unsorted", "split-unlabeled", "split-dtype",
        "classes"])
def test_bad_fields_are_one_line_naming_the_field(changes, error, match):
    with pytest.raises(error, match=match):
        tiny(**changes)


def test_a_typed_directory_round_trips_memory_mapped(tmp_path):
    ds = tiny()
    save_typed_dataset(ds, tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert (meta["kind"], meta["node_types"], meta["relations"], meta["feature_dims"]) == (
        "typed_dataset", ["paper", "author"], ["author__writes__paper", "paper__cites__paper"],
        {"paper": 2, "author": None})
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "features.paper.npy", "indices.npy", "indptr.npy", "labels.npy", "meta.json", "rel_indptr.npy",
        "test_idx.npy", "train_idx.npy", "type_offsets.npy", "val_idx.npy"]
    back = load_dataset("dir", tmp_path / "d")
    assert isinstance(back, TypedDataset) and isinstance(back.features["paper"], np.memmap)
    assert back.graph.relations == ds.graph.relations and back.graph.node_types == ds.graph.node_types
    for a, b in ((back.graph.graph.indptr, ds.graph.graph.indptr), (back.graph.graph.indices, ds.graph.graph.indices),
                 (back.graph.rel_indptr, ds.graph.rel_indptr), (back.features["paper"], PAPER_X),
                 (back.labels, LABELS), (back.train_idx, ds.train_idx), (back.val_idx, ds.val_idx)):
        np.testing.assert_array_equal(a, b)
    assert back.features["author"] is None and (back.target_type, back.num_classes) == ("paper", 3)
    # The topology is a graph directory's too: one graph over all types.
    assert load_graph(tmp_path / "d").indptr.tolist() == ds.graph.graph.indptr.tolist()
    with pytest.raises(ValueError, match=r"expected kind 'dataset', got 'typed_dataset'"):
        load_dataset_dir(tmp_path / "d")
    with pytest.raises(ValueError, match=r"already exists; pass overwrite=True"):
        save_typed_dataset(ds, tmp_path / "d")
    (tmp_path / "d" / "features.paper.npy").unlink()
    with pytest.raises(ValueError, match=r"features\.paper\.npy: missing array file"):
        load_typed_dataset_dir(tmp_path / "d")


def test_a_directory_whose_arrays_break_the_rules_is_named(tmp_path):
    save_typed_dataset(tiny(), tmp_path / "d")
    np.save(tmp_path / "d" / "labels.npy", np.array([-1, 0, -1, 2], dtype=np.int64))  # train node 0 unlabeled
    with pytest.raises(ValueError, match=r"d: the arrays do not form a valid typed dataset: train_idx: contains "
                                         r"nodes without a label"):
        load_typed_dataset_dir(tmp_path / "d")


def test_info_shows_the_types_and_relations_of_a_typed_directory(tmp_path, capsys):
    save_typed_dataset(tiny(), tmp_path / "d")
    assert main(["info", "--dataset", "dir", "--data-dir", str(tmp_path / "d")]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) if "  " in line.strip() else (line.strip(), "")
                for line in lines)
    assert rows["node types"] == "" and rows["paper"] == "nodes 4, feature dim 2"
    assert rows["author"] == "nodes 3, feature dim none"
    assert rows["author__writes__paper"] == "edges 4, mean in-degree 1.00, max in-degree 2"
    assert rows["paper__cites__paper"] == "edges 3, mean in-degree 0.750, max in-degree 2"
    assert (rows["target type"], rows["classes"], rows["train / val / test"]) == ("paper", "3", "2 / 1 / 0")
    assert len({len(line) - len(line.split("  ")[-1].lstrip()) for line in lines if line.rstrip() != line.strip()
                or "  " in line}) == 1  # one value column
    assert main(["info", "--dataset", "dir", "--data-dir", str(tmp_path / "d"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(tiny().summary()))


