"""Synthetic presets (-o preset=hard) and the options behind the harder graph: informative dimensions
and label noise."""

from __future__ import annotations

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.synthetic import (SyntheticConfig, hard_config, informative_dimensions, make_synthetic,
                                     preset_config, products_like_config)


def class_mean_spread(ds) -> np.ndarray:
    """float [d]: per dimension, the spread of the class means (0 where a dimension carries no class signal)."""
    means = np.stack([ds.features[ds.labels == c].mean(0) for c in range(ds.num_classes)])
    return means.std(0)


def test_informative_features_leave_the_other_dimensions_pure_noise():
    cfg = SyntheticConfig(num_nodes=8000, num_classes=16, feature_dim=20, feature_signal=1.0, feature_noise=0.5,
                          informative_features=0.25)
    spread = class_mean_spread(make_synthetic(cfg))  # ~1 (16 centroid entries) or ~0.02 (noise of 500-node means)
    informative = spread > 0.3
    assert informative.sum() == 5  # round(0.25 * 20)
    assert np.array_equal(np.flatnonzero(informative), informative_dimensions(cfg))
    assert spread[~informative].max() < 0.06


def test_label_noise_flips_the_expected_share_and_keeps_the_graph():
    base = SyntheticConfig(num_nodes=20_000, num_classes=5)
    clean, noisy = make_synthetic(base), make_synthetic(SyntheticConfig(num_nodes=20_000, num_classes=5,
                                                                        label_noise=0.3))
    changed = (clean.labels != noisy.labels).mean()
    assert changed == pytest.approx(0.3 * (1 - 1 / 5), abs=0.015)  # a flip to the same class changes nothing
    assert np.array_equal(clean.graph.indices, noisy.graph.indices)
    assert np.array_equal(clean.features, noisy.features)


@pytest.mark.parametrize("field, value, match", [
    ("informative_features", 0.0, r"informative_features: expected in \(0, 1\], got 0.0"),
    ("label_noise", 1.5, r"label_noise: expected in \[0, 1\], got 1.5"),
])
def test_new_options_reject_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        SyntheticConfig(**{field: value})


def test_presets_scale_and_override():
    assert preset_config("hard", 0.5) == hard_config(0.5)
    assert preset_config("products", 0.001) == products_like_config(0.001)
    assert preset_config("default").num_nodes == SyntheticConfig().num_nodes
    cfg = preset_config("hard", 0.1, homophily=0.9, seed=3)
    assert (cfg.num_nodes, cfg.homophily, cfg.seed, cfg.num_classes) == (10_000, 0.9, 3, hard_config().num_classes)
    with pytest.raises(ValueError, match=r"preset: expected one of default, products, hard, pubmed, papers100M, got 'easy'"):
        preset_config("easy")
    with pytest.raises(ValueError, match=r"options: \['homophilly'\] are not SyntheticConfig fields"):
        preset_config("hard", homophilly=0.5)


def test_the_pubmed_preset_has_pubmeds_shape():
    """PubMed: 19,717 nodes, 88,648 directed edges (mean degree 4.5), 500 features, 3 classes, edge
    homophily ~0.8; a fifth of the dimensions carry class signal."""
    ds = load_dataset("synthetic", preset="pubmed")
    assert (ds.graph.num_nodes, ds.feature_dim, ds.num_classes) == (19_717, 500, 3)
    assert abs(ds.graph.num_edges / ds.graph.num_nodes - 88_648 / 19_717) < 0.05 * 4.5
    dst = np.repeat(np.arange(ds.graph.num_nodes), np.diff(ds.graph.indptr))
    homophily = float((ds.labels[ds.graph.indices] == ds.labels[dst]).mean())
    assert 0.75 < homophily < 0.85, homophily
    informative = informative_dimensions(preset_config("pubmed"))
    spread, noise = class_mean_spread(ds), np.setdiff1d(np.arange(500), informative)
    assert informative.shape[0] == 100 and spread[informative].mean() > 5 * spread[noise].mean()
    assert ds.train_idx.shape[0] == int(0.05 * 19_717)


def test_load_dataset_takes_preset_and_scale():
    ds = load_dataset("synthetic", preset="hard", scale=0.02, num_classes=6)
    assert (ds.graph.num_nodes, ds.num_classes, ds.feature_dim) == (2000, 6, 100)
    with pytest.raises(ValueError, match=r"scale: needs a preset .* -o preset=hard -o scale=0.5"):
        load_dataset("synthetic", scale=0.5)


def test_cli_trains_on_the_hard_preset(capsys):
    code = main(["train", "--dataset", "synthetic", "-o", "preset=hard", "-o", "scale=0.01", "--epochs", "1",
                 "--batch-size", "128", "--quiet"])
    assert code == 0
    assert "final: test accuracy" in capsys.readouterr().out
    assert main(["train", "--dataset", "synthetic", "-o", "preset=easy", "--quiet"]) == 2
    assert "error: preset: expected one of default, products, hard, pubmed, papers100M, got 'easy'" in capsys.readouterr().err
