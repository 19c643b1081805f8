"""``gnnscale generate``: write a synthetic dataset directory chunk by chunk, at any scale."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gnnscale.cli.common import key_value
from gnnscale.graph.generate import CHUNK_EDGES, check_generate_args, generate_dataset, memory_bound
from gnnscale.graph.synthetic import PRESETS, preset_config

# Names the generator gives settings in its errors, where they differ from the flag's dest.
FLAG_ALIASES = {"out_dir": "--out"}


def add_generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="write a synthetic dataset directory chunk by chunk (papers100M-sized "
                                        "graphs in bounded memory)")
    p.add_argument("--preset", required=True, choices=tuple(PRESETS),
                   help="the synthetic preset; papers100M streams as it is, the others need -o streaming=true "
                        "(their block-model variant, a different graph from --dataset synthetic -o preset=...)")
    p.add_argument("--scale", type=float, required=True, help="the preset's node count times this")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the dataset directory to write (train on it with --dataset dir --data-dir DIR)")
    p.add_argument("--chunk-edges", type=int, default=CHUNK_EDGES,
                   help="directed edges held in memory at a time: sets the memory, never the output")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    p.add_argument("--feature-dim", type=int, default=None, help="feature dimension (default: the preset's)")
    p.add_argument("--option", "-o", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="any other SyntheticConfig field, e.g. -o homophily=0.5 (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")


def cmd_generate(args) -> None:
    overrides = dict(args.option)
    for key in ("seed", "feature_dim", "scale", "preset"):
        if key in overrides:
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"option: -o {key}=... repeats {flag}; give {flag} only")
    overrides["seed"] = args.seed
    if args.feature_dim is not None:
        overrides["feature_dim"] = args.feature_dim
    cfg = preset_config(args.preset, args.scale, **overrides)
    check_generate_args(cfg, args.chunk_edges)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    print(f"generating {cfg.num_nodes:,} nodes, ~{cfg.avg_degree * cfg.num_nodes:,.0f} directed edges before "
          f"removing repeats, {cfg.feature_dim} features; working memory below "
          f"{memory_bound(cfg, args.chunk_edges) / 2**30:.2f} GiB", flush=True)
    start = time.perf_counter()
    summary = generate_dataset(cfg, out, chunk_edges=args.chunk_edges, overwrite=args.overwrite,
                               progress=TenthsProgress() if sys.stderr.isatty() else None)
    print_written(out, summary, f"{summary.edges_drawn - summary.num_edges:,} repeats removed",
                  time.perf_counter() - start)


def print_written(out: Path, summary, detail: str, seconds: float) -> None:
    """The summary line of a dataset directory written chunk by chunk, then each file's size."""
    total = sum(summary.file_bytes.values())
    print(f"wrote {out}: {summary.num_nodes:,} nodes, {summary.num_edges:,} directed edges ({detail}), "
          f"{total / 1e9:.2f} GB in {seconds:.1f} s")
    for name, size in summary.file_bytes.items():
        print(f"  {name:<14} {size:>16,} bytes")


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
