"""The dataset directory format: atomic writes, memory-mapped loads, and errors that name the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnscale.graph import storage
from gnnscale.graph.storage import DATASET_ARRAYS, load_dataset_dir, load_graph, save_dataset, save_graph
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds():
    return make_synthetic(SyntheticConfig(num_nodes=1000, avg_degree=6.0, num_classes=4, feature_dim=7))


@pytest.fixture
def saved(tmp_path, ds) -> Path:
    return save_dataset(ds, tmp_path / "ds")


def assert_same(a, b) -> None:
    assert (a.name, a.num_classes) == (b.name, b.num_classes)
    for field in ("features", "labels", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        assert getattr(a, field).dtype == getattr(b, field).dtype
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    assert a.graph.indices.dtype == b.graph.indices.dtype


def test_round_trip_is_memory_mapped(saved, ds):
    assert sorted(p.name for p in saved.iterdir()) == sorted([f"{s}.npy" for s in DATASET_ARRAYS] + ["meta.json"])
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["num_nodes"] == 1000 and meta["num_edges"] == ds.graph.num_edges and meta["feature_dim"] == 7
    assert meta["dtypes"]["indices"] == np.dtype(np.int32).str
    loaded = load_dataset_dir(saved)
    assert_same(loaded, ds)
    for arr in (loaded.features, loaded.labels, loaded.graph.indptr, loaded.graph.indices, loaded.train_idx):
        assert isinstance(arr, np.memmap) and not arr.flags.writeable
    in_memory = load_dataset_dir(saved, mmap=False)
    assert not isinstance(in_memory.features, np.memmap)
    assert_same(in_memory, ds)


def test_save_from_a_memory_mapped_dataset(saved, tmp_path, ds):
    again = save_dataset(load_dataset_dir(saved), tmp_path / "copy")
    assert_same(load_dataset_dir(again), ds)


def test_existing_directory_needs_overwrite(saved, ds):
    with pytest.raises(ValueError, match="directory: .* already exists"):
        save_dataset(ds, saved)
    smaller = make_synthetic(SyntheticConfig(num_nodes=200, avg_degree=4.0))
    save_dataset(smaller, saved, overwrite=True)
    assert_same(load_dataset_dir(saved), smaller)
    assert [p.name for p in saved.parent.iterdir()] == ["ds"], "staging or old directories left behind"


def test_failed_write_leaves_nothing(tmp_path, ds, monkeypatch):
    calls = []

    def failing_save(f, arr, allow_pickle):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=allow_pickle)

    monkeypatch.setattr("gnnscale.graph.storage.np.save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_dataset(ds, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_killed_write_leaves_no_directory_under_the_target_name(tmp_path):
    # The child dies (os._exit: no cleanup, like SIGKILL) after writing two arrays.
    script = f"""
import os, numpy as np
from gnnscale.graph import storage
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
ds = make_synthetic(SyntheticConfig(num_nodes=300, avg_degree=4.0))
real, count = np.save, [0]
def dying_save(f, arr, allow_pickle):
    count[0] += 1
    if count[0] == 3:
        os._exit(9)
    real(f, arr, allow_pickle=allow_pickle)
storage.np.save = dying_save
storage.save_dataset(ds, {str(tmp_path / 'ds')!r})
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=60)
    assert result.returncode == 9, result.stderr.decode()
    assert not (tmp_path / "ds").exists()
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".ds.tmp-")
    with pytest.raises(ValueError, match="directory"):
        load_dataset_dir(tmp_path / "ds")
    # The next write to the same target removes what the dead process left; another machine's staging
    # folder (a shared file system) and a live process's are kept.
    foreign = tmp_path / ".ds.tmp-otherhost-1-0123456789ab"
    live = tmp_path / f".ds.tmp-{storage._host()}-{os.getpid()}-0123456789ab"
    foreign.mkdir(), live.mkdir()
    save_dataset(make_synthetic(SyntheticConfig(num_nodes=300, avg_degree=4.0)), tmp_path / "ds")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ds", foreign.name, live.name])
    load_dataset_dir(tmp_path / "ds")


