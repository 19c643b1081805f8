"""Dataset loaders: synthetic generator, Planetoid, OGB (fake directories), npz, and the registry."""

from __future__ import annotations

import collections
import gzip
import os
import pickle
import re
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnscale.cli import main
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.graph.npz import load_npz, save_npz
from gnnscale.graph.ogb import load_ogb
from gnnscale.graph.planetoid import UnsafePickleError, load_planetoid, restricted_loads
from gnnscale.graph.storage import save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic, products_like_config

CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data")) \
    / "cora_planetoid"
needs_cora = pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")


def coo(graph: CSCGraph) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int64 of every edge, in CSC order."""
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees())
    return graph.indices.astype(np.int64), dst


def edge_set(graph: CSCGraph) -> set[tuple[int, int]]:
    return set(zip(*(a.tolist() for a in coo(graph))))


def assert_same_dataset(a, b) -> None:
    assert a.name == b.name and a.num_classes == b.num_classes
    for field in ("features", "labels", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)


# --- synthetic -----------------------------------------------------------------------------------

SMALL = SyntheticConfig(num_nodes=4000, avg_degree=10.0, num_classes=5, feature_dim=8)


def test_synthetic_is_deterministic_by_seed():
    assert_same_dataset(make_synthetic(SMALL), make_synthetic(SMALL))
    other = make_synthetic(SyntheticConfig(num_nodes=4000, avg_degree=10.0, num_classes=5, feature_dim=8, seed=1))
    assert not np.array_equal(other.labels, make_synthetic(SMALL).labels)


def test_synthetic_graph_is_simple_undirected_with_target_degree():
    ds = make_synthetic(SMALL)
    src, dst = coo(ds.graph)
    assert not np.any(src == dst), "self loops"
    assert edge_set(ds.graph) == {(d, s) for s, d in edge_set(ds.graph)}, "not symmetric"
    assert len(edge_set(ds.graph)) == ds.graph.num_edges, "duplicates"
    assert ds.graph.num_edges / ds.graph.num_nodes == pytest.approx(SMALL.avg_degree, rel=0.02)
    assert ds.features.dtype == np.float32 and ds.features.shape == (4000, 8)
    assert ds.labels.min() >= 0 and ds.labels.max() < SMALL.num_classes
    splits = np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])
    assert np.unique(splits).size == splits.size == 4000
    assert ds.train_idx.size == 2400


def test_synthetic_degrees_are_heavy_tailed():
    cfg = SyntheticConfig(num_nodes=20_000, avg_degree=10.0, degree_exponent=2.5)
    deg = make_synthetic(cfg).graph.in_degrees()
    mean = deg.mean()
    assert deg.max() > 30 * mean
    # A Poisson(10) graph has P(deg > 40) ~ 1e-11; a power law keeps about a percent of nodes there.
    assert (deg > 4 * mean).mean() > 0.005
    lighter = make_synthetic(SyntheticConfig(num_nodes=20_000, avg_degree=10.0, degree_exponent=4.0))
    assert lighter.graph.in_degrees().max() < deg.max()


@pytest.mark.parametrize("homophily", [0.0, 0.3, 0.8])
def test_synthetic_edge_homophily_follows_config(homophily):
    cfg = SyntheticConfig(num_nodes=20_000, avg_degree=10.0, num_classes=8, homophily=homophily)
    ds = make_synthetic(cfg)
    src, dst = coo(ds.graph)
    measured = np.mean(ds.labels[src] == ds.labels[dst])
    # An inter-block draw still lands in u's block with probability ~1/num_classes.
    assert measured == pytest.approx(homophily + (1 - homophily) / 8, abs=0.04)


def test_synthetic_features_carry_class_signal():
    ds = make_synthetic(SyntheticConfig(num_nodes=5000, feature_signal=1.0, feature_noise=0.1, num_classes=4))
    centroids = np.stack([ds.features[ds.labels == c].mean(0) for c in range(4)])
    nearest = np.argmin(((ds.features[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == ds.labels) > 0.99


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("num_nodes", 1, "num_nodes"),
        ("num_classes", 1, "num_classes"),
        ("homophily", 1.5, "homophily"),
        ("homophily", -0.1, "homophily"),
        ("degree_exponent", 2.0, "degree_exponent"),
        ("avg_degree", 0.0, "avg_degree"),
        ("avg_degree", 1e9, "avg_degree"),
        ("feature_noise", -1.0, "feature_noise"),
        ("feature_dim", 0, "feature_dim"),
        ("train_fraction", 0.9, "train_fraction \\+ val_fraction"),
        ("train_fraction", 0.0, "train_fraction"),
        ("seed", -1, "seed"),
        ("avg_degree", float("nan"), "avg_degree"),
    ],
)
def test_synthetic_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        SyntheticConfig(**{field: value})


@pytest.mark.parametrize(("field", "value"), [("num_nodes", 10.5), ("seed", "0"), ("homophily", True)])
def test_synthetic_config_rejects_bad_types(field, value):
    with pytest.raises(TypeError, match=field):
        SyntheticConfig(**{field: value})


def test_products_like_config_is_products_shaped():
    cfg = products_like_config(0.001)
    assert (cfg.num_classes, cfg.feature_dim) == (47, 100)
    assert cfg.num_nodes == round(2_449_029 * 0.001)
    assert products_like_config().avg_degree == pytest.approx(50.5, abs=0.1)
    ds = make_synthetic(cfg)
    assert ds.num_classes == 47 and ds.feature_dim == 100
    with pytest.raises(ValueError, match="scale"):
        products_like_config(0)


# --- planetoid -----------------------------------------------------------------------------------


@needs_cora
def test_cora_loads_with_the_standard_split():
    ds = load_planetoid(CORA_DIR, "cora")
    assert (ds.graph.num_nodes, ds.graph.num_edges, ds.feature_dim, ds.num_classes) == (2708, 10556, 1433, 7)
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (140, 500, 1000)
    np.testing.assert_array_equal(ds.train_idx, np.arange(140))
    np.testing.assert_array_equal(ds.val_idx, np.arange(140, 640))
    assert ds.test_idx.min() == 1708 and ds.test_idx.max() == 2707
    np.testing.assert_array_equal(np.bincount(ds.labels[ds.train_idx]), [20] * 7)
    np.testing.assert_allclose(ds.features.sum(1), 1.0, rtol=1e-5)  # row-normalised
    assert edge_set(ds.graph) == {(d, s) for s, d in edge_set(ds.graph)}
    raw = load_planetoid(CORA_DIR, "cora", normalize_features=False)
    assert set(np.unique(raw.features)) == {0.0, 1.0}


def write_fake_planetoid(root: Path) -> None:
    """A CiteSeer-shaped toy: 7 nodes, 2 features, 2 classes; test ids {4, 6}, node 5 has no test row.

        0 - 1    2 - 3     4 - 6     5 (isolated, padded with zeros, no label)
        (train: 0, 1; val: 2, 3 (from allx); test: 4, 6)
    """
    def dump(part: str, obj) -> None:
        (root / f"ind.citeseer.{part}").write_bytes(pickle.dumps(obj, protocol=2))

    onehot = np.eye(2)
    dump("x", sp.csr_matrix(np.array([[1.0, 1.0], [2.0, 0.0]])))
    dump("y", onehot[[0, 1]])
    dump("allx", sp.csr_matrix(np.array([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])))
    dump("ally", onehot[[0, 1, 1, 0]])
    # Rows in test.index order: first node 6, then node 4.
    dump("tx", sp.csr_matrix(np.array([[0.0, 5.0], [4.0, 0.0]])))
    dump("ty", onehot[[1, 0]])
    dump("graph", collections.defaultdict(list, {0: [1], 1: [0, 1], 2: [3], 4: [6], 6: [4, 4]}))
    (root / "ind.citeseer.test.index").write_text("6\n4\n")


def test_planetoid_processing_reorders_and_pads_test_rows(tmp_path):
    write_fake_planetoid(tmp_path)
    ds = load_planetoid(tmp_path, "citeseer", normalize_features=False)
    assert ds.graph.num_nodes == 7
    np.testing.assert_array_equal(ds.features[[4, 5, 6]], [[4.0, 0.0], [0.0, 0.0], [0.0, 5.0]])
    np.testing.assert_array_equal(ds.labels, [0, 1, 1, 0, 0, -1, 1])
    np.testing.assert_array_equal(ds.train_idx, [0, 1])
    np.testing.assert_array_equal(ds.val_idx, [2, 3])
    np.testing.assert_array_equal(ds.test_idx, [4, 6])
    assert edge_set(ds.graph) == {(0, 1), (1, 0), (2, 3), (3, 2), (4, 6), (6, 4)}  # self loop, duplicate gone
    normalized = load_planetoid(tmp_path, "citeseer")
    np.testing.assert_allclose(normalized.features.sum(1), [1, 1, 1, 1, 1, 0, 1])


class _CallsOsSystem:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("obj", [_CallsOsSystem(), collections.OrderedDict(a=1)])
def test_restricted_unpickler_refuses_disallowed_globals(obj):
    payload = pickle.dumps(obj, protocol=2)
    with pytest.raises(ValueError, match="refusing to load global (posix|os|nt)\\.system|OrderedDict"):
        restricted_loads(payload)
    with pytest.raises(pickle.UnpicklingError):
        restricted_loads(payload)


def test_planetoid_refuses_a_malicious_file(tmp_path):
    write_fake_planetoid(tmp_path)
    (tmp_path / "ind.citeseer.graph").write_bytes(pickle.dumps(_CallsOsSystem(), protocol=2))
    with pytest.raises(UnsafePickleError, match="ind.citeseer.graph.*system"):
        load_planetoid(tmp_path, "citeseer")


def test_planetoid_missing_file_and_bad_name(tmp_path):
    write_fake_planetoid(tmp_path)
    (tmp_path / "ind.citeseer.ty").unlink()
    with pytest.raises(ValueError, match="ind.citeseer.ty"):
        load_planetoid(tmp_path, "citeseer")
    with pytest.raises(ValueError, match="name"):
        load_planetoid(tmp_path, "reddit")


# --- ogb -----------------------------------------------------------------------------------------


def write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows))


# Toy graph for the OGB fakes, 5 nodes, directed (as arxiv stores it):  0 -> 1 -> 2 -> 0,  3 -> 4,  4 -> 3 (dup pair)
FAKE_EDGES = np.array([[0, 1, 2, 3, 4], [1, 2, 0, 4, 3]])
FAKE_FEATURES = np.arange(15, dtype=np.float32).reshape(5, 3) / 4
FAKE_LABELS = np.array([3, 0, 1, 2, 0])
FAKE_SPLIT = {"train": [2, 0], "valid": [1], "test": [4, 3]}


def write_fake_ogb(root: Path, name: str, split: str) -> Path:
    folder = root / name.replace("-", "_")
    write_csv_gz(folder / "raw" / "edge.csv.gz", FAKE_EDGES.T)
    write_csv_gz(folder / "raw" / "node-feat.csv.gz", FAKE_FEATURES)
    write_csv_gz(folder / "raw" / "node-label.csv.gz", FAKE_LABELS[:, None])
    write_csv_gz(folder / "raw" / "num-node-list.csv.gz", [5])
    write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", [5])
    for part, ids in FAKE_SPLIT.items():
        write_csv_gz(folder / "split" / split / f"{part}.csv.gz", ids)
    return folder


def test_ogb_raw_layout_round_trip(tmp_path):
    write_fake_ogb(tmp_path, "ogbn-arxiv", "time")
    ds = load_ogb(tmp_path, "ogbn-arxiv")
    np.testing.assert_allclose(ds.features, FAKE_FEATURES)
    np.testing.assert_array_equal(ds.labels, FAKE_LABELS)
    np.testing.assert_array_equal(ds.train_idx, [0, 2])
    np.testing.assert_array_equal(ds.test_idx, [3, 4])
    assert ds.num_classes == 40 and ds.name == "ogbn-arxiv"
    directed = set(zip(*FAKE_EDGES.tolist()))
    assert edge_set(ds.graph) == directed | {(d, s) for s, d in directed}
    assert edge_set(load_ogb(tmp_path, "ogbn-arxiv", symmetrize=False).graph) == directed


def test_ogb_products_is_always_undirected(tmp_path):
    write_fake_ogb(tmp_path, "ogbn-products", "sales_ranking")
    ds = load_ogb(tmp_path, "ogbn-products", symmetrize=False)
    assert ds.num_classes == 47 and ds.graph.num_edges == 8


@pytest.mark.parametrize("protocol", [2, 4])
def test_ogb_processed_layout_matches_raw(tmp_path, protocol):
    folder = write_fake_ogb(tmp_path, "ogbn-arxiv", "time")
    raw = load_ogb(tmp_path, "ogbn-arxiv", layout="raw")
    (folder / "processed").mkdir()
    graph = {"edge_index": FAKE_EDGES.astype(np.int64), "edge_feat": None, "node_feat": FAKE_FEATURES,
             "num_nodes": np.int64(5), "node_year": np.zeros((5, 1), dtype=np.int64)}
    # What NodePropPredDataset.pre_process writes (protocol 4 in current OGB, torch's default 2 before).
    torch.save({"graph": graph, "labels": FAKE_LABELS[:, None]}, folder / "processed" / "data_processed",
               pickle_protocol=protocol)
    for edge in (folder / "raw").iterdir():
        edge.unlink()  # auto must now pick the processed file
    assert_same_dataset(load_ogb(tmp_path, "ogbn-arxiv"), raw)


def test_ogb_processed_layout_refuses_foreign_objects(tmp_path):
    folder = write_fake_ogb(tmp_path, "ogbn-arxiv", "time")
    (folder / "processed").mkdir()
    torch.save({"graph": collections.OrderedDict(), "labels": None}, folder / "processed" / "data_processed")
    with pytest.raises(ValueError, match="data_processed.*OrderedDict"):
        load_ogb(tmp_path, "ogbn-arxiv", layout="processed")


class Numpy1Pickler(pickle._Pickler):
    """Pickles numpy arrays the way numpy 1.x does. numpy 2 names its array reconstructor
    ``numpy._core.multiarray._reconstruct``; numpy 1.x, which wrote every real OGB processed file,
    named it ``numpy.core.multiarray._reconstruct``. Everything else is pickle's own output."""

    def save_global(self, obj, name=None):
        module = getattr(obj, "__module__", None) or ""
        if not module.startswith("numpy._core"):
            return super().save_global(obj, name)
        module = "numpy.core" + module[len("numpy._core"):]
        name = name or obj.__qualname__
        if self.proto >= 4:
            self.save(module)
            self.save(name)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode("utf-8"))
        self.memoize(obj)


