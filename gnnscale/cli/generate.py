"""``gnnscale generate``: write a synthetic dataset directory chunk by chunk, at any scale (a typed preset: its
features block by block)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gnnscale.cli.common import key_value
from gnnscale.cli.flags import add_settings, read_settings
from gnnscale.graph.generate import CHUNK_EDGES, check_generate_args, generate_dataset, memory_bound
from gnnscale.graph.synthetic import PRESETS, SyntheticConfig, preset_config
from gnnscale.graph.typed_synthetic import (TYPED_PRESETS, TypedSyntheticConfig, generate_typed_dataset,
                                            typed_preset_config)
from gnnscale.settings import flag_fields, option_string, setting


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateConfig:
    """What ``gnnscale generate`` writes: a preset's streaming synthetic dataset
    (:func:`~gnnscale.graph.synthetic.preset_config`), chunk by chunk
    (:func:`~gnnscale.graph.generate.generate_dataset`, whose keywords ``chunk_edges`` and ``overwrite``
    these are), or a typed preset's dataset (:func:`~gnnscale.graph.typed_synthetic.typed_preset_config`,
    :func:`~gnnscale.graph.typed_synthetic.generate_typed_dataset`: the topology in memory, the features block
    by block). Checked when built, the dataset's config included.

    Args:
        preset: the synthetic preset (:data:`~gnnscale.graph.synthetic.PRESETS`, or a typed one of
            :data:`~gnnscale.graph.typed_synthetic.TYPED_PRESETS`); required.
        scale: the preset's node count times this (> 0); required.
        out: the dataset directory to write; required.
        chunk_edges: directed edges held in memory at a time (>= 1).
        seed: seed of every random draw.
        feature_dim: feature dimension (None: the preset's; a typed preset: of every type with features).
        overwrite: replace an existing ``out``.
        options: any other SyntheticConfig (TypedSyntheticConfig) field, ``(name, value)`` pairs
            (``-o name=value``).
    """

    preset: str | None = setting(None, "the synthetic preset; papers100M streams as it is, the others need -o "
                                       "streaming=true (their block-model variant, a different graph from --dataset "
                                       "synthetic -o preset=...); the typed ones (mag, igbh) are the graphs of "
                                       "--dataset synthetic -o preset=..., their features written block by block",
                                 choices=(*PRESETS, *TYPED_PRESETS), required=True)
    scale: float | None = setting(None, "the preset's node count times this", required=True)
    out: str | None = setting(None, "the dataset directory to write (train on it with --dataset dir --data-dir DIR)",
                              metavar="DIR", aliases=("out_dir",), required=True)
    chunk_edges: int = setting(CHUNK_EDGES, "directed edges held in memory at a time: sets the memory, never the "
                                            "output (a typed preset builds its topology in memory)")
    seed: int = setting(0, "seed of every random draw")
    feature_dim: int | None = setting(None, "feature dimension (a typed preset: of every type with features)",
                                      default_text="the preset's")
    overwrite: bool = setting(False, "replace an existing --out directory")
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        for name in ("preset", "scale", "out"):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required (--{name})")
        flagged = {field.name: option_string(GenerateConfig, field, flag)
                   for field, flag in flag_fields(GenerateConfig)}
        for key, _ in self.options:
            if key in flagged:
                raise ValueError(f"option: -o {key}=... repeats {flagged[key]}; give {flagged[key]} only")
        cfg = self.synthetic  # a config checks itself when built
        if not isinstance(cfg, TypedSyntheticConfig):
            check_generate_args(cfg, self.chunk_edges)

    @property
    def synthetic(self) -> SyntheticConfig | TypedSyntheticConfig:
        """The dataset's config: the preset at ``scale`` with ``seed``, ``feature_dim`` and ``options``."""
        overrides = {**dict(self.options), "seed": self.seed}
        if self.feature_dim is not None:
            overrides["feature_dim"] = self.feature_dim
        if self.preset in TYPED_PRESETS:
            return typed_preset_config(self.preset, self.scale, **overrides)
        return preset_config(self.preset, self.scale, **overrides)


def add_generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="write a synthetic dataset directory chunk by chunk (papers100M-sized "
                                        "graphs in bounded memory)")
    add_settings(p, GenerateConfig)
    p.add_argument("--option", "-o", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="any other SyntheticConfig field (a typed preset: TypedSyntheticConfig field), e.g. -o "
                        "homophily=0.5 (repeatable)")


def read_generate_config(args: argparse.Namespace) -> GenerateConfig:
    return read_settings(GenerateConfig, args, options=tuple(args.option))


def cmd_generate(args: argparse.Namespace) -> None:
    settings = read_generate_config(args)
    cfg, out = settings.synthetic, Path(settings.out)
    if out.exists() and not settings.overwrite:
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    if isinstance(cfg, TypedSyntheticConfig):
        generate_typed(cfg, out, settings.overwrite)
        return
    print(f"generating {cfg.num_nodes:,} nodes, ~{cfg.avg_degree * cfg.num_nodes:,.0f} directed edges before "
          f"removing repeats, {cfg.feature_dim} features; working memory below "
          f"{memory_bound(cfg, settings.chunk_edges) / 2**30:.2f} GiB", flush=True)
    start = time.perf_counter()
    summary = generate_dataset(cfg, out, chunk_edges=settings.chunk_edges, overwrite=settings.overwrite,
                               progress=TenthsProgress() if sys.stderr.isatty() else None)
    print_written(out, summary, f"{summary.edges_drawn - summary.num_edges:,} repeats removed",
                  time.perf_counter() - start)


def generate_typed(cfg: TypedSyntheticConfig, out: Path, overwrite: bool) -> None:
    drawn = sum(r.num_edges for r in cfg.relations)
    values = sum(t.count * t.feature_dim for t in cfg.node_types)
    print(f"generating {sum(t.count for t in cfg.node_types):,} nodes of {len(cfg.node_types)} types, {drawn:,} "
          f"edges drawn in {len(cfg.relations)} relations{' (and their reverses)' if cfg.reverse else ''}, "
          f"{values * 4 / 1e9:.2f} GB of features written block by block", flush=True)
    start = time.perf_counter()
    summary = generate_typed_dataset(cfg, out, overwrite=overwrite,
                                     progress=TenthsProgress() if sys.stderr.isatty() else None)
    print_written(out, summary, f"{drawn:,} drawn", time.perf_counter() - start)


def print_written(out: Path, summary, detail: str, seconds: float) -> None:
    """The summary line of a dataset directory written chunk by chunk, then each file's size."""
    total = sum(summary.file_bytes.values())
    print(f"wrote {out}: {summary.num_nodes:,} nodes, {summary.num_edges:,} directed edges ({detail}), "
          f"{total / 1e9:.2f} GB in {seconds:.1f} s")
    width = max(14, *(len(name) for name in summary.file_bytes))  # a typed graph's features.<type>.npy are longer
    for name, size in summary.file_bytes.items():
        print(f"  {name:<{width}} {size:>16,} bytes")


class TenthsProgress:
    """A line on stderr each time a phase passes another tenth (long runs take tens of minutes; on a
    terminal only, like training's progress bar), headed by ``command``."""

    def __init__(self, command: str = "generate") -> None:
        self.command = command
        self.shown: dict[str, int] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        tenth = 10 * done // max(total, 1)
        if tenth > self.shown.get(phase, 0):
            self.shown[phase] = tenth
            sys.stderr.write(f"{self.command}: {phase} {10 * tenth}%\n")
            sys.stderr.flush()
