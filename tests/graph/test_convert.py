"""gnnscale convert: edge lists (.npy files, OGB's papers100M raw archives) into the dataset directory,
byte for byte what the in-memory builders write, in memory bounded by the chunk size and the node
count, atomically, with errors that name the file."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.convert import convert_dataset, memory_bound, npy_inputs, ogb_inputs, random_split
from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.npy_stream import ZipNpy
from gnnscale.graph.ogb import load_ogb
from gnnscale.graph.storage import load_dataset_dir, load_graph, save_dataset, save_graph
from full_disk import FULL_DISK

REPO = Path(__file__).resolve().parents[2]


def read_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def random_edges(num_nodes: int, num_edges: int, seed: int) -> np.ndarray:
    """int64 [2, E] with repeats and self loops (a small graph makes both frequent)."""
    return np.random.default_rng(seed).integers(0, num_nodes, (2, num_edges))


def write_edges(folder: Path, parts: list[np.ndarray], layout: str, dtype) -> dict:
    """``parts`` ([2, E_i] each) written in ``layout``; returns npy_inputs' edge arguments."""
    folder.mkdir(exist_ok=True)
    files: dict[str, list[Path]] = {"edges": [], "src": [], "dst": []}
    for i, part in enumerate(parts):
        part = part.astype(dtype)
        if layout == "pair":
            for key, row in (("src", part[0]), ("dst", part[1])):
                files[key].append(folder / f"{key}{i}.npy")
                np.save(files[key][-1], row)
        else:
            files["edges"].append(folder / f"edges{i}.npy")
            np.save(files["edges"][-1], part if layout == "2xE" else np.ascontiguousarray(part.T))
    return files


# Three files of one graph on 300 nodes: node 299 appears in no edge (its id is the largest only in
# the features), and the files repeat each other's edges.
PARTS = [random_edges(299, 2000, 0), random_edges(299, 1500, 1), random_edges(299, 10, 0)]


@pytest.mark.parametrize("layout,dtype", [("2xE", np.int64), ("Ex2", np.int32), ("pair", np.uint16)])
@pytest.mark.parametrize("symmetrize", [False, True])
@pytest.mark.parametrize("keep_self_loops", [False, True])
def test_graph_directory_is_the_in_memory_one(tmp_path, layout, dtype, symmetrize, keep_self_loops):
    files = write_edges(tmp_path / "in", PARTS, layout, dtype)
    src, dst = np.concatenate(PARTS, axis=1)
    # Without num_nodes the graph ends at the largest id (298); with it, node 299 is isolated.
    for num_nodes in (None, 300):
        n = num_nodes or int(max(src.max(), dst.max())) + 1
        expected = tmp_path / f"memory-{n}"
        save_graph(csc_from_coo(src, dst, n, symmetrize=symmetrize, remove_self_loops=not keep_self_loops), expected)
        for chunk in (7, 10**6):  # many chunks and buckets; one of each
            out = tmp_path / f"out-{n}-{chunk}"
            summary = convert_dataset(npy_inputs(**files, num_nodes=num_nodes), out, symmetrize=symmetrize,
                                      keep_self_loops=keep_self_loops, chunk_edges=chunk)
            assert read_files(out) == read_files(expected)
            assert summary.edges_read == src.size and summary.num_nodes == n
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging folder left


