"""``gnnscale convert`` for typed graphs: OGB's ogbn-mag raw layout and IGB-H's ``.npy`` layout, written here by
hand (a few nodes per type), give the graph, features, labels and split drawn below; bad input is one line naming
the file, and leaves no directory."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.typed_convert import convert_typed, igbh_inputs, ogb_mag_inputs
from gnnscale.graph.typed_dataset import TypedDataset

# The by-hand ogbn-mag (local ids; OGB lists the types alphabetically):
#
#   authors a0 a1 a2, fields f0 f1, institution i0, papers p0 p1 p2 p3 (2-d features, labels 1 0 2 1)
#   affiliated_with: a0 -> i0, a2 -> i0
#   writes:          a0 -> p0, a1 -> p0, a2 -> p1, a0 -> p3
#   cites:           p1 -> p0, p2 -> p0, p3 -> p2, p3 -> p3 (a self loop: dropped)
#   has_topic:       p0 -> f1, p1 -> f0, p1 -> f1
#   split (time):    train p0 p1, valid p3, test p2
#
# Converted, papers come first (the target type): global ids papers 0-3, authors 4-6, fields 7-8, institution 9.
MAG_RELATIONS = {
    ("author", "affiliated_with", "institution"): [(0, 0), (2, 0)],
    ("author", "writes", "paper"): [(0, 0), (1, 0), (2, 1), (0, 3)],
    ("paper", "cites", "paper"): [(1, 0), (2, 0), (3, 2), (3, 3)],
    ("paper", "has_topic", "field_of_study"): [(0, 1), (1, 0), (1, 1)],
}
PAPER_X = [[0.5, 1.0], [1.5, 2.0], [2.5, 3.0], [3.5, 4.0]]


def write_gz(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(f"{line}\n" for line in lines)


def write_mag(root: Path) -> Path:
    """OGB's ogbn-mag raw layout, as ``NodePropPredDataset("ogbn-mag", root)`` downloads it, under ``root``."""
    raw = root / "ogbn_mag" / "raw"
    write_gz(raw / "num-node-dict.csv.gz", ["author,field_of_study,institution,paper", "3,2,1,4"])
    write_gz(raw / "triplet-type-list.csv.gz", [",".join(t) for t in MAG_RELATIONS])
    for triplet, pairs in MAG_RELATIONS.items():
        folder = raw / "relations" / "___".join(triplet)
        write_gz(folder / "edge.csv.gz", [f"{s},{d}" for s, d in pairs])
        write_gz(folder / "num-edge-list.csv.gz", [str(len(pairs))])
        write_gz(folder / "edge_reltype.csv.gz", ["0"] * len(pairs))
    write_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", [",".join(map(str, row)) for row in PAPER_X])
    write_gz(raw / "node-feat" / "paper" / "node_year.csv.gz", ["2019", "2018", "2019", "2017"])
    write_gz(raw / "nodetype-has-label.csv.gz", ["author,field_of_study,institution,paper", "False,False,False,True"])
    write_gz(raw / "node-label" / "paper" / "node-label.csv.gz", ["1", "0", "2", "1"])
    split = root / "ogbn_mag" / "split" / "time"
    write_gz(split / "nodetype-has-split.csv.gz", ["author,field_of_study,institution,paper",
                                                   "False,False,False,True"])
    for part, ids in (("train", [0, 1]), ("valid", [3]), ("test", [2])):
        write_gz(split / "paper" / f"{part}.csv.gz", map(str, ids))
    return root


def local_edges(ds: TypedDataset, relation: str) -> set[tuple[int, int]]:
    return set(zip(*(a.tolist() for a in ds.graph.edges(relation))))


