"""CSCGraph, csc_from_coo and validate_csc (gnnscale/graph/csc.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gnnscale.graph.csc import INT32_MAX, CSCGraph, csc_from_coo, index_dtype, validate_csc


def edge_set(graph: CSCGraph) -> list[tuple[int, int]]:
    """Sorted (src, dst) list of the graph's edges, duplicates kept."""
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    return sorted(zip(graph.indices.tolist(), dst.tolist()))


# ---------------------------------------------------------------------------------------------------
# csc_from_coo
# ---------------------------------------------------------------------------------------------------


def test_tiny_graph_csc(tiny_coo):
    # The drawing is in conftest.py. In-edges, sorted by source id:
    #   0: [2]   1: [0, 3, 4]   2: [1]   3: [0]   4: [2]   5: []
    src, dst, n = tiny_coo
    g = csc_from_coo(src, dst, n)
    np.testing.assert_array_equal(g.indptr, [0, 1, 4, 5, 6, 7, 7])
    np.testing.assert_array_equal(g.indices, [2, 0, 3, 4, 1, 0, 2])
    assert g.indptr.dtype == np.int64
    assert g.indices.dtype == np.int32  # small graph: int32 ids
    assert g.num_nodes == 6 and g.num_edges == 7
    np.testing.assert_array_equal(g.in_degrees(), [1, 3, 1, 1, 1, 0])
    assert g.nbytes() == 7 * 8 + 7 * 4


def test_edge_order_does_not_matter(tiny_coo):
    src, dst, n = tiny_coo
    perm = np.random.default_rng(0).permutation(src.shape[0])
    a, b = csc_from_coo(src, dst, n), csc_from_coo(src[perm], dst[perm], n)
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)


def test_symmetrize(tiny_coo):
    src, dst, n = tiny_coo
    g = csc_from_coo(src, dst, n, symmetrize=True)
    directed = set(zip(src.tolist(), dst.tolist()))
    expected = sorted(directed | {(d, s) for s, d in directed})
    assert edge_set(g) == expected
    # Node 1 now also receives from its out-neighbor 2: [0, 2, 3, 4]; node 5 stays isolated.
    np.testing.assert_array_equal(g.indices[g.indptr[1]:g.indptr[2]], [0, 2, 3, 4])
    assert g.in_degrees()[5] == 0


def test_symmetrize_of_mutual_edge_keeps_one_copy():
    # 0 <-> 1 already in both directions: symmetrizing must not double them (duplicates removed by default).
    g = csc_from_coo(np.array([0, 1]), np.array([1, 0]), 2, symmetrize=True)
    assert edge_set(g) == [(0, 1), (1, 0)]
    g = csc_from_coo(np.array([0, 1]), np.array([1, 0]), 2, symmetrize=True, remove_duplicates=False)
    assert edge_set(g) == [(0, 1), (0, 1), (1, 0), (1, 0)]


def test_remove_self_loops(tiny_coo):
    src, dst, n = tiny_coo
    src2, dst2 = np.concatenate([src, [3, 5]]), np.concatenate([dst, [3, 5]])
    kept = csc_from_coo(src2, dst2, n)
    assert (3, 3) in edge_set(kept) and (5, 5) in edge_set(kept)
    assert kept.num_edges == 9
    dropped = csc_from_coo(src2, dst2, n, remove_self_loops=True)
    assert edge_set(dropped) == edge_set(csc_from_coo(src, dst, n))


def test_remove_duplicates(tiny_coo):
    src, dst, n = tiny_coo
    # 0 -> 1 three times, 2 -> 4 twice.
    src2, dst2 = np.concatenate([src, [0, 0, 2]]), np.concatenate([dst, [1, 1, 4]])
    dedup = csc_from_coo(src2, dst2, n)  # default: remove_duplicates=True
    assert edge_set(dedup) == edge_set(csc_from_coo(src, dst, n))
    kept = csc_from_coo(src2, dst2, n, remove_duplicates=False)
    assert kept.num_edges == 10
    np.testing.assert_array_equal(kept.indices[kept.indptr[1]:kept.indptr[2]], [0, 0, 0, 3, 4])
    np.testing.assert_array_equal(kept.indices[kept.indptr[4]:kept.indptr[5]], [2, 2])


def test_in_edges_sorted_and_isolated_nodes():
    rng = np.random.default_rng(1)
    n = 50
    src, dst = rng.integers(0, n, 400), rng.integers(0, 40, 400)  # nodes 40..49 receive nothing
    g = csc_from_coo(src, dst, n, remove_duplicates=False)
    assert g.num_edges == 400
    assert np.all(g.in_degrees()[40:] == 0)
    np.testing.assert_array_equal(g.in_degrees(), np.bincount(dst, minlength=n))
    for v in range(n):
        row = g.indices[g.indptr[v]:g.indptr[v + 1]]
        np.testing.assert_array_equal(row, np.sort(src[dst == v]))


def test_empty_graph():
    e = np.array([], dtype=np.int64)
    g = csc_from_coo(e, e, 4)
    np.testing.assert_array_equal(g.indptr, [0, 0, 0, 0, 0])
    assert g.num_edges == 0


def test_index_dtype():
    assert index_dtype(10) == np.int32
    assert index_dtype(INT32_MAX) == np.int32
    assert index_dtype(2**32) == np.int64


# ---------------------------------------------------------------------------------------------------
# CSCGraph / validate_csc
# ---------------------------------------------------------------------------------------------------


