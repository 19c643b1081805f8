"""Training: :func:`fit` (``gnnscale.train.fit``), the one entry for every model, layout and worker count."""

from __future__ import annotations


def __getattr__(name: str):
    # fit is imported on first use: the modules below gnnscale.train (the loader's prefetch stage among
    # them) import this package without paying for the trainer's imports.
    if name in ("fit", "RunOutputs", "TrainConfig", "LayoutOptions", "TrainReport"):
        from gnnscale.train import api

        return {"fit": api.fit, "RunOutputs": api.RunOutputs, "TrainConfig": api.TrainConfig,
                "LayoutOptions": api.LayoutOptions, "TrainReport": api.TrainReport}[name]
    raise AttributeError(f"module 'gnnscale.train' has no attribute {name!r}")
