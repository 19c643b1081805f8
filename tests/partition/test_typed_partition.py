"""Partitioning a typed graph: ids renumbered type-major then by part (types stay one range each, each part owns one
range within every type), the typed partition directory (the whole typed topology, each part's typed rows, its rows
of every type's features, the target type's labels and split), the training nodes balanced, and a corrupt or
partial directory refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.graph.typed import TypedGraph, typed_graph
from gnnscale.partition import load_partition, read_manifest, write_partition_dir
from gnnscale.partition.typed import TypedPartitionBook, check_owned
from gnnscale.partition.typed_directory import load_typed_partition, typed_new_ids, write_typed_partition_dir

SCALE = 0.003  # the mag-shaped graph: about 2,200 papers, 3,400 authors, 26 institutions, 180 fields


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=SCALE)


@pytest.fixture(scope="module")
def written(mag, tmp_path_factory) -> Path:
    """A 3-part METIS partition directory of ``mag`` (read-only: tests that damage it copy it first)."""
    out = tmp_path_factory.mktemp("typed") / "parts"
    write_typed_partition_dir(mag, 3, "metis", out)
    return out


@pytest.fixture
def damaged(written, tmp_path) -> Path:
    return Path(shutil.copytree(written, tmp_path / "parts"))


def relabelled(graph: TypedGraph, new_to_old: np.ndarray) -> TypedGraph:
    """The oracle: the typed graph rebuilt from its relations' edge lists with every id mapped to its new one."""
    old_to_new = np.empty_like(new_to_old)
    old_to_new[new_to_old] = np.arange(new_to_old.shape[0])
    edges = {}
    for rel in graph.relations:
        src, dst = graph.edges(rel)
        (s0, _), (d0, _) = graph.node_range(rel.src), graph.node_range(rel.dst)
        edges[rel] = (old_to_new[src + s0] - s0, old_to_new[dst + d0] - d0)
    return typed_graph({t: graph.count(t) for t in graph.node_types}, edges)


def assert_same_graph(got: TypedGraph, expected: TypedGraph) -> None:
    assert np.array_equal(got.rel_indptr, expected.rel_indptr)
    assert np.array_equal(got.graph.indptr, expected.graph.indptr)
    assert np.array_equal(np.asarray(got.graph.indices), np.asarray(expected.graph.indices))


# --- new ids -------------------------------------------------------------------------------------


def tiny() -> TypedGraph:
    """paper 0-3 (global 0-3), author 0-2 (global 4-6)::

        writes (author -> paper): a0->p0, a1->p0, a1->p2, a2->p3
        cites  (paper -> paper):  p1->p0, p2->p1, p3->p2
    """
    return typed_graph({"paper": 4, "author": 3}, {
        ("author", "writes", "paper"): (np.array([0, 1, 1, 2]), np.array([0, 0, 2, 3])),
        ("paper", "cites", "paper"): (np.array([1, 2, 3]), np.array([0, 1, 2]))})


def test_new_ids_are_type_major_then_part_then_old_id():
    graph = tiny()
    part = np.array([1, 0, 1, 0, 0, 1, 0])  # papers p0..p3, then authors a0..a2
    ids = typed_new_ids(graph, part, 2)
    # Papers of part 0 (p1, p3), of part 1 (p0, p2); authors of part 0 (a0, a2), of part 1 (a1).
    assert ids.new_to_old.tolist() == [1, 3, 0, 2, 4, 6, 5]
    assert ids.book.offsets.tolist() == [[0, 2, 4], [4, 6, 7]]
    assert ids.book.owner(np.arange(7)).tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert ids.book.owner(torch.arange(7)).tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert ids.book.type_offsets.tolist() == [0, 4, 7]
    assert ids.book.counts(0).tolist() == [2, 2]
    # New paper 0 is p1: its rows (writes, cites) were [] and [p2]; p2 is new paper 3.
    new_rows = ids.rel_indptr
    assert (new_rows[1] - new_rows[0], new_rows[2] - new_rows[1]) == (0, 1)


def test_a_part_may_own_no_node_of_a_type():
    book = TypedPartitionBook(offsets=np.array([[0, 0, 4], [4, 6, 7]]))
    assert book.owner(np.arange(7)).tolist() == [1, 1, 1, 1, 0, 0, 1]
    owned = r"ids in \[0, 0\), \[4, 6\); got \[1, 6\]"
    with pytest.raises(ValueError, match=rf"seeds: expected nodes owned by rank 0, {owned}"):
        check_owned(book, np.array([4, 1, 6]), 0)


@pytest.mark.parametrize("offsets, match", [
    ([[0, 2, 4], [5, 6, 7]], "where the previous type's ends"),
    ([[0, 3, 2], [2, 6, 7]], "where the previous type's ends"),
    ([[1, 2, 4], [4, 6, 7]], "the first from 0"),
])
def test_a_book_whose_ranges_do_not_tile_the_ids_is_refused(offsets, match):
    with pytest.raises(ValueError, match=match):
        TypedPartitionBook(offsets=np.array(offsets))


