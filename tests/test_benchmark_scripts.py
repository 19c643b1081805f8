"""Every script under benchmarks/ prints its ``--help`` (and every helper module there imports): a script
whose imports broke when the helpers it shares (benchmarks/distributed.py, emulated_link.py) changed
fails here, not in a user's run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_every_benchmark_script_prints_its_help() -> None:
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 10, f"expected the benchmark scripts under {BENCHMARKS}"
    # One interpreter for all of them (torch is imported once): run each script's module with --help.
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "failed = []\n"
        "for path in sys.argv[1:]:\n"
        "    sys.argv = [path, '--help']\n"
        "    try:\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "        if '__main__' in open(path).read():  # a script, not a helper module\n"
        "            failed.append(f'{path}: --help did not exit')\n"
        "    except SystemExit as stop:\n"
        "        if stop.code not in (0, None):\n"
        "            failed.append(f'{path}: exit {stop.code}')\n"
        "    except Exception as error:\n"
        "        failed.append(f'{path}: {type(error).__name__}: {error}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *map(str, scripts)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"benchmark scripts that do not print --help:\n{done.stdout}\n{done.stderr[-3000:]}"