def test_dataset_directory_is_the_in_memory_one(tmp_path):
    files = write_edges(tmp_path / "in", PARTS, "2xE", np.int64)
    src, dst = np.concatenate(PARTS, axis=1)
    rng = np.random.default_rng(5)
    features = rng.standard_normal((300, 6)).astype(np.float16)  # half precision in, float32 out
    labels = rng.integers(-1, 4, 300)  # -1: unlabeled
    np.save(tmp_path / "feat.npy", features)
    np.save(tmp_path / "labels.npy", labels.reshape(-1, 1))
    graph = csc_from_coo(src, dst, 300, symmetrize=True, remove_self_loops=True)

    def in_memory(splits) -> dict[str, bytes]:
        ds = NodeDataset(name="mine", graph=graph, features=features.astype(np.float32), labels=labels,
                         train_idx=splits[0], val_idx=splits[1], test_idx=splits[2], num_classes=5)
        save_dataset(ds, tmp_path / "memory", overwrite=True)
        return read_files(tmp_path / "memory")

    # A random split of the labeled nodes (--seed, --split-fractions)...
    inputs = npy_inputs(**files, features=tmp_path / "feat.npy", labels=tmp_path / "labels.npy", num_classes=5,
                        name="mine")
    convert_dataset(inputs, tmp_path / "random", symmetrize=True, chunk_edges=50, split_fractions=(0.5, 0.2, 0.1),
                    seed=3)
    splits = random_split(labels, (0.5, 0.2, 0.1), seed=3)
    assert read_files(tmp_path / "random") == in_memory(splits)
    labeled = int((labels >= 0).sum())
    assert [s.size for s in splits] == [labeled // 2, int(0.2 * labeled), int(0.1 * labeled)]
    assert np.unique(np.concatenate(splits)).size == sum(s.size for s in splits)
    # ... or split files, ids in any order.
    given = [np.flatnonzero(labels >= 0)[i::3][::-1] for i in range(3)]
    for stem, ids in zip(("train", "val", "test"), given):
        np.save(tmp_path / f"{stem}.npy", ids)
    inputs = npy_inputs(**files, features=tmp_path / "feat.npy", labels=tmp_path / "labels.npy", num_classes=5,
                        name="mine", splits=tuple(tmp_path / f"{s}.npy" for s in ("train", "val", "test")))
    convert_dataset(inputs, tmp_path / "given", symmetrize=True, chunk_edges=50)
    assert read_files(tmp_path / "given") == in_memory([np.sort(ids) for ids in given])
    assert load_dataset_dir(tmp_path / "given").num_classes == 5


def write_fake_papers100m(root: Path, *, compressed: bool, fortran: bool = False, seed: int = 0) -> dict:
    """OGB's raw layout of ogbn-papers100M, small: 500 nodes, 4,000 edges (self loops and repeats
    included), 16 features, 172 classes, labels NaN outside the splits."""
    rng = np.random.default_rng(seed)
    n = 500
    folder = root / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / "time").mkdir(parents=True)
    edge_index = rng.integers(0, n, (2, 4000))
    arrays = {"edge_index": np.asfortranarray(edge_index) if fortran else edge_index,
              "node_feat": rng.standard_normal((n, 16)).astype(np.float32),
              "num_nodes_list": np.array([n]), "num_edges_list": np.array([edge_index.shape[1]])}
    save = np.savez_compressed if compressed else np.savez
    save(folder / "raw" / "data.npz", **arrays)
    labels = np.full((n, 1), np.nan)
    order = rng.permutation(n)
    splits = {"train": order[:60], "valid": order[60:80], "test": order[80:100]}
    labels[order[:100], 0] = rng.integers(0, 172, 100)
    save(folder / "raw" / "node-label.npz", node_label=labels)
    for part, ids in splits.items():
        with gzip.open(folder / "split" / "time" / f"{part}.csv.gz", "wt") as f:
            f.write("".join(f"{i}\n" for i in ids))
    return arrays | {"labels": labels}


@pytest.mark.parametrize("compressed,fortran", [(True, False), (False, False), (True, True)])
def test_ogb_papers100m_raw_layout_round_trips(tmp_path, compressed, fortran):
    written = write_fake_papers100m(tmp_path / "ogb", compressed=compressed, fortran=fortran)
    summary = convert_dataset(ogb_inputs(tmp_path / "ogb"), tmp_path / "out", symmetrize=True, keep_self_loops=True,
                              chunk_edges=300)
    # load_ogb reads the archives whole, symmetrises and keeps self loops: the same dataset.
    save_dataset(load_ogb(tmp_path / "ogb", "ogbn-papers100M"), tmp_path / "memory")
    assert read_files(tmp_path / "out") == read_files(tmp_path / "memory")
    ds = load_dataset_dir(tmp_path / "out")
    unlabeled = np.isnan(written["labels"][:, 0])
    assert np.all(ds.labels[unlabeled] == -1) and np.all(ds.labels[~unlabeled] >= 0)  # NaN -> -1
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size, ds.num_classes) == (60, 20, 20, 172)
    assert summary.edges_read == 4000 and ds.name == "ogbn-papers100M"


class Stop(Exception):
    """Raised by :func:`stop_in`'s progress callback: an interruption (Ctrl-C, a kill) mid-phase."""


def stop_in(phase: str):
    """A ``progress(current, done, total)`` callback that raises :class:`Stop` at the second step of ``phase``."""
    def progress(current, done, total):
        if current == phase and done == 2:
            raise Stop(phase)
    return progress


