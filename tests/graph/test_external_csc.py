"""The external bucket sort gives csc_from_coo's graph, and NpyWriter gives np.save's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.external_csc import EdgeBuckets, NpyWriter, bucket_bounds


@pytest.mark.parametrize("batch", [7, 100, 10_000])
def test_buckets_build_the_csc_of_the_edges_added(tmp_path, batch):
    rng = np.random.default_rng(0)
    n = 300
    src, dst = rng.integers(0, n, 5000), rng.integers(0, n, 5000)  # with repeats, in random order
    src[:50], dst[:50] = 0, 7  # one node with many repeated in-edges
    expected = csc_from_coo(src, dst, n, remove_duplicates=True)
    bounds = bucket_bounds(np.bincount(dst, minlength=n), per_bucket=400)
    assert bounds[0] == 0 and bounds[-1] == n and len(bounds) > 10
    buckets = EdgeBuckets(tmp_path / "b", bounds, n)
    for start in range(0, src.shape[0], batch):
        buckets.add(src[start:start + batch], dst[start:start + batch])
    assert buckets.edges_added == 5000
    with NpyWriter(tmp_path / "indptr.npy", np.int64, (n + 1,)) as indptr, \
            NpyWriter(tmp_path / "indices.npy", np.int32, (None,)) as indices:
        edges = buckets.write_csc(indptr, indices)
    assert edges == expected.num_edges
    assert not (tmp_path / "b").exists()  # every bucket file consumed, and the folder gone
    np.testing.assert_array_equal(np.load(tmp_path / "indptr.npy"), expected.indptr)
    np.testing.assert_array_equal(np.load(tmp_path / "indices.npy"), expected.indices)


def test_npy_writer_writes_what_np_save_writes(tmp_path):
    array = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "saved.npy", array)
    with NpyWriter(tmp_path / "known.npy", np.float32, (20, 3)) as f:
        f.write(array[:5])
        f.write(array[5:])
    with NpyWriter(tmp_path / "grown.npy", np.float32, (None, 3)) as f:
        for row in array:
            f.write(row[None])
    saved = (tmp_path / "saved.npy").read_bytes()
    assert (tmp_path / "known.npy").read_bytes() == saved
    assert (tmp_path / "grown.npy").read_bytes() == saved


def test_npy_writer_refuses_a_wrong_row_count_or_shape(tmp_path):
    writer = NpyWriter(tmp_path / "short.npy", np.int64, (4,))
    writer.write(np.arange(3))
    with pytest.raises(ValueError, match=r"short.npy: expected 4 rows, 3 were written"):
        writer.close()
    with NpyWriter(tmp_path / "wide.npy", np.float32, (2, 3)) as f:
        with pytest.raises(ValueError, match=r"wide.npy: expected pieces of shape \[rows, \[3\]\], got \(1, 4\)"):
            f.write(np.zeros((1, 4)))
        f.write(np.zeros((2, 3)))


@pytest.mark.parametrize("per_bucket", [1, 3, 40])
def test_a_bucket_holds_at_most_per_bucket_plus_its_first_node(per_bucket):
    weights = np.random.default_rng(1).pareto(1.2, 500) + 1.0  # heavy-tailed: some nodes pass per_bucket alone
    bounds = bucket_bounds(weights, per_bucket)
    assert bounds[0] == 0 and bounds[-1] == 500 and np.all(np.diff(bounds) > 0)
    sums = np.add.reduceat(weights, bounds[:-1])
    assert np.all(sums < per_bucket + weights[bounds[:-1]] + 1e-9)
    assert len(bounds) - 1 >= weights.sum() // (per_bucket + weights.max())  # not one bucket for everything
