"""Half-precision feature rows: stored rounded to nearest even, widened back to float32 exactly, and a
partition directory that stores them, loads them and refuses a manifest that names another dtype."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

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


# float32 bit patterns where rounding to 16 bits can go wrong, with what round-to-nearest-even gives by hand
# (the upper 16 bits for bfloat16; float16 bits for float16). bfloat16 keeps 7 bits of mantissa, so its half
# ULP is bit 15 of the float32; float16 keeps 10 (half ULP 2**-11 at 1), with subnormals below 2**-14.
BFLOAT16_BY_HAND = {
    0x3F800000: 0x3F80,  # 1.0: exact
    0x3F808000: 0x3F80,  # a tie, the lower neighbour even: down (truncation agrees)
    0x3F818000: 0x3F82,  # a tie, the lower neighbour odd: up to even (truncation gives 0x3F81)
    0x3F808001: 0x3F81,  # just above a tie: up
    0x3F807FFF: 0x3F80,  # just below a tie: down
    0xBF818000: 0xBF82,  # a negative tie, odd: away from zero to even
    0x3FFF8000: 0x4000,  # a tie whose rounding carries into the exponent: 2.0
    0x40490FDB: 0x4049,  # pi: down
    0x3EAAAAAB: 0x3EAB,  # 1/3: up
    0x00008000: 0x0000,  # a subnormal tie, even: to +0
    0x00018000: 0x0002,  # a subnormal tie, odd: up
    0x00000001: 0x0000,  # the smallest subnormal: to 0
    0x007FFFFF: 0x0080,  # the largest subnormal: up to the smallest normal
    0x80008000: 0x8000,  # a negative subnormal tie: to -0
    0x80000000: 0x8000,  # -0 stays -0
    0x7F7E8000: 0x7F7E,  # a tie near the top, even: down
    0x7F7F8000: 0x7F80,  # a tie at the top, odd: up to inf
    0x7F7FFFFF: 0x7F80,  # the largest float32: inf
    0x7F800000: 0x7F80,  # inf
    0xFF800000: 0xFF80,  # -inf
    0x7FC00000: None,  # NaN: a NaN (which one is torch's: 0xFFFF in torch 2.13, 0x7FC0 in its scalar code)
}
FLOAT16_BY_HAND = {
    0x3F801000: 0x3C00,  # 1 + 2**-11, a tie, even: 1.0
    0x3F803000: 0x3C02,  # 1 + 3 * 2**-11, a tie, odd: up to 1 + 2**-9
    0x3F801001: 0x3C01,  # just above a tie: up
    0x45001000: 0x6800,  # 2049, a tie between 2048 and 2050: 2048
    0x45003000: 0x6802,  # 2051, a tie: 2052
    0x477FE000: 0x7BFF,  # 65504, the largest float16
    0x477FEFFF: 0x7BFF,  # just below 65520: 65504
    0x477FF000: 0x7C00,  # 65520, the tie above the largest: inf
    0x33800000: 0x0001,  # 2**-24, the smallest subnormal
    0x33000000: 0x0000,  # 2**-25, a subnormal tie, even: 0
    0x33C00000: 0x0002,  # 3 * 2**-25, a tie, odd: 2**-23
    0x33A00000: 0x0001,  # 1.25 * 2**-24: down
    0x387FE000: 0x0400,  # 1023.5 * 2**-24, a tie above the largest subnormal: the smallest normal
    0xB3C00000: 0x8002,  # a negative subnormal tie, odd
    0x00000001: 0x0000,  # a float32 subnormal: 0
    0x80000000: 0x8000,  # -0
    0x7F800000: 0x7C00,  # inf
    0x7FC00000: None,  # NaN: a NaN
}
CRAFTED_BITS = np.array(sorted(set(BFLOAT16_BY_HAND) | set(FLOAT16_BY_HAND)), dtype=np.uint32)
# [10, 4] float32 rows of the crafted values, padded with 0.1 (itself inexact in both).
CRAFTED = np.r_[CRAFTED_BITS.view(np.float32), np.full(40 - CRAFTED_BITS.size, 0.1, np.float32)].reshape(10, 4)
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_rounded(rows, dtype: torch.dtype) -> torch.Tensor:
    """The oracle: float32 ``rows`` through torch's conversion to ``dtype`` and back to float32."""
    rows = rows if isinstance(rows, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(rows, np.float32))
    return rows.detach().to(dtype).to(torch.float32)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit for bit: -0 is not +0, and a NaN's bits count."""
    assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
    same = got.contiguous().view(torch.int32) == want.contiguous().view(torch.int32)
    assert bool(same.all()), [(f"{a:#010x}", f"{b:#010x}") for a, b in
                              zip(got.view(torch.int32)[~same].tolist(), want.view(torch.int32)[~same].tolist())]


