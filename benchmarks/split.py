"""Split vs data parallelism (GSplit, Polisetty et al.): epoch time and its split, redundancy, local edges,
edge skew, rounds and bytes per iteration, same data, same total batch, same run.

    python benchmarks/split.py [--scale 0.25] [--workers 2,4] [--total-batch 4000] [--layouts hybrid,split,split+replicated]
                               [--model sage] [--fanouts 15,10,5] [--hidden 256] [--epochs 3]
                               [--cache-fraction F] [--link-gbit inf,1] [--tune-malloc] [--cache-dir DIR]
                               [--json FILE] [--plot FILE.png]

The products-shaped dataset and its METIS partitions are those benchmarks/distributed.py caches under
benchmarks/.cache. For every (link, workers, layout) the script launches ``torchrun -m gnnscale train
--partitions DIR --layout L`` (gloo on 127.0.0.1, one thread per worker) and reads rank 0's metrics. Every
layout trains ``--total-batch`` seeds per iteration: data parallelism as P micro-batches of total/P seeds
of each worker's own training nodes, split parallelism as one mini-batch of all of them (``--batch-size``
is total/P for both), so both run the same number of iterations per epoch. ``--cache-fraction F`` adds a
``hybrid+cache`` run (data-parallel hybrid whose workers cache F of all nodes' rows, the hottest remote ones).

The first epoch is warm-up (numba compilation, page cache); the table shows medians over the others of
rank 0's seconds: sample, split (online splitting, split only), fetch (data parallel: the feature fetch;
split: reading its own rows), forward+backward, of which shuffle (split's cooperative layers), gradient
sync, other (waiting for the loading stage not covered above). The loading stage (sample, split,
fetch) runs in the background beside forward+backward, so the parts add up to more than the epoch when
the overlap works. Redundancy, local edges and skew: split over every iteration, data parallelism over
the first iterations of each epoch (see gnnscale/train/layouts/data_parallel.py). All workers share this machine's
cores, so with more workers than cores the times include that contention.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import (MB, add_cache_dir_argument, cached_dataset, cached_partition,  # noqa: E402
                         check_run_arguments, dataset_meta, exit_on_sigterm, exit_unless_links_work,
                         partition_info, run_launch, torchrun_command)
from emulated_link import add_link_argument, link_label  # noqa: E402

BASELINE = "hybrid"  # data parallelism, which split is measured against
# What is run: a name for the table -> the layout and its flags. split: owner-driven sampling (the
# default); split+replicated: every worker samples the whole mini-batch.
RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    BASELINE: (BASELINE, ()),
    "split": ("split", ()),
    "split+replicated": ("split", ("--split-sampling", "replicated")),
}
LAYOUTS = tuple(RUNS)
# Phases of the epoch time split, in stacking order: (metrics key, label). Shuffle is inside fwd+bwd.
PHASES = (("sample_s", "sample"), ("split_s", "split"), ("fetch_s", "fetch"), ("forward_backward_s", "fwd+bwd"),
          ("grad_sync_s", "grad sync"))
TARGET_RATIO = 0.9  # the issue's done-when: split epoch time <= 0.9x data-parallel hybrid at 4 workers
TARGET_WORKERS = 4


def train_command(partition_dir: Path, workers: int, layout: str, a: argparse.Namespace, metrics: Path) -> list[str]:
    cache = layout.endswith("+cache")
    name, flags = RUNS[layout.removesuffix("+cache")]
    return [*torchrun_command(workers), "-m", "gnnscale", "train", "--partitions", str(partition_dir),
            "--layout", name, *flags,
            "--model", a.model, "--fanouts", a.fanouts, "--batch-size", str(a.total_batch // workers),
            "--hidden", str(a.hidden), "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", "1",
            "--no-eval", "--quiet", "--metrics-out", str(metrics),
            *(["--cache-fraction", str(a.cache_fraction)] if cache else [])]


def run_training(partition_dir: Path, workers: int, layout: str, rate: float, a: argparse.Namespace,
                 scratch: Path) -> dict:
    """One launch; rank 0's metrics JSON with the emulated link's counters under ``"link"``."""
    metrics = scratch / f"metrics_w{workers}_{layout}_link{link_label(rate)}.json"
    return run_launch(train_command(partition_dir, workers, layout, a, metrics), metrics, rate, timeout_s=a.timeout,
                      tune_malloc=a.tune_malloc, what=f"training ({workers} workers, {layout})")


def summarize_run(report: dict, workers: int, layout: str, rate: float) -> dict:
    """One table row: medians over the epochs after the first (warm-up)."""
    timed = report["history"][1:]

    def median(get) -> float:
        return statistics.median(get(h) for h in timed)

    row = {"link_gbit": link_label(rate), "workers": workers, "layout": layout, "epochs_timed": len(timed),
           "num_batches": timed[0]["num_batches"], "epoch_s": median(lambda h: h["epoch_s"]),
           "warmup_epoch_s": report["history"][0]["epoch_s"], "wall_s": report["wall_s"],
           "shuffle_s": median(lambda h: h["shuffle_s"]),
           "link_mb": None if report["link"] is None else report["link"].qdisc_bytes / MB,
           "link_drops": None if report["link"] is None else report["link"].qdisc_drops}
    for key, _ in PHASES:
        row[key] = median(lambda h: h[key])
    row["metrics_s"] = median(lambda h: h.get("metrics_s", 0.0))  # data parallel: the edge metrics' bookkeeping
    # What the loading stage did not hide (its busy time runs beside forward+backward).
    row["other_s"] = row["epoch_s"] - row["forward_backward_s"] - row["grad_sync_s"]
    edges = [h["edge_metrics"] for h in timed]
    for key in ("redundancy", "local_edge_fraction", "edge_skew"):
        row[key] = median(lambda h: h["edge_metrics"][key])
    row["edges_computed_per_iteration"] = statistics.median(e["edges_computed"] / e["iterations"] for e in edges)
    row["minibatch_edges_per_iteration"] = statistics.median(e["minibatch_edges"] / e["iterations"] for e in edges)
    row["edge_iterations"] = edges[0]["iterations"]
    row["rounds"] = {c: median(lambda h: h["rounds_per_iteration"][c]) for c in ("sample", "feature", "shuffle", "grad")}
    row["mb"] = {c: median(lambda h: h["bytes_per_iteration"][c]) / MB for c in ("sample", "feature", "shuffle", "grad")}
    row["cache_hit_rate"] = median(lambda h: h["cache"]["hit_rate"]) if "cache" in timed[0] else None
    return row


def add_ratios(rows: list[dict]) -> None:
    """Each row's epoch time over the hybrid row of the same link and worker count."""
    hybrid = {(r["link_gbit"], r["workers"]): r["epoch_s"] for r in rows if r["layout"] == BASELINE}
    for r in rows:
        key = (r["link_gbit"], r["workers"])
        r["x_hybrid"] = r["epoch_s"] / hybrid[key] if key in hybrid else None