def test_ogbn_mag_raw_layout_gives_the_graph_drawn_by_hand(tmp_path):
    convert_typed(ogb_mag_inputs(write_mag(tmp_path / "ogb")), tmp_path / "mag")
    ds = load_dataset("dir", tmp_path / "mag")
    assert isinstance(ds, TypedDataset) and ds.name == "ogbn-mag"
    assert ds.graph.node_types == ("paper", "author", "field_of_study", "institution")
    assert ds.graph.type_offsets.tolist() == [0, 4, 7, 9, 10]
    assert [str(r) for r in ds.graph.relations] == ["author__affiliated_with__institution", "author__writes__paper",
                                                    "paper__cites__paper", "paper__has_topic__field_of_study"]
    for (src, name, dst), pairs in MAG_RELATIONS.items():
        assert local_edges(ds, f"{src}__{name}__{dst}") == {(s, d) for s, d in pairs if (s, d) != (3, 3)}
    np.testing.assert_array_equal(ds.features["paper"], np.array(PAPER_X, dtype=np.float32))
    assert ds.feature_dims == {"paper": 2, "author": None, "field_of_study": None, "institution": None}
    assert (ds.target_type, ds.labels.tolist(), ds.num_classes) == ("paper", [1, 0, 2, 1], 3)
    assert (ds.train_idx.tolist(), ds.val_idx.tolist(), ds.test_idx.tolist()) == ([0, 1], [3], [2])


def test_ogbn_mag_with_reverses_as_pyg_to_undirected(tmp_path):
    convert_typed(ogb_mag_inputs(write_mag(tmp_path / "ogb")), tmp_path / "mag", symmetrize=True)
    ds = load_dataset("dir", tmp_path / "mag")
    assert [str(r) for r in ds.graph.relations][4:] == [
        "institution__rev_affiliated_with__author", "paper__rev_writes__author", "field_of_study__rev_has_topic__paper"]
    assert local_edges(ds, "paper__cites__paper") == {(1, 0), (2, 0), (3, 2), (0, 1), (0, 2), (2, 3)}
    assert local_edges(ds, "paper__rev_writes__author") == {(0, 0), (0, 1), (1, 2), (3, 0)}
    # p0's in-edges, grouped by relation: writes from a0 a1 (4, 5), cites from p1 p2 (1, 2), rev_has_topic from f1 (8).
    g = ds.graph.graph
    assert g.indices[g.indptr[0]:g.indptr[1]].tolist() == [4, 5, 1, 2, 8]
    assert main(["info", "--dataset", "dir", "--data-dir", str(tmp_path / "mag")]) == 0


