#!/usr/bin/env bash
# The GPU checks in one command, for a machine with CUDA: every `gpu`-marked test, then benchmarks/gpu.py's
# table (products-shaped, SCALE 1.0 by default), the whole within BUDGET_S seconds (540: 9 minutes on 16 cores
# and one H100/H200). Each step is bounded: the tests by TESTS_S (180) and 120 s per test, the table by what is
# left (its rows that would start too late are skipped and named). SEEDS (0) adds the accuracy comparison.
# Python: PY, else the project's .venv where there is one, else python3 (a bare image: torch and numba, no venv;
# this tree is put on PYTHONPATH). SCALE=0.002 makes it a smoke run (without CUDA the tests skip and the table
# has its CPU rows only). Extra arguments go to benchmarks/gpu.py.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - start) )); }
timeout "${TESTS_S:-180}" "$PY" -m pytest -q -m gpu -p no:cacheprovider --timeout 120 tests
tests=$?
echo "gpu tests: rc $tests, $(( $(date +%s) - start )) s"
# The table gets what is left, less a margin for its last row to end and the table to print.
rows=$(( $(left) - 120 )); [ "$rows" -gt 0 ] || rows=0
timeout "$(left)" "$PY" benchmarks/gpu.py --scale "${SCALE:-1.0}" --accuracy-seeds "${SEEDS:-0}" --budget-s "$rows" "$@"
table=$?
echo "gpu check: tests rc $tests, table rc $table, $(( $(date +%s) - start )) s"
[ "$tests" -eq 0 ] && [ "$table" -eq 0 ]
