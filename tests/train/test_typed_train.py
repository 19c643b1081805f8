"""Training on a typed graph in one process: R-GCN, R-SAGE and R-GAT beat a model of the target type's own features
by the margin the generator sets; the fused kernel trains exactly as its two-step per-relation baseline; a resumed
run equals the uninterrupted one; and what a typed run cannot do is one line at the command line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.typed_synthetic import typed_preset_config
from gnnscale.nn.typed_models import TypedModelConfig
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import seeded_model

SCALE = 0.003  # about 2,200 papers of the mag-shaped graph
CFG = TrainConfig(fanouts=(8, 4), batch_size=256, epochs=4, lr=0.01, seed=1, threads=1)


@pytest.fixture(scope="module")
def mag():
    return load_dataset("synthetic", None, preset="mag", scale=SCALE)


def typed_model(ds, name: str, **kw):
    dims = {t: d for t, d in ds.feature_dims.items() if d is not None}
    cfg = TypedModelConfig.for_graph(ds.graph, feature_dims=dims, name=name, num_classes=ds.num_classes, num_layers=2,
                                     hidden_dim=32, heads=2, dropout=0.2, **kw)
    return seeded_model(cfg, 0)


@pytest.fixture(scope="module")
def features_only(mag) -> float:
    return features_only_accuracy(mag)


def features_only_accuracy(ds) -> float:
    """The oracle: a two-layer MLP on the papers' own features, trained with plain torch on the same split (one
    thread: a tiny model, which more threads only slow down on a shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _mlp_accuracy(ds)
    finally:
        torch.set_num_threads(threads)


def _mlp_accuracy(ds) -> float:
    lo = ds.target_range[0]
    x = torch.from_numpy(np.asarray(ds.features[ds.target_type]))
    y = torch.from_numpy(np.asarray(ds.labels))
    train, test = torch.from_numpy(ds.train_idx - lo), torch.from_numpy(ds.test_idx - lo)
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, ds.num_classes))
    opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
    for _ in range(100):
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x[train]), y[train]).backward()
        opt.step()
    with torch.no_grad():
        return float((mlp(x[test]).argmax(1) == y[test]).double().mean())


@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_relational_models_beat_the_target_types_own_features_by_the_generators_margin(mag, features_only, name):
    cfg = typed_preset_config("mag", SCALE)
    mlp = features_only
    assert mlp <= cfg.feature_accuracy + 0.08  # the generator's ceiling for a model of the features alone
    report = fit(typed_model(mag, name), mag, inputs="blocks", config=CFG, progress=False)
    assert report.test_acc_at_best_val >= mlp + cfg.margin / 2, (report.test_acc_at_best_val, mlp, cfg.margin)


def test_the_fused_kernel_trains_exactly_as_the_two_step_per_relation_baseline(mag):
    cfg = replace(CFG, epochs=1)
    fused = fit(typed_model(mag, "rgcn"), mag, inputs="blocks", config=cfg, progress=False)
    two_step = fit(typed_model(mag, "rgcn"), mag, inputs="blocks", config=replace(cfg, sampler="two_step"),
                   progress=False)
    assert fused.history[0]["iteration_losses"] == two_step.history[0]["iteration_losses"]
    assert fused.history[0]["sampled_edges"] == two_step.history[0]["sampled_edges"]


def test_a_resumed_typed_run_equals_the_uninterrupted_one(mag, tmp_path):
    cfg = replace(CFG, epochs=2)
    whole = fit(typed_model(mag, "rsage"), mag, inputs="blocks", config=cfg, progress=False)
    ckpt = tmp_path / "run.ckpt"
    fit(typed_model(mag, "rsage"), mag, inputs="blocks", config=replace(cfg, epochs=1), progress=False,
        outputs=RunOutputs(checkpoint=ckpt, checkpoint_every=3))
    resumed = fit(typed_model(mag, "rsage"), mag, inputs="blocks", config=cfg, progress=False,
                  outputs=RunOutputs(checkpoint=ckpt, resume=True))
    assert [h["iteration_losses"] for h in resumed.history] == [h["iteration_losses"] for h in whole.history]
    assert [h["val_acc"] for h in resumed.history] == [h["val_acc"] for h in whole.history]


