"""KaMinPar partitioning: the ParHIP file written by streaming, the method's balance and cut, its CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gnnscale.cli import main
from gnnscale.graph.csc import CSCGraph, csc_from_coo
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import assign_parts, load_partition, parhip, read_manifest, write_partition_dir
from gnnscale.partition.kaminpar_parts import kaminpar_parts
from gnnscale.partition.parhip import open_parhip, temporary_parhip, write_parhip
from launch import ENV, LAUNCH_TIMEOUT_S, torchrun
from test_partition import SMALL, cut_fraction

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds():
    return make_synthetic(SMALL)


def read_parhip(path: Path) -> tuple[int, list[list[int]]]:
    """(n, rows) of an unweighted ParHIP file with 32-bit ids (version 3 | 8: no weights, 64-bit offsets),
    parsed from the format's description (not the library's reader)."""
    data = Path(path).read_bytes()
    version, n, m = np.frombuffer(data[:24], dtype="<u8").tolist()
    assert version == 11
    offsets = np.frombuffer(data[24:24 + 8 * (n + 1)], dtype="<u8").astype(np.int64)
    assert offsets[0] == 24 + 8 * (n + 1) and offsets[-1] == len(data) and offsets[-1] - offsets[0] == 4 * m
    rows = [np.frombuffer(data[offsets[v]:offsets[v + 1]], dtype="<u4").tolist() for v in range(n)]
    return n, rows


def scipy_symmetric_rows(graph: CSCGraph) -> list[list[int]]:
    """Sorted neighbor lists of the undirected graph without self loops or repeats, by scipy."""
    n = graph.num_nodes
    dst = np.repeat(np.arange(n), graph.in_degrees())
    a = sp.coo_matrix((np.ones(dst.shape[0]), (graph.indices.astype(np.int64), dst)), shape=(n, n)).tocsr()
    s = (a + a.T).tolil()
    s.setdiag(0)
    s = s.tocsr()
    s.eliminate_zeros()
    s.sort_indices()
    return [s.indices[s.indptr[v]:s.indptr[v + 1]].tolist() for v in range(n)]


# --- the ParHIP file -----------------------------------------------------------------------------


# The tiny graph of conftest.py (src -> dst), undirected: 0-1 0-2 0-3 1-2 1-3 1-4 2-4, 5 isolated, so
# the file's rows are 0: [1, 2, 3]  1: [0, 2, 3, 4]  2: [0, 1, 4]  3: [0, 1]  4: [1, 2]  5: [].
def test_tiny_graph_file_is_the_drawn_adjacency(tiny_graph, tmp_path):
    xadj = write_parhip(tiny_graph, tmp_path / "g.parhip", chunk_entries=2)
    assert read_parhip(tmp_path / "g.parhip") == (6, [[1, 2, 3], [0, 2, 3, 4], [0, 1, 4], [0, 1], [1, 2], []])
    assert xadj.tolist() == [0, 3, 7, 10, 12, 14, 14]


@pytest.mark.parametrize("chunk_entries", [1, 7, 1000])
def test_streamed_file_equals_the_one_piece_file_and_the_symmetric_adjacency(random_graph, tmp_path, chunk_entries):
    # random_graph has self loops, repeated edges and both directions of some edges: all must go.
    whole, streamed = tmp_path / "whole.parhip", tmp_path / "streamed.parhip"
    write_parhip(random_graph, whole, chunk_entries=10**9)
    write_parhip(random_graph, streamed, chunk_entries=chunk_entries)
    assert streamed.read_bytes() == whole.read_bytes()
    n, rows = read_parhip(streamed)
    assert n == random_graph.num_nodes and rows == scipy_symmetric_rows(random_graph)
    xadj, adjncy = open_parhip(streamed)  # the library's reader (used by the balancing pass) agrees
    assert [adjncy[xadj[v]:xadj[v + 1]].tolist() for v in range(n)] == rows


@pytest.mark.parametrize("compress", [False, True])
def test_kaminpar_reads_the_32_bit_file_as_written(random_graph, tmp_path, compress):
    kaminpar = pytest.importorskip("kaminpar")
    write_parhip(random_graph, tmp_path / "g.parhip")
    n, rows = read_parhip(tmp_path / "g.parhip")
    graph = kaminpar.load_graph(str(tmp_path / "g.parhip"), kaminpar.GraphFileFormat.PARHIP, compress=compress)
    # (A compressed graph lists runs of consecutive ids first: compared as sets.)
    assert graph.n() == n and [sorted(u for u, _ in graph.neighbors(v)) for v in range(n)] == rows


def test_a_partial_or_foreign_file_is_refused_naming_it(random_graph, tmp_path):
    path = tmp_path / "g.parhip"
    write_parhip(random_graph, path)
    data = path.read_bytes()
    path.write_bytes(data[:-4])  # one id short
    with pytest.raises(ValueError, match=r"g\.parhip is shorter .* a partial file"):
        open_parhip(path)
    path.write_bytes(np.array([4 | 3], "<u8").tobytes() + data[8:])  # 32-bit offsets: not what is written here
    with pytest.raises(ValueError, match=r"g\.parhip is not an unweighted ParHIP file with 64-bit offsets"):
        open_parhip(path)


def symmetric_multigraph(idx_dtype) -> CSCGraph:
    """400 nodes, both directions of every edge, with self loops and edges repeated in both directions."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 400, size=3000), rng.integers(0, 400, size=3000)
    src, dst = np.concatenate([src, src[:200], np.arange(20)]), np.concatenate([dst, dst[:200], np.arange(20)])
    graph = csc_from_coo(src, dst, 400, symmetrize=True, remove_duplicates=False)
    return CSCGraph(indptr=graph.indptr, indices=graph.indices.astype(idx_dtype), num_nodes=400)


