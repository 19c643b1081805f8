"""A bare torch + numba machine (a GPU machine's image: no pymetis, no KaMinPar, no PyG) imports every module
that does not need those packages, and collects the `gpu` tests: the optional packages are imported only where
they are used.

Each check runs in a fresh interpreter whose import machinery refuses the three packages (a finder first on
``sys.meta_path``, installed before anything else is imported), so that what this machine has installed does
not hide an import at module level.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFUSED = ("pymetis", "kaminpar", "torch_geometric")
# The modules that are about one of those packages, and why (each must still fail on its package, so that the
# refusal is seen to work):
NEEDS_PYG = {
    "gnnscale.loader": "the PyG-compatible loaders: their batches are PyG Data",
    "gnnscale.sampling.pyg": "the one conversion of a sampled batch into a PyG Data",
    "gnnscale.train.pyg_inputs": "fit(..., inputs='pyg'): the model is given a PyG Data",
}
# Installed by -c code before any other import: a missing optional package, as on a bare machine.
REFUSE = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {REFUSED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused)", name=name)
        return None
sys.meta_path.insert(0, Refuse())
"""
IMPORT_ALL = REFUSE + """
import importlib, json
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError as err:
        failed[name] = getattr(err, "name", None) or str(err)
print(json.dumps(failed))
"""


def gnnscale_modules() -> list[str]:
    """Every module of the package, by its files (a package that fails to import still has its modules listed)."""
    names = []
    for path in sorted((ROOT / "gnnscale").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def in_bare_python(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_every_module_but_the_pyg_ones_imports_without_the_optional_packages():
    names = gnnscale_modules()
    assert len(names) > 100
    done = in_bare_python(IMPORT_ALL, json.dumps(names), timeout=300)
    assert done.returncode == 0, done.stderr
    failed = json.loads(done.stdout.splitlines()[-1])
    pyg_modules = {name for name in names if any(name == m or name.startswith(m + ".") for m in NEEDS_PYG)}
    assert set(failed) == pyg_modules, {name: why for name, why in failed.items() if name not in pyg_modules}
    assert all(why == "torch_geometric" or why.startswith("torch_geometric.") for why in failed.values()), failed


@pytest.mark.slow
def test_the_gpu_tests_collect_without_the_optional_packages():
    code = REFUSE + """
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]))
"""
    done = in_bare_python(code, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert "tests/train/test_train_device.py::test_a_run_on_cuda_trains_like_the_cpu_run" in done.stdout


@pytest.mark.slow
def test_metis_without_pymetis_is_one_line_saying_how_to_install(tmp_path):
    code = REFUSE + """
from gnnscale.cli import main
sys.exit(main(sys.argv[1:]))
"""
    out = tmp_path / "p"
    done = in_bare_python(code, "partition", "-o", "num_nodes=300", "--parts", "2", "--method", "metis", "--out",
                          str(out), timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("gnnscale partition: error: method: metis needs the pymetis package: "
                           "pip install 'pymetis>=2025.2'\n")
    assert not out.exists()
