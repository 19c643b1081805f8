"""The dataset registry: one name -> one loader, behind :func:`load_dataset`.

========================  =====================================================  ==========================
name                      root                                                   options
========================  =====================================================  ==========================
synthetic                 ignored (generated)                                    SyntheticConfig fields,
                                                                                 preset, scale; typed presets
                                                                                 (mag, igbh): preset, scale,
                                                                                 TypedSyntheticConfig fields
cora, citeseer, pubmed    folder with ``ind.<name>.*``                            normalize_features
ogbn-arxiv, -products,    OGB's root (holds ``ogbn_<name>/``)                     symmetrize, layout
ogbn-papers100M
npz                       the ``.npz`` file                                      symmetrize, remove_self_loops
dir                       a directory written by :func:`save_dataset` or         mmap
                          :func:`save_typed_dataset` (``gnnscale convert``,
                          ``gnnscale generate``)
========================  =====================================================  ==========================

The typed presets and a typed directory give a :class:`~gnnscale.graph.typed_dataset.TypedDataset`, every other
a :class:`~gnnscale.graph.dataset.NodeDataset`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.npz import load_npz
from gnnscale.graph.ogb import OGB_DATASETS, load_ogb
from gnnscale.graph.planetoid import PLANETOID_NAMES, load_planetoid
from gnnscale.graph.synthetic import PRESETS, SyntheticConfig, make_synthetic, preset_config
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.graph.typed_storage import load_dataset_directory
from gnnscale.graph.typed_synthetic import TYPED_PRESETS, make_typed_synthetic, typed_preset_config

DATASETS = ("synthetic", *PLANETOID_NAMES, *OGB_DATASETS, "npz", "dir")

# Keyword options each root-based loader accepts (checked here so that a typo is a ValueError naming it).
_OPTIONS: dict[str, tuple[str, ...]] = {
    **{name: ("normalize_features",) for name in PLANETOID_NAMES},
    **{name: ("symmetrize", "layout") for name in OGB_DATASETS},
    "npz": ("symmetrize", "remove_self_loops"),
    "dir": ("mmap",),
}
_ROOT_MEANING = {
    **{name: f"the folder holding ind.{name}.* files" for name in PLANETOID_NAMES},
    **{name: f"OGB's root folder (the one holding {name.replace('-', '_')}/)" for name in OGB_DATASETS},
    "npz": "the path of the .npz file",
    "dir": "a directory written by save_dataset, save_typed_dataset, gnnscale convert or gnnscale generate",
}


def load_dataset(name: str, root: str | Path | None = None, **options) -> NodeDataset | TypedDataset:
    """Load a dataset by registry name.

    Args:
        name: one of :data:`DATASETS`.
        root: where the data lives (see the module table; the CLI's ``--data-dir``); required for every
            name except ``"synthetic"``, which ignores it.
        **options: loader options (module table); for ``"synthetic"``, :class:`SyntheticConfig` fields, or a
            typed preset (``preset="mag"`` or ``"igbh"``, ``scale``) and TypedSyntheticConfig fields.

    Raises ValueError for an unknown name, a missing root, an unknown option, or missing files (the
    loaders name the missing file).
    """
    if name not in DATASETS:
        raise ValueError(f"name: unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    if name == "synthetic":
        if options.get("preset") in TYPED_PRESETS:
            options = dict(options)
            return make_typed_synthetic(typed_preset_config(options.pop("preset"), options.pop("scale", 1.0),
                                                            **options))
        return make_synthetic(_synthetic_config(options))
    if root is None:
        raise ValueError(f"root: dataset {name!r} needs root (data_dir): {_ROOT_MEANING[name]}")
    unknown = sorted(set(options) - set(_OPTIONS[name]))
    if unknown:
        raise ValueError(f"options: {unknown} not accepted by dataset {name!r}; accepted: {list(_OPTIONS[name])}")
    return _loader(name)(Path(root), **options)


def _loader(name: str) -> Callable[..., NodeDataset | TypedDataset]:
    if name in PLANETOID_NAMES:
        return lambda root, **kw: load_planetoid(root, name, **kw)
    if name in OGB_DATASETS:
        return lambda root, **kw: load_ogb(root, name, **kw)
    return {"npz": load_npz, "dir": load_dataset_directory}[name]


def _synthetic_config(options: dict) -> SyntheticConfig:
    """SyntheticConfig fields; ``preset`` (one of PRESETS) and ``scale`` start from a named config."""
    options = dict(options)
    preset, scale = options.pop("preset", None), options.pop("scale", None)
    if preset is not None or scale is not None:
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"preset: expected one of {', '.join(PRESETS)}, got {preset!r} (typed graphs: "
                             f"{', '.join(TYPED_PRESETS)})")
        if preset is None:
            raise ValueError(f"scale: needs a preset (one of {', '.join((*PRESETS, *TYPED_PRESETS))}), e.g. -o "
                             "preset=hard -o scale=0.5")
        return preset_config(preset, 1.0 if scale is None else scale, **options)
    valid = [f.name for f in dataclasses.fields(SyntheticConfig)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"options: {unknown} are not SyntheticConfig fields; valid fields: {valid}")
    return SyntheticConfig(**options)
