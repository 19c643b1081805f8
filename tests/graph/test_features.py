"""Gathering feature rows: the numba kernel against numpy's fancy indexing."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from gnnscale.graph.features import gather_rows, take_columns, take_rows
from gnnscale.prefetch import stream_in_groups


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_rows_equals_fancy_indexing(dtype, tmp_path):
    rng = np.random.default_rng(0)
    features = rng.standard_normal((3000, 13)).astype(dtype)
    ids = rng.integers(0, 3000, 5000)  # repeats, any order, more rows than a piece
    np.testing.assert_array_equal(gather_rows(features, ids), features[ids])
    np.save(tmp_path / "f.npy", features)
    mapped = np.load(tmp_path / "f.npy", mmap_mode="r")  # read-only memory map
    np.testing.assert_array_equal(gather_rows(mapped, ids), features[ids])
    np.testing.assert_array_equal(gather_rows(features[:, ::2], ids), features[ids][:, ::2])  # not contiguous
    assert gather_rows(features, np.empty(0, dtype=np.int64)).shape == (0, 13)


def test_gather_rows_rejects_bad_ids():
    features = np.zeros((10, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"ids: row ids must lie in \[0, 10\)"):
        gather_rows(features, np.array([3, 10]))
    with pytest.raises(ValueError, match=r"ids: row ids must lie in \[0, 10\)"):
        gather_rows(features, np.array([-1]))
    with pytest.raises(ValueError, match="ids: expected a 1-D array"):
        gather_rows(features, np.zeros((2, 2), dtype=np.int64))


@pytest.mark.parametrize("values", [
    np.arange(3000 * 13, dtype=np.float32).reshape(3000, 13) / 7,   # 52-byte rows: uint32 words
    np.arange(3000, dtype=np.int64) * 3,                             # 1-D, 8-byte rows
    np.arange(3000) % 3 == 0,                                        # bool mask, 1-byte rows
    (np.arange(3000 * 6, dtype=np.float64) / 3).reshape(3000, 2, 3),  # 3-D
    np.arange(3000 * 3, dtype=np.int16).reshape(3000, 3),            # 6-byte rows: uint16 words
    np.linspace(0, 1, 3000 * 5).astype(np.float16).reshape(3000, 5),  # 10-byte rows
], ids=["float32", "int64", "bool", "3d", "int16", "float16"])
def test_take_rows_equals_fancy_indexing_for_any_dtype(values, tmp_path):
    ids = np.random.default_rng(1).integers(0, 3000, 5000)  # repeats, any order, more rows than a piece
    got = take_rows(values, ids)
    assert got.dtype == values.dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got, values[ids])
    np.save(tmp_path / "v.npy", values)
    np.testing.assert_array_equal(take_rows(np.load(tmp_path / "v.npy", mmap_mode="r"), ids), values[ids])
    assert take_rows(values, np.empty(0, dtype=np.int64)).shape == (0,) + values.shape[1:]


def test_take_rows_falls_back_to_numpy_and_rejects_bad_ids():
    strided = np.arange(40.0).reshape(10, 4)[:, ::2]  # not contiguous
    objects = np.array([str(i) for i in range(10)], dtype=object)
    ids = np.array([9, 0, 3, 3])
    np.testing.assert_array_equal(take_rows(strided, ids), strided[ids])
    assert take_rows(objects, ids).tolist() == ["9", "0", "3", "3"]
    with pytest.raises(ValueError, match=r"ids: row ids must lie in \[0, 10\)"):
        take_rows(strided, np.array([10]))
    with pytest.raises(ValueError, match="values: expected an array with at least one dimension"):
        take_rows(np.float32(1.0), ids)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint16])
def test_take_columns_equals_fancy_indexing(dtype, tmp_path):
    rng = np.random.default_rng(2)
    values = (rng.standard_normal((3000, 13)) * 100).astype(dtype)
    ids = rng.integers(0, 3000, 5000)  # repeats, any order, more rows than a piece
    cols = np.array([12, 0, 5, 6])  # any order
    got = take_columns(values, ids, cols)
    assert got.dtype == values.dtype and got.shape == (5000, 4)
    np.testing.assert_array_equal(got, values[ids][:, cols])
    np.save(tmp_path / "v.npy", values)
    np.testing.assert_array_equal(take_columns(np.load(tmp_path / "v.npy", mmap_mode="r"), ids, cols),
                                  values[ids][:, cols])
    assert take_columns(values, ids[:0], cols).shape == (0, 4)


def test_take_columns_rejects_bad_input():
    values = np.zeros((10, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=r"ids: expected ids in \[0, 10\)"):
        take_columns(values, np.array([10]), np.array([0]))
    with pytest.raises(ValueError, match=r"cols: expected ids in \[0, 4\)"):
        take_columns(values, np.array([1]), np.array([-1]))
    with pytest.raises(ValueError, match="values: expected a C-contiguous 2-D numeric array"):
        take_columns(values[:, ::2], np.array([1]), np.array([0]))


def test_background_stage_uses_the_callers_thread_count():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread")
    threads: list[int] = []

    def produce(items: range) -> list[int]:  # a loading-stage group: records the numba threads it ran with
        threads.append(numba.get_num_threads())
        return list(items)

    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert list(stream_in_groups(produce, 2, 1, 1)) == [0, 1]
    finally:
        numba.set_num_threads(before)
    # A new thread would start at numba's maximum; the stage must follow the caller's setting.
    assert threads == [1, 1]


def test_gather_rows_writes_into_a_given_array_and_checks_it():
    features = np.arange(24, dtype=np.float32).reshape(6, 4)
    out = np.full((3, 4), -1.0, dtype=np.float32)
    assert gather_rows(features, np.array([5, 0, 2]), out=out) is out
    np.testing.assert_array_equal(out, features[[5, 0, 2]])
    halves = features.astype(np.float16)  # through numpy's indexing, into out all the same
    out16 = np.empty((2, 4), dtype=np.float16)
    np.testing.assert_array_equal(gather_rows(halves, np.array([1, 3]), out=out16), halves[[1, 3]])
    with pytest.raises(ValueError, match=r"out: expected a C-contiguous float32 array of shape \(3, 4\)"):
        gather_rows(features, np.array([5, 0, 2]), out=np.empty((3, 4), dtype=np.float64))
