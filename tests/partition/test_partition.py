"""Partitioning: METIS vs random assignment, balance, relabelling, the partition directory and its CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gnnscale.cli import main
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.storage import load_dataset_dir, save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import (
    LocalPartition,
    PartRows,
    assign_parts,
    load_partition,
    read_manifest,
    relabel,
    symmetric_adjacency,
    write_partition_dir,
)
from full_disk import FULL_DISK

REPO = Path(__file__).resolve().parents[2]
CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", REPO / ".." / "shared" / "data")) / "cora_planetoid"
needs_cora = pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")
METHODS = ("metis", "kaminpar", "random")
SMALL = SyntheticConfig(num_nodes=3000, avg_degree=10.0, num_classes=5, feature_dim=8, train_fraction=0.3,
                        val_fraction=0.2, test_fraction=0.3, seed=1)


@pytest.fixture(scope="module")
def ds():
    return make_synthetic(SMALL)


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora", CORA_DIR)


@pytest.fixture(scope="module")
def written(ds, tmp_path_factory) -> Path:
    """A 4-part METIS partition directory of ``ds`` (read-only: tests that damage it copy it first)."""
    out = tmp_path_factory.mktemp("written") / "parts"
    write_partition_dir(ds, 4, "metis", out, seed=0)
    return out


@pytest.fixture
def damaged(written, tmp_path) -> Path:
    """A private copy of ``written`` that a test may break."""
    return Path(shutil.copytree(written, tmp_path / "parts"))


def edge_keys(graph: CSCGraph, ids: np.ndarray | None = None) -> np.ndarray:
    """Sorted int64 keys ``src * n + dst`` of every edge, ids mapped through ``ids`` first if given."""
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees())
    src = graph.indices.astype(np.int64)
    if ids is not None:
        src, dst = ids[src], ids[dst]
    return np.sort(src * graph.num_nodes + dst)


def cut_fraction(graph: CSCGraph, part: np.ndarray) -> float:
    return float(np.mean(part[graph.indices] != np.repeat(part, graph.in_degrees())))


# --- assignment ----------------------------------------------------------------------------------


def test_symmetric_adjacency_matches_scipy(random_graph):
    # random_graph (conftest): directed, with self loops and nodes without in-edges.
    xadj, adjncy = symmetric_adjacency(random_graph)
    n = random_graph.num_nodes
    a = sp.csr_matrix((np.ones(random_graph.num_edges), random_graph.indices, random_graph.indptr), shape=(n, n))
    s = (a + a.T).tolil()
    s.setdiag(0)
    s = s.tocsr()
    s.eliminate_zeros()
    s.sort_indices()
    assert xadj.dtype == np.int64
    np.testing.assert_array_equal(xadj, s.indptr)
    np.testing.assert_array_equal(adjncy, s.indices)


@pytest.mark.parametrize("num_parts", [2, 3, 5])
@pytest.mark.parametrize("method", METHODS)
def test_parts_are_balanced_to_one_node(ds, method, num_parts):
    part = assign_parts(ds.graph, num_parts, method, train_idx=ds.train_idx, seed=0)
    assert part.dtype == np.int64 and part.shape == (ds.graph.num_nodes,)
    assert part.min() == 0 and part.max() == num_parts - 1
    for counts in (np.bincount(part, minlength=num_parts), np.bincount(part[ds.train_idx], minlength=num_parts)):
        assert counts.max() - counts.min() <= 1, counts
    edges = np.bincount(part, weights=ds.graph.in_degrees(), minlength=num_parts)
    assert edges.max() / edges.mean() < 1.3  # not enforced; power-law degrees keep it within ~17%


def test_metis_and_kaminpar_cut_far_fewer_edges_than_random(ds):
    # Measured on this graph, 4 parts, seeds 0-4: kaminpar 0.269-0.287, metis 0.267-0.269, random 0.744-0.757.
    cut = {m: cut_fraction(ds.graph, assign_parts(ds.graph, 4, m, train_idx=ds.train_idx)) for m in METHODS}
    assert cut["random"] > 0.7, cut  # 1 - 1/4 expected
    assert cut["metis"] < 0.45 * cut["random"], cut
    assert cut["kaminpar"] < 1.25 * cut["metis"], cut
    assert cut["kaminpar"] < 0.45 * cut["random"], cut


@needs_cora
def test_metis_on_cora_cuts_few_edges_and_balances_training_nodes(cora):
    # Cora's 140 training nodes are 20 per class and METIS' parts follow the classes, so METIS alone
    # leaves them uneven: the balancing pass must even them out at a small cost in cut.
    part = assign_parts(cora.graph, 4, "metis", train_idx=cora.train_idx)
    assert cut_fraction(cora.graph, part) < 0.1
    assert np.bincount(part[cora.train_idx]).tolist() == [35, 35, 35, 35]
    assert np.ptp(np.bincount(part)) <= 1


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_parts(ds, method):
    # (kaminpar: with one thread, its default; two threads need not repeat themselves.)
    a = assign_parts(ds.graph, 3, method, train_idx=ds.train_idx, seed=5)
    np.testing.assert_array_equal(a, assign_parts(ds.graph, 3, method, train_idx=ds.train_idx, seed=5))
    if method == "random":
        assert not np.array_equal(assign_parts(ds.graph, 3, method, seed=1), assign_parts(ds.graph, 3, method, seed=2))


@pytest.mark.parametrize("method", METHODS)
def test_edge_cases_one_part_one_node_per_part_no_edges(tiny_graph, method):
    n = tiny_graph.num_nodes
    assert assign_parts(tiny_graph, 1, method).tolist() == [0] * n
    assert sorted(assign_parts(tiny_graph, n, method, train_idx=np.array([0, 1]))) == list(range(n))
    empty = CSCGraph(indptr=np.zeros(11, dtype=np.int64), indices=np.zeros(0, dtype=np.int32), num_nodes=10)
    assert np.bincount(assign_parts(empty, 3, method)).tolist() == [4, 3, 3]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(num_parts=0), "num_parts: expected an int in \\[1, num_nodes = 6\\], got 0"),
    (dict(num_parts=7), "num_parts: expected an int in \\[1, num_nodes = 6\\], got 7"),
    (dict(method="kway"), "method: expected one of metis, kaminpar, random, got 'kway'"),
    (dict(seed=-1), "seed"),
    (dict(threads=0), "threads: expected an int >= 1, got 0"),
    (dict(train_idx=np.array([0, 6])), "train_idx: expected node ids in \\[0, 6\\)"),
], ids=["num_parts0", "num_parts7", "method", "seed", "threads", "train_idx"])
def test_bad_assign_arguments_name_the_argument(tiny_graph, method, kwargs, match):
    args = {"num_parts": 2, "method": method, **kwargs}
    with pytest.raises(ValueError, match=match):
        assign_parts(tiny_graph, args.pop("num_parts"), args.pop("method"), **args)


def test_non_graph_and_non_int_parts_are_type_errors(tiny_graph):
    with pytest.raises(TypeError, match="graph"):
        assign_parts(tiny_graph.indptr, 2)
    with pytest.raises(TypeError, match="num_parts"):
        assign_parts(tiny_graph, 2.0)


# --- relabelling ---------------------------------------------------------------------------------


def test_relabelled_graph_is_the_same_graph_with_contiguous_parts(ds):
    part = assign_parts(ds.graph, 4, "metis", train_idx=ds.train_idx)
    r = relabel(ds.graph, part, 4)
    np.testing.assert_array_equal(r.new_to_old[r.old_to_new], np.arange(ds.graph.num_nodes))
    # Contiguous ranges, in the order (part, old id).
    np.testing.assert_array_equal(part[r.new_to_old], r.book.owner(np.arange(ds.graph.num_nodes)))
    for p in range(4):
        lo, hi = r.book.node_range(p)
        assert np.all(np.diff(r.new_to_old[lo:hi]) > 0)
    # Isomorphic through new_to_old: every edge maps to exactly one original edge.
    np.testing.assert_array_equal(edge_keys(r.graph, r.new_to_old), edge_keys(ds.graph))
    assert r.graph.indices.dtype == ds.graph.indices.dtype
    rows_sorted = np.diff(r.graph.indices.astype(np.int64)) >= 0
    rows_sorted[r.graph.indptr[1:-1] - 1] = True  # row boundaries may go down
    assert rows_sorted.all()


def test_relabelling_ignores_the_input_row_order(ds):
    # Shuffle every node's in-edges: the relabelled graph must not change (all workers agree).
    rng = np.random.default_rng(0)
    keys = np.repeat(np.arange(ds.graph.num_nodes), ds.graph.in_degrees()) * 2.0 + rng.random(ds.graph.num_edges)
    shuffled = CSCGraph(indptr=ds.graph.indptr, indices=ds.graph.indices[np.argsort(keys)],
                        num_nodes=ds.graph.num_nodes)
    part = assign_parts(ds.graph, 3, "random")
    a, b = relabel(ds.graph, part, 3), relabel(shuffled, part, 3)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)


# --- the partition directory ---------------------------------------------------------------------


@pytest.mark.parametrize("view", ["whole", "own"])
def test_round_trip(written, ds, view):
    manifest = read_manifest(written)
    new_to_old = np.load(written / "new_to_old.npy")
    old_to_new = np.argsort(new_to_old)
    topology = load_partition(written, 0, "whole").topology
    np.testing.assert_array_equal(edge_keys(topology, new_to_old), edge_keys(ds.graph))
    seen = {name: [] for name in ("train_idx", "val_idx", "test_idx")}
    for p in range(4):
        lp = load_partition(written, p, view)
        assert isinstance(lp, LocalPartition) and lp.view == view and lp.num_parts == 4
        assert (lp.dataset_name, lp.num_classes, lp.feature_dim) == ("synthetic", 5, 8)
        lo, hi = lp.book.node_range(p)
        assert lp.node_offset == lo == manifest["offsets"][p]
        assert isinstance(lp.features, np.memmap) and not lp.features.flags.writeable
        np.testing.assert_array_equal(lp.features, ds.features[new_to_old[lo:hi]])
        np.testing.assert_array_equal(lp.labels, ds.labels[new_to_old[lo:hi]])
        for name in seen:
            ids = getattr(lp, name)
            assert ids.dtype == np.int64 and (ids.size == 0 or (lo <= ids[0] and ids[-1] < hi))
            seen[name].append(ids)
        if view == "own":
            assert isinstance(lp.topology, PartRows) and lp.topology.node_offset == lo
            rows = slice(topology.indptr[lo], topology.indptr[hi])
            np.testing.assert_array_equal(lp.topology.local_indices, topology.indices[rows])
            np.testing.assert_array_equal(lp.topology.local_indptr, topology.indptr[lo:hi + 1] - topology.indptr[lo])
        else:
            assert isinstance(lp.topology, CSCGraph) and isinstance(lp.topology.indices, np.memmap)
    for name, parts in seen.items():
        np.testing.assert_array_equal(np.concatenate(parts), np.sort(old_to_new[getattr(ds, name)]))


@pytest.mark.parametrize("view", ["whole", "own"])
@pytest.mark.parametrize("workers", [1, 2])
def test_fewer_workers_than_parts_each_hold_consecutive_parts_as_one(written, view, workers):
    manifest = read_manifest(written)
    k = 4 // workers
    for w in range(workers):
        held = load_partition(written, w, view, workers=workers)
        parts = [load_partition(written, q, view) for q in range(w * k, (w + 1) * k)]
        assert (held.part, held.num_parts, held.view) == (w, workers, view)
        np.testing.assert_array_equal(held.book.offsets, manifest["offsets"][::k])
        assert held.node_offset == parts[0].node_offset
        assert held.num_local_nodes == sum(p.num_local_nodes for p in parts)
        for name in ("features", "labels", "train_idx", "val_idx", "test_idx"):
            np.testing.assert_array_equal(getattr(held, name), np.concatenate([getattr(p, name) for p in parts]))
        whole = load_partition(written, 0, "whole").topology
        if view == "whole":
            assert isinstance(held.topology.indices, np.memmap)  # not copied, whatever the parts held
            np.testing.assert_array_equal(held.topology.indices, whole.indices)
        else:
            lo, hi = held.book.node_range(w)
            assert held.topology.node_offset == lo
            rows = slice(whole.indptr[lo], whole.indptr[hi])
            np.testing.assert_array_equal(held.topology.local_indices, whole.indices[rows])
            np.testing.assert_array_equal(held.topology.local_indptr, whole.indptr[lo:hi + 1] - whole.indptr[lo])


def test_a_worker_count_that_does_not_divide_the_parts_names_the_counts_that_do(written):
    with pytest.raises(ValueError, match=r"has 4 parts, which 3 workers cannot share equally .* launch 1, 2, 4 "
                                         r"workers, or repartition with gnnscale partition --parts 3"):
        load_partition(written, 0, workers=3)
    with pytest.raises(ValueError, match=r"part: expected an int in \[0, workers = 2\), got 2"):
        load_partition(written, 2, workers=2)
    with pytest.raises(ValueError, match="workers: expected an int >= 1, got 0"):
        load_partition(written, 0, workers=0)


def test_manifest_records_every_file_and_the_summary(written):
    manifest = read_manifest(written)
    on_disk = sorted(p.relative_to(written).as_posix() for p in written.rglob("*.npy"))
    assert sorted(manifest["files"]) == on_disk and len(on_disk) == 3 + 4 * 7
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((written / rel).read_bytes()).hexdigest() == digest, rel
    assert manifest["method"] == "metis" and manifest["num_parts"] == 4 and manifest["num_nodes"] == 3000
    assert 0 < manifest["edge_cut_fraction"] < 0.4 and manifest["balance"]["nodes"] == 1.0
    assert manifest["balance"]["train_nodes"] <= 1.01 and sum(manifest["edges"]) == manifest["num_edges"]


def test_writing_is_deterministic_and_reads_memory_mapped_features(ds, written, tmp_path):
    mapped = load_dataset_dir(save_dataset(ds, tmp_path / "ds"))
    assert isinstance(mapped.features, np.memmap)
    again = tmp_path / "again"
    write_partition_dir(mapped, 4, "metis", again, seed=0)
    assert read_manifest(again)["files"] == read_manifest(written)["files"]


def test_flipped_byte_is_reported_as_corrupt(damaged):
    path = damaged / "part1" / "features.npy"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="part1/features.npy: file is corrupt"):
        load_partition(damaged, 1, "own")
    load_partition(damaged, 0, "own")  # other parts do not read it
    load_partition(damaged, 1, "own", verify=False)  # same shape: only the checksum can tell


def test_corrupt_topology_fails_hybrid_only(damaged):
    path = damaged / "topology" / "indices.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="topology/indices.npy: file is corrupt"):
        load_partition(damaged, 2, "whole")
    assert load_partition(damaged, 2, "own").view == "own"


@pytest.mark.parametrize("rel", ["part3/labels.npy", "part3/indices.npy", "topology/indptr.npy",
                                 "part3/test_idx.npy"])
def test_missing_file_is_named(damaged, rel):
    (damaged / rel).unlink()
    view = "whole" if rel.startswith("topology") else "own"
    with pytest.raises(ValueError, match=f"{rel}: missing file"):
        load_partition(damaged, 3, view)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda m: m.update(format_version=2), "manifest.json: expected format_version 1, got 2"),
    (lambda m: m.update(kind="dataset"), "expected kind 'partition'"),
    (lambda m: m["files"].pop("part0/labels.npy"), "no sha256 recorded for part0/labels.npy"),
    (lambda m: m.update(offsets=[0, 5, 3, 2000, 3000]), "offsets must rise"),
    (lambda m: m.update(num_nodes=2999), "offsets must rise from 0 to num_nodes"),
])
def test_bad_manifest_is_named(damaged, edit, match):
    manifest = json.loads((damaged / "manifest.json").read_text())
    edit(manifest)
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=match):
        load_partition(damaged, 0, "own")


def test_bad_load_arguments(written, tmp_path):
    with pytest.raises(ValueError, match="part: expected an int in \\[0, num_parts = 4\\), got 4"):
        load_partition(written, 4)
    with pytest.raises(ValueError, match="part: .* got -1"):
        load_partition(written, -1)
    with pytest.raises(ValueError, match="view: expected one of whole, own, got 'both'"):
        load_partition(written, 0, "both")
    with pytest.raises(ValueError, match="directory: expected a partition directory"):
        load_partition(tmp_path / "absent", 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty/manifest.json: missing manifest.json"):
        load_partition(tmp_path / "empty", 0)


def test_existing_directory_needs_overwrite(ds, written, tmp_path):
    with pytest.raises(ValueError, match="out_dir: .* already exists"):
        write_partition_dir(ds, 2, "random", written)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="out_dir: .* is a file, not a folder"):
        write_partition_dir(ds, 2, "random", tmp_path / "file" / "b")
    with pytest.raises(ValueError, match="method"):
        write_partition_dir(ds, 2, "spectral", tmp_path / "c")
    assert not (tmp_path / "c").exists()
    copy = Path(shutil.copytree(written, tmp_path / "copy"))
    write_partition_dir(ds, 2, "random", copy, overwrite=True)
    assert read_manifest(copy)["num_parts"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "file"], "staging or old directories left behind"


@pytest.mark.slow
def test_killed_write_is_never_taken_for_a_partition(tmp_path):
    # The child dies (os._exit: no cleanup, like SIGKILL) in the middle of writing part 1.
    target = tmp_path / "parts"
    script = f"""