@pytest.mark.parametrize("stem", DATASET_ARRAYS)
def test_missing_array_file_is_named(saved, stem):
    (saved / f"{stem}.npy").unlink()
    with pytest.raises(ValueError, match=f"{stem}.npy: missing"):
        load_dataset_dir(saved)


def test_missing_or_corrupt_meta_is_named(saved):
    (saved / "meta.json").write_text('{"format_version": 1, "kind": "dataset", "num_nod')
    with pytest.raises(ValueError, match="meta.json: corrupt"):
        load_dataset_dir(saved)
    (saved / "meta.json").unlink()
    with pytest.raises(ValueError, match="meta.json: missing"):
        load_dataset_dir(saved)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.update(num_nodes=999), "indptr.npy: expected shape \\[1000\\]"),
        (lambda m: m.update(num_edges=1), "indices.npy: expected shape"),
        (lambda m: m["dtypes"].update(labels="<i4"), "labels.npy: dtype <i8 disagrees"),
        (lambda m: m["shapes"].update(val_idx=[3]), "val_idx.npy: shape .* disagrees"),
        (lambda m: m.update(format_version=99), "meta.json: expected format_version 1"),
        (lambda m: m.pop("num_classes"), "meta.json: missing key 'num_classes'"),
        (lambda m: m.update(kind="graph"), "meta.json: expected kind 'dataset'"),
    ],
)
def test_meta_that_disagrees_with_arrays(saved, edit, match):
    meta = json.loads((saved / "meta.json").read_text())
    edit(meta)
    (saved / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=match):
        load_dataset_dir(saved)


def test_wrong_or_truncated_array_file_is_named(saved, ds):
    np.save(saved / "labels.npy", ds.labels.astype(np.int32))
    with pytest.raises(ValueError, match="labels.npy: dtype <i4 disagrees"):
        load_dataset_dir(saved)
    data = (saved / "features.npy").read_bytes()
    (saved / "features.npy").write_bytes(data[: len(data) // 2])
    for mmap in (True, False):
        with pytest.raises(ValueError, match="features.npy: unreadable or truncated"):
            load_dataset_dir(saved, mmap=mmap)


def test_arrays_that_are_not_a_dataset(saved):
    indices = np.load(saved / "indices.npy")
    indices[0] = 5000  # out of range, same dtype and shape
    np.save(saved / "indices.npy", indices)
    with pytest.raises(ValueError, match="indices: node ids must lie in"):
        load_dataset_dir(saved)


def test_graph_round_trip(tmp_path, ds, saved):
    path = save_graph(ds.graph, tmp_path / "g")
    graph = load_graph(path)
    np.testing.assert_array_equal(graph.indices, ds.graph.indices)
    assert isinstance(graph.indptr, np.memmap) and graph.num_nodes == 1000
    np.testing.assert_array_equal(load_graph(saved).indptr, ds.graph.indptr)  # a dataset dir holds a graph
    with pytest.raises(ValueError, match="kind 'dataset', got 'graph'"):
        load_dataset_dir(path)
    with pytest.raises(TypeError, match="graph"):
        save_graph(ds, tmp_path / "x")


def test_bad_arguments(tmp_path, ds):
    with pytest.raises(ValueError, match="directory"):
        load_dataset_dir(tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="directory: .* is a file, not a folder"):
        save_dataset(ds, tmp_path / "file" / "b")
    save_dataset(ds, tmp_path / "a" / "b")  # missing parent folders are created
    assert load_dataset_dir(tmp_path / "a" / "b").graph.num_nodes == ds.graph.num_nodes
    with pytest.raises(TypeError, match="ds: expected a NodeDataset"):
        save_dataset(ds.graph, tmp_path / "c")