def ogb_like_arrays(name: str, num_nodes: int = 300, avg_degree: int = 6):
    """Arrays shaped and laid out as OGB's ``read_csv_graph_raw`` builds them from its raw CSVs: pandas'
    ``.values`` of a numeric frame is Fortran-ordered, ``edge.csv.gz`` is read transposed, products gets
    every edge followed by its reverse (``add_inverse_edge``), arxiv a ``node_year`` column, num_nodes
    is a Python int, edge_feat is None. Returns (raw edges [E, 2], graph dict, labels [n, 1])."""
    rng = np.random.default_rng(len(name))
    feature_dim, num_classes = (128, 40) if name == "ogbn-arxiv" else (100, 47)
    edges = rng.integers(0, num_nodes, size=(num_nodes * avg_degree, 2))
    edge_index = edges.T.astype(np.int64)  # like pd.read_csv(...).values.T.astype(np.int64): F-ordered
    if name == "ogbn-products":
        doubled = np.repeat(edge_index, 2, axis=1)
        doubled[0, 1::2], doubled[1, 1::2] = edge_index[1], edge_index[0]
        edge_index = doubled
    node_feat = np.asfortranarray(rng.standard_normal((num_nodes, feature_dim)).astype(np.float32))
    labels = rng.integers(0, num_classes, size=(num_nodes, 1)).astype(np.int64)
    graph = {"edge_index": edge_index, "edge_feat": None, "node_feat": node_feat, "num_nodes": num_nodes}
    if name == "ogbn-arxiv":
        graph["node_year"] = rng.integers(1990, 2021, size=(num_nodes, 1)).astype(np.int64)
    return edges, graph, labels


