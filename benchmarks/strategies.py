"""Every distributed strategy in one table: epoch time and its split, rounds and bytes per iteration by
category, at several (emulated) link rates, each strategy's epoch time as a ratio against hybrid.

    python benchmarks/strategies.py [--scale 0.05] [--workers 4] [--strategies all] [--link-gbit inf,10,1]
                                    [--batch-size 250] [--fanouts 15,10,5] [--hidden 256] [--epochs 3]
                                    [--bulk 4] [--replication 2] [--dgs-period 30] [--cache-dir DIR] [--json FILE]
                                    [--plot FILE.png] [--list]

A strategy is a named set of ``gnnscale train`` arguments (the registry ``STRATEGIES`` below: adding one
is one line). The ones the installed ``gnnscale train --help`` does not offer (a flag or a ``--layout`` /
``--sampler`` choice it lacks) are skipped with a note, so the table always holds every strategy that
exists when it runs; ``--list`` shows which. The data are those of benchmarks/distributed.py: the
products-shaped synthetic graph at ``--scale``, cached, partitioned with METIS into ``--workers`` parts.
For every (link rate, strategy) the script launches ``torchrun --standalone -m gnnscale train
--partitions DIR`` (gloo, one thread per worker) over the emulated link (benchmarks/emulated_link.py)
and reads rank 0's metrics. ``--batch-size`` is per worker, so every strategy trains P x b seeds per
iteration: data parallelism as P micro-batches, split parallelism as one mini-batch of all of them.
Strategies named ``-float16`` / ``-bfloat16`` train on a partition of the same graph and parts whose
features are stored in that type (``gnnscale partition --feature-dtype``): half the bytes fetched.

The first epoch is warm-up (numba compilation, page cache); the table shows medians over the others.
The loading stage (sample, split, fetch) runs in the background beside forward+backward (``--prefetch
1``, the default), so those parts overlap the epoch; ``other`` = epoch - fwd+bwd - grad is the loading
the overlap did not hide. All workers share this machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import (MB, ROOT, add_cache_dir_argument, cached_dataset, cached_partition,  # noqa: E402
                         check_run_arguments, dataset_meta, exit_on_sigterm, exit_unless_links_work,
                         partition_info, run_launch, torchrun_command)
from emulated_link import add_link_argument, link_label  # noqa: E402

BASELINE = "hybrid"
FASTSAMPLE_BASELINE = "vanilla"  # what hybrid partitioning is measured against (FastSample's 2L rounds)
CATEGORIES = ("sample", "feature", "shuffle", "grad")
# Epoch split, in the plot's stacking order: (metrics key, label). Loading-stage parts first.
LOADING = (("sample_s", "sample"), ("split_s", "split"), ("fetch_s", "fetch"))
TRAINING = (("forward_backward_s", "fwd+bwd"), ("shuffle_s", "(shuffle)"), ("grad_sync_s", "grad"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """One row of the table.

    Args:
        name: the row's label (also what ``--strategies`` selects).
        args: extra ``gnnscale train`` arguments; ``{bulk}``, ``{replication}`` and ``{dgs_period}`` are
            filled from this script's options of those names.
        about: one line for ``--list``: what the strategy is.
        feature_dtype: how the partition it trains on stores features (``gnnscale partition
            --feature-dtype``).
    """

    name: str
    args: tuple[str, ...]
    about: str
    feature_dtype: str = "float32"


STRATEGIES = (
    Strategy(name="vanilla", args=("--layout", "vanilla"), about="data parallel, topology partitioned: 2L rounds"),
    Strategy(name="hybrid", args=("--layout", "hybrid"), about="data parallel, topology replicated: 2 rounds"),
    Strategy(name="split", args=("--layout", "split"), about="GSplit: one mini-batch split across workers"),
    Strategy(name="matrix-1d", args=("--sampler", "matrix", "--bulk", "{bulk}", "--layout", "1d"),
             about="matrix bulk sampling, 1D-partitioned products"),
    Strategy(name="matrix-1.5d", args=("--sampler", "matrix", "--bulk", "{bulk}", "--layout", "1.5d",
                                       "--replication", "{replication}"),
             about="matrix bulk sampling, 1.5D (replication c) products"),
    Strategy(name="dgs-hybrid", args=("--layout", "hybrid", "--dgs", "--dgs-period", "{dgs_period}"), about="explanation-guided sampling, hybrid"),
    Strategy(name="dgs-vanilla", args=("--layout", "vanilla", "--dgs", "--dgs-period", "{dgs_period}"), about="explanation-guided sampling, vanilla"),
    Strategy(name="hybrid-float16", args=("--layout", "hybrid"), feature_dtype="float16",
             about="hybrid, features stored and fetched as float16"),
    Strategy(name="hybrid-bfloat16", args=("--layout", "hybrid"), feature_dtype="bfloat16",
             about="hybrid, features stored and fetched as bfloat16"),
    Strategy(name="split-bfloat16", args=("--layout", "split", "--shuffle-dtype", "bfloat16"), feature_dtype="bfloat16",
             about="split, features stored as bfloat16, every exchange in bfloat16 (summed in float32)"),
    Strategy(name="dgs-hybrid-bfloat16", args=("--layout", "hybrid", "--dgs", "--dgs-period", "{dgs_period}"),
             feature_dtype="bfloat16", about="explanation-guided sampling, hybrid, bfloat16 features"),
)


# --- which strategies exist -----------------------------------------------------------------------


def train_help() -> str:
    """The installed ``gnnscale train --help`` text (columns widened so that choice lists stay on one line)."""
    env = {**os.environ, "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "gnnscale", "train", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    if done.returncode != 0:
        sys.exit(f"`gnnscale train --help` failed:\n{done.stderr}")
    return done.stdout


def missing_support(strategy: Strategy, help_text: str) -> list[str]:
    """What ``strategy`` needs that ``help_text`` does not offer: flags, and values outside a flag's {choices}."""
    missing = []
    for i, token in enumerate(strategy.args):
        if not token.startswith("--"):
            continue
        if not re.search(re.escape(token) + r"\b", help_text):
            missing.append(token)
            continue
        choices = re.search(re.escape(token) + r" \{([^}]*)\}", help_text)
        value = strategy.args[i + 1] if i + 1 < len(strategy.args) else ""
        if choices and not value.startswith("--") and value not in choices.group(1).split(","):
            missing.append(f"{token} {value}")
    return missing