HEADER = (f"{'Gbit/s':>6} {'P':>2} {'layout':>16} {'it':>3} {'epoch s':>7} {'sample':>6} {'split':>6} {'fetch':>6} "
          f"{'fwd+bwd':>7} {'(shuf)':>6} {'grad':>6} {'other':>6} {'redund':>7} {'local':>6} {'skew':>5} "
          f"{'rounds s/f/s/g':>14} {'MB feat':>7} {'MB shuf':>7} {'MB grad':>7} {'hit':>5} {'x hybrid':>8}")


def print_row(r: dict) -> None:
    ratio = f"{r['x_hybrid']:.2f}" if r["x_hybrid"] is not None else "-"
    hit = f"{r['cache_hit_rate']:.0%}" if r["cache_hit_rate"] is not None else "-"
    rounds = f"{r['rounds']['sample']:g}/{r['rounds']['feature']:g}/{r['rounds']['shuffle']:g}/{r['rounds']['grad']:g}"
    print(f"{r['link_gbit']:>6} {r['workers']:2d} {r['layout']:>16} {r['num_batches']:3d} {r['epoch_s']:7.2f} "
          f"{r['sample_s']:6.2f} {r['split_s']:6.2f} {r['fetch_s']:6.2f} {r['forward_backward_s']:7.2f} "
          f"{r['shuffle_s']:6.2f} {r['grad_sync_s']:6.2f} {r['other_s']:6.2f} {r['redundancy']:7.1%} "
          f"{r['local_edge_fraction']:6.1%} {r['edge_skew']:5.3f} {rounds:>14} {r['mb']['feature']:7.1f} "
          f"{r['mb']['shuffle']:7.1f} {r['mb']['grad']:7.1f} {hit:>5} {ratio:>8}", flush=True)


