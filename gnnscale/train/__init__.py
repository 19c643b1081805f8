"""Training: :func:`fit` (``gnnscale.train.fit``), the one entry for every model, layout and worker count."""

from __future__ import annotations

from gnnscale.train.api import LayoutOptions, RunOutputs, TrainConfig, TrainReport, fit

__all__ = ["LayoutOptions", "RunOutputs", "TrainConfig", "TrainReport", "fit"]
