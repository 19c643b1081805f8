"""gnnscale: mini-batch GNN training on graphs too large for one machine."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _installed_version

# One source of truth: pyproject.toml's version, as installed (pip install -e . records it).
try:
    __version__ = _installed_version("gnnscale")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"


def load_model(path, config=None):
    """The model ``gnnscale train --save-model PATH`` wrote, rebuilt with its weights, in eval mode.

    Args:
        path: str or os.PathLike, the model file.
        config: a :class:`~gnnscale.nn.ModelConfig`, needed only for a weight-only file (default None).

    See :func:`gnnscale.nn.model_file.load_model`; imported here on first use, so that ``import gnnscale``
    stays light (it imports no torch)."""
    from gnnscale.nn.model_file import load_model as _load_model

    return _load_model(path, config)