import os
from gnnscale.partition import directory
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
ds = make_synthetic(SyntheticConfig(num_nodes=400, avg_degree=4.0, feature_dim=4))
real, count = directory._write_npy, [0]
def dying_write(path, array):
    count[0] += 1
    if count[0] == 12:
        os._exit(9)
    return real(path, array)
directory._write_npy = dying_write
directory.write_partition_dir(ds, 2, "metis", {str(target)!r})
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120)
    assert result.returncode == 9, result.stderr.decode()
    assert not target.exists()
    leftovers = list(tmp_path.iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".parts.tmp-")
    assert (leftovers[0] / "part0" / "features.npy").is_file()  # it did die half-way
    with pytest.raises(ValueError, match="directory: expected a partition directory"):
        load_partition(target, 0)
    with pytest.raises(ValueError, match="missing manifest.json"):
        load_partition(leftovers[0], 0)


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_partition_writes_a_loadable_directory(tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["partition", "--dataset", "synthetic", "-o", "num_nodes=600", "-o", "feature_dim=4", "--parts", "3",
            "--method", "metis", "--out", str(out), "--seed", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "edge cut" in printed and "balance" in printed
    manifest = read_manifest(out)
    assert (manifest["num_parts"], manifest["method"], manifest["seed"]) == (3, "metis", 2)
    assert load_partition(out, 2, "own").features.shape[0] == 200
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"gnnscale partition: error: --out: {out} already exists; pass --overwrite to replace it, or choose " \
                  "another --out\n"
    # Checked before the dataset is loaded (a large one takes minutes): a dataset that cannot load is not reached.
    assert main(["partition", "--dataset", "npz", "--data-dir", str(tmp_path / "absent.npz"), "--parts", "2",
                 "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--method", "random"]) == 0


@pytest.mark.parametrize(("extra", "message"), [
    (["--parts", "0"], "--parts: expected an int in [1, num_nodes = 300], got 0"),
    (["--parts", "2", "--method", "kway"], "method"),
])
def test_cli_partition_bad_input_is_one_clear_line(tmp_path, capsys, extra, message):
    argv = ["partition", "-o", "num_nodes=300", "--out", str(tmp_path / "p"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gnnscale partition: error:") and message in err and err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize("method", ["random", "kaminpar"])
def test_a_full_disk_names_where_the_write_went_and_leaves_nothing(tmp_path, method):
    # 300 nodes of 64 features: the features (77 kB) pass the limit, and with kaminpar the temporary
    # ParHIP file of the symmetric graph (about 50 kB) does first.
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out" / "parts"
    argv = ["partition", "--dataset", "synthetic", "-o", "num_nodes=300", "-o", "feature_dim=64", "--parts", "2",
            "--method", method, "--out", str(out)]
    run = subprocess.run([sys.executable, "-c", FULL_DISK, *argv], capture_output=True, text=True, cwd=REPO,
                         timeout=600, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("gnnscale partition: error: [Errno 27] "), run.stderr  # EFBIG; a full disk: ENOSPC
    if method == "kaminpar":
        assert (f"{tmp_path / 'tmp'}: could not write KaMinPar's temporary graph files (File too large); the "
                "symmetric graph takes up to") in run.stderr and "set TMPDIR to a folder with room" in run.stderr
    else:
        assert f"{out}: could not write the partition directory (File too large); nothing was left" in run.stderr
    assert list((tmp_path / "tmp").iterdir()) == [] and list((tmp_path / "out").iterdir()) == []
