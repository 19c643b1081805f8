"""The partition directory written by streaming: the same bytes as the in-memory relabelling, in memory
bounded by a chunk and a few per-node arrays."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.storage import load_dataset_dir, save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import assign_parts, read_manifest, relabel, summarize, write_partition_dir
from test_partition import METHODS

REPO = Path(__file__).resolve().parents[2]
SMALL = SyntheticConfig(num_nodes=2000, avg_degree=9.0, num_classes=4, feature_dim=6, train_fraction=0.3,
                        val_fraction=0.2, test_fraction=0.3, seed=3)
SPLITS = ("train_idx", "val_idx", "test_idx")


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def read_tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ds() -> NodeDataset:
    return make_synthetic(SMALL)


@pytest.mark.parametrize("method", METHODS)
def test_streamed_directory_is_the_in_memory_relabelling_byte_for_byte(ds, tmp_path, method):
    # Memory-mapped input and 7 edges per step (hundreds of steps, rows split across them) against the
    # whole graph relabelled in memory, each array saved by np.save.
    mapped = load_dataset_dir(save_dataset(ds, tmp_path / "ds"))
    write_partition_dir(mapped, 3, method, tmp_path / "streamed", seed=2, chunk_edges=7)
    write_partition_dir(ds, 3, method, tmp_path / "default", seed=2)
    streamed = read_tree(tmp_path / "streamed")
    assert streamed == read_tree(tmp_path / "default")  # manifest included: the chunk changes nothing

    r = relabel(ds.graph, assign_parts(ds.graph, 3, method, train_idx=ds.train_idx, seed=2), 3)
    splits = {name: r.map_ids(getattr(ds, name)) for name in SPLITS}
    expected = {"new_to_old.npy": r.new_to_old, "topology/indptr.npy": r.graph.indptr,
                "topology/indices.npy": r.graph.indices}
    for p in range(3):
        lo, hi = r.book.node_range(p)
        rows = r.new_to_old[lo:hi]
        expected.update({f"part{p}/features.npy": ds.features[rows], f"part{p}/labels.npy": ds.labels[rows],
                         f"part{p}/indptr.npy": r.graph.indptr[lo:hi + 1] - r.graph.indptr[lo],
                         f"part{p}/indices.npy": r.graph.indices[r.graph.indptr[lo]:r.graph.indptr[hi]]})
        for name, ids in splits.items():
            expected[f"part{p}/{name}.npy"] = ids[(ids >= lo) & (ids < hi)]
    assert sorted(streamed) == sorted([*expected, "manifest.json"])
    for rel, array in expected.items():
        assert streamed[rel] == npy_bytes(array), rel
    manifest = read_manifest(tmp_path / "streamed")
    summary = summarize(r, splits["train_idx"], method).to_dict()
    assert {key: manifest[key] for key in summary} == json.loads(json.dumps(summary))
    assert manifest["edge_cut"] > 0


def test_a_node_with_more_in_edges_than_a_chunk_is_relabelled_alone(tmp_path):
    # Node 0 has 40 in-edges, the chunk is 3: its row goes through in one step, never split.
    #   0 <- 1..40,  k <- 0 for k = 1..40
    n = 41
    indptr = np.concatenate([[0, 40], 40 + np.arange(1, n)]).astype(np.int64)
    indices = np.concatenate([np.arange(1, n), np.zeros(n - 1)]).astype(np.int32)
    graph = CSCGraph(indptr=indptr, indices=indices, num_nodes=n)
    data = NodeDataset(name="star", graph=graph, features=np.ones((n, 2), np.float32), labels=np.zeros(n, np.int64),
                       train_idx=np.arange(0, n, 2, dtype=np.int64), val_idx=np.empty(0, np.int64),
                       test_idx=np.empty(0, np.int64), num_classes=1)
    write_partition_dir(data, 2, "random", tmp_path / "a", chunk_edges=3)
    write_partition_dir(data, 2, "random", tmp_path / "b")
    assert read_tree(tmp_path / "a") == read_tree(tmp_path / "b")
    assert read_manifest(tmp_path / "a")["edge_cut"] == relabel_cut(graph, tmp_path / "a")


def relabel_cut(graph: CSCGraph, directory: Path) -> int:
    """Edges whose ends lie in different parts, counted from the directory's own files."""
    manifest = read_manifest(directory)
    new_to_old = np.load(directory / "new_to_old.npy")
    part_of_new = np.searchsorted(manifest["offsets"], np.arange(graph.num_nodes), side="right") - 1
    part_of_old = np.empty(graph.num_nodes, dtype=np.int64)
    part_of_old[new_to_old] = part_of_new
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    return int(np.count_nonzero(part_of_old[dst] != part_of_old[graph.indices]))


