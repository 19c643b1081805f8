"""numba runs on a thread-safe threading layer, or the background loader refuses to start."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gnnscale.threading_layer import THREADSAFE_LAYERS, choose_threading_layer

# Trains two batches with the background loader; prints the threading layer numba ran on.
PROBE = r"""
import numba, torch
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model
ds = make_synthetic(SyntheticConfig(num_nodes=400, feature_dim=8, num_classes=3))
fit(seeded_model(ModelConfig(name="sage", in_dim=8, hidden_dim=8, num_classes=3, num_layers=2), 0), ds,
    inputs="blocks", config=TrainConfig(fanouts=(3, 3), batch_size=128, epochs=1, threads=2, prefetch=1,
                                        evaluate=False), progress=False)
print("layer", numba.threading_layer())
"""


def _run(env_extra: dict, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", **env_extra}
    return subprocess.run([*(prefix or []), sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_trainer_runs_on_a_threadsafe_layer():
    assert choose_threading_layer() in THREADSAFE_LAYERS
    done = _run({})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] in THREADSAFE_LAYERS


@pytest.mark.slow
def test_workqueue_layer_is_refused_with_a_clear_error():
    # workqueue aborts the process when the loader thread and the training thread both run kernels.
    done = _run({"NUMBA_THREADING_LAYER": "workqueue"})
    assert done.returncode != 0
    assert "prefetch: numba's threading layer is 'workqueue'" in done.stderr
    assert "--prefetch 0" in done.stderr


def _system_libgomp() -> Path | None:
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64"):
        path = Path(folder) / "libgomp.so.1.0.0"
        if path.is_file():
            return path
    return None


@pytest.mark.slow
def test_without_the_system_openmp_runtime_numba_still_gets_a_threadsafe_layer():
    """A fresh machine without libgomp (slim images): numba's omp layer links the system's
    libgomp.so.1.0.0 and would fall back to workqueue; the tbb dependency must take over."""
    libgomp = _system_libgomp()
    if libgomp is None or shutil.which("unshare") is None:
        pytest.skip("needs the system libgomp (to hide) and unshare")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available here")
    # Hide libgomp in a private mount namespace: bind /dev/null over it, then train.
    hide = ["unshare", "-rm", "sh", "-c", f'mount --bind /dev/null {libgomp} && exec "$0" "$@"']
    done = _run({}, prefix=hide)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "tbb"