def test_ogbn_mag_from_the_command_line(tmp_path, capsys):
    root = write_mag(tmp_path / "ogb")
    assert main(["convert", "--ogb-mag-root", str(root), "--symmetrize", "--out", str(tmp_path / "mag")]) == 0
    out = capsys.readouterr().out
    assert "converting 13 edges of 4 relations between 4 node types (paper, author, field_of_study, institution)" in out
    assert load_dataset("dir", tmp_path / "mag").graph.num_edges == 2 * (2 + 4 + 3 + 3)  # the self loop dropped
    assert main(["convert", "--ogb-mag-root", str(root), "--igb-root", str(root), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == ("gnnscale convert: error: --igb-root: give one of --ogb-root, --ogb-mag-root, "
                                       "--igb-root, got --ogb-mag-root and --igb-root\n")
    assert main(["convert", "--ogb-mag-root", str(root), "--edges", "e.npy", "--out", str(tmp_path / "x")]) == 2
    assert "--ogb-mag-root: reads its own edges, features, labels and splits; drop --edges" in capsys.readouterr().err


def _break_writes(root: Path) -> None:
    write_gz(root / "ogbn_mag/raw/relations/author___writes___paper/edge.csv.gz", ["0,0", "1,0", "2,1", "0,4"])


def _unknown_type(root: Path) -> None:
    write_gz(root / "ogbn_mag/raw/triplet-type-list.csv.gz", ["author,writes,paper", "paper,published,venue"])


def _no_labels(root: Path) -> None:
    shutil.rmtree(root / "ogbn_mag/raw/node-label")


def _missing_edges(root: Path) -> None:
    (root / "ogbn_mag/raw/relations/paper___cites___paper/edge.csv.gz").unlink()


def _short_count(root: Path) -> None:
    write_gz(root / "ogbn_mag/raw/relations/paper___cites___paper/num-edge-list.csv.gz", ["3"])


@pytest.mark.parametrize("damage, target, line", [
    (_break_writes, None, r"author___writes___paper/edge\.csv\.gz: edge 3: destination id 4 out of range \[0, 4\) "
                          r"\(author__writes__paper: 4 paper nodes\)$"),
    (_unknown_type, None, r"triplet-type-list\.csv\.gz: relation paper__published__venue names node type 'venue', not "
                          r"one of num-node-dict\.csv\.gz's \(author, field_of_study, institution, paper\)$"),
    (None, "author", r"^target_type: 'author' has no labels \(.*node-label/author/node-label\.csv\.gz is missing\); "
                     r"labeled types: paper$"),
    (None, "venue", r"^target_type: expected one of the node types author, field_of_study, institution, paper, got "
                    r"'venue'$"),
    (_no_labels, None, r"^target_type: no node type has labels \(nothing under .*raw/node-label\); node classification "
                       r"needs a labeled type$"),
    (_missing_edges, None, r"paper___cites___paper/edge\.csv\.gz: missing\. gnnscale reads OGB's on-disk layout"),
    (_short_count, None, r"paper___cites___paper/edge\.csv\.gz: expected 3 rows 'src,dst' \(num-edge-list\.csv\.gz\), "
                         r"got shape \[4, 2\]$"),
], ids=["ids-exceed-counts", "unknown-type", "target-without-labels", "unknown-target", "no-labels", "missing-file",
        "edge-count"])
def test_bad_ogbn_mag_input_is_one_line_naming_the_file(tmp_path, damage, target, line):
    root = write_mag(tmp_path / "ogb")
    if damage is not None:
        damage(root)
    with pytest.raises(ValueError, match=line) as err:
        ogb_mag_inputs(root, target)
    assert "\n" not in str(err.value)


def test_features_that_run_short_leave_no_directory(tmp_path, capsys):
    root = write_mag(tmp_path / "ogb")
    write_gz(root / "ogbn_mag/raw/node-feat/paper/node-feat.csv.gz", ["0.5,1.0", "1.5,2.0", "2.5,3.0"])
    assert main(["convert", "--ogb-mag-root", str(root), "--out", str(tmp_path / "mag")]) == 2
    assert capsys.readouterr().err.endswith("node-feat/paper/node-feat.csv.gz: expected 4 rows (num-node-dict.csv.gz), "
                                            "got 3\n")
    assert not (tmp_path / "mag").exists() and list(tmp_path.iterdir()) == [root]


# The by-hand IGB-H (local ids; every type has 3-d features, row i of type t is [i, i, i] + 10 * type index):
#
#   papers p0..p5 (labels 1 0 - 18 2 5: p2 unlabeled), authors a0 a1 a2, institute i0, fields f0 f1
#   cites:         p1 -> p0, p2 -> p0, p3 -> p2, p5 -> p5 (a self loop: dropped)
#   written_by:    p0 -> a0, p0 -> a1, p1 -> a2, p3 -> a0
#   affiliated_to: a0 -> i0, a2 -> i0
#   topic:         p0 -> f1, p1 -> f0, p1 -> f1
#   split (IGB's): the 5 labeled papers in id order: 3 train (p0 p1 p3), 1 val (p4), the rest test (p5)
IGB_COUNTS = {"paper": 6, "author": 3, "institute": 1, "fos": 2}
IGB_EDGES = {"paper__cites__paper": [(1, 0), (2, 0), (3, 2), (5, 5)],
             "paper__written_by__author": [(0, 0), (0, 1), (1, 2), (3, 0)],
             "author__affiliated_to__institute": [(0, 0), (2, 0)],
             "paper__topic__fos": [(0, 1), (1, 0), (1, 1)]}
IGB_LABELS = np.array([1, 0, np.nan, 18, 2, 5], dtype=np.float32)


def igb_features(t: int, count: int) -> np.ndarray:
    return np.repeat(np.arange(count, dtype=np.float32)[:, None], 3, axis=1) + 10 * t


def write_igbh(root: Path) -> Path:
    """IGB-H's processed layout (IGB's download script) under ``root``."""
    processed = root / "processed"
    for t, (node_type, count) in enumerate(IGB_COUNTS.items()):
        (processed / node_type).mkdir(parents=True)
        np.save(processed / node_type / "node_feat.npy", igb_features(t, count))
    for relation, pairs in IGB_EDGES.items():
        (processed / relation).mkdir()
        np.save(processed / relation / "edge_index.npy", np.array(pairs, dtype=np.int64))
    np.save(processed / "paper" / "node_label_19.npy", IGB_LABELS)
    return root


def test_igbh_layout_gives_the_graph_drawn_by_hand(tmp_path):
    convert_typed(igbh_inputs(write_igbh(tmp_path / "small")), tmp_path / "igbh")
    ds = load_dataset("dir", tmp_path / "igbh")
    assert ds.name == "igbh-small" and ds.graph.node_types == ("paper", "author", "institute", "fos")
    assert ds.graph.type_offsets.tolist() == [0, 6, 9, 10, 12]
    assert [str(r) for r in ds.graph.relations] == list(IGB_EDGES)
    for relation, pairs in IGB_EDGES.items():
        assert local_edges(ds, relation) == {(s, d) for s, d in pairs if (s, d) != (5, 5)}
    for t, (node_type, count) in enumerate(IGB_COUNTS.items()):
        np.testing.assert_array_equal(ds.features[node_type], igb_features(t, count))
    assert (ds.labels.tolist(), ds.num_classes) == ([1, 0, -1, 18, 2, 5], 19)
    assert (ds.train_idx.tolist(), ds.val_idx.tolist(), ds.test_idx.tolist()) == ([0, 1, 3], [4], [5])


def test_igbh_from_the_command_line_with_reverses(tmp_path, capsys):
    root = write_igbh(tmp_path / "small")
    assert main(["convert", "--igb-root", str(root), "--symmetrize", "--out", str(tmp_path / "igbh")]) == 0
    ds = load_dataset("dir", tmp_path / "igbh")
    assert [str(r) for r in ds.graph.relations][4:] == [
        "author__rev_written_by__paper", "institute__rev_affiliated_to__author", "fos__rev_topic__paper"]
    assert local_edges(ds, "author__rev_written_by__paper") == {(0, 0), (1, 0), (2, 1), (0, 3)}
    capsys.readouterr()
    assert main(["convert", "--igb-root", str(root), "--igb-labels", "2K", "--out", str(tmp_path / "x")]) == 2
    assert "paper/node_label_2K.npy: missing (IGB-H's processed layout" in capsys.readouterr().err
    assert main(["convert", "--igb-root", str(root), "--target-type", "author", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == ("gnnscale convert: error: --target-type: only with --ogb-mag-root (IGB-H's "
                                       "labels are on papers)\n")


def test_bad_igbh_input_is_one_line_naming_the_file(tmp_path):
    root = write_igbh(tmp_path / "small")
    np.save(root / "processed/paper__written_by__author/edge_index.npy", np.array([[0, 0], [5, 3]]))
    with pytest.raises(ValueError, match=r"paper__written_by__author/edge_index\.npy: edge 1: destination id 3 out of "
                                         r"range \[0, 3\) \(paper__written_by__author: 3 author nodes\)$"):
        igbh_inputs(root)
    np.save(root / "processed/paper__written_by__author/edge_index.npy", np.array([[0, 1, 2]]))
    with pytest.raises(ValueError, match=r"edge_index\.npy: expected int edges \[E, 2\]"):
        igbh_inputs(root)
    (root / "processed/fos/node_feat.npy").unlink()
    with pytest.raises(ValueError, match=r"fos/node_feat\.npy: missing \(IGB-H's processed layout"):
        igbh_inputs(root)
    with pytest.raises(ValueError, match=r"^igb_root: expected IGB-H's folder holding processed/"):
        igbh_inputs(tmp_path / "none")