@pytest.mark.parametrize("chunk", [0, -1, 2.5, True])
def test_bad_chunk_edges_is_named(ds, tmp_path, chunk):
    with pytest.raises(ValueError, match="chunk_edges"):
        write_partition_dir(ds, 2, "random", tmp_path / "p", chunk_edges=chunk)
    assert list(tmp_path.iterdir()) == []


# Runs in a fresh interpreter: a warm-up partition first (numba's cache, numpy's first allocations), then
# the peak of every numpy allocation (tracemalloc sees them) while partitioning a memory-mapped dataset.
MEASURE = """
import json, sys, tracemalloc
from gnnscale.graph.storage import load_dataset_dir
from gnnscale.partition import write_partition_dir
source, out, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = load_dataset_dir(source)
write_partition_dir(ds, 4, "random", out + "-warm", chunk_edges=chunk)
tracemalloc.start()
write_partition_dir(ds, 4, "random", out, chunk_edges=chunk)
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1]}))
"""
# What the bound allows: 8 int64 arrays of one entry per node (the assignment, new ids and their
# inverse, indptr and its temporaries; measured: 48 bytes per node), 16 bytes per chunk edge (the
# relabelled rows and a copy), 1 MiB for the rest (splits, a piece of features).
BYTES_PER_NODE = 64
BYTES_PER_CHUNK_EDGE = 16


@pytest.mark.slow
def test_memory_is_bounded_by_chunk_and_nodes_not_edges(tmp_path):
    # 20,000 nodes, 200 in-edges each: 4M edges, 16 MB of int32 indices (32 MB with the relabelled copy
    # the in-memory path held); the streamed path may hold 2.4 MB of per-node arrays and a 20,000-edge chunk.
    rng = np.random.default_rng(0)
    n, degree, chunk = 20_000, 200, 20_000
    indices = rng.integers(0, n, size=n * degree, dtype=np.int32)
    graph = CSCGraph(indptr=np.arange(0, n * degree + 1, degree, dtype=np.int64), indices=indices, num_nodes=n)
    data = NodeDataset(name="dense", graph=graph, features=rng.standard_normal((n, 4), dtype=np.float32),
                       labels=rng.integers(0, 3, n), train_idx=np.arange(0, n, 10, dtype=np.int64),
                       val_idx=np.empty(0, np.int64), test_idx=np.empty(0, np.int64), num_classes=3)
    save_dataset(data, tmp_path / "ds")
    del data, graph, indices
    run = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "ds"), str(tmp_path / "parts"), str(chunk)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr
    peak = json.loads(run.stdout.strip().splitlines()[-1])["peak"]
    assert peak <= BYTES_PER_NODE * n + BYTES_PER_CHUNK_EDGE * chunk + (1 << 20)
    assert peak < 4 * n * degree / 4  # far below the relabelled indices the in-memory path held
    assert (tmp_path / "parts" / "manifest.json").is_file()


def out_of_range_id(directory: Path) -> None:
    """One edge's source becomes num_nodes: a valid .npy file, a wrong graph."""
    indices = np.load(directory / "indices.npy", mmap_mode="r+")
    indices[5] = SMALL.num_nodes
    indices.flush()


def truncated_features(directory: Path) -> None:
    path = directory / "features.npy"
    os.truncate(path, path.stat().st_size - 100)


@pytest.mark.parametrize(("damage", "culprit", "message"), [
    (out_of_range_id, "indices.npy", f"node ids must lie in [0, {SMALL.num_nodes}), found {SMALL.num_nodes}"),
    (truncated_features, "features.npy", "truncated"),
])
def test_cli_partition_of_a_damaged_directory_names_the_file_and_writes_nothing(ds, tmp_path, capsys, damage,
                                                                              culprit, message):
    source = save_dataset(ds, tmp_path / "ds")
    damage(source)
    out = tmp_path / "parts"
    assert main(["partition", "--dataset", "dir", "--data-dir", str(source), "--parts", "2", "--method", "random",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gnnscale partition: error: {source / culprit}: ") and message in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no target, no staging folder