@pytest.mark.parametrize("protocol", [2, 4], ids=["protocol2", "protocol4"])
@pytest.mark.parametrize("name, split", [("ogbn-arxiv", "time"), ("ogbn-products", "sales_ranking")])
def test_ogb_processed_file_written_by_numpy1_matches_raw(tmp_path, name, split, protocol):
    # A processed file as OGB writes it (torch.save of numpy arrays; protocol 4 in current OGB, torch's
    # default 2 before), pickled with numpy 1.x's module names, next to the raw CSVs it came from.
    edges, graph, labels = ogb_like_arrays(name)
    n = graph["num_nodes"]
    folder = tmp_path / name.replace("-", "_")
    write_csv_gz(folder / "raw" / "edge.csv.gz", edges)
    write_csv_gz(folder / "raw" / "node-feat.csv.gz", graph["node_feat"])
    write_csv_gz(folder / "raw" / "node-label.csv.gz", labels)
    write_csv_gz(folder / "raw" / "num-node-list.csv.gz", [n])
    write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", [edges.shape[0]])
    order = np.random.default_rng(1).permutation(n)
    for part, ids in {"train": order[:180], "valid": order[180:240], "test": order[240:]}.items():
        write_csv_gz(folder / "split" / split / f"{part}.csv.gz", ids)
    (folder / "processed").mkdir()
    processed = folder / "processed" / "data_processed"
    numpy1 = types.SimpleNamespace(Pickler=Numpy1Pickler, __name__="numpy1_pickle")
    torch.save({"graph": graph, "labels": labels}, processed, pickle_module=numpy1, pickle_protocol=protocol)
    with zipfile.ZipFile(processed) as archive:
        payload = archive.read(next(m for m in archive.namelist() if m.endswith("data.pkl")))
    assert b"numpy.core.multiarray" in payload and b"numpy._core" not in payload  # the fixture is numpy 1.x's

    from_processed = load_ogb(tmp_path, name, layout="processed")
    assert_same_dataset(from_processed, load_ogb(tmp_path, name, layout="raw"))
    np.testing.assert_array_equal(from_processed.features, graph["node_feat"])
    np.testing.assert_array_equal(from_processed.labels, labels[:, 0])
    np.testing.assert_array_equal(from_processed.train_idx, np.sort(order[:180]))
    expected = {(int(s), int(d)) for s, d in edges} | {(int(d), int(s)) for s, d in edges}
    assert edge_set(from_processed.graph) == expected  # both directions (symmetrize default / products)


