"""The registry of distributed layouts: the one place that knows every layout by name.

The CLI's ``--layout`` choices, the option checks, which partition view a worker loads, which
checkpoints may resume on another partition and what the trainer builds are all read from here.
Adding a layout is one module (a :class:`~gnnscale.train.layouts.base.LayoutSpec` and its ``build``)
and one line in :data:`LAYOUTS`.
"""

from __future__ import annotations

from dataclasses import fields, replace

from gnnscale.sampling.registry import check_sampler_fits_model, sampler_spec, samplers_with
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import Layout, LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.layouts.data_parallel import HYBRID, VANILLA
from gnnscale.train.layouts.dgs import DGSConfig, build_dgs_layout
from gnnscale.train.layouts.matrix import ONE_D, ONE_POINT_FIVE_D
from gnnscale.train.layouts.split import SPLIT

LAYOUTS: dict[str, LayoutSpec] = {spec.name: spec for spec in (HYBRID, VANILLA, SPLIT, ONE_D, ONE_POINT_FIVE_D)}
DEFAULT_LAYOUT = HYBRID.name  # --layout when not given


def layout_spec(name: str) -> LayoutSpec:
    """The registered layout called ``name`` (``--layout``)."""
    if name not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)} (--layout), got {name!r}")
    return LAYOUTS[name]


def layouts_with(feature: str) -> str:
    """``"a or b"``: the layouts whose spec has ``feature`` (a boolean field), for messages."""
    return " or ".join(name for name, spec in LAYOUTS.items() if getattr(spec, feature))


def layouts_sampling_with(sampler: str, feature: str | None = None) -> str:
    """``"a or b"``: the layouts that sample with ``sampler`` (and have ``feature``, a boolean field), for messages."""
    return " or ".join(name for name, spec in LAYOUTS.items()
                       if sampler in spec.samplers and (feature is None or getattr(spec, feature)))


def layouts_owning(option_class: type) -> tuple[str, ...]:
    """The layouts whose own options are ``option_class``."""
    return tuple(name for name, spec in LAYOUTS.items() if spec.options is option_class)


def option_classes() -> tuple[type, ...]:
    """Every layout's options dataclass, once each, in registry order (the CLI's layout flags)."""
    return tuple(dict.fromkeys(spec.options for spec in LAYOUTS.values()))


def layout_options(layout: str = "hybrid", *, dgs=None, **settings) -> LayoutOptions:
    """``LayoutOptions`` for ``layout`` with its own options from keywords (``layout_options("split",
    shuffle_dtype="bfloat16")``); a keyword the layout does not own is an error naming the layouts that do."""
    spec = layout_spec(layout)
    own = {f.name for f in fields(spec.options)}
    for name in settings:
        if name not in own:
            owners = [owner for cls in option_classes() if name in {f.name for f in fields(cls)}
                      for owner in layouts_owning(cls)]
            where = f"applies to --layout {' or '.join(owners)}" if owners else "is no layout option"
            raise ValueError(f"{name}: {where}, got --layout {layout}")
    return LayoutOptions(layout=layout, settings=spec.options(**settings), dgs=dgs)


def resolved(options: LayoutOptions) -> LayoutOptions:
    """``options`` with the layout's own options filled in (its defaults where ``settings`` is None)."""
    spec = layout_spec(options.layout)
    if options.settings is None:
        return replace(options, settings=spec.options())
    if type(options.settings) is not spec.options:
        raise TypeError(f"settings: --layout {spec.name} takes {spec.options.__name__}, got "
                        f"{type(options.settings).__name__}")
    return options


def check_layout_options(options: LayoutOptions, cfg: TrainConfig, model_name: str | None = "sage",
                         world_size: int | None = None) -> LayoutSpec:
    """Reject an option combination that cannot run, before any worker starts; return the layout's spec.
    ``model_name``: the built-in model's name, None for a model of one's own. ``world_size`` is the
    launch's, once known (the flags alone are checked without it)."""
    spec = layout_spec(options.layout)
    options = resolved(options)
    check_dgs(options, spec, cfg, model_name)
    check_sampler_fits_model(cfg.sampler, model_name)
    check_layout_sampler(cfg, spec)
    check_device_data(options, spec, cfg)
    spec.check(options, cfg, model_name, world_size)
    return spec


def check_layout_sampler(cfg: TrainConfig, spec: LayoutSpec, feature: str | None = None) -> None:
    """The layout's workers sample with ``cfg.sampler``; the message names the layouts that do (of those with
    ``feature``, where the run needs one)."""
    if cfg.sampler not in spec.samplers:
        raise ValueError(f"sampler: --sampler {cfg.sampler} runs distributed with --layout "
                         f"{layouts_sampling_with(cfg.sampler, feature)}, got --layout {spec.name} (which samples with "
                         f"--sampler {' or '.join(spec.samplers)})")


def check_device_data(options: LayoutOptions, spec: LayoutSpec, cfg: TrainConfig) -> None:
    """--sample-on device needs a layout whose workers sample with a device build of the sampler
    (``spec.device_sampling``); neither it nor --gpu-cache-fraction runs with DGS, which samples and fetches
    with kernels of its own on the host while its model trains on the device."""
    if cfg.sample_on == "device" and not spec.device_sampling:
        raise ValueError(f"sample_on: --sample-on device needs a layout whose workers sample on the device "
                         f"(--layout {layouts_with('device_sampling')}); --layout {spec.name} samples on the host")
    asked = [flag for flag, on in (("--sample-on device", cfg.sample_on == "device"),
                                   (f"--gpu-cache-fraction {cfg.gpu_cache_fraction:g}", cfg.gpu_cache_fraction > 0)) if on]
    if asked and options.dgs is not None:
        field = "sample_on" if cfg.sample_on == "device" else "gpu_cache_fraction"
        raise ValueError(f"{field}: {' and '.join(asked)} and --dgs: DGS samples and fetches with its own kernels on "
                         "the host; drop one of them")


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
    if not sampler_spec(cfg.sampler).masked:
        raise ValueError(f"dgs: --dgs samples with its own node-sampling kernel (the {' or '.join(samplers_with('masked'))} "
                         f"one with masks); drop --sampler {cfg.sampler}")
    if getattr(options.settings, "cache_fraction", 0) > 0:
        raise ValueError("dgs: --dgs and --cache-fraction both cut the feature fetch; use one of them")


def build_layout(ctx: LayoutContext) -> Layout:
    """This worker's layout (collective on the context's Comms); DGS, where asked for, on top of it."""
    ctx = replace(ctx, options=resolved(ctx.options))
    if ctx.options.dgs is not None:
        return build_dgs_layout(ctx)
    return layout_spec(ctx.options.layout).build(ctx)
