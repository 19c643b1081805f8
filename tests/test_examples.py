"""The scripts under examples/ run from a checkout: a short run of each (a few seconds), in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORA_DIR = Path(os.environ.get("GNNSCALE_DATA", ROOT / ".." / "shared" / "data")) / "cora_planetoid"


def run_example(name: str, *args: str) -> str:
    # The checkout's gnnscale first on the path: the example runs against this code, installed or not.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, f"{name} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def test_pyg_graphsage_on_synthetic_data() -> None:
    out = run_example("pyg_graphsage.py", "--num-nodes", "2000", "--epochs", "2", "--max-batches", "3",
                      "--batch-size", "64")
    assert len(re.findall(r"^epoch \d: loss [\d.]+ ", out, re.MULTILINE)) == 2
    assert re.search(r"^test accuracy [01]\.\d{4}$", out, re.MULTILINE), out


@pytest.mark.skipif(not (CORA_DIR / "ind.cora.x").is_file(), reason=f"Cora not found at {CORA_DIR}")
def test_pyg_graphsage_on_cora() -> None:
    out = run_example("pyg_graphsage.py", "--dataset", "cora", "--data-dir", str(CORA_DIR), "--epochs", "1",
                      "--max-batches", "2", "--batch-size", "32")
    assert out.startswith("cora: 2708 nodes") and "test accuracy" in out, out