def available(selected: list[Strategy]) -> list[Strategy]:
    """``selected`` minus the strategies this checkout cannot run, each skip printed with its reason."""
    help_text = train_help()
    runnable = []
    for s in selected:
        missing = missing_support(s, help_text)
        if missing:
            print(f"  skipped {s.name}: `gnnscale train` has no {', '.join(missing)} yet", flush=True)
        else:
            runnable.append(s)
    return runnable


# --- running --------------------------------------------------------------------------------------


def train_command(strategy: Strategy, partition_dir: Path, a: argparse.Namespace, metrics: Path) -> list[str]:
    extra = [arg.format(bulk=a.bulk, replication=a.replication, dgs_period=a.dgs_period) for arg in strategy.args]
    return [*torchrun_command(a.workers), "-m", "gnnscale", "train", "--partitions", str(partition_dir), *extra,
            "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--hidden", str(a.hidden),
            "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", "1", "--no-eval", "--quiet",
            "--metrics-out", str(metrics)]


def summarize(report: dict, strategy: str, rate: float) -> dict:
    """One table row: medians over the epochs after the first. Keys a strategy does not report count 0."""
    timed = report["history"][1:]

    def median(get) -> float:
        return statistics.median(get(h) for h in timed)

    row = {"link_gbit": link_label(rate), "strategy": strategy, "epochs_timed": len(timed),
           "num_batches": timed[0]["num_batches"], "epoch_s": median(lambda h: h["epoch_s"]),
           "warmup_epoch_s": report["history"][0]["epoch_s"], "wall_s": report["wall_s"],
           "link_mb": None if report["link"] is None else report["link"].qdisc_bytes / MB,
           "link_drops": None if report["link"] is None else report["link"].qdisc_drops}
    for key, _ in (*LOADING, *TRAINING):
        row[key] = median(lambda h: h.get(key, 0.0))
    row["other_s"] = row["epoch_s"] - row["forward_backward_s"] - row["grad_sync_s"]
    row["rounds"] = {c: median(lambda h: h["rounds_per_iteration"].get(c, 0)) for c in CATEGORIES}
    row["mb"] = {c: median(lambda h: h["bytes_per_iteration"].get(c, 0)) / MB for c in CATEGORIES}
    edges = timed[0].get("edge_metrics")
    row["redundancy"] = median(lambda h: h["edge_metrics"]["redundancy"]) if edges else None
    return row


def add_ratios(rows: list[dict]) -> None:
    """Each row's epoch time over the baseline's (hybrid) at the same link rate."""
    base = {r["link_gbit"]: r["epoch_s"] for r in rows if r["strategy"] == BASELINE}
    for r in rows:
        r["x_hybrid"] = r["epoch_s"] / base[r["link_gbit"]] if r["link_gbit"] in base else None


HEADER = (f"{'Gbit/s':>6} {'strategy':>19} {'it':>3} {'epoch s':>7} {'sample':>6} {'split':>6} {'fetch':>6} "
          f"{'fwd+bwd':>7} {'(shuf)':>6} {'grad':>6} {'other':>6} {'rounds s/f/sh/g':>15} "
          f"{'MB smp':>6} {'MB feat':>7} {'MB shuf':>7} {'MB grad':>7} {'redund':>6} {'x hybrid':>8}")