# --- the directory -------------------------------------------------------------------------------


def test_the_whole_topology_is_the_graph_renumbered(mag, written):
    new_to_old = np.load(written / "new_to_old.npy")
    expected = relabelled(mag.graph, new_to_old)
    for part in range(3):
        assert_same_graph(load_typed_partition(written, part, "whole").topology, expected)


def test_types_stay_ranges_and_each_part_owns_one_range_of_every_type(mag, written):
    manifest = read_manifest(written)
    new_to_old = np.load(written / "new_to_old.npy")
    offsets = mag.graph.type_offsets
    assert manifest["type_offsets"] == offsets.tolist()
    for t in range(len(mag.graph.node_types)):
        # Every new id of type t is an old id of type t, in old-id order within each part.
        lo, hi = offsets[t], offsets[t + 1]
        assert np.all((new_to_old[lo:hi] >= lo) & (new_to_old[lo:hi] < hi))
        row = manifest["part_offsets"][t]
        assert row[0] == lo and row[-1] == hi
        for p in range(3):
            assert np.all(np.diff(new_to_old[row[p]:row[p + 1]]) > 0)


@pytest.mark.parametrize("method", ["metis", "kaminpar"])
def test_the_target_types_training_nodes_and_the_nodes_are_balanced(mag, written, tmp_path, method):
    if method != "metis":
        written = tmp_path / method
        write_typed_partition_dir(mag, 3, method, written)
    train = [load_typed_partition(written, p, "own").train_idx.shape[0] for p in range(3)]
    assert sum(train) == mag.train_idx.shape[0] and max(train) - min(train) <= 1
    nodes = np.diff(np.array(read_manifest(written)["part_offsets"]), axis=1).sum(axis=0)
    assert nodes.sum() == mag.graph.num_nodes and nodes.max() - nodes.min() <= 1
    # The cut of a min-cut partitioner, against a random assignment of the same graph.
    write_typed_partition_dir(mag, 3, "random", tmp_path / "random")
    assert read_manifest(written)["edge_cut"] < 0.8 * read_manifest(tmp_path / "random")["edge_cut"]


def test_each_part_holds_its_rows_of_every_type_its_labels_and_split(mag, written):
    new_to_old = np.load(written / "new_to_old.npy")
    offsets = mag.graph.type_offsets
    for p in range(3):
        part = load_typed_partition(written, p, "own")
        for t, name in enumerate(mag.graph.node_types):
            lo, hi = part.book.node_range(t, p)
            x = mag.features[name]
            if x is None:
                assert part.features[name] is None
            else:
                assert np.array_equal(part.features[name], x[new_to_old[lo:hi] - offsets[t]])
        lo, hi = part.book.node_range(0, p)  # paper, the target type, is type 0
        assert part.label_offset == lo
        assert np.array_equal(part.labels, mag.labels[new_to_old[lo:hi]])
        for name in ("train_idx", "val_idx", "test_idx"):
            old = getattr(mag, name)
            owned = np.isin(old, new_to_old[lo:hi])
            assert np.array_equal(np.sort(new_to_old[getattr(part, name)]), old[owned])


def test_each_parts_typed_rows_are_the_whole_graphs_rows_of_its_nodes(written):
    whole = load_typed_partition(written, 0, "whole").topology
    layout = whole.row_layout()
    for p in range(3):
        rows = load_typed_partition(written, p, "own").topology
        got, at = [], 0
        for t in range(len(whole.node_types)):
            lo, hi = rows.book.node_range(t, p)
            k = layout.rows_per_node(t)
            first = layout.row_start[t] + (lo - whole.type_offsets[t]) * k
            for r in range(first, first + (hi - lo) * k):  # brute force, row by row
                expected = whole.graph.indices[whole.rel_indptr[r]:whole.rel_indptr[r + 1]]
                n = rows.rel_indptr[at + 1] - rows.rel_indptr[at]
                got.append(np.array_equal(rows.indices[rows.rel_indptr[at]:rows.rel_indptr[at] + n], expected))
                at += 1
        assert all(got) and at == rows.rel_indptr.shape[0] - 1


def test_the_manifest_counts_the_cut_and_every_file(written):
    manifest = read_manifest(written)
    whole = load_typed_partition(written, 0, "whole").topology
    book = load_typed_partition(written, 0, "whole").book
    dst = np.repeat(np.arange(whole.num_nodes), np.diff(whole.graph.indptr))
    src = np.asarray(whole.graph.indices, dtype=np.int64)
    assert manifest["edge_cut"] == int(np.count_nonzero(book.owner(src) != book.owner(dst)))
    assert manifest["edges"] == [int(np.count_nonzero(book.owner(dst) == p)) for p in range(3)]
    files = {str(f.relative_to(written)) for f in written.rglob("*.npy")}
    assert set(manifest["files"]) == files and "part2/features.paper.npy" in files
    assert "part2/features.author.npy" not in files  # authors have no features


