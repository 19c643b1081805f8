"""The typed presets: ogbn-mag's and IGB-H's shapes at a scale, determinism, the directory written block by block,
and the signal the generator sets: a vote over a paper's typed neighborhood beats its own features by at least
the configured margin, and carries nothing without homophily."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.graph.typed_storage import load_typed_dataset_dir
from gnnscale.graph.typed_synthetic import generate_typed_dataset, make_typed_synthetic, typed_preset_config

# The paths from a paper to other papers that the oracle's vote follows, as relations read from the paper outwards
# (each relation's destination is the previous step's type).
MAG_PATHS = (("paper__cites__paper",), ("author__writes__paper", "paper__rev_writes__author"),
             ("field_of_study__rev_has_topic__paper", "paper__has_topic__field_of_study"))
IGBH_PATHS = (("paper__cites__paper",), ("author__rev_written_by__paper", "paper__written_by__author"),
              ("fos__rev_topic__paper", "paper__topic__fos"))


def test_the_mag_preset_has_ogbn_mags_shape_at_a_scale():
    ds = load_dataset("synthetic", preset="mag", scale=0.002)
    assert isinstance(ds, TypedDataset) and ds.name == "synthetic-mag"
    # round(count * 0.002): 736,389 papers, 1,134,649 authors, 8,740 institutions, 59,965 fields.
    assert {t: ds.graph.count(t) for t in ds.graph.node_types} == {
        "paper": 1473, "author": 2269, "institution": 17, "field_of_study": 120}
    assert ds.feature_dims == {"paper": 128, "author": None, "institution": None, "field_of_study": None}
    assert ds.target_type == "paper" and ds.num_classes == 8  # 1473 papers: 8 classes (at least 8, 200 per class)
    assert [str(r) for r in ds.graph.relations] == [
        "author__affiliated_with__institution", "author__writes__paper", "paper__cites__paper",
        "paper__has_topic__field_of_study", "institution__rev_affiliated_with__author", "paper__rev_writes__author",
        "field_of_study__rev_has_topic__paper"]
    # Edges drawn: round(7,145,660 * 0.002) writes, round(5,416,271 * 0.002) cites; repeats and self loops go.
    writes = ds.graph.edges("author__writes__paper")[0].size
    assert 0.8 * 14_291 < writes <= 14_291
    assert ds.graph.edges("paper__rev_writes__author")[0].size == writes
    cites = set(zip(*(a.tolist() for a in ds.graph.edges("paper__cites__paper"))))
    assert cites == {(d, s) for s, d in cites} and 2 * 0.8 * 10_833 < len(cites) <= 2 * 10_833  # symmetrised
    # ogbn-mag's time split, as fractions: 629,571 / 64,879 / 41,939 of 736,389 papers.
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (1259, 129, 83)
    assert np.all(ds.labels >= 0)


def test_the_igbh_preset_has_igbhs_shape_with_features_on_every_type():
    cfg = typed_preset_config("igbh", 0.004)
    # IGB-H small: 1,000,000 papers, 1,926,066 authors, 14,751 institutes, 190,449 fields.
    assert [(t.name, t.count, t.feature_dim) for t in cfg.node_types] == [
        ("paper", 4000, 1024), ("author", 7704, 1024), ("institute", 59, 1024), ("fos", 762, 1024)]
    assert [(r.relation, r.num_edges) for r in cfg.relations] == [
        ("paper__cites__paper", 48_282), ("paper__written_by__author", 18_214),
        ("author__affiliated_to__institute", 6_522), ("paper__topic__fos", 28_936)]
    assert cfg.num_classes == 19 and (cfg.train_fraction, cfg.val_fraction, cfg.test_fraction) == (0.6, 0.2, 0.2)
    assert typed_preset_config("igbh", 1.0).count("paper") == 1_000_000
    small = typed_preset_config("igbh", 0.0005, feature_dim=16)
    assert {t.feature_dim for t in small.node_types} == {16}


def test_same_seed_same_dataset_other_seed_another():
    a, b = (make_typed_synthetic(typed_preset_config("mag", 0.001, seed=3)) for _ in range(2))
    c = make_typed_synthetic(typed_preset_config("mag", 0.001, seed=4))
    for x, y in ((a.graph.graph.indices, b.graph.graph.indices), (a.features["paper"], b.features["paper"]),
                 (a.labels, b.labels), (a.train_idx, b.train_idx)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.labels, c.labels) and not np.array_equal(a.features["paper"], c.features["paper"])


def test_the_directory_written_block_by_block_is_the_in_memory_dataset(tmp_path):
    cfg = typed_preset_config("igbh", 0.0005, feature_dim=8)
    generate_typed_dataset(cfg, tmp_path / "d")
    back, ds = load_typed_dataset_dir(tmp_path / "d"), make_typed_synthetic(cfg)
    for t in ds.graph.node_types:
        np.testing.assert_array_equal(back.features[t], ds.features[t])
    for x, y in ((back.graph.rel_indptr, ds.graph.rel_indptr), (back.graph.graph.indices, ds.graph.graph.indices),
                 (back.labels, ds.labels), (back.test_idx, ds.test_idx)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match=r"out_dir: .* already exists"):
        generate_typed_dataset(cfg, tmp_path / "d")


def _adjacency(ds: TypedDataset, relation: str) -> sp.csr_matrix:
    """[count of the destination type, count of the source type]: 1 where the relation has an edge."""
    rel = ds.graph.relations[ds.graph.relation_id(relation)]
    src, dst = ds.graph.edges(relation)
    return sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(ds.graph.count(rel.dst), ds.graph.count(rel.src)))


def oracle_accuracies(ds: TypedDataset, paths) -> tuple[float, float]:
    """(features, neighborhood) accuracy on the val and test papers of two model-free classifiers: the nearest
    class mean of the training papers' features, and a vote of the training papers' labels reached along
    ``paths`` (the features' answer where no vote reaches)."""
    n, classes = ds.graph.count(ds.target_type), ds.num_classes
    train = ds.local_ids(ds.train_idx)
    held_out = ds.local_ids(np.concatenate([ds.val_idx, ds.test_idx]))
    truth = ds.labels[held_out]
    x = np.asarray(ds.features[ds.target_type], dtype=np.float64)
    means = np.stack([x[train][ds.labels[train] == c].mean(axis=0) for c in range(classes)])
    by_features = (x[held_out] @ means.T - 0.5 * (means ** 2).sum(axis=1)).argmax(axis=1)
    known = np.zeros((n, classes))
    known[train, ds.labels[train]] = 1.0
    votes = np.zeros((n, classes))
    for path in paths:
        reached = known
        for relation in reversed(path):
            reached = _adjacency(ds, relation) @ reached
        votes += reached
    votes = votes[held_out]
    by_vote = np.where(votes.sum(axis=1) > 0, votes.argmax(axis=1), by_features)
    return float((by_features == truth).mean()), float((by_vote == truth).mean())


@pytest.mark.parametrize("preset, scale, paths, homophily, feature_accuracy", [
    ("mag", 0.01, MAG_PATHS, 0.5, 0.3),
    ("mag", 0.01, MAG_PATHS, 0.2, 0.15),
    ("igbh", 0.002, IGBH_PATHS, 0.5, 0.3),
], ids=["mag", "mag-weak", "igbh"])
def test_the_typed_neighborhood_beats_the_features_by_the_configured_margin(preset, scale, paths, homophily,
                                                                          feature_accuracy):
    cfg = typed_preset_config(preset, scale, homophily=homophily, feature_accuracy=feature_accuracy,
                              feature_dim=64)
    ds = make_typed_synthetic(cfg)
    features, neighborhood = oracle_accuracies(ds, paths)
    assert abs(features - feature_accuracy) < 0.06, features  # the features tell what the setting lets them
    assert neighborhood - features >= cfg.margin, (neighborhood, features, cfg.margin)


def test_without_homophily_the_relations_carry_no_class():
    ds = make_typed_synthetic(typed_preset_config("mag", 0.01, homophily=0.0, feature_accuracy=1.0 / 36))
    assert ds.num_classes == 36
    features, neighborhood = oracle_accuracies(ds, MAG_PATHS)
    assert features < 2 / 36 and neighborhood < 2 / 36, (features, neighborhood)  # chance is 1/36


@pytest.mark.parametrize("options, match", [
    ({"homophilly": 0.5}, r"options: \['homophilly'\] are not settings of the typed preset 'mag'; valid: \["),
    ({"relations": ()}, r"options: \['relations'\] are not settings"),
    ({"feature_accuracy": 0.01}, r"feature_accuracy: expected in \[1 / num_classes = 0.125, 1\], got 0.01"),
    ({"homophily": 1.5}, r"homophily: expected in \[0, 1\], got 1.5"),
    ({"feature_dim": 0}, r"feature_dim: expected an int >= 1, got 0"),
    ({"scale": -1.0}, r"scale: expected a finite number > 0, got -1.0"),
])
def test_bad_preset_settings_are_one_line(options, match):
    options = dict(options)
    scale = options.pop("scale", 0.001)
    with pytest.raises(ValueError, match=match):
        typed_preset_config("mag", scale, **options)


def test_generate_writes_a_typed_preset_from_the_command_line(tmp_path, capsys):
    assert main(["generate", "--preset", "mag", "--scale", "0.001", "--seed", "2", "-o", "homophily=0.4",
                 "--out", str(tmp_path / "mag")]) == 0
    assert "generating 1,940 nodes of 4 types, 21,111 edges drawn in 4 relations (and their reverses)" in \
        capsys.readouterr().out
    back = load_dataset("dir", tmp_path / "mag")
    ds = make_typed_synthetic(typed_preset_config("mag", 0.001, seed=2, homophily=0.4))
    np.testing.assert_array_equal(back.graph.graph.indices, ds.graph.graph.indices)
    np.testing.assert_array_equal(back.features["paper"], ds.features["paper"])
    assert main(["generate", "--preset", "mag", "--scale", "0.001", "-o", "relations=[]", "--out",
                 str(tmp_path / "x")]) == 2
    assert "options: ['relations'] are not settings of the typed preset 'mag'" in capsys.readouterr().err