def test_ogb_papers100m_binary_layout_with_nan_labels(tmp_path):
    folder = tmp_path / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    np.savez(folder / "raw" / "data.npz", edge_index=FAKE_EDGES, node_feat=FAKE_FEATURES.astype(np.float16),
             num_nodes_list=np.array([5]), num_edges_list=np.array([5]))
    np.savez(folder / "raw" / "node-label.npz", node_label=np.array([[3.0], [np.nan], [1.0], [np.nan], [0.0]]))
    for part, ids in {"train": [0], "valid": [2], "test": [4]}.items():
        write_csv_gz(folder / "split" / "time" / f"{part}.csv.gz", ids)
    ds = load_ogb(tmp_path, "ogbn-papers100M")
    np.testing.assert_array_equal(ds.labels, [3, -1, 1, -1, 0])
    assert ds.features.dtype == np.float32 and ds.num_classes == 172


def test_ogb_missing_file_names_path_and_how_to_get_it(tmp_path):
    folder = write_fake_ogb(tmp_path, "ogbn-arxiv", "time")
    (folder / "raw" / "node-feat.csv.gz").unlink()
    with pytest.raises(ValueError, match="node-feat.csv.gz: missing.*NodePropPredDataset"):
        load_ogb(tmp_path, "ogbn-arxiv")
    with pytest.raises(ValueError, match="ogbn_products.raw.edge.csv.gz: missing"):
        load_ogb(tmp_path, "ogbn-products")
    with pytest.raises(ValueError, match="processed.data_processed: missing"):
        load_ogb(tmp_path, "ogbn-arxiv", layout="processed")
    write_fake_ogb(tmp_path, "ogbn-arxiv", "time")
    (folder / "split" / "time" / "valid.csv.gz").unlink()
    with pytest.raises(ValueError, match="split.time.valid.csv.gz: missing"):
        load_ogb(tmp_path, "ogbn-arxiv")