def test_rows_written_a_few_at_a_time_are_the_same_files(mag, written, tmp_path):
    # Chunks of at most 1,000 edges (a node with more is written alone): dozens of chunks per type and part.
    write_typed_partition_dir(mag, 3, "metis", tmp_path / "chunked", chunk_edges=1000)
    assert read_manifest(tmp_path / "chunked")["files"] == read_manifest(written)["files"]


@pytest.mark.parametrize("view", ["whole", "own"])
def test_one_worker_holds_every_part_as_one(mag, written, view):
    merged = load_typed_partition(written, 0, view, workers=1)
    new_to_old = np.load(written / "new_to_old.npy")
    offsets = mag.graph.type_offsets
    assert merged.book.offsets.tolist() == [[lo, hi] for lo, hi in zip(offsets, offsets[1:])]
    assert np.array_equal(merged.features["paper"], mag.features["paper"][new_to_old[:mag.graph.count("paper")]])
    assert np.array_equal(merged.train_idx, np.sort(np.argsort(new_to_old)[mag.train_idx]))
    if view == "own":
        whole = load_typed_partition(written, 0, "whole").topology
        assert np.array_equal(merged.topology.rel_indptr, whole.rel_indptr)
        assert np.array_equal(merged.topology.indices, whole.graph.indices)


def test_a_one_part_partition_keeps_the_datasets_ids(mag, tmp_path):
    write_typed_partition_dir(mag, 1, "random", tmp_path / "one")
    part = load_typed_partition(tmp_path / "one", 0, "whole")
    assert np.array_equal(np.load(tmp_path / "one" / "new_to_old.npy"), np.arange(mag.graph.num_nodes))
    assert_same_graph(part.topology, mag.graph)
    assert np.array_equal(part.train_idx, mag.train_idx)


def test_half_precision_features_are_stored_rounded(mag, tmp_path):
    write_typed_partition_dir(mag, 2, "random", tmp_path / "half", feature_dtype="bfloat16")
    part = load_typed_partition(tmp_path / "half", 1, "own")
    assert part.features["paper"].dtype == np.uint16 and read_manifest(tmp_path / "half")["feature_dtype"] == "bfloat16"


# --- refused -------------------------------------------------------------------------------------


def test_a_flipped_byte_is_named(damaged):
    path = damaged / "part1" / "features.paper.npy"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"part1/features.paper.npy: file is corrupt \(sha256") as err:
        load_typed_partition(damaged, 1, "own")
    assert "\n" not in str(err.value)
    load_typed_partition(damaged, 0, "own")  # other parts do not read it


@pytest.mark.parametrize("rel, view", [("part2/rel_indptr.npy", "own"), ("topology/rel_indptr.npy", "whole"),
                                       ("part2/labels.npy", "whole")])
def test_a_missing_file_is_named(damaged, rel, view):
    (damaged / rel).unlink()
    with pytest.raises(ValueError, match=f"{rel}: missing file"):
        load_typed_partition(damaged, 2, view)


def test_a_partial_directory_is_refused(damaged):
    (damaged / "manifest.json").unlink()
    with pytest.raises(ValueError, match="missing manifest.json"):
        load_typed_partition(damaged, 0)


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(part_offsets=m["part_offsets"][:-1]), "part_offsets must hold, per node type, 4 ints"),
    (lambda m: m["feature_dim"].pop("author"), "feature_dim must map every node type"),
    (lambda m: m.update(target_type="venue"), "target_type must be one of paper, author"),
    (lambda m: m.update(type_offsets=[0, 5, 3, 2, 1]), "type_offsets must be 5 ints rising"),
])
def test_a_bad_manifest_is_named(damaged, edit, match):
    manifest = json.loads((damaged / "manifest.json").read_text())
    edit(manifest)
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=match):
        load_typed_partition(damaged, 0)


def test_each_kind_of_directory_is_read_by_its_own_loader(written, tmp_path):
    with pytest.raises(ValueError, match=r"holds a typed graph \(node types paper, author, institution, "
                                         r"field_of_study\); a typed model"):
        load_partition(written, 0)
    plain = make_synthetic(SyntheticConfig(num_nodes=200, avg_degree=4.0, feature_dim=4))
    write_partition_dir(plain, 2, "random", tmp_path / "plain")
    with pytest.raises(ValueError, match="holds a graph of one node type; a typed model trains on the partition of a "
                                         "typed dataset"):
        load_typed_partition(tmp_path / "plain", 0)


def test_the_command_line_partitions_a_typed_dataset(mag, tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["partition", "--dataset", "synthetic", "-o", "preset=mag", "-o", f"scale={SCALE}", "--parts", "2",
            "--out", str(out)]
    assert main(argv) == 0
    assert "edge cut" in capsys.readouterr().out
    manifest = read_manifest(out)
    assert (manifest["kind"], manifest["num_parts"], manifest["target_type"]) == ("typed_partition", 2, "paper")
    assert load_typed_partition(out, 1, "own").features["paper"].shape[1] == 128