def format_row(r: dict) -> str:
    ratio = f"{r['x_hybrid']:.2f}" if r.get("x_hybrid") is not None else "-"
    redundancy = f"{r['redundancy']:.0%}" if r["redundancy"] is not None else "-"
    rounds = "/".join(f"{r['rounds'][c]:.3g}" for c in CATEGORIES)  # DGS: one round per mask refresh, a fraction per iteration
    mb = r["mb"]
    return (f"{r['link_gbit']:>6} {r['strategy']:>19} {r['num_batches']:3d} {r['epoch_s']:7.2f} {r['sample_s']:6.2f} "
            f"{r['split_s']:6.2f} {r['fetch_s']:6.2f} {r['forward_backward_s']:7.2f} {r['shuffle_s']:6.2f} "
            f"{r['grad_sync_s']:6.2f} {r['other_s']:6.2f} {rounds:>15} {mb['sample']:6.2f} {mb['feature']:7.2f} "
            f"{mb['shuffle']:7.2f} {mb['grad']:7.2f} {redundancy:>6} {ratio:>8}")


def print_summary(rows: list[dict], a: argparse.Namespace) -> None:
    add_ratios(rows)
    print(f"\nmedians over epochs 1..{a.epochs - 1}, rank 0's seconds per epoch ((shuf): split's shuffles, inside "
          "fwd+bwd; other: epoch - fwd+bwd - grad, the loading the overlap did not hide); rounds and MB (sent + "
          "received by rank 0) per iteration by category sample/feature/shuffle/grad; redundancy: edges computed "
          "over the union mini-batch's - 1; x hybrid: epoch time over hybrid's at the same link rate")
    print(HEADER)
    for r in rows:
        print(format_row(r))
    for rate in dict.fromkeys(r["link_gbit"] for r in rows):
        here = {r["strategy"]: r for r in rows if r["link_gbit"] == rate}
        if BASELINE in here and FASTSAMPLE_BASELINE in here:
            print(f"link {rate} Gbit/s: {BASELINE} / {FASTSAMPLE_BASELINE} epoch time = "
                  f"{here[BASELINE]['epoch_s'] / here[FASTSAMPLE_BASELINE]['epoch_s']:.2f}")
    dropped = [r for r in rows if r["link_drops"]]
    if any(r["link_drops"] is not None for r in rows):
        print("emulated link: " + ("no packet dropped" if not dropped else "DROPPED packets in " + ", ".join(
            f"{r['link_gbit']} Gbit/s {r['strategy']}: {r['link_drops']}" for r in dropped)))


