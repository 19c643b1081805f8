"""gnnscale: mini-batch GNN training on graphs too large for one machine."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _installed_version

# One source of truth: pyproject.toml's version, as installed (pip install -e . records it).
try:
    __version__ = _installed_version("gnnscale")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
