"""The scripts under examples/ run from a checkout: a short run of each (a few seconds), in a fresh process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.partition import write_partition_dir

ROOT = Path(__file__).resolve().parents[1]
CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", ROOT / ".." / "shared" / "data")) / "cora_planetoid"


def run_example(name: str, *args: str) -> str:
    # The checkout's gnnscale first on the path: the example runs against this code, installed or not.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, f"{name} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_pyg_graphsage_on_synthetic_data() -> None:
    out = run_example("pyg_graphsage.py", "--num-nodes", "2000", "--epochs", "2", "--max-batches", "3",
                      "--batch-size", "64")
    assert len(re.findall(r"^epoch \d: loss [\d.]+ ", out, re.MULTILINE)) == 2
    assert re.search(r"^test accuracy [01]\.\d{4}$", out, re.MULTILINE), out


@pytest.mark.slow
@pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")
def test_pyg_graphsage_on_cora() -> None:
    out = run_example("pyg_graphsage.py", "--dataset", "cora", "--data-dir", str(CORA_DIR), "--epochs", "1",
                      "--max-batches", "2", "--batch-size", "32")
    assert out.startswith("cora: 2708 nodes") and "test accuracy" in out, out


@pytest.mark.slow
def test_pyg_to_hetero_on_the_mag_preset() -> None:
    out = run_example("pyg_to_hetero.py", "--scale", "0.001", "--epochs", "1", "--hidden", "16")
    assert out.startswith("mag-shaped graph: 736 papers") and len(re.findall(r"^epoch 0: loss [\d.]+ ", out, re.M)) == 1
    assert re.search(r"^test accuracy [01]\.\d{4}$", out, re.MULTILINE), out


def run_distributed_example(partition_dir: Path, *args: str) -> str:
    """examples/pyg_graphsage_distributed.py under torchrun, one worker per part of ``partition_dir``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "examples" / "pyg_graphsage_distributed.py"), "--partitions",
                           str(partition_dir), "--layout", "hybrid", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_pyg_graphsage_under_torchrun_on_synthetic_data(tmp_path) -> None:
    dataset = make_synthetic(SyntheticConfig(num_nodes=2000))
    write_partition_dir(dataset, 2, "metis", tmp_path / "parts")
    out = run_distributed_example(tmp_path / "parts", "--epochs", "2", "--batch-size", "64", "--metrics-out",
                                  str(tmp_path / "m.json"))
    history = json.loads((tmp_path / "m.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [0, 1] and history[1]["loss"] < history[0]["loss"]
    assert all(h["rounds_per_iteration"]["feature"] == 2 for h in history)  # hybrid: features from their owners
    assert len(re.findall(r"^test accuracy [01]\.\d{4} ", out, re.MULTILINE)) == 1, out  # rank 0 only


# The same script and layout run under torchrun on synthetic data (with stricter assertions) above.
@pytest.mark.slow
@pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")
def test_pyg_graphsage_under_torchrun_on_cora(tmp_path) -> None:
    write_partition_dir(load_dataset("cora", CORA_DIR), 2, "metis", tmp_path / "cora")
    out = run_distributed_example(tmp_path / "cora", "--epochs", "1", "--batch-size", "32")
    assert re.search(r"^epoch   0  loss [\d.]+ ", out, re.MULTILINE) and "test accuracy" in out, out
