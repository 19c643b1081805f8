"""Half-precision feature rows: stored rounded to nearest even, widened back to float32 exactly, and a
partition directory that stores them, loads them and refuses a manifest that names another dtype."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from gnnscale.graph.feature_dtype import FEATURE_DTYPES, decode, encode, numpy_dtype, stored_name
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import load_partition, read_manifest, write_partition_dir

ROWS = np.array([[1.0, -2.5, 3.14159265, 1e-3], [65504.0, 1e-8, -0.0, 0.333333]], dtype=np.float32)


@pytest.mark.parametrize("name", FEATURE_DTYPES)
def test_encode_rounds_as_torch_does_and_decode_widens_exactly(name):
    stored = encode(ROWS, name)
    assert stored.dtype == numpy_dtype(name) and stored.shape == ROWS.shape and stored_name(stored) == name
    expected = torch.from_numpy(ROWS).to({"float32": torch.float32, "float16": torch.float16,
                                          "bfloat16": torch.bfloat16}[name]).to(torch.float32)
    back = decode(stored)
    assert back.dtype == torch.float32 and torch.equal(back, expected)


def test_half_precision_keeps_about_three_and_two_decimal_digits():
    assert np.abs(decode(encode(ROWS, "float16")).numpy() - ROWS)[0].max() < 2e-3
    assert np.abs(decode(encode(ROWS, "bfloat16")).numpy() - ROWS)[0].max() < 2e-2


def test_unknown_dtypes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"feature_dtype: expected one of float32, float16, bfloat16, got 'int8'"):
        encode(ROWS, "int8")
    with pytest.raises(TypeError, match=r"features: expected float32, float16 or bfloat16 rows.*float64"):
        stored_name(ROWS.astype(np.float64))


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(num_nodes=600, avg_degree=6.0, num_classes=3, feature_dim=5, seed=2))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_a_partition_stores_its_features_in_half_precision(dataset, tmp_path, name):
    write_partition_dir(dataset, 2, "metis", tmp_path / "p", feature_dtype=name)
    wide = tmp_path / "wide"
    write_partition_dir(dataset, 2, "metis", wide)
    assert read_manifest(tmp_path / "p")["feature_dtype"] == name
    new_to_old = np.load(tmp_path / "p" / "new_to_old.npy")
    for part in range(2):
        got = load_partition(tmp_path / "p", part)
        lo, hi = got.book.node_range(part)
        assert got.features.dtype == numpy_dtype(name)
        assert np.array_equal(got.features, encode(dataset.features[new_to_old[lo:hi]], name))
        # Half the bytes on disk (the same .npy header).
        half, full = tmp_path / "p" / f"part{part}" / "features.npy", wide / f"part{part}" / "features.npy"
        assert full.stat().st_size - half.stat().st_size == got.features.size * 2


def test_a_manifest_naming_an_unknown_feature_dtype_is_refused_with_its_path(dataset, tmp_path):
    write_partition_dir(dataset, 2, "random", tmp_path / "p")
    path = tmp_path / "p" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["feature_dtype"] = "float8"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=rf"{path}: feature_dtype must be one of float32, float16, bfloat16, got "
                                         r"'float8'"):
        load_partition(tmp_path / "p", 0)


def test_the_cli_partitions_in_half_precision_and_refuses_another_dtype(tmp_path):
    cmd = [sys.executable, "-m", "gnnscale", "partition", "--dataset", "synthetic", "-o", "num_nodes=500",
           "--parts", "2", "--out", str(tmp_path / "p")]
    bad = subprocess.run([*cmd, "--feature-dtype", "float64"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--feature-dtype: invalid choice: 'float64'" in bad.stderr
    ok = subprocess.run([*cmd, "--feature-dtype", "bfloat16"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert load_partition(tmp_path / "p", 1).features.dtype == np.uint16