def print_verdict(rows: list[dict]) -> None:
    """The issue's done-when checks, stated plainly."""
    for r in rows:
        if r["layout"] != BASELINE:
            dp = next((d for d in rows if d["layout"] == BASELINE and d["workers"] == r["workers"]
                       and d["link_gbit"] == r["link_gbit"]), None)
            same = f"; data-parallel hybrid's redundancy in the same run {dp['redundancy']:.1%}" if dp else ""
            print(f"link {r['link_gbit']} Gbit/s, {r['workers']} workers: {r['layout']} redundancy {r['redundancy']:.1%} "
                  f"(target exactly 0: {'met' if r['redundancy'] == 0 else 'NOT met'}){same}; local edges "
                  f"{r['local_edge_fraction']:.1%}" + (f" (target >= 83%: {'met' if r['local_edge_fraction'] >= 0.83 else 'NOT met'})"
                                                      if r["workers"] == TARGET_WORKERS else ""))
            if r["x_hybrid"] is not None:
                target = (f" (target <= {TARGET_RATIO}: {'met' if r['x_hybrid'] <= TARGET_RATIO else 'NOT met'})"
                          if r["workers"] == TARGET_WORKERS else "")
                print(f"  {r['layout']} / hybrid epoch time = {r['x_hybrid']:.2f}{target}")
    dropped = [r for r in rows if r["link_drops"]]
    if any(r["link_drops"] is not None for r in rows):
        print("emulated link: " + ("no packet dropped" if not dropped else "DROPPED packets in " + ", ".join(
            f"{r['link_gbit']} Gbit/s {r['workers']} workers {r['layout']}: {r['link_drops']}" for r in dropped)))