def test_interrupted_run_leaves_no_directory(tmp_path):
    write_fake_papers100m(tmp_path / "ogb", compressed=True)
    for phase in ("scan", "edges", "csc", "features"):
        with pytest.raises(Stop):
            convert_dataset(ogb_inputs(tmp_path / "ogb"), tmp_path / "out", chunk_edges=300, progress=stop_in(phase))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ogb"]


def damage(path: Path, *, cut: int = 0, flip_at: float | None = None) -> None:
    """Cut ``cut`` bytes off the end of ``path``, or flip one byte at fraction ``flip_at`` of it."""
    data = bytearray(path.read_bytes())
    if flip_at is not None:
        data[int(flip_at * len(data))] ^= 0xFF
    path.write_bytes(bytes(data[:len(data) - cut]))


def bad_edge_inputs(tmp_path: Path) -> list[tuple[str, dict, str]]:
    """(case, npy_inputs arguments, the error expected, naming the file)."""
    good = random_edges(50, 200, 0)
    cases = []

    def save(name, array):
        np.save(tmp_path / name, array)
        return tmp_path / name

    negative = good.copy()
    negative[1, 37] = -4
    cases.append(("negative id", {"edges": [save("neg.npy", negative)]},
                  r"neg\.npy: edge 37: destination id -4 out of range \[0, "))
    cases.append(("id >= num_nodes", {"edges": [save("good.npy", good)], "num_nodes": 40},
                  r"good\.npy: edge \d+: source id 4\d out of range \[0, 40\) \(num_nodes 40\)"))
    save("float.npy", good.astype(np.float64))
    cases.append(("float ids", {"edges": [tmp_path / "float.npy"]},
                  r"float\.npy: node ids must be integers, got dtype float64"))
    cases.append(("lengths", {"src": [save("s.npy", good[0])], "dst": [save("d.npy", good[1, :150])]},
                  r"s\.npy, .*d\.npy: source and destination files differ in length \(200 and 150 ids\)"))
    cases.append(("shape", {"edges": [save("three.npy", np.zeros((3, 5), np.int64))]},
                  r"three\.npy: expected edges as an array \[2, E\] or \[E, 2\], got shape \[3, 5\]"))
    damage(save("cut.npy", good), cut=100)
    cases.append(("truncated npy", {"edges": [tmp_path / "cut.npy"]},
                  r"cut\.npy: not a readable \.npy file \(truncated or corrupt"))
    (tmp_path / "header.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    cases.append(("corrupt header", {"edges": [tmp_path / "header.npy"]}, r"header\.npy: not a readable \.npy file"))
    cases.append(("missing", {"edges": [tmp_path / "nowhere.npy"]}, r"nowhere\.npy: no such file"))
    return cases


def test_bad_edge_files_are_named_and_leave_no_directory(tmp_path):
    (tmp_path / "in").mkdir()
    for case, kwargs, message in bad_edge_inputs(tmp_path / "in"):
        with pytest.raises(ValueError, match=message):
            convert_dataset(npy_inputs(**kwargs), tmp_path / "out", chunk_edges=16)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in"], case


def test_damaged_archives_are_named_and_leave_no_directory(tmp_path):
    # Damage found while the features are copied, after the edges are written: the staging folder goes.
    write_fake_papers100m(tmp_path / "ogb", compressed=True)
    data = tmp_path / "ogb" / "ogbn_papers100M" / "raw" / "data.npz"
    pristine = data.read_bytes()
    for how, message in [
        (dict(flip_at=0.5), r"data\.npz \(member node_feat\): damaged archive member \(truncated or corrupt"),
        (dict(cut=200), r"data\.npz: not a readable \.npz archive \(truncated or corrupt"),
    ]:
        data.write_bytes(pristine)
        damage(data, **how)
        with pytest.raises(ValueError, match=message):
            convert_dataset(ogb_inputs(tmp_path / "ogb"), tmp_path / "out", chunk_edges=300)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ogb"]
    # A member whose data ends early (a .npy header promising more than the member holds).
    data.write_bytes(pristine)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(np.zeros((2, 9999))))
    with zipfile.ZipFile(data, "a") as archive:
        archive.writestr("short.npy", header.getvalue() + np.zeros(100).tobytes())
    with pytest.raises(ValueError, match=r"data\.npz \(member short\): truncated array"):
        list(ZipNpy(data, "short").columns(1000))
    with pytest.raises(ValueError, match=r"data\.npz: no array 'missing' in the archive"):
        ZipNpy(data, "missing")


