#!/usr/bin/env bash
# The GPU checks in one command, for a machine with CUDA: every `gpu`-marked test, then benchmarks/gpu.py's
# table. SCALE=0.002 SEEDS=1 makes it a smoke run (on a machine without CUDA the tests skip and the table
# has its CPU rows only). Extra arguments go to benchmarks/gpu.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pytest -q -m gpu -p no:cacheprovider
"$PY" benchmarks/gpu.py --scale "${SCALE:-1.0}" --accuracy-seeds "${SEEDS:-3}" "$@"