@pytest.mark.parametrize("chunk_entries", [1, 7, 1000])
def test_symmetric_graph_file_is_its_columns_and_the_general_paths_bytes(idx_dtype, tmp_path, monkeypatch,
                                                                          chunk_entries):
    graph = symmetric_multigraph(idx_dtype)
    assert parhip.is_symmetric(graph, 2 * graph.in_degrees(), chunk_entries=chunk_entries)
    fast = tmp_path / "fast.parhip"
    write_parhip(graph, fast, chunk_entries=chunk_entries)
    assert read_parhip(fast) == (400, scipy_symmetric_rows(graph))
    monkeypatch.setattr(parhip, "is_symmetric", lambda *_, **__: False)  # the scan for out-neighbors instead
    write_parhip(graph, tmp_path / "general.parhip", chunk_entries=chunk_entries)
    assert fast.read_bytes() == (tmp_path / "general.parhip").read_bytes()


def test_asymmetric_graphs_with_equal_degrees_are_told_apart(idx_dtype):
    # Every node has in-degree = out-degree in both, so only the hash of the edges can tell.
    cycle = csc_from_coo(np.array([0, 1, 2]), np.array([1, 2, 0]), 3)
    both = csc_from_coo(np.array([0, 1, 1, 2, 2, 0]), np.array([1, 0, 2, 1, 0, 2]), 3)
    for graph, expected in ((cycle, False), (both, True)):
        graph = CSCGraph(indptr=graph.indptr, indices=graph.indices.astype(idx_dtype), num_nodes=3)
        degree = graph.in_degrees() + np.bincount(graph.indices, minlength=3)
        assert parhip.is_symmetric(graph, degree) is expected
    # A repeated edge whose reverse is there once: the multisets differ, the degrees too.
    repeated = csc_from_coo(np.array([0, 0, 1]), np.array([1, 1, 0]), 2, remove_duplicates=False)
    assert not parhip.is_symmetric(repeated, repeated.in_degrees() + np.bincount(repeated.indices, minlength=2))


def test_streamed_file_reads_a_memory_mapped_graph(random_graph, tmp_path):
    np.save(tmp_path / "indices.npy", random_graph.indices)
    mapped = CSCGraph(indptr=random_graph.indptr, indices=np.load(tmp_path / "indices.npy", mmap_mode="r"),
                      num_nodes=random_graph.num_nodes)
    write_parhip(mapped, tmp_path / "a.parhip", chunk_entries=500)
    write_parhip(random_graph, tmp_path / "b.parhip")
    assert (tmp_path / "a.parhip").read_bytes() == (tmp_path / "b.parhip").read_bytes()


