"""Link splits: the random split by the unordered original-id pair (reverse edges together, the same under
any relabelling, validation and test edges out of the message-passing graph) and OGB's link layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.link_split import (check_edge_split, csc_edge_codes, edge_codes, edge_destinations, keep_edges,
                                      random_link_split, read_link_split)
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticConfig(num_nodes=600, avg_degree=8.0, num_classes=3, feature_dim=4, seed=2)).graph


def edge_set(src, dst) -> set:
    return set(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))


def all_edges(g) -> set:
    return edge_set(g.indices, edge_destinations(g.indptr))


def test_the_synthetic_graph_is_symmetric(graph):
    edges = all_edges(graph)
    assert edges == {(v, u) for u, v in edges}


def test_a_random_split_partitions_the_edges_keeps_reverses_together_and_removes_held_out_edges(graph):
    split = random_link_split(graph, (0.7, 0.1, 0.2), key=11)
    train, val, test = (edge_set(*getattr(split, name)) for name in ("train", "val", "test"))
    assert train | val | test == all_edges(graph)
    assert not (train & val or train & test or val & test)
    for part in (train, val, test):  # an undirected edge falls in one part with its reverse
        assert part == {(v, u) for u, v in part}
    # The message-passing graph is exactly the training edges.
    assert all_edges(split.graph) == train
    # Each pair draws independently: the shares are the fractions within a few standard deviations.
    n = graph.num_edges
    for part, fraction in ((val, 0.1), (test, 0.2)):
        assert abs(len(part) / n - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / (n / 2))


def test_a_random_split_depends_on_the_key_and_on_original_ids_only(graph):
    a = random_link_split(graph, (0.85, 0.05, 0.10), key=1)
    assert edge_set(*a.val) == edge_set(*random_link_split(graph, (0.85, 0.05, 0.10), key=1).val)
    assert edge_set(*a.val) != edge_set(*random_link_split(graph, (0.85, 0.05, 0.10), key=2).val)
    # Relabel the nodes (as a partition does): the split, mapped back to the original ids, is the same.
    perm = np.random.default_rng(0).permutation(graph.num_nodes)  # new id of each old node
    new_to_old = np.argsort(perm)
    src, dst = np.asarray(graph.indices, dtype=np.int64), edge_destinations(graph.indptr)
    relabelled = csc_from_coo(perm[src], perm[dst], graph.num_nodes)
    b = random_link_split(relabelled, (0.85, 0.05, 0.10), key=1, original_ids=new_to_old)
    for name in ("train", "val", "test"):
        assert edge_set(*new_to_old[getattr(b, name)]) == edge_set(*getattr(a, name))


@pytest.mark.parametrize("fractions, message", [
    ((0.8, 0.1, 0.05), "must sum to 1"), ((1.1, -0.05, -0.05), "expected fractions >= 0"),
    ((0.0, 0.5, 0.5), "leaves no training edge"), ((0.9, 0.1), "three fractions"),
])
def test_a_bad_edge_split_is_one_line_naming_it(fractions, message):
    with pytest.raises(ValueError, match=f"^edge_split: .*{message}"):
        check_edge_split(fractions)


def write_split(directory, fmt, parts: dict) -> None:
    directory.mkdir(exist_ok=True)
    for name, arrays in parts.items():
        if fmt == "npz":
            np.savez(directory / f"{name}.npz", **arrays)
        else:
            torch.save({k: torch.as_tensor(v) for k, v in arrays.items()}, directory / f"{name}.pt")


@pytest.mark.parametrize("fmt", ["npz", "pt"])
def test_an_ogb_link_split_removes_valid_and_test_pairs_both_ways(tmp_path, fmt):
    # 0 - 1 - 2 - 3 and 0 - 2, undirected (both directions stored).
    g = csc_from_coo(np.array([0, 1, 2, 0]), np.array([1, 2, 3, 2]), 4, symmetrize=True)
    write_split(tmp_path, fmt, {
        "train": {"source_node": np.array([0, 1]), "target_node": np.array([1, 2])},
        "valid": {"source_node": np.array([2]), "target_node": np.array([3]),
                  "target_node_neg": np.array([[0, 1]])},
        "test": {"source_node": np.array([0]), "target_node": np.array([2])},
    })
    split = read_link_split(g, tmp_path)
    assert all_edges(split.graph) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    assert edge_set(*split.train) == all_edges(split.graph)
    assert edge_set(*split.val) == {(2, 3)} and edge_set(*split.test) == {(0, 2)}
    assert split.val_neg.tolist() == [[0, 1]] and split.test_neg is None


def test_a_split_file_missing_a_key_is_one_line(tmp_path):
    g = csc_from_coo(np.array([0, 1]), np.array([1, 2]), 3, symmetrize=True)
    pairs = {"source_node": np.array([0]), "target_node": np.array([1])}
    write_split(tmp_path, "npz", {"train": pairs, "valid": {"source_node": np.array([1])}, "test": pairs})
    with pytest.raises(ValueError, match=r"^link_split: .*valid has no 'target_node' \(it holds source_node\)$"):
        read_link_split(g, tmp_path)
    (tmp_path / "test.npz").unlink()
    with pytest.raises(ValueError, match=r"^link_split: .* has neither test.npz nor test.pt"):
        read_link_split(g, tmp_path)


def test_keep_edges_counts_rows_with_empty_ones_anywhere():
    # Rows 0 and 3 and 4 empty (4 and 5 trail), row 1 has 3 edges, row 2 has 2.
    indptr = np.array([0, 0, 3, 5, 5, 5])
    indices = np.array([7, 8, 9, 1, 2])
    keep = np.array([True, False, True, False, True])
    new_indptr, new_indices = keep_edges(indptr, indices, keep)
    assert new_indptr.tolist() == [0, 0, 2, 3, 3, 3] and new_indices.tolist() == [7, 9, 2]
    # The chunked codes equal the per-edge ones (destinations found by binary search, empty rows skipped).
    dst = edge_destinations(indptr)
    assert dst.tolist() == [1, 1, 1, 2, 2]
    np.testing.assert_array_equal(csc_edge_codes(indptr, indices, (0.5, 0.25, 0.25), 3, first_row=10),
                                  edge_codes(indices, dst + 10, (0.5, 0.25, 0.25), 3))
