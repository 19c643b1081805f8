# Two set-up commands that work on a fresh machine (see README):
#   make run    create .venv, install, compile the kernels, train GraphSAGE on the built-in synthetic dataset
#   make test   create .venv, install, compile the kernels, run the test suite: the default tier, then the slow tier
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test bench-cora

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	# The CPU build of torch first, pinned: an unpinned torch would pull several GB of CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Every numba kernel compiled into numba's on-disk cache, again whenever a source file changes: no
# training run pays for compilation, and a kernel that does not compile fails the install.
# numba keys a cached kernel on its own file's timestamp only, not on the files of the functions it
# inlines: a changed helper would leave a stale kernel in the cache. Every change recompiles them all.
$(VENV)/.compiled: $(VENV)/.installed $(shell find gnnscale -name '*.py')
	find gnnscale -name '*.nbi' -delete -o -name '*.nbc' -delete
	$(PY) -m gnnscale.compile
	touch $@

run: $(VENV)/.compiled
	$(PY) -m gnnscale train --dataset synthetic --model sage --fanouts 10,5 --epochs 5

test: $(VENV)/.compiled
	$(PY) -m pytest -q
	$(PY) -m pytest -q -m slow

bench-cora: $(VENV)/.compiled
	@echo "bench-cora: GraphSAGE, GCN and GAT on Cora, 5 seeds each; about 20 minutes on 2 cores (about 4 per seed)"
	$(PY) benchmarks/cora_accuracy.py --data-dir ../shared/data/cora_planetoid