def test_valid_graph_accepted(idx_dtype):
    g = CSCGraph(indptr=np.array([0, 1, 4, 5, 6, 7, 7]), indices=np.array([2, 0, 3, 4, 1, 0, 2], dtype=idx_dtype),
                 num_nodes=6)
    assert g.indices.dtype == idx_dtype
    assert g.num_edges == 7


def test_memmap_arrays_not_copied(tmp_path, idx_dtype):
    np.save(tmp_path / "indptr.npy", np.array([0, 1, 2], dtype=np.int64))
    np.save(tmp_path / "indices.npy", np.array([1, 0], dtype=idx_dtype))
    indptr = np.load(tmp_path / "indptr.npy", mmap_mode="r")
    indices = np.load(tmp_path / "indices.npy", mmap_mode="r")
    g = CSCGraph(indptr=indptr, indices=indices, num_nodes=2)
    assert g.indptr is indptr and g.indices is indices


def _csc(indptr, indices, num_nodes, idx_dtype=np.int64):
    return CSCGraph(indptr=np.asarray(indptr, dtype=np.int64), indices=np.asarray(indices, dtype=idx_dtype),
                    num_nodes=num_nodes)


def test_float_indices_rejected():
    with pytest.raises(TypeError, match="indices"):
        CSCGraph(indptr=np.array([0, 1, 2]), indices=np.array([1.0, 0.0]), num_nodes=2)


def test_int32_indptr_rejected(idx_dtype):
    with pytest.raises(TypeError, match="indptr"):
        CSCGraph(indptr=np.array([0, 1, 2], dtype=np.int32), indices=np.array([1, 0], dtype=idx_dtype), num_nodes=2)


def test_int32_indices_too_many_nodes():
    # Checked before any length check, so no 2**31-node array is needed.
    with pytest.raises(TypeError, match="indices"):
        validate_csc(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), INT32_MAX + 2)


def test_indptr_decreasing_rejected(idx_dtype):
    with pytest.raises(ValueError, match=r"indptr.*non-decreasing"):
        _csc([0, 3, 1, 3], [0, 1, 2], 3, idx_dtype)


def test_indptr_not_starting_at_zero(idx_dtype):
    with pytest.raises(ValueError, match="indptr"):
        _csc([1, 2, 3], [0, 1], 2, idx_dtype)


@pytest.mark.parametrize("last", [2, 4])
def test_indptr_not_ending_at_edge_count(idx_dtype, last):
    with pytest.raises(ValueError, match=r"indptr.*edge count"):
        _csc([0, 1, 2, last], [0, 1, 2], 3, idx_dtype)


@pytest.mark.parametrize("indptr", [[0, 1, 3], [0, 1, 2, 3, 3]])
def test_indptr_wrong_length(idx_dtype, indptr):
    with pytest.raises(ValueError, match=r"indptr.*length"):
        _csc(indptr, [0, 1, 2], 3, idx_dtype)


@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_indices_out_of_range(idx_dtype, bad):
    with pytest.raises(ValueError, match=rf"indices.*{bad}"):
        _csc([0, 1, 2, 3], [0, bad, 2], 3, idx_dtype)


def test_indices_range_check_can_be_skipped(idx_dtype):
    validate_csc(np.array([0, 1], dtype=np.int64), np.array([5], dtype=idx_dtype), 1, check_ids=False)
    with pytest.raises(ValueError, match="indices"):
        validate_csc(np.array([0, 1], dtype=np.int64), np.array([5], dtype=idx_dtype), 1)


def test_non_array_and_2d_rejected():
    with pytest.raises(TypeError, match="indptr"):
        CSCGraph(indptr=[0, 1], indices=np.array([0]), num_nodes=1)
    with pytest.raises(TypeError, match="indices"):
        CSCGraph(indptr=np.array([0, 1]), indices=[0], num_nodes=1)
    with pytest.raises(ValueError, match="indices"):
        CSCGraph(indptr=np.array([0, 1]), indices=np.array([[0]]), num_nodes=1)


@pytest.mark.parametrize("num_nodes, exc", [(2.0, TypeError), (True, TypeError), (-1, ValueError)])
def test_bad_num_nodes(num_nodes, exc):
    with pytest.raises(exc, match="num_nodes"):
        CSCGraph(indptr=np.array([0, 0, 0]), indices=np.array([], dtype=np.int64), num_nodes=num_nodes)


@pytest.mark.parametrize("name", ["src", "dst"])
def test_coo_float_ids_rejected(tiny_coo, name):
    src, dst, n = tiny_coo
    kw = {"src": src, "dst": dst}
    kw[name] = kw[name].astype(np.float64)
    with pytest.raises(TypeError, match=name):
        csc_from_coo(kw["src"], kw["dst"], n)


@pytest.mark.parametrize("name", ["src", "dst"])
@pytest.mark.parametrize("bad", [-1, 6])
def test_coo_ids_out_of_range(tiny_coo, name, bad):
    src, dst, n = tiny_coo
    kw = {"src": src, "dst": dst}
    kw[name][3] = bad
    with pytest.raises(ValueError, match=name):
        csc_from_coo(kw["src"], kw["dst"], n)


def test_coo_mismatched_lengths(tiny_coo):
    src, dst, n = tiny_coo
    with pytest.raises(ValueError, match="src, dst"):
        csc_from_coo(src, dst[:-1], n)


def test_coo_2d_rejected(tiny_coo):
    src, dst, n = tiny_coo
    with pytest.raises(ValueError, match="src"):
        csc_from_coo(src.reshape(1, -1), dst, n)