@pytest.mark.parametrize("name, by_hand", [("bfloat16", BFLOAT16_BY_HAND), ("float16", FLOAT16_BY_HAND)])
def test_torch_rounds_the_crafted_values_to_nearest_even_as_worked_out_by_hand(name, by_hand):
    """The oracle itself: ties to even, subnormals, overflow to inf."""
    bits = np.array(list(by_hand), dtype=np.uint32)
    narrow = torch.from_numpy(bits.view(np.float32)).to(HALF[name])
    got = narrow.view(torch.int16).numpy().view(np.uint16)
    assert [f"{b:#06x}" if w is not None else "nan" if np.isnan(x) else "?"
            for b, w, x in zip(got, by_hand.values(), narrow.float().tolist())] == \
           [f"{w:#06x}" if w is not None else "nan" for w in by_hand.values()]


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_encode_and_decode_are_torchs_conversion_bit_for_bit_on_ties_and_subnormals(name):
    stored = encode(CRAFTED, name)
    want = torch.from_numpy(CRAFTED).to(HALF[name])
    assert stored.dtype == numpy_dtype(name)
    assert np.array_equal(stored.view(np.uint16), want.view(torch.int16).numpy().view(np.uint16))
    assert_same_bits(decode(stored), torch_rounded(CRAFTED, HALF[name]))


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


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_a_partitions_half_precision_rows_are_torchs_conversion_bit_for_bit(dataset, tmp_path, name):
    """The crafted values that stay finite in both dtypes (partitioning refuses non-finite features), over
    and over as the features of every node."""
    values = CRAFTED.ravel()
    features = np.resize(values[np.isfinite(values) & (np.abs(values) <= 65504)], (dataset.graph.num_nodes, 4))
    write_partition_dir(replace(dataset, features=features), 2, "random", tmp_path / "p", feature_dtype=name)
    new_to_old = np.load(tmp_path / "p" / "new_to_old.npy")
    for part in range(2):
        got = load_partition(tmp_path / "p", part)
        lo, hi = got.book.node_range(part)
        assert_same_bits(decode(got.features), torch_rounded(features[new_to_old[lo:hi]], HALF[name]))


def test_a_feature_that_half_precision_would_store_as_inf_is_refused_before_partitioning(dataset, tmp_path):
    """65504 is float16's largest value and 65520 the tie above it, which rounds to Inf: a partition would
    hold an Inf feature (a NaN model) though the float32 features are finite. bfloat16 keeps it (65536)."""
    features = dataset.features.copy()
    features[[7, 300], 1] = [65520.0, -70000.0]
    features[9, 2] = 65504.0
    big = replace(dataset, features=features)
    with pytest.raises(ValueError, match=r"feature_dtype: 2 rows hold values that float16 stores as Inf \(magnitude "
                                         r"65520 or more; rows 7, 300\); store them as bfloat16 or float32"):
        write_partition_dir(big, 2, "random", tmp_path / "p16", feature_dtype="float16")
    assert not (tmp_path / "p16").exists()
    write_partition_dir(big, 2, "random", tmp_path / "pb", feature_dtype="bfloat16")
    stored = np.concatenate([decode(load_partition(tmp_path / "pb", p).features).numpy() for p in range(2)])
    assert sorted(stored[np.abs(stored) > 1000].tolist()) == [-70144.0, 65536.0, 65536.0]
    features[7, 1] = features[300, 1] = 65519.0  # below the tie: 65504
    write_partition_dir(replace(dataset, features=features), 2, "random", tmp_path / "ok", feature_dtype="float16")
    stored = np.concatenate([decode(load_partition(tmp_path / "ok", p).features).numpy() for p in range(2)])
    assert sorted(stored[np.abs(stored) > 1000].tolist()) == [65504.0] * 3


def test_a_manifest_naming_an_unknown_feature_dtype_is_refused_with_its_path(dataset, tmp_path):
    write_partition_dir(dataset, 2, "random", tmp_path / "p")
    path = tmp_path / "p" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["feature_dtype"] = "float8"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=rf"{path}: feature_dtype must be one of float32, float16, bfloat16, got "
                                         r"'float8'"):
        load_partition(tmp_path / "p", 0)


@pytest.mark.slow
def test_the_cli_partitions_in_half_precision_and_refuses_another_dtype(tmp_path):
    cmd = [sys.executable, "-m", "gnnscale", "partition", "--dataset", "synthetic", "-o", "num_nodes=500",
           "--parts", "2", "--out", str(tmp_path / "p")]
    bad = subprocess.run([*cmd, "--feature-dtype", "float64"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--feature-dtype: invalid choice: 'float64'" in bad.stderr
    ok = subprocess.run([*cmd, "--feature-dtype", "bfloat16"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert load_partition(tmp_path / "p", 1).features.dtype == np.uint16