MAG = ["--dataset", "synthetic", "-o", "preset=mag", "-o", f"scale={SCALE}", "--quiet"]


@pytest.mark.parametrize("argv, line", [
    (["--model", "rgcn", "--fanouts", "4,2", "--epochs", "1"], None),
    (["--model", "rgat", "--fanouts", "4,2", "--relation-fanouts", "cites=2", "rev_writes=1,0", "--epochs", "1"], None),
    (["--model", "rgcn", "--relation-fanouts", "likes=2"], "--relation-fanouts: the graph has no relation named 'likes'; "
                                                           "it has author__affiliated_with__institution, "),
    (["--model", "rgcn", "--relation-fanouts", "cites"], "--relation-fanouts: expected REL=N,N (a relation and its "
                                                         "fanouts per hop), got 'cites'"),
    (["--fanouts", "4,2"], "--model: a typed graph trains --model rgcn or rsage or rgat (one operator per relation), "
                           "got --model sage"),
    (["--model", "rgcn", "--sampler", "matrix", "--bulk", "2"],
     "--sampler: --model rgcn samples a typed graph with --sampler fused or two_step, got --sampler matrix"),
    (["--model", "rgcn", "--sample-on", "device"], "--sample-on: --sample-on device holds a plain graph's data"),
    (["--model", "rgcn", "--partitions", "P", "--layout", "split"], "--layout: --model rgcn trains a typed graph in one "
                                                                    "process or with --layout hybrid or vanilla, got "
                                                                    "--layout split"),
    (["--model", "rgcn", "--partitions", "P", "--dgs"], "--dgs: --dgs explains plain models over a plain graph"),
    (["--model", "rsage", "--partitions", "P", "--cache-fraction", "0.1"],
     "--cache-fraction: --model rsage fetches every node type's rows from their owners, without a cache"),
    (["--model", "rgat", "--partitions", "P", "--layout", "vanilla", "--sampler", "two_step"],
     "--sampler: --sampler two_step runs distributed with --layout hybrid, got --layout vanilla"),
], ids=["trains", "relation-fanouts", "unknown-relation", "relation-fanouts-syntax", "plain-model", "matrix", "sample-on-device", "split", "dgs", "cache",
        "vanilla-two-step"])
def test_the_command_line_trains_a_typed_graph_or_says_why_not_in_one_line(argv, line, capsys):
    args = [*MAG, *argv] if "--partitions" not in argv else ["--quiet", *argv]
    code = main(["train", *args])
    err = capsys.readouterr().err
    if line is None:
        assert code == 0, err
        return
    assert code == 2 and err.startswith(f"gnnscale train: error: {line}") and err.count("\n") == 1, err


def test_a_plain_model_on_a_typed_graph_is_refused_by_fit_too(mag):
    from gnnscale.nn import ModelConfig

    plain = seeded_model(ModelConfig(name="sage", in_dim=8, num_classes=mag.num_classes, num_layers=2), 0)
    with pytest.raises(ValueError, match="model: --model sage does not train a typed dataset"):
        fit(plain, mag, inputs="blocks", config=CFG, progress=False)


@pytest.mark.parametrize("name", ["rgcn", "rsage", "rgat"])
def test_typed_models_train_in_bf16_mixed_close_to_float32(mag, name):
    """Under autocast a relation's term is bfloat16 and the sum it joins float32: the layer sums in float32. Every
    iteration's loss is finite and within 2% of the float32 run's (the same batches and dropout masks)."""
    cfg = replace(CFG, epochs=1)
    full = fit(typed_model(mag, name), mag, inputs="blocks", config=cfg, progress=False)
    mixed = fit(typed_model(mag, name), mag, inputs="blocks", config=replace(cfg, precision="bf16-mixed"),
                progress=False)
    assert all(np.isfinite(mixed.history[0]["iteration_losses"]))
    np.testing.assert_allclose(mixed.history[0]["iteration_losses"], full.history[0]["iteration_losses"], rtol=2e-2)