# A fresh interpreter writes the ParHIP file of a memory-mapped dataset graph (after a warm-up on a
# tiny one: numba compiles per argument type) and prints how far its peak resident size (VmHWM) grew
# over its resident size before the call: the mapped pages of the graph count, as in a run's peak RSS.
MEASURE_WRITE = """
import json, sys
import numpy as np
from gnnscale.graph import csc
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.pages import release_pages
from gnnscale.partition.parhip import write_parhip
folder, chunk = sys.argv[1], int(sys.argv[2])
csc.ID_CHUNK = chunk  # the id check's pieces: the file is 8 to 16 of them
def graph(name):
    indptr = np.load(f"{folder}/{name}_indptr.npy", mmap_mode="r")
    return CSCGraph(indptr=indptr, indices=np.load(f"{folder}/{name}_indices.npy", mmap_mode="r"),
                    num_nodes=indptr.shape[0] - 1)
def growth(step):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    base = int(open("/proc/self/statm").read().split()[1]) * 4096
    result = step()
    peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    return result, peak - base
write_parhip(graph("warm"), f"{folder}/warm.parhip", chunk_entries=chunk)
big, load = growth(lambda: graph("big"))  # the graph's validation reads every id
release_pages(big.indices)  # whatever the load left mapped is not the write's
_, write = growth(lambda: write_parhip(big, f"{folder}/big.parhip", chunk_entries=chunk))
print(json.dumps({"load": load, "write": write}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("symmetric", [True, False])
def test_writing_the_file_holds_a_chunk_and_arrays_per_node_not_the_edges(tmp_path, symmetric):
    rng = np.random.default_rng(0)
    n, m = 50_000, 8_000_000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    for name, g in (("big", csc_from_coo(src, dst, n, symmetrize=symmetric)),
                    ("warm", csc_from_coo(np.array([0, 1]), np.array([1, 2]), 3, symmetrize=symmetric))):
        np.save(tmp_path / f"{name}_indptr.npy", g.indptr)
        np.save(tmp_path / f"{name}_indices.npy", g.indices)
    file_bytes = (tmp_path / "big_indices.npy").stat().st_size  # int32: 32 MB, or 64 MB symmetrised
    chunk = 1 << 18
    run = subprocess.run([sys.executable, "-c", MEASURE_WRITE, str(tmp_path), str(chunk)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr
    growth = json.loads(run.stdout.strip().splitlines()[-1])
    # Per node: a few int64 arrays (degrees, ranges, xadj, offsets); the staging of one range (8 bytes,
    # twice for the scattered out-neighbors) and the pages of one chunk of the graph; 8 MB of slack.
    # Measured (symmetric, asymmetric graph): the write grew 7.0 and 10.1 MB, the load 4.5 MB; with the
    # code before the pages were handed back in the degree count, the symmetry check, the out-neighbor
    # scan and the id check: 66.9 and 35.1 MB, the load 64.3 and 32.5 MB (the whole file).
    bound = 6 * 8 * n + 3 * 8 * chunk + 8 * chunk + (8 << 20)
    assert growth["write"] <= bound < file_bytes, (growth, bound, file_bytes)
    # Loading checks every id a chunk at a time, holding at most one chunk's pages (4 bytes an id).
    assert growth["load"] <= 4 * chunk + (8 << 20) < file_bytes / 2, (growth, file_bytes)


def test_temporary_file_is_removed_also_on_error(tiny_graph):
    with pytest.raises(RuntimeError, match="inside"):
        with temporary_parhip(tiny_graph) as (path, _, _):
            assert path.is_file()
            raise RuntimeError("inside")
    assert not path.parent.exists()


def test_bad_chunk_size_is_named(tiny_graph, tmp_path):
    with pytest.raises(ValueError, match="chunk_entries: expected an int >= 1, got 0"):
        write_parhip(tiny_graph, tmp_path / "g.parhip", chunk_entries=0)


# --- the method ----------------------------------------------------------------------------------
# (Balance, cut, same seed same parts, the edge cases and the argument checks: test_partition.py, over
# every method.)


def test_two_threads_give_a_balanced_partition_too(ds):
    part = assign_parts(ds.graph, 4, "kaminpar", train_idx=ds.train_idx, seed=0, threads=2)
    assert np.ptp(np.bincount(part[ds.train_idx])) <= 1 and np.ptp(np.bincount(part)) <= 1


def test_compressed_graph_and_terapart_context_give_a_valid_partition(ds):
    # What --method kaminpar does above COMPRESS_ABOVE_EDGES, forced here on a small graph.
    with temporary_parhip(ds.graph) as (path, xadj, _):
        part = kaminpar_parts(path, ds.graph.num_nodes, int(xadj[-1]), 4, seed=0, threads=2, compress=True)
    counts = np.bincount(part, minlength=4)
    assert part.shape == (ds.graph.num_nodes,) and counts.min() > 0
    assert counts.max() <= 1.03 * ds.graph.num_nodes / 4 + 1  # KaMinPar's own balance, before the exact pass
    assert cut_fraction(ds.graph, part) < 0.4


# --- directory, CLI, training --------------------------------------------------------------------


def test_cli_kaminpar_directory_records_the_method_and_loads(tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["partition", "-o", "num_nodes=600", "-o", "feature_dim=4", "--parts", "3", "--method", "kaminpar",
            "--threads", "2", "--out", str(out)]
    assert main(argv) == 0
    assert "kaminpar, 3 parts: edge cut" in capsys.readouterr().out
    manifest = read_manifest(out)
    assert manifest["method"] == "kaminpar" and np.ptp(manifest["split_sizes"]["train_idx"]) <= 1
    assert sum(load_partition(out, p, "own").features.shape[0] for p in range(3)) == 600


def test_cli_bad_threads_is_one_line_naming_the_flag(tmp_path, capsys):
    argv = ["partition", "-o", "num_nodes=300", "--parts", "2", "--method", "kaminpar", "--threads", "0",
            "--out", str(tmp_path / "p")]
    assert main(argv) == 2
    assert capsys.readouterr().err == "gnnscale partition: error: --threads: expected an int >= 1, got 0\n"


@pytest.mark.slow
def test_missing_kaminpar_is_one_line_saying_how_to_install(tmp_path):
    # A kaminpar package that fails to import, found first on the path: what a broken or absent install does.
    fake = tmp_path / "site" / "kaminpar"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no kaminpar here')\n")
    env = {**ENV, "PYTHONPATH": f"{tmp_path / 'site'}:{REPO}"}
    cmd = [sys.executable, "-m", "gnnscale", "partition", "-o", "num_nodes=300", "--parts", "2", "--method",
           "kaminpar", "--out", str(tmp_path / "p")]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("gnnscale partition: error: method: kaminpar needs the kaminpar package: "
                          "pip install 'kaminpar>=3.7'\n")
    assert not (tmp_path / "p").exists()


# Slow tier: a launch is seconds to a minute on a busy machine, and what it would catch is covered in the
# default tier: a kaminpar directory is the format every method writes, each part loaded above
# (test_cli_kaminpar_directory_records_the_method_and_loads), and the launches of
# tests/train/test_distributed_train.py train on such directories (METIS-written).
@pytest.mark.slow
def test_kaminpar_partition_trains_under_torchrun(tmp_path):
    ds = make_synthetic(SyntheticConfig(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5))
    write_partition_dir(ds, 2, "kaminpar", tmp_path / "p2", seed=0)
    cmd = torchrun(2, "--partitions", str(tmp_path / "p2"), "--layout", "vanilla", "--fanouts", "4,3", "--hidden",
                   "16", "--batch-size", "64", "--epochs", "1", "--threads", "1", "--no-eval")
    run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=REPO, timeout=LAUNCH_TIMEOUT_S)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "epoch" in run.stdout
