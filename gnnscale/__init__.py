"""gnnscale: mini-batch GNN training on graphs too large for one machine."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _installed_version

# One source of truth: pyproject.toml's version, as installed (pip install -e . records it).
try:
    __version__ = _installed_version("gnnscale")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"


def load_model(path, config=None):
    """The model ``gnnscale train --save-model PATH`` wrote, rebuilt with its weights, in eval mode (see
    :func:`gnnscale.nn.model_file.load_model`; imported here on first use, so ``import gnnscale`` stays light)."""
    from gnnscale.nn.model_file import load_model as _load_model

    return _load_model(path, config)