def test_existing_target_and_bad_arguments_are_refused_before_any_work(tmp_path):
    np.save(tmp_path / "e.npy", random_edges(20, 50, 0))
    (tmp_path / "taken").mkdir()
    inputs = npy_inputs(edges=[tmp_path / "e.npy"])
    with pytest.raises(ValueError, match=r"out_dir: .*taken already exists; pass overwrite=True"):
        convert_dataset(inputs, tmp_path / "taken")
    with pytest.raises(ValueError, match=r"chunk_edges: expected an int >= 1, got 0"):
        convert_dataset(inputs, tmp_path / "x", chunk_edges=0)
    np.save(tmp_path / "f.npy", np.zeros((20, 3), np.float32))
    with pytest.raises(ValueError, match=r"features: features and labels go together"):
        npy_inputs(edges=[tmp_path / "e.npy"], features=tmp_path / "f.npy")
    with pytest.raises(ValueError, match=r"f\.npy: expected 25 rows \(num_nodes\), got 20"):
        npy_inputs(edges=[tmp_path / "e.npy"], features=tmp_path / "f.npy", labels=tmp_path / "f.npy", num_nodes=25)
    np.save(tmp_path / "l.npy", np.arange(20) % 3)
    with_nodes = npy_inputs(edges=[tmp_path / "e.npy"], features=tmp_path / "f.npy", labels=tmp_path / "l.npy")
    with pytest.raises(ValueError, match=r"split_fractions: expected 3 fractions in \[0, 1\] summing to at most 1"):
        convert_dataset(with_nodes, tmp_path / "x", split_fractions=(0.8, 0.3, 0.1))
    np.save(tmp_path / "big.npy", np.array([3, 25]))
    with pytest.raises(ValueError, match=r"big\.npy: node ids must lie in \[0, 20\), got \[3, 25\]"):
        npy_inputs(edges=[tmp_path / "e.npy"], features=tmp_path / "f.npy", labels=tmp_path / "l.npy",
                   splits=(tmp_path / "big.npy",) * 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.npy", "e.npy", "f.npy", "l.npy", "taken"]


@pytest.mark.slow
def test_a_write_that_fails_midway_leaves_no_directory(tmp_path):
    # The topology (about 12 kB of indices) fits under the limit, the features (77 kB) do not.
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "e.npy", random_edges(300, 3000, 0))
    np.save(tmp_path / "in" / "f.npy", np.zeros((300, 64), np.float32))
    np.save(tmp_path / "in" / "l.npy", np.zeros(300, np.int64))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", FULL_DISK, "convert", "--edges", str(tmp_path / "in" / "e.npy"),
                          "--features", str(tmp_path / "in" / "f.npy"), "--labels", str(tmp_path / "in" / "l.npy"),
                          "--chunk-edges", "500", "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                         timeout=600)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("gnnscale convert: error: [Errno 27] ")  # EFBIG; a full disk is ENOSPC
    assert f"{out}: could not write the directory (File too large); nothing was left" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# Runs in a fresh interpreter: warm up, then measure the peak of every Python and numpy allocation
# (tracemalloc sees them; mapped input pages are released after each chunk) during each conversion.
MEASURE = """
import json, sys, tracemalloc
from pathlib import Path
import numpy as np
from gnnscale.graph.convert import convert_dataset, npy_inputs, ogb_inputs
folder, chunk = Path(sys.argv[1]), int(sys.argv[2])
convert_dataset(npy_inputs(edges=[folder / "warm.npy"]), folder / "warm-out", chunk_edges=chunk)
peaks = {}
for case, inputs in (("npy", npy_inputs(edges=[folder / "edges.npy"], features=folder / "feat.npy",
                                         labels=folder / "labels.npy")),
                     ("ogb", ogb_inputs(folder / "ogb"))):
    tracemalloc.start()
    summary = convert_dataset(inputs, folder / f"{case}-out", symmetrize=True, chunk_edges=chunk)
    peaks[case] = {"peak": tracemalloc.get_traced_memory()[1], "nodes": summary.num_nodes,
                   "edges": summary.num_edges, "largest": summary.largest_in_degree}
    tracemalloc.stop()
print(json.dumps(peaks))
"""


