"""Mixed precision (``--precision``, ``TrainConfig.precision``, gnnscale/train/precision.py): bf16-mixed trains on
the CPU close to float32; a 16-mixed run checkpointed mid-epoch resumes exactly, its gradient scaler's state
included; the setting is part of what a checkpoint must match; bad values and float16 on the CPU are named in one
line. The `gpu` tests train under CUDA autocast (bfloat16 and float16)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from gnnscale.cli import main
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.checkpoints.files import previous_path, read_payload, write_atomic
from gnnscale.train.inputs import seeded_model
from gnnscale.train.precision import StepPrecision
from gnnscale.train.rules import RunSettings, check_run
from gnnscale.train.tasks.node import NODE

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=16, seed=3)
CLI = ["train", "--dataset", "synthetic", "-o", "num_nodes=300", "-o", "feature_dim=8", "-o", "num_classes=3",
       "--fanouts", "3,2", "--epochs", "1", "--threads", "1", "--quiet"]
# float16 on the CPU warns once per run (rules.note_cpu_float16): expected in these tests.
pytestmark = pytest.mark.filterwarnings("ignore:precision. 16-mixed with --device cpu")


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


def config(**overrides) -> TrainConfig:
    return TrainConfig(**{**dict(fanouts=(4, 3), batch_size=128, epochs=3, lr=0.01, seed=7, threads=1), **overrides})


def trained(ds, cfg: TrainConfig, name: str = "sage", **outputs):
    model = ModelConfig(name=name, in_dim=ds.feature_dim, hidden_dim=16, num_classes=ds.num_classes, num_layers=2,
                        heads=2, dropout=0.2)
    return fit(seeded_model(model, cfg.seed), ds, inputs="blocks", config=cfg, outputs=RunOutputs(**outputs),
               progress=False)


def numbers(report) -> list[tuple]:
    return [(h["loss"], h["iteration_losses"], h["train_acc"], h["val_acc"], h["test_acc"]) for h in report.history]


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_bf16_mixed_trains_on_the_cpu_close_to_float32(dataset, name):
    """The same batches and dropout masks, products in bfloat16: every iteration's loss finite and within 1% of
    the float32 run's, the accuracies within 3 points (7 of the 240 test nodes)."""
    full, mixed = trained(dataset, config(), name), trained(dataset, config(precision="bf16-mixed"), name)
    for a, b in zip(mixed.history, full.history, strict=True):
        assert all(np.isfinite(a["iteration_losses"]))
        np.testing.assert_allclose(a["iteration_losses"], b["iteration_losses"], rtol=1e-2)
        assert abs(a["test_acc"] - b["test_acc"]) <= 0.03 and abs(a["val_acc"] - b["val_acc"]) <= 0.03
    assert numbers(mixed) != numbers(full)  # bfloat16 did compute: the runs are not the same bits


def test_a_16_mixed_run_resumes_exactly_with_its_gradient_scaler(dataset, tmp_path):
    """Features scaled up 300x make float16's gradients overflow at the scaler's first scale (2**16), so the
    scaler skips steps and backs off: by the mid-epoch checkpoint its state is not a fresh scaler's, and the
    resumed run, which restores it, continues the uninterrupted run bit for bit."""
    loud = replace(dataset, features=np.asarray(dataset.features) * 300)
    cfg = config(precision="16-mixed")
    whole = trained(loud, cfg)
    ckpt = tmp_path / "run.pt"
    trained(loud, replace(cfg, epochs=2), checkpoint=ckpt, checkpoint_every=4)
    mid = tmp_path / "mid.pt"  # the save before the last one: epoch 1, 2 of its 6 iterations done
    mid.write_bytes(previous_path(ckpt).read_bytes())
    payload = read_payload(mid)
    assert (payload["epoch"], payload["step"]) == (1, 2)
    assert payload["scaler_state"]["scale"] < 2.0 ** 16  # it backed off: the state is the run's own
    assert numbers(trained(loud, cfg, checkpoint=mid, resume=True)) == numbers(whole)
    # Without the scaler's state the run could not continue exactly: refused, naming what is missing.
    write_atomic(mid, {**payload, "scaler_state": None})
    with pytest.raises(ValueError, match=r"checkpoint: holds no gradient scaler state, which --precision 16-mixed "
                                         r"needs to resume"):
        trained(loud, cfg, checkpoint=mid, resume=True)


