"""The registry of distributed layouts: the one place that knows every layout by name.

The CLI's ``--layout`` choices, the option checks, which partition view a worker loads, which
checkpoints may resume on another partition and what the trainer builds are all read from here.
Adding a layout is one module (a :class:`~gnnscale.train.layouts.base.LayoutSpec` and its ``build``)
and one line in :data:`LAYOUTS`.
"""

from __future__ import annotations

from gnnscale.train.config import TrainConfig, check_sampler_fits_model
from gnnscale.train.layouts.base import Layout, LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.layouts.data_parallel import HYBRID, VANILLA
from gnnscale.train.layouts.dgs import DGSConfig, build_dgs_layout
from gnnscale.train.layouts.matrix import ONE_D, ONE_POINT_FIVE_D
from gnnscale.train.layouts.split import SPLIT

LAYOUTS: dict[str, LayoutSpec] = {spec.name: spec for spec in (HYBRID, VANILLA, SPLIT, ONE_D, ONE_POINT_FIVE_D)}


def layout_spec(name: str) -> LayoutSpec:
    """The registered layout called ``name`` (``--layout``)."""
    if name not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)} (--layout), got {name!r}")
    return LAYOUTS[name]


def layouts_with(feature: str) -> str:
    """``"a or b"``: the layouts whose spec has ``feature`` (a boolean field), for messages."""
    return " or ".join(name for name, spec in LAYOUTS.items() if getattr(spec, feature))


def layouts_sampling_with(sampler: str) -> str:
    return " or ".join(name for name, spec in LAYOUTS.items() if sampler in spec.samplers)


def check_layout_options(options: LayoutOptions, cfg: TrainConfig, model_name: str | None = "sage",
                         world_size: int | None = None) -> LayoutSpec:
    """Reject an option combination that cannot run, before any worker starts; return the layout's spec.
    ``model_name``: the built-in model's name, None for a model of one's own. ``world_size`` is the
    launch's, once known (the flags alone are checked without it)."""
    spec = layout_spec(options.layout)
    name = spec.name
    for option, flag in (("split_sampling", "--split-sampling"), ("shuffle_dtype", "--shuffle-dtype")):
        if getattr(options, option) is not None and not spec.split_sampling:
            raise ValueError(f"{option}: {flag} applies to --layout {layouts_with('split_sampling')}, got --layout "
                             f"{name}")
    check_dgs(options, spec, cfg, model_name)
    check_sampler_fits_model(cfg.sampler, model_name)
    if cfg.sampler not in spec.samplers:
        raise ValueError(f"sampler: --sampler {cfg.sampler} runs distributed with --layout "
                         f"{layouts_sampling_with(cfg.sampler)}, got --layout {name} (which samples with --sampler "
                         f"{' or '.join(spec.samplers)})")
    if options.replication != 1 and not spec.replication:
        raise ValueError(f"replication: --replication {options.replication} applies to --layout "
                         f"{layouts_with('replication')}, got --layout {name}")
    fraction = options.cache_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"cache_fraction: expected a fraction of all nodes in [0, 1] (--cache-fraction), got "
                         f"{fraction!r}")
    if fraction > 0 and not spec.cache:
        raise ValueError(f"cache_fraction: --cache-fraction caches the feature rows a worker fetches, which --layout "
                         f"{layouts_with('cache')} do; --layout {name} has none to cache")
    spec.check(options, cfg, model_name, world_size)
    return spec


def check_dgs(options: LayoutOptions, spec: LayoutSpec, cfg: TrainConfig, model_name: str | None) -> None:
    dgs = options.dgs
    if dgs is None:
        return
    if model_name is None:
        raise ValueError("dgs: --dgs explains the model on a copy that it rebuilds from the built-in model's config "
                         "(sage, gcn, gat); a model of your own trains without --dgs")
    if not isinstance(dgs, DGSConfig):
        raise TypeError(f"dgs: expected a DGSConfig, got {type(dgs).__name__}")
    if not spec.dgs:
        raise ValueError(f"dgs: --dgs needs a layout that fetches features (--layout {layouts_with('dgs')}), got "
                         f"--layout {spec.name}")
    if cfg.sampler != "fused":
        raise ValueError(f"dgs: --dgs samples with its own node-sampling kernel (the fused one with masks); drop "
                         f"--sampler {cfg.sampler}")
    if options.cache_fraction > 0:
        raise ValueError("dgs: --dgs and --cache-fraction both cut the feature fetch; use one of them")


def build_layout(ctx: LayoutContext) -> Layout:
    """This worker's layout (collective on the context's Comms); DGS, where asked for, on top of it."""
    if ctx.options.dgs is not None:
        return build_dgs_layout(ctx)
    return layout_spec(ctx.options.layout).build(ctx)