def test_ogb_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="name"):
        load_ogb(tmp_path, "ogbn-mag")
    with pytest.raises(ValueError, match="root"):
        load_ogb(tmp_path / "nowhere", "ogbn-arxiv")
    with pytest.raises(ValueError, match="layout"):
        load_ogb(tmp_path, "ogbn-arxiv", layout="zip")


# --- npz -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("topology", ["csc", "edge_index"])
def test_npz_round_trip(tmp_path, topology):
    ds = make_synthetic(SMALL)
    path = save_npz(ds, tmp_path / "small.npz", topology=topology)
    assert_same_dataset(load_npz(path), ds)


def test_npz_masks_edge_list_and_symmetrize(tmp_path):
    # 4 nodes: 0 -> 1, 1 -> 2, 2 -> 2 (self loop), 0 -> 1 again (duplicate)
    arrays = dict(features=np.ones((4, 2)), labels=np.array([0, 1, 1, -1]),
                  edge_index=np.array([[0, 1, 2, 0], [1, 2, 2, 1]]),
                  train_mask=np.array([True, True, False, False]), val_mask=np.array([False, False, True, False]),
                  test_idx=np.array([2, 1]))
    np.savez(tmp_path / "toy.npz", **arrays)
    ds = load_npz(tmp_path / "toy.npz")
    assert ds.name == "toy" and ds.num_classes == 2 and ds.features.dtype == np.float32
    assert edge_set(ds.graph) == {(0, 1), (1, 2), (2, 2)}
    np.testing.assert_array_equal(ds.train_idx, [0, 1])
    np.testing.assert_array_equal(ds.test_idx, [1, 2])
    sym = load_npz(tmp_path / "toy.npz", symmetrize=True, remove_self_loops=True)
    assert edge_set(sym.graph) == {(0, 1), (1, 0), (1, 2), (2, 1)}