def plot(rows: list[dict], path: str, title: str) -> None:
    """Per (link, strategy): the training thread's epoch stacked, and beside it, narrower, the loading
    stage's busy time (it runs in the background, overlapped)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 2.5), 5.0))
    training = [("compute", lambda r: r["forward_backward_s"] - r["shuffle_s"], "#55a868"),
                ("shuffle", lambda r: r["shuffle_s"], "#8172b2"), ("grad sync", lambda r: r["grad_sync_s"], "#c44e52"),
                ("waiting for loading", lambda r: r["other_s"], "#b0b0b0")]
    bottom = [0.0] * len(rows)
    for name, get, color in training:
        heights = [max(get(r), 0.0) for r in rows]  # timer noise can make a part dip below 0
        ax.bar([i - 0.12 for i in x], heights, bottom=bottom, color=color, label=name, width=0.5)
        bottom = [b + h for b, h in zip(bottom, heights)]
    side = [0.0] * len(rows)
    for (key, name), color in zip(LOADING, ("#4c72b0", "#64b5cd", "#dd8452")):
        heights = [max(r[key], 0.0) for r in rows]
        ax.bar([i + 0.25 for i in x], heights, bottom=side, color=color, label=f"{name} (loading)", width=0.2)
        side = [b + h for b, h in zip(side, heights)]
    for i, r in enumerate(rows):
        note = f"{r['epoch_s']:.1f}s" + (f"\n{r['x_hybrid']:.2f}x" if r.get("x_hybrid") is not None else "")
        ax.annotate(note, (i - 0.12, bottom[i]), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{r['link_gbit']} Gbit/s\n{r['strategy']}" for r in rows], fontsize=8)
    ax.set_ylabel("seconds per epoch, rank 0")
    ax.set_ylim(0, max(max(bottom), max(side)) * 1.3)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot -> {path}")


# --- main -----------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.05, help="fraction of products' 2.45M nodes (default 0.05)")
    p.add_argument("--workers", type=int, default=4, help="workers (and METIS parts) (default 4)")
    p.add_argument("--strategies", default="all",
                   help=f"comma-separated, from {','.join(s.name for s in STRATEGIES)} (default all that exist)")
    add_link_argument(p, default="inf,10,1")
    p.add_argument("--batch-size", type=int, default=250, help="seed nodes per worker per iteration (default 250)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run, the first one warm-up (default 3)")
    p.add_argument("--bulk", type=int, default=4, help="matrix strategies: --bulk (default 4)")
    p.add_argument("--replication", type=int, default=2, help="matrix-1.5d: --replication (default 2)")
    p.add_argument("--dgs-period", type=int, default=30,
                   help="dgs strategies: --dgs-period (default 30, the CLI's; DGS samples plainly for its first "
                        "--dgs-warmup + --dgs-lag = 10 iterations, so give the runs epochs longer than that)")
    p.add_argument("--seed", type=int, default=0, help="seed of the dataset, METIS and training")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one launch (default 1800)")
    p.add_argument("--tune-malloc", action="store_true", help="as in benchmarks/distributed.py")
    add_cache_dir_argument(p)
    p.add_argument("--json", default=None, help="write the rows and settings here")
    p.add_argument("--plot", default=None, help="write the stacked-bar PNG here")
    p.add_argument("--list", action="store_true", help="print the strategies and which exist, then stop")
    a = p.parse_args()
    names = {s.name: s for s in STRATEGIES}
    wanted = list(names) if a.strategies == "all" else a.strategies.split(",")
    unknown = [n for n in wanted if n not in names]
    if unknown:
        p.error(f"--strategies: expected names from {','.join(names)} (or all), got {','.join(unknown)}")
    a.selected = [names[n] for n in wanted]
    for flag in ("workers", "batch_size", "bulk", "replication", "dgs_period"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: expected an int >= 1, got {getattr(a, flag)}")
    check_run_arguments(p, a)
    return a


def main() -> None:
    exit_on_sigterm()
    a = parse_args()
    if a.list:
        help_text = train_help()
        for s in STRATEGIES:
            missing = missing_support(s, help_text)
            state = "available" if not missing else "not yet (no " + ", ".join(missing) + ")"
            stored = "" if s.feature_dtype == "float32" else f" (partition --feature-dtype {s.feature_dtype})"
            print(f"{s.name:>19}  {' '.join(s.args):<60} {state}; {s.about}{stored}")
        return
    exit_unless_links_work(a.link_gbit)
    strategies = available(a.selected)
    if not strategies:
        sys.exit("no selected strategy is offered by `gnnscale train` here")
    dataset_dir = cached_dataset(a.scale, a.seed, Path(a.cache_dir))
    meta = dataset_meta(dataset_dir)
    partition_dirs = {dtype: cached_partition(dataset_dir, a.workers, a.seed, a.timeout, dtype)
                      for dtype in dict.fromkeys(s.feature_dtype for s in strategies)}
    info = partition_info(next(iter(partition_dirs.values())))
    print(f"dataset: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, {meta['feature_dim']} features "
          f"(scale {a.scale:g}), METIS {a.workers} parts (edge cut {info['edge_cut_fraction']:.1%}); fanouts "
          f"{a.fanouts}, batch {a.batch_size} per worker, hidden {a.hidden}, {a.epochs} epochs (median of the last "
          f"{a.epochs - 1}); {os.cpu_count()} CPU cores; strategies {','.join(s.name for s in strategies)}",
          flush=True)
    print(HEADER, flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-strategies-") as scratch:
        # Rates outermost: every strategy of one rate runs back to back, under the same load.
        for rate in a.link_gbit:
            for s in strategies:
                metrics = Path(scratch) / f"metrics_{s.name}_link{link_label(rate)}.json"
                report = run_launch(train_command(s, partition_dirs[s.feature_dtype], a, metrics), metrics, rate, timeout_s=a.timeout,
                                    tune_malloc=a.tune_malloc, what=f"training ({a.workers} workers, {s.name})")
                rows.append(summarize(report, s.name, rate))
                print(format_row(rows[-1]), f"  [{report['wall_s']:.0f}s wall]", flush=True)
    print_summary(rows, a)
    if a.plot:
        plot(rows, a.plot, f"products-shaped, scale {a.scale:g} ({meta['num_nodes']:,} nodes), {a.workers} workers, "
                           f"fanouts {a.fanouts}, batch {a.batch_size}/worker, {os.cpu_count()} cores shared")
    if a.json:
        settings = {k: v for k, v in vars(a).items() if k != "selected"}
        settings["link_gbit"] = [link_label(rate) for rate in a.link_gbit]  # JSON has no inf
        settings["strategies"] = {s.name: list(s.args) for s in strategies}
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "dataset": {k: meta[k] for k in ("num_nodes", "num_edges", "feature_dim")},
                       "partition": info, "cpu_count": os.cpu_count(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
