"""``--timeout`` where pytest-timeout is absent (a GPU machine's image may lack it; its check passes the
option): tests/conftest.py takes the option and enforces it, so the check neither stops at an unknown option
nor hangs on a stuck test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def run_without_the_plugin(tmp_path: Path, body: str, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(body)
    # The project's conftest as a plugin of a run in tmp_path (its own rootdir): the probe is all it collects.
    cmd = [sys.executable, "-m", "pytest", "-p", "no:timeout", "-p", "no:cacheprovider", "-p", "conftest", "-q",
           *options, str(tmp_path / "test_probe.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_a_test_within_its_limit_passes(tmp_path):
    done = run_without_the_plugin(tmp_path, "def test_quick():\n    pass\n", "--timeout", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_test_past_its_limit_ends_the_run_with_its_stack(tmp_path):
    body = "import time\n\ndef test_stuck():\n    time.sleep(60)\n"
    done = run_without_the_plugin(tmp_path, body, "--timeout", "1")
    assert done.returncode != 0
    assert "Timeout" in done.stderr and "test_stuck" in done.stderr


def test_the_marker_overrides_the_option(tmp_path):
    body = "import time\nimport pytest\n\n@pytest.mark.timeout(1)\ndef test_stuck():\n    time.sleep(60)\n"
    done = run_without_the_plugin(tmp_path, body, "--timeout", "100")
    assert done.returncode != 0 and "test_stuck" in done.stderr