@pytest.mark.parametrize(
    ("drop", "extra", "match"),
    [
        ("features", {}, "features: required key missing"),
        ("labels", {}, "labels: required key missing"),
        ("edge_index", {}, "indptr/indices or edge_index"),
        ("val_idx", {}, "val_idx: missing"),
        (None, {"indptr": np.array([0, 0, 0, 0, 0])}, "both edge_index and indptr"),
        (None, {"train_mask": np.ones(4, dtype=bool)}, "both train_idx and train_mask"),
        (None, {"num_classes": np.int64(1)}, "num_classes"),
        (None, {"edge_index": np.array([[0], [9]])}, "edge_index: node ids must lie in"),
        (None, {"labels": np.zeros(3, dtype=np.int64)}, "labels: expected shape"),
    ],
)
def test_npz_errors_name_the_key(tmp_path, drop, extra, match):
    arrays = dict(features=np.ones((4, 2), np.float32), labels=np.array([0, 1, 1, 0]),
                  edge_index=np.array([[0, 1], [1, 2]]), train_idx=np.array([0]), val_idx=np.array([1]),
                  test_idx=np.array([2]))
    arrays.pop(drop, None)
    arrays.update(extra)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=match):
        load_npz(tmp_path / "bad.npz")


def damaged_copies(good: Path) -> dict[str, Path]:
    """The ways a downloaded or copied .npz arrives broken: cut short, one byte flipped inside an array
    (the zip's CRC no longer matches), or not an archive at all."""
    data = good.read_bytes()
    cut = good.with_name("truncated.npz")
    cut.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[data.index(b"\x93NUMPY") + 200] ^= 0xFF  # inside the first member's array bytes
    crc = good.with_name("crc.npz")
    crc.write_bytes(bytes(flipped))
    text = good.with_name("text.npz")
    text.write_text("node,label\n0,1\n")
    return {"truncated": cut, "crc": crc, "text": text}