def test_a_checkpoint_resumes_only_with_its_precision(dataset, tmp_path):
    """The precision changes every number, so it is part of the run's signature; a checkpoint written before
    the setting existed ran in float32 and resumes as 32."""
    ckpt = tmp_path / "run.pt"
    trained(dataset, config(epochs=1), checkpoint=ckpt)
    with pytest.raises(ValueError, match=r"checkpoint: .* was written with train.precision='32', this run has "
                                         r"train.precision='bf16-mixed'; resume with the same --precision"):
        trained(dataset, config(epochs=2, precision="bf16-mixed"), checkpoint=ckpt, resume=True)
    payload = read_payload(ckpt)
    del payload["signature"]["train"]["precision"]
    write_atomic(ckpt, payload)
    assert len(trained(dataset, config(epochs=2), checkpoint=ckpt, resume=True).history) == 2


def test_the_precision_is_one_of_lightnings_names(capsys):
    with pytest.raises(ValueError, match=r"precision: expected one of \('32', 'bf16-mixed', '16-mixed'\), got 'bf16'"):
        config(precision="bf16")
    assert main([*CLI, "--precision", "16"]) == 2
    assert "argument --precision: invalid choice: '16'" in capsys.readouterr().err


@pytest.mark.filterwarnings("default")
def test_float16_on_the_cpu_runs_and_says_bfloat16_is_the_cpus_half():
    run = RunSettings(train=config(precision="16-mixed"), task=NODE, task_settings=None, layout=None,
                      outputs=RunOutputs(), model="sage")
    with pytest.warns(UserWarning, match=r"^precision: 16-mixed with --device cpu autocasts to float16"):
        check_run(run)


def test_the_command_line_trains_in_bf16_mixed_and_records_it(tmp_path):
    out = tmp_path / "m.json"
    assert main([*CLI, "--precision", "bf16-mixed", "--metrics-out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["train"]["precision"] == "bf16-mixed" and np.isfinite(metrics["history"][0]["loss"])


def test_the_scaler_steps_only_on_finite_gradients():
    """StepPrecision with a scaler, by hand: a finite gradient steps with the unscaled gradient; an infinite one
    is skipped and halves the scale (GradScaler's backoff), the parameter untouched."""
    weight = torch.nn.Parameter(torch.tensor([1.0]))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    precision = StepPrecision("16-mixed", torch.device("cpu"))
    precision.backward((weight * 3.0).sum())
    assert weight.grad.item() == 3.0 * 2.0 ** 16  # scaled
    precision.step(optimizer)
    assert weight.item() == 1.0 - 0.5 * 3.0
    optimizer.zero_grad()
    precision.backward((weight * float("inf")).sum())
    precision.step(optimizer)
    assert weight.item() == -0.5 and precision.state_dict()["scale"] == 2.0 ** 15


# --- on a GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_on_cuda_trains_close_to_the_cpu_float32_run(dataset, precision):
    """CUDA autocast (the torch path in the half dtype; float16 with its scaler): finite losses within 2% of
    the CPU's float32 run, accuracies within 3 points."""
    cpu = trained(dataset, config())
    gpu = trained(dataset, config(device="cuda", precision=precision))
    for a, b in zip(gpu.history, cpu.history, strict=True):
        assert all(np.isfinite(a["iteration_losses"]))
        np.testing.assert_allclose(a["iteration_losses"], b["iteration_losses"], rtol=2e-2)
        assert abs(a["test_acc"] - b["test_acc"]) <= 0.03
