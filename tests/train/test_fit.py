"""``gnnscale.train.fit`` with models of one's own: over gnnscale blocks and PyG's GraphSAGE, in one
process and under torchrun (real processes, gloo on 127.0.0.1), against a one-process reference that
trains the same steps in plain PyTorch; and gnnscale's built-in model through ``fit`` against the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from fit_models import make_model, reference_losses, whole_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.partition import write_partition_dir
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import seeded_model
from gnnscale.train.layouts import LayoutOptions
from gnnscale.train.layouts.dgs_config import DGSConfig
from launch import ENV, LAUNCH_TIMEOUT_S, run_launch, torchrun

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8, seed=5)
# The settings of fit_script.py, whose runs the distributed tests check.
CONFIG = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=2, lr=0.01, seed=3, threads=1, evaluate=False)
CLI_ARGS = ["--model", "sage", "--hidden", "16", "--fanouts", "4,3", "--batch-size", "64", "--epochs", "2", "--lr",
            "0.01", "--seed", "3", "--threads", "1", "--no-eval", "--quiet"]
# P workers' gradients are summed by gloo's all-reduce in its own order, the reference sums them in rank
# order. With 1 and 2 workers the sums are the same (a + b == b + a) and so are the losses, bit for bit.
# With 4, float32 addition is not associative: a gradient may differ in its last bit, which Adam's steps
# carry on (seen: losses within 6e-8 over the 6 steps here). The tolerance allows about 8 float32 ulps of
# a loss near 1, far below what one different batch or a missed gradient would change.
RTOL, ATOL = 1e-6, 1e-6


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


@pytest.fixture(scope="module")
def partitions(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("fit_parts")
    for p in (2, 4):
        write_partition_dir(dataset, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (2, 4)}


@pytest.fixture(scope="module")
def launched(partitions, tmp_path_factory):
    """``launched(nproc)``: the per-step losses of every run of fit_script.py on ``nproc`` workers."""
    runs: dict[int, dict] = {}
    scratch = tmp_path_factory.mktemp("fit_runs")

    def get(nproc: int) -> dict:
        if nproc not in runs:
            out = scratch / f"runs{nproc}.json"
            env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])}
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                   str(ROOT / "tests" / "fit_script.py"), str(partitions[nproc]), str(out)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, env=env)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            runs[nproc] = json.loads(out.read_text())
        return runs[nproc]

    return get


def reference(kind: str, partition_dir: Path, nproc: int) -> list[list[float]]:
    torch.set_num_threads(1)  # as the workers: the same kernels, the same rounding
    graph, features, labels, train_parts = whole_dataset(partition_dir, nproc)
    model = make_model(kind, features.shape[1], int(labels.max()) + 1, len(CONFIG.fanouts))
    return reference_losses(model, kind, graph, features, labels, train_parts, CONFIG)


@pytest.mark.parametrize("kind", ["blocks", "pyg"])
def test_own_model_in_one_process_trains_exactly_like_the_reference(dataset, kind):
    model = make_model(kind, dataset.feature_dim, dataset.num_classes, len(CONFIG.fanouts))
    torch.set_num_threads(1)
    report = fit(model, dataset, inputs=kind, config=CONFIG, progress=False)
    graph, features = dataset.graph, torch.from_numpy(dataset.features)
    labels = torch.from_numpy(dataset.labels).long()
    expected = reference_losses(make_model(kind, dataset.feature_dim, dataset.num_classes, len(CONFIG.fanouts)),
                                kind, graph, features, labels, [torch.from_numpy(dataset.train_idx)], CONFIG)
    assert [h["iteration_losses"] for h in report.history] == expected


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("kind", ["blocks", "pyg"])
def test_own_model_trains_distributed_like_its_workers_in_one_process(launched, partitions, nproc, kind):
    runs = launched(nproc)
    expected = reference(kind, partitions[nproc], nproc)
    for layout in ("hybrid", "vanilla"):
        got = runs[f"{kind}-{layout}"]
        assert [len(epoch) for epoch in got] == [len(epoch) for epoch in expected]
        if nproc == 2:
            assert got == expected
        else:
            assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                         rtol=RTOL, atol=ATOL)
    # The same blocks and features in both layouts (only the communication differs): the same bits.
    assert runs[f"{kind}-hybrid"] == runs[f"{kind}-vanilla"]


@pytest.mark.slow
def test_builtin_model_through_fit_trains_exactly_like_the_cli(launched, partitions, tmp_path):
    out = tmp_path / "cli.json"
    run = run_launch(torchrun(2, "--partitions", str(partitions[2]), "--layout", "hybrid", "--metrics-out", str(out),
                              *CLI_ARGS))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cli = [h["iteration_losses"] for h in json.loads(out.read_text())["history"]]
    assert launched(2)["builtin-hybrid"] == cli


def test_own_model_resumes_from_its_checkpoint_exactly(dataset, tmp_path):
    """Dropout from torch's generator included: fit seeds it per step, so the resumed epoch draws the masks
    the uninterrupted run drew. Another model does not resume the checkpoint."""
    dims = (dataset.feature_dim, dataset.num_classes, len(CONFIG.fanouts))
    ckpt = tmp_path / "run.ckpt"
    whole = fit(make_model("pyg", *dims), dataset, inputs="pyg", config=CONFIG, progress=False)
    fit(make_model("pyg", *dims), dataset, inputs="pyg", config=replace(CONFIG, epochs=1),
        outputs=RunOutputs(checkpoint=ckpt), progress=False)
    resumed = fit(make_model("pyg", *dims), dataset, inputs="pyg", config=CONFIG,
                  outputs=RunOutputs(checkpoint=ckpt, resume=True), progress=False)
    assert [h["iteration_losses"] for h in resumed.history] == [h["iteration_losses"] for h in whole.history]
    with pytest.raises(ValueError, match=r"checkpoint: .* model\.inputs='pyg', this run has model\.inputs='blocks'"):
        fit(make_model("blocks", *dims), dataset, inputs="blocks", config=replace(CONFIG, epochs=3),
            outputs=RunOutputs(checkpoint=ckpt, resume=True), progress=False)


def test_fit_leaves_the_callers_random_state_as_it_was(dataset):
    model = make_model("blocks", dataset.feature_dim, dataset.num_classes, 2)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    fit(model, dataset, inputs="blocks", config=TrainConfig(fanouts=(3, 2), batch_size=256, epochs=1, threads=1,
                                                            evaluate=False), progress=False)
    assert torch.equal(torch.get_rng_state(), before)


def builtin(dataset) -> torch.nn.Module:
    return seeded_model(ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=8,
                                    num_classes=dataset.num_classes, num_layers=2), 0)


@pytest.mark.parametrize("layout, match", [
    ("split", "split-aware layers.*your own"),
    (LayoutOptions(layout="hybrid", dgs=DGSConfig()), "dgs.*built-in"),
])
def test_layouts_that_need_gnnscale_layers_refuse_a_model_of_ones_own(dataset, partitions, layout, match):
    model = make_model("pyg", dataset.feature_dim, dataset.num_classes, 2)
    with pytest.raises(ValueError, match=match):
        fit(model, partitions[2], inputs="pyg", config=CONFIG, layout=layout)


@pytest.mark.parametrize("kind, inputs, config, outputs, match", [
    ("blocks", "auto", CONFIG, RunOutputs(), "inputs: expected one of"),
    ("builtin", "pyg", CONFIG, RunOutputs(), "inputs: .*takes blocks"),
    ("pyg", "pyg", TrainConfig(fanouts=(3, 2), sampler="ladies"), RunOutputs(), "sampler: --sampler ladies"),
    ("pyg", "pyg", CONFIG, RunOutputs(model_out="m.pt"), "model_out: .*torch.save"),
    ("blocks", "blocks", CONFIG, RunOutputs(full_eval="accuracy"), "full_eval"),
])
def test_what_cannot_run_is_one_clear_error(dataset, kind, inputs, config, outputs, match):
    model = builtin(dataset) if kind == "builtin" else make_model(kind, dataset.feature_dim, dataset.num_classes, 2)
    with pytest.raises(ValueError, match=match):
        fit(model, dataset, inputs=inputs, config=config, outputs=outputs, progress=False)


def test_a_dataset_trains_in_this_process_without_layout_options(dataset):
    with pytest.raises(ValueError, match="layout: applies to a distributed run"):
        fit(builtin(dataset), dataset, inputs="blocks", layout="vanilla")