def plot(rows: list[dict], path: str, title: str) -> None:
    """Per (link, workers, layout): the training thread's epoch stacked (what the epoch time is made of),
    and beside it, narrower, the loading stage's busy time (it runs in the background, overlapped)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    training = [("forward_backward_s", "fwd+bwd (compute)", "#55a868"), ("shuffle_s", "shuffle (in fwd+bwd)", "#8172b2"),
                ("grad_sync_s", "grad sync", "#c44e52"), ("other_s", "waiting for loading", "#b0b0b0")]
    loading = [("sample_s", "sample (loading)", "#4c72b0"), ("split_s", "split (loading)", "#64b5cd"),
               ("fetch_s", "fetch (loading)", "#dd8452")]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(4.5, 2.0 * len(rows) + 2.5), 5.0))
    bottom = [0.0] * len(rows)
    for key, name, color in training:
        if key == "forward_backward_s":  # the shuffles are inside fwd+bwd: stack them separately
            heights = [max(r[key] - r["shuffle_s"], 0.0) for r in rows]
        else:
            heights = [max(r[key], 0.0) for r in rows]
        ax.bar([i - 0.12 for i in x], heights, bottom=bottom, color=color, label=name, width=0.5)
        bottom = [b + h for b, h in zip(bottom, heights)]
    side = [0.0] * len(rows)
    for key, name, color in loading:
        heights = [max(r[key], 0.0) for r in rows]
        ax.bar([i + 0.25 for i in x], heights, bottom=side, color=color, label=name, width=0.2)
        side = [b + h for b, h in zip(side, heights)]
    for i, r in enumerate(rows):
        note = f"{r['epoch_s']:.1f}s\nredundancy {r['redundancy']:.0%}"
        if r["layout"] != BASELINE and r["x_hybrid"] is not None:
            note += f"\n{r['x_hybrid']:.2f}x hybrid"
        ax.annotate(note, (i - 0.12, bottom[i]), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{r['link_gbit']} Gbit/s\n{r['workers']} workers\n{r['layout']}" for r in rows])
    ax.set_ylabel("seconds per epoch, rank 0")
    ax.set_ylim(0, max(bottom) * 1.35)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot -> {path}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.45M nodes (default 0.25)")
    p.add_argument("--workers", default="2,4", help="worker counts, comma-separated (default 2,4)")
    p.add_argument("--total-batch", type=int, default=4000, help="seeds per iteration over all workers (4000)")
    p.add_argument("--layouts", default="hybrid,split", help="layouts, comma-separated (default hybrid,split)")
    p.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run, the first one warm-up (default 3)")
    p.add_argument("--cache-fraction", type=float, default=0.0,
                   help="also run hybrid with this --cache-fraction (a 'hybrid+cache' row); 0: no such run")
    add_link_argument(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the dataset, METIS and training")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one launch (default 1800)")
    p.add_argument("--tune-malloc", action="store_true", help="as in benchmarks/distributed.py")
    add_cache_dir_argument(p)
    p.add_argument("--json", default=None, help="write the rows and settings here")
    p.add_argument("--plot", default=None, help="write the stacked-bar PNG here")
    a = p.parse_args()
    try:
        a.worker_counts = [int(w) for w in a.workers.split(",")]
        [int(f) for f in a.fanouts.split(",")]
    except ValueError:
        p.error(f"--workers and --fanouts: expected comma-separated ints, got {a.workers!r} and {a.fanouts!r}")
    a.layout_list = a.layouts.split(",")
    if any(layout not in LAYOUTS for layout in a.layout_list):
        p.error(f"--layouts: expected a subset of {','.join(LAYOUTS)}, got {a.layouts}")
    if not 0 < a.cache_fraction <= 1 and a.cache_fraction != 0:
        p.error(f"--cache-fraction: expected a fraction in [0, 1], got {a.cache_fraction}")
    if a.cache_fraction:
        a.layout_list.append(f"{BASELINE}+cache")
    if any(w < 1 or a.total_batch % w for w in a.worker_counts):
        p.error(f"--workers: expected counts >= 1 that divide --total-batch {a.total_batch}, got {a.workers}")
    check_run_arguments(p, a)
    return a


def main() -> None:
    exit_on_sigterm()
    a = parse_args()
    exit_unless_links_work(a.link_gbit)
    dataset_dir = cached_dataset(a.scale, a.seed, Path(a.cache_dir))
    meta = dataset_meta(dataset_dir)
    print(f"dataset: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, {meta['feature_dim']} features "
          f"(scale {a.scale:g}); {a.model}, fanouts {a.fanouts}, {a.total_batch} seeds per iteration, hidden "
          f"{a.hidden}, {a.epochs} epochs (median of the last {a.epochs - 1}); {os.cpu_count()} CPU cores", flush=True)
    partitions = {w: cached_partition(dataset_dir, w, a.seed, a.timeout) for w in a.worker_counts}
    for w, path in partitions.items():
        info = partition_info(path)
        print(f"  {w} parts: edge cut {info['edge_cut_fraction']:.2%}, node balance {info['balance']['nodes']:.3f}",
              flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-split-bench-") as scratch:
        # Rates outermost: the layouts of one (rate, workers) run back to back, under the same load.
        for rate in a.link_gbit:
            for w in a.worker_counts:
                for layout in a.layout_list:
                    report = run_training(partitions[w], w, layout, rate, a, Path(scratch))
                    rows.append(summarize_run(report, w, layout, rate))
                    print(f"  ran {link_label(rate)} Gbit/s, {w} workers {layout}: {report['wall_s']:.0f}s wall, epochs "
                          + ", ".join(f"{h['epoch_s']:.1f}" for h in report["history"]) + " s", flush=True)
    add_ratios(rows)
    print(f"\nmedians over epochs 1..{a.epochs - 1}, rank 0's seconds per epoch (shuf: the shuffles inside fwd+bwd; "
          "other: epoch - fwd+bwd - grad, the loading the overlap did not hide); redundancy, local edges, skew; "
          "rounds (feature/shuffle/grad) and MB (sent + received by rank 0) per iteration; x hybrid: epoch time over "
          "the hybrid run of the same link and worker count")
    print(HEADER)
    for r in rows:
        print_row(r)
    print_verdict(rows)
    if a.plot:
        plot(rows, a.plot, f"products-shaped, scale {a.scale:g} ({meta['num_nodes']:,} nodes), {a.model}, fanouts "
                           f"{a.fanouts},\n{a.total_batch} seeds per iteration, {os.cpu_count()} cores shared by all workers")
    if a.json:
        settings = {k: v for k, v in vars(a).items() if k not in ("worker_counts", "layout_list")}
        settings["link_gbit"] = [link_label(rate) for rate in a.link_gbit]  # JSON has no inf
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "dataset": {k: meta[k] for k in ("num_nodes", "num_edges", "feature_dim")},
                       "partitions": {str(w): partition_info(p) for w, p in partitions.items()},
                       "cpu_count": os.cpu_count(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
