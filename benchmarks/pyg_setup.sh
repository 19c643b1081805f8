#!/usr/bin/env bash
# Builds a separate virtual environment in which PyG's own NeighborLoader runs, for
# benchmarks/pyg_loader.py: the CPU build of torch 2.13.0, torch_geometric, this checkout of gnnscale
# (editable) and PyG's compiled sampling backend.
# PyG's NeighborLoader needs pyg-lib or torch-sparse for neighbor sampling. pyg-lib has no CPU wheel on
# the registry for torch 2.13, and torch-sparse has no wheel either, so torch-scatter and
# torch-sparse 0.6.18 are compiled here from their source distributions against the installed torch
# (about 25 minutes on 2 cores; MAX_JOBS sets the compile jobs, default 2, use 1 where memory is tight).
# Usage: benchmarks/pyg_setup.sh [VENV_DIR]   (default: $HOME/.cache/gnnscale-pyg)
# Prints the environment's folder on its last line; a second call with a working environment returns at once.
set -euo pipefail
venv="${1:-$HOME/.cache/gnnscale-pyg}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check='import torch_geometric, torch_sparse, gnnscale
from torch_geometric.typing import WITH_TORCH_SPARSE, WITH_PYG_LIB
assert WITH_TORCH_SPARSE or WITH_PYG_LIB, "no compiled sampling backend"'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "$venv"; exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0 numpy scipy >&2
"$venv/bin/pip" install -q wheel "setuptools>=77" >&2
# gnnscale and its dependencies (numba, torch_geometric, ...) from this checkout.
"$venv/bin/pip" install -q -e "$repo" >&2
# The compiled backend: built against the torch above, hence no build isolation.
MAX_JOBS="${MAX_JOBS:-2}" "$venv/bin/pip" install -q --no-build-isolation torch-scatter >&2
MAX_JOBS="${MAX_JOBS:-2}" "$venv/bin/pip" install -q --no-build-isolation torch-sparse==0.6.18 >&2
"$venv/bin/python" - >&2 <<'PY'
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.typing import WITH_TORCH_SPARSE, WITH_PYG_LIB
assert WITH_TORCH_SPARSE or WITH_PYG_LIB, "torch_geometric sees no compiled sampling backend"
data = Data(x=torch.randn(100, 4), edge_index=torch.randint(0, 100, (2, 500)))
next(iter(NeighborLoader(data, num_neighbors=[3, 2], batch_size=8)))
PY
echo "$venv"