@pytest.mark.parametrize("damage, message", [
    ("truncated", r"path: .*truncated.npz is a damaged .npz archive \(truncated or corrupt"),
    ("crc", r"features: damaged in .*crc.npz \(truncated or corrupt archive: Bad CRC-32"),
    ("text", r"path: .*text.npz is not an .npz archive \(it does not start like a zip file"),
], ids=["truncated", "crc", "text"])
@pytest.mark.parametrize("command", ["train", "info", "partition"])
def test_damaged_npz_is_one_clear_line_in_every_command(tmp_path, capsys, damage, message, command):
    good = save_npz(make_synthetic(SyntheticConfig(num_nodes=300, feature_dim=64, seed=2)), tmp_path / "good.npz")
    path = damaged_copies(good)[damage]
    extra = {"train": ["--epochs", "1", "--quiet"], "info": [],
             "partition": ["--parts", "2", "--out", str(tmp_path / "parts")]}[command]
    assert main([command, "--dataset", "npz", "--data-dir", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gnnscale {command}: error: "), err
    assert re.search(message, err), err
    assert "allow_pickle" not in err
    assert not (tmp_path / "parts").exists()


def test_npz_refuses_object_arrays_and_non_archives(tmp_path):
    arrays = dict(features=np.ones((2, 2)), labels=np.array([0, 1]), edge_index=np.zeros((2, 0), np.int64),
                  train_idx=np.array([0]), val_idx=np.array([1]), test_idx=np.array([], np.int64),
                  extra=np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "obj.npz", **arrays)
    with pytest.raises(ValueError, match="extra: cannot be read .* without pickle"):
        load_npz(tmp_path / "obj.npz")
    np.save(tmp_path / "single.npy", np.ones(3))
    with pytest.raises(ValueError, match="single .npy array"):
        load_npz(tmp_path / "single.npy")
    with pytest.raises(ValueError, match="path"):
        load_npz(tmp_path / "absent.npz")


# --- registry ------------------------------------------------------------------------------------


def test_registry_lists_and_rejects_names():
    assert {"synthetic", "cora", "ogbn-products", "npz", "dir"} <= set(DATASETS)
    with pytest.raises(ValueError, match="unknown dataset 'reddit'.*synthetic.*ogbn-products"):
        load_dataset("reddit")


def test_registry_synthetic_options_map_to_config():
    ds = load_dataset("synthetic", num_nodes=500, avg_degree=4.0, num_classes=3, feature_dim=5)
    assert (ds.graph.num_nodes, ds.feature_dim, ds.num_classes) == (500, 5, 3)
    with pytest.raises(ValueError, match="num_node"):
        load_dataset("synthetic", num_node=500)


@pytest.mark.parametrize("name", ["cora", "ogbn-arxiv", "npz", "dir"])
def test_registry_requires_root(name):
    with pytest.raises(ValueError, match="root"):
        load_dataset(name)


def test_registry_loads_files_and_names_missing_ones(tmp_path):
    ds = make_synthetic(SyntheticConfig(num_nodes=300, avg_degree=4.0))
    save_dataset(ds, tmp_path / "ds")
    assert_same_dataset(load_dataset("dir", tmp_path / "ds", mmap=False), ds)
    save_npz(ds, tmp_path / "ds.npz")
    assert_same_dataset(load_dataset("npz", tmp_path / "ds.npz"), ds)
    (tmp_path / "ds" / "labels.npy").unlink()
    with pytest.raises(ValueError, match="labels.npy"):
        load_dataset("dir", tmp_path / "ds")
    with pytest.raises(ValueError, match="ind.cora.x"):
        load_dataset("cora", tmp_path)
    with pytest.raises(ValueError, match="options.*normalise_features"):
        load_dataset("cora", tmp_path, normalise_features=False)


def test_npz_accepts_an_empty_split(tmp_path):
    np.savez(tmp_path / "empty.npz", features=np.ones((3, 2)), labels=np.array([0, 1, 0]),
             edge_index=np.array([[0], [1]]), train_idx=np.array([0, 1]), val_idx=np.array([]),
             test_mask=np.zeros(3, dtype=bool))
    ds = load_npz(tmp_path / "empty.npz")
    assert ds.val_idx.size == 0 and ds.test_idx.size == 0 and ds.val_idx.dtype == np.int64