@pytest.mark.slow
def test_memory_is_bounded_by_chunk_and_nodes_not_edges(tmp_path):
    # 20,000 nodes and 1.5M edges (24 MB as int64 [2, E], 48 MB of keys once symmetrised), 16 features;
    # the OGB fake: 20,000 nodes and 1M edges in a compressed archive.
    rng = np.random.default_rng(0)
    n, chunk = 20_000, 20_000
    np.save(tmp_path / "warm.npy", rng.integers(0, 100, (2, 1000)))
    np.save(tmp_path / "edges.npy", rng.integers(0, n, (2, 1_500_000)))
    np.save(tmp_path / "feat.npy", rng.standard_normal((n, 16)).astype(np.float32))
    np.save(tmp_path / "labels.npy", rng.integers(0, 10, n))
    folder = tmp_path / "ogb" / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / "time").mkdir(parents=True)
    np.savez_compressed(folder / "raw" / "data.npz", edge_index=rng.integers(0, n, (2, 1_000_000)),
                        node_feat=rng.standard_normal((n, 16)).astype(np.float32), num_nodes_list=np.array([n]))
    np.savez_compressed(folder / "raw" / "node-label.npz", node_label=rng.integers(0, 172, (n, 1)).astype(float))
    for part in ("train", "valid", "test"):
        with gzip.open(folder / "split" / "time" / f"{part}.csv.gz", "wt") as f:
            f.write("1\n2\n")
    run = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path), str(chunk)], capture_output=True, text=True,
                         cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    for case, m in measured.items():
        bound = memory_bound(m["nodes"], chunk, m["largest"])
        assert m["peak"] <= bound, (case, m, bound)
        assert bound < 8 * m["edges"] / 3, (case, m, bound)  # far below the edges' bytes


def test_cli_converts_edge_files_and_names_the_bad_one(tmp_path, capsys):
    edges = random_edges(100, 600, 0)
    np.save(tmp_path / "a.npy", edges[:, :400])
    np.save(tmp_path / "b.npy", np.ascontiguousarray(edges[:, 400:].T))
    np.save(tmp_path / "feat.npy", np.ones((100, 4), np.float32))
    np.save(tmp_path / "labels.npy", np.arange(100) % 3)
    out = tmp_path / "ds"
    assert main(["convert", "--edges", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--features",
                 str(tmp_path / "feat.npy"), "--labels", str(tmp_path / "labels.npy"), "--symmetrize",
                 "--chunk-edges", "64", "--split-fractions", "0.6,0.2,0.2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    ds = load_dataset_dir(out)
    assert (ds.graph.num_nodes, ds.num_classes, ds.train_idx.size) == (100, 3, 60)
    assert f"{ds.graph.num_edges:,} directed edges" in printed and "indices.npy" in printed
    assert main(["convert", "--edges", str(tmp_path / "a.npy"), "--out", str(out)]) == 2
    assert f"error: --out: {out} already exists; pass --overwrite" in capsys.readouterr().err
    np.save(tmp_path / "bad.npy", np.array([[0, 1], [2, 100]]))
    assert main(["convert", "--edges", str(tmp_path / "bad.npy"), "--num-nodes", "100",
                 "--out", str(tmp_path / "g")]) == 2
    assert f"error: {tmp_path / 'bad.npy'}: edge 1: destination id 100 out of range [0, 100)" in capsys.readouterr().err
    assert main(["convert", "--edges", str(tmp_path / "a.npy"), "--ogb-root", str(tmp_path),
                 "--out", str(tmp_path / "g")]) == 2
    assert "error: --ogb-root: reads its own edges, features, labels and splits" in capsys.readouterr().err
    assert main(["convert", "--edges", str(tmp_path / "a.npy"), "--features", str(tmp_path / "feat.npy"), "--labels",
                 str(tmp_path / "labels.npy"), "--train-idx", str(tmp_path / "labels.npy"), "--out", "x"]) == 2
    assert "error: --train-idx: give the three split files (train, val, test idx) together" in capsys.readouterr().err
    assert main(["convert", "--edges", str(tmp_path / "a.npy"), "--num-classes", "3", "--out", "x"]) == 2
    assert "error: --train-idx: split files and num_classes need features and labels" in capsys.readouterr().err
    # A graph directory from the edges alone.
    assert main(["convert", "--src", str(tmp_path / "labels.npy"), "--dst", str(tmp_path / "labels.npy"),
                 "--keep-self-loops", "--out", str(tmp_path / "g")]) == 0
    assert load_graph(tmp_path / "g").num_edges == 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ds", "g"]
