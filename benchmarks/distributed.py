"""Distributed epoch time: hybrid vs vanilla partitioning (FastSample, section 3.3), same data, same run.

    python benchmarks/distributed.py [--scale 0.25] [--workers 2,4] [--layouts vanilla,hybrid]
                                     [--link-gbit inf,10,1] [--epochs 3] [--fanouts 15,10,5]
                                     [--batch-size 1000] [--hidden 256] [--cache-dir DIR] [--json FILE]
                                     [--plot FILE.png]

The dataset is shaped like ogbn-products (2.45M nodes at scale 1, ~50 in-edges per node, 100
features, 47 classes, 8% training nodes; the gnnscale synthetic generator at ``--scale``). It is built
once and cached under benchmarks/.cache as a dataset directory, then partitioned with METIS once per
worker count (``gnnscale partition --dataset dir``, also cached). For every (workers, layout) the
script launches ``torchrun -m gnnscale train --partitions DIR --layout L`` on this machine (gloo over
127.0.0.1, one thread per worker) and reads rank 0's metrics JSON. With ``--link-gbit R`` every launch
runs over an emulated link of R Gbit/s that all workers share (benchmarks/emulated_link.py: a
rate-limited loopback in a private network namespace); ``inf``, the default, is the host loopback.

Both layouts train identically (same blocks for the same keys); only the communication differs:
vanilla costs 2 rounds per hop after the first plus 2 feature rounds (2L per iteration), hybrid only
the 2 feature rounds. The first ``--epochs`` epoch is warm-up (numba compilation, page cache); the
table reports the median of the others. Batch size is per worker, as in FastSample. All workers
share this machine's cores, so with more workers than cores the times include that contention.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from emulated_link import (  # noqa: E402  (benchmarks/ is not a package)
    add_link_argument, check_link_support, link_command, link_label, read_link_stats)

from gnnscale.train.layouts.registry import layout_spec  # noqa: E402

BASELINE, CANDIDATE = "vanilla", "hybrid"  # what is measured against what
LAYOUTS = (BASELINE, CANDIDATE)
# Phases of the epoch time split, in stacking order: (metrics key, label).
PHASES = (("sample_s", "sample"), ("fetch_s", "fetch"), ("forward_backward_s", "fwd+bwd"),
          ("grad_sync_s", "grad sync"))
TARGET_RATIO = 0.7  # the issue's done-when: hybrid epoch time <= 0.7x vanilla at 4 workers
TARGET_WORKERS = 4
MB = 1e6
# --tune-malloc: glibc serves allocations above its mmap threshold (at most 32 MiB by default) with
# fresh mmaps and unmaps them on free, so every large activation of every iteration is page-faulted
# and zeroed anew by the kernel. Raising both thresholds keeps freed memory in the heap for reuse.
GLIBC_KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(16 << 30), "MALLOC_TRIM_THRESHOLD_": str(16 << 30)}


# --- data -----------------------------------------------------------------------------------------


def cached_dataset(scale: float, seed: int, cache: Path) -> Path:
    """The products-shaped dataset directory for (scale, seed), generated and saved on first use.

    Generated in this process and dropped before training starts, so the workers get the memory.
    """
    path = cache / f"products_scale{scale:g}_seed{seed}_dataset"
    if (path / "meta.json").is_file():  # save_dataset is atomic: a complete directory has meta.json
        return path
    # Imported here: only a cold cache needs the generator.
    from gnnscale.graph.storage import save_dataset
    from gnnscale.graph.synthetic import make_synthetic, products_like_config

    start = time.perf_counter()
    dataset = make_synthetic(products_like_config(scale, seed=seed))
    cache.mkdir(parents=True, exist_ok=True)
    save_dataset(dataset, path, overwrite=path.exists())
    print(f"built dataset: {dataset.graph.num_nodes:,} nodes, {dataset.graph.num_edges:,} edges, "
          f"{dataset.train_idx.shape[0]:,} training nodes in {time.perf_counter() - start:.0f}s -> {path}",
          flush=True)
    return path


def dataset_meta(dataset_dir: Path) -> dict:
    """The cached dataset's ``meta.json`` (node, edge and feature counts)."""
    return json.loads((dataset_dir / "meta.json").read_text(encoding="utf-8"))


def exit_unless_links_work(rates: list[float]) -> None:
    """Check the emulated links before the dataset: a missing tc fails in a second, not after minutes."""
    try:
        check_link_support(rates)
    except RuntimeError as err:
        sys.exit(str(err))


def cached_partition(dataset_dir: Path, workers: int, seed: int, timeout_s: float,
                     feature_dtype: str = "float32") -> Path:
    """The METIS partition directory of ``dataset_dir`` into ``workers`` parts, features stored as
    ``feature_dtype`` (``gnnscale partition --feature-dtype``), written on first use.

    Runs the ``gnnscale partition`` command in a child process: METIS' memory is returned to the
    system when it exits instead of staying in this process while the workers run.
    """
    dtype = "" if feature_dtype == "float32" else f"_{feature_dtype}"
    path = dataset_dir.with_name(f"{dataset_dir.name}_metis{workers}_seed{seed}{dtype}")
    if (path / "manifest.json").is_file():  # the manifest is the last file written
        return path
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "gnnscale", "partition", "--dataset", "dir", "--data-dir", str(dataset_dir),
           "--parts", str(workers), "--method", "metis", "--seed", str(seed), "--out", str(path),
           "--feature-dtype", feature_dtype]
    if path.exists():
        cmd.append("--overwrite")  # a directory without a manifest is unusable anyway
    output = run_checked(cmd, env=os.environ.copy(), timeout_s=timeout_s, what=f"partitioning into {workers} parts")
    print(output.strip(), f"({time.perf_counter() - start:.0f}s)", flush=True)
    return path


def partition_info(partition_dir: Path) -> dict:
    """Cut and balance from the partition's manifest (for the report; vanilla's traffic follows the cut)."""
    manifest = json.loads((partition_dir / "manifest.json").read_text(encoding="utf-8"))
    keys = ("num_nodes", "num_edges", "edge_cut", "edge_cut_fraction", "balance", "train_nodes")
    return {k: manifest[k] for k in keys if k in manifest}


# --- launching ------------------------------------------------------------------------------------


def torchrun_command(workers: int) -> list[str]:
    """``torchrun --standalone`` for ``workers`` workers on this machine (``python -m
    torch.distributed.run`` is what the ``torchrun`` script runs; through this interpreter it needs no
    PATH lookup). Standalone: torchrun binds a free port itself and hands it to its workers. Choosing
    one here (bind port 0, release it, pass ``--master-port``) is a race: until torchrun binds it, the
    kernel may give the port to any other socket, and on a loaded machine shared with test suites that
    made launches fail with EADDRINUSE now and then (tests/launch.py)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers)]


def run_checked(cmd: list[str], env: dict, timeout_s: float, what: str) -> str:
    """Run ``cmd`` in its own process group; return its combined output, or exit the script with it.

    Its own session so that on timeout the whole group (torchrun and its workers) is stopped, not
    just the launcher, which would leave orphaned workers holding memory and cores. The same when this
    script is interrupted or terminated (an outer ``timeout``, Ctrl-C): see :func:`exit_on_sigterm`.
    """
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        output, _ = proc.communicate()
        fail(f"{what}: timed out after {timeout_s:.0f}s", cmd, output)
    except BaseException:  # SystemExit from SIGTERM, KeyboardInterrupt: the workers must not outlive us
        stop_group(proc)
        raise
    if proc.returncode != 0:
        fail(f"{what}: exit status {proc.returncode}", cmd, output)
    return output


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that :func:`run_checked` stops the launch's process group on the
    way out (by default SIGTERM ends Python at once and the workers, in their own session, run on)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group started for ``proc``; SIGKILL it if it is still there 10 s later."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if grace is None:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def fail(reason: str, cmd: list[str], output: str) -> None:
    """Stop the benchmark with the failing command and everything it printed."""
    sys.stderr.write(f"benchmark failed: {reason}\ncommand: {' '.join(cmd)}\n--- output ---\n{output}\n")
    sys.exit(1)


def train_command(partition_dir: Path, workers: int, layout: str, a: argparse.Namespace, metrics: Path) -> list[str]:
    """The torchrun command line of one (workers, layout) run."""
    return [*torchrun_command(workers), "-m", "gnnscale", "train", "--partitions", str(partition_dir), "--layout", layout,
            "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--hidden", str(a.hidden),
            "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", "1", "--no-eval", "--quiet",
            "--metrics-out", str(metrics)]


def run_launch(train_cmd: list[str], metrics: Path, link_gbit: float, *, timeout_s: float, tune_malloc: bool,
               what: str) -> dict:
    """Run one torchrun launch (``train_cmd`` writes rank 0's metrics to ``metrics``) over the emulated
    link and return those metrics, with ``wall_s`` and the link's counters under ``"link"`` (None on the
    host loopback)."""
    link_stats = metrics.with_name(metrics.stem + "_link.txt")
    cmd = link_command(train_cmd, link_gbit, stats_path=link_stats)
    # One thread per worker: the workers already share the cores; more threads would only fight.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    if tune_malloc:
        env.update(GLIBC_KEEP_MEMORY)
    start = time.perf_counter()
    output = run_checked(cmd, env=env, timeout_s=timeout_s, what=f"{what}, link {link_label(link_gbit)} Gbit/s")
    if not metrics.is_file():
        fail("training finished but wrote no metrics file", cmd, output)
    report = json.loads(metrics.read_text(encoding="utf-8"))
    report["wall_s"] = time.perf_counter() - start
    report["link"] = read_link_stats(link_stats) if link_stats.is_file() else None
    return report


def run_training(partition_dir: Path, workers: int, layout: str, link_gbit: float, a: argparse.Namespace,
                 scratch: Path) -> dict:
    """Launch one distributed run over the emulated link and return rank 0's metrics JSON."""
    metrics = scratch / f"metrics_w{workers}_{layout}_link{link_label(link_gbit)}.json"
    return run_launch(train_command(partition_dir, workers, layout, a, metrics), metrics, link_gbit,
                      timeout_s=a.timeout, tune_malloc=a.tune_malloc, what=f"training ({workers} workers, {layout})")


# --- summarising ----------------------------------------------------------------------------------


def print_run(row: dict, report: dict) -> None:
    """One progress line per launch: wall time, every epoch's time, and what the shaped link carried."""
    link = "" if row["link_mb"] is None else \
        f"; link carried {row['link_mb']:,.0f} MB, dropped {row['link_drops']} packets"
    print(f"  ran {row['link_gbit']} Gbit/s, {row['workers']} workers {row['layout']}: {row['wall_s']:.0f}s wall, "
          "epochs " + ", ".join(f"{h['epoch_s']:.1f}" for h in report["history"]) + f" s{link}", flush=True)


def summarize_run(report: dict, workers: int, layout: str, link_gbit: float, num_layers: int) -> dict:
    """One table row: medians over the epochs after the first (warm-up), rank 0's times."""
    timed = report["history"][1:]

    def median(key: str) -> float:
        return statistics.median(h[key] for h in timed)

    row = {"link_gbit": link_label(link_gbit), "workers": workers, "layout": layout, "epochs_timed": len(timed),
           "num_batches": timed[0]["num_batches"], "epoch_s": median("epoch_s"),
           "warmup_epoch_s": report["history"][0]["epoch_s"], "wall_s": report["wall_s"]}
    link = report["link"]
    # What the shaped link carried over the whole launch (all workers, both directions, headers and
    # start-up included) and what its queue dropped (expected 0; see emulated_link.QUEUE_BYTES).
    row["link_mb"] = None if link is None else link.qdisc_bytes / MB
    row["link_drops"] = None if link is None else link.qdisc_drops
    for key, _ in PHASES:
        row[key] = median(key)
    row["other_s"] = row["epoch_s"] - sum(row[key] for key, _ in PHASES)
    # Rounds are means per iteration and the same in every iteration: any spread would be a bug.
    rounds = [h["rounds_per_iteration"] for h in timed]
    row["rounds"] = {c: statistics.median(r[c] for r in rounds) for c in rounds[0]}
    row["rounds_constant"] = all(r == rounds[0] for r in rounds)
    row["rounds_sample_feature"] = row["rounds"]["sample"] + row["rounds"]["feature"]
    # A worker holding the whole topology samples alone: 1 sampling + 1 feature round per iteration;
    # one holding its own rows asks the owners at every hop and for every hop's features: 2L.
    row["rounds_expected"] = 2 if layout_spec(layout).view == "whole" else 2 * num_layers
    row["mb_per_iteration"] = {c: statistics.median(h["bytes_per_iteration"][c] for h in timed) / MB
                               for c in timed[0]["bytes_per_iteration"]}
    return row


def add_ratios(rows: list[dict]) -> dict[tuple[str, int], float]:
    """Each row's epoch time over the vanilla row's of the same link and worker count;
    {(link, workers): hybrid/vanilla}."""
    vanilla = {(r["link_gbit"], r["workers"]): r["epoch_s"] for r in rows if r["layout"] == BASELINE}
    ratios = {}
    for r in rows:
        key = (r["link_gbit"], r["workers"])
        r["x_vanilla"] = r["epoch_s"] / vanilla[key] if key in vanilla else None
        if r["layout"] == CANDIDATE and r["x_vanilla"] is not None:
            ratios[key] = r["x_vanilla"]
    return ratios


HEADER = (f"{'Gbit/s':>6} {'workers':>7} {'layout':>7} {'iters':>5} {'epoch s':>8} {'sample':>7} {'fetch':>7} "
          f"{'fwd+bwd':>7} {'grad':>7} {'other':>7} {'rounds s+f':>10} {'grad':>4} {'MB smp':>7} {'MB feat':>7} "
          f"{'x vanilla':>9}")


def print_row(r: dict) -> None:
    rounds_ok = "" if r["rounds_sample_feature"] == r["rounds_expected"] and r["rounds_constant"] else "!"
    ratio = f"{r['x_vanilla']:.2f}" if r["x_vanilla"] is not None else "-"
    mb = r["mb_per_iteration"]
    print(f"{r['link_gbit']:>6} {r['workers']:7d} {r['layout']:>7} {r['num_batches']:5d} {r['epoch_s']:8.2f} "
          f"{r['sample_s']:7.2f} "
          f"{r['fetch_s']:7.2f} {r['forward_backward_s']:7.2f} {r['grad_sync_s']:7.2f} {r['other_s']:7.2f} "
          f"{r['rounds_sample_feature']:>9g}{rounds_ok:1} {r['rounds']['grad']:4g} {mb['sample']:7.2f} "
          f"{mb['feature']:7.2f} {ratio:>9}", flush=True)


def print_verdict(rows: list[dict], ratios: dict[tuple[str, int], float], num_layers: int) -> None:
    """The issue's two done-when checks, and the emulated link's health, stated plainly."""
    bad = [r for r in rows if r["rounds_sample_feature"] != r["rounds_expected"] or not r["rounds_constant"]]
    print(f"rounds per iteration (sample + feature): expected {2 * num_layers} (vanilla, 2L) and 2 (hybrid): "
          + ("all rows match" if not bad else
             "MISMATCH in " + ", ".join(f"{r['workers']} workers {r['layout']}" for r in bad)))
    dropped = [r for r in rows if r["link_drops"]]
    if any(r["link_drops"] is not None for r in rows):
        print("emulated link: " + ("no packet dropped" if not dropped else "DROPPED packets (the queue was too "
              "small; times include TCP's recovery) in " + ", ".join(
                  f"{r['link_gbit']} Gbit/s {r['workers']} workers {r['layout']}: {r['link_drops']}" for r in dropped)))
    for (link, workers), ratio in ratios.items():
        target = f" (target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'})" \
            if workers == TARGET_WORKERS else ""
        print(f"link {link} Gbit/s, {workers} workers: hybrid / vanilla epoch time = {ratio:.2f}{target}")


# --- plot -----------------------------------------------------------------------------------------


def plot(rows: list[dict], path: str, title: str) -> None:
    """Stacked bars of rank 0's epoch time split, one bar per (workers, layout)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    parts = [*PHASES, ("other_s", "other")]
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#b0b0b0"]
    labels = [f"{r['link_gbit']} Gbit/s\n{r['workers']} workers\n{r['layout']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(rows) + 2.5), 4.8))
    bottom = [0.0] * len(rows)
    for (key, name), color in zip(parts, colors):
        # "other" can dip below zero by timer noise; a negative bar would overlap the others.
        heights = [max(r[key], 0.0) for r in rows]
        ax.bar(labels, heights, bottom=bottom, color=color, label=name, width=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, r in enumerate(rows):
        note = f"{r['epoch_s']:.1f}s"
        if r["layout"] == CANDIDATE and r["x_vanilla"] is not None:
            note += f"\n{r['x_vanilla']:.2f}x vanilla"
        ax.annotate(note, (i, bottom[i]), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize=9)
    ax.set_ylabel("epoch time, rank 0 (s)")
    ax.set_ylim(0, max(bottom) * 1.22)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8, ncol=len(parts))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot -> {path}")


# --- main -----------------------------------------------------------------------------------------


def check_run_arguments(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The options every distributed benchmark shares: a warm-up epoch and at least one timed, a
    positive scale, a .png plot."""
    if a.epochs < 2:
        p.error(f"--epochs: expected >= 2 (the first epoch is warm-up and not reported), got {a.epochs}")
    if not a.scale > 0:
        p.error(f"--scale: expected a number > 0, got {a.scale}")
    if a.plot is not None and not a.plot.endswith(".png"):
        p.error(f"--plot: expected a .png path, got {a.plot}")


def add_cache_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir``: where the generated dataset and its partitions are kept between runs."""
    parser.add_argument("--cache-dir", default=str(HERE / ".cache"),
                        help="folder of the generated dataset and its METIS partitions, reused by later runs "
                             "(default benchmarks/.cache, git-ignored)")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.45M nodes (default 0.25)")
    p.add_argument("--workers", default="2,4", help="worker counts, comma-separated (default 2,4)")
    p.add_argument("--layouts", default="vanilla,hybrid", help="layouts, comma-separated (default vanilla,hybrid)")
    add_link_argument(p)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run, the first one warm-up (default 3)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1000, help="seed nodes per worker per iteration")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0, help="seed of the dataset, METIS and training")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one launch (default 1800)")
    p.add_argument("--tune-malloc", action="store_true",
                   help="run the workers with glibc's mmap/trim thresholds raised (freed tensors reused, not "
                        "returned to the kernel and page-faulted again); default: the allocator as users get it")
    add_cache_dir_argument(p)
    p.add_argument("--json", default=None, help="write the rows and settings here")
    p.add_argument("--plot", default=None, help="write the stacked-bar PNG here")
    a = p.parse_args()
    try:
        a.worker_counts = [int(w) for w in a.workers.split(",")]
        a.fanout_list = [int(f) for f in a.fanouts.split(",")]
    except ValueError:
        p.error(f"--workers and --fanouts: expected comma-separated ints, got {a.workers!r} and {a.fanouts!r}")
    a.layout_list = a.layouts.split(",")
    if any(w < 1 for w in a.worker_counts):
        p.error(f"--workers: expected counts >= 1, got {a.workers}")
    if any(layout not in LAYOUTS for layout in a.layout_list):
        p.error(f"--layouts: expected a subset of {','.join(LAYOUTS)}, got {a.layouts}")
    check_run_arguments(p, a)
    return a


def main() -> None:
    exit_on_sigterm()
    a = parse_args()
    exit_unless_links_work(a.link_gbit)
    dataset_dir = cached_dataset(a.scale, a.seed, Path(a.cache_dir))
    meta = dataset_meta(dataset_dir)
    print(f"dataset: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, {meta['feature_dim']} features "
          f"(scale {a.scale:g}); fanouts {a.fanouts}, batch {a.batch_size} per worker, hidden {a.hidden}, "
          f"{a.epochs} epochs (median of the last {a.epochs - 1}); {os.cpu_count()} CPU cores"
          + ("; workers with --tune-malloc" if a.tune_malloc else ""), flush=True)
    partitions = {w: cached_partition(dataset_dir, w, a.seed, a.timeout) for w in a.worker_counts}
    for w, path in partitions.items():
        info = partition_info(path)
        print(f"  {w} parts: edge cut {info['edge_cut_fraction']:.2%}, node balance {info['balance']['nodes']:.3f}, "
              f"in-edge balance {info['balance']['edges']:.3f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-bench-") as scratch:
        # Rates outermost: the two layouts of one (rate, workers) run back to back, under the same load.
        for rate in a.link_gbit:
            for w in a.worker_counts:
                for layout in a.layout_list:
                    report = run_training(partitions[w], w, layout, rate, a, Path(scratch))
                    rows.append(summarize_run(report, w, layout, rate, len(a.fanout_list)))
                    print_run(rows[-1], report)
    ratios = add_ratios(rows)
    print(f"\nmedian over epochs 1..{a.epochs - 1}, rank 0's seconds per epoch; rounds and MB per iteration; "
          "Gbit/s: the emulated link all workers share (inf: host loopback); x vanilla: epoch time over the vanilla "
          "run of the same link and worker count")
    print(HEADER)
    for r in rows:
        print_row(r)
    print_verdict(rows, ratios, len(a.fanout_list))
    if a.plot:
        plot(rows, a.plot, f"products-shaped, scale {a.scale:g} ({meta['num_nodes']:,} nodes), fanouts {a.fanouts}, "
                           f"batch {a.batch_size}/worker, {os.cpu_count()} cores"
                           + (", --tune-malloc" if a.tune_malloc else ""))
    if a.json:
        settings = {k: v for k, v in vars(a).items() if k not in ("worker_counts", "fanout_list", "layout_list")}
        settings["link_gbit"] = [link_label(rate) for rate in a.link_gbit]  # JSON has no inf
        payload = {"settings": settings,
                   "dataset": {k: meta[k] for k in ("num_nodes", "num_edges", "feature_dim", "num_classes")},
                   "partitions": {str(w): partition_info(p) for w, p in partitions.items()},
                   "cpu_count": os.cpu_count(), "rows": rows,
                   "hybrid_over_vanilla": {f"{link} Gbit/s, {w} workers": r for (link, w), r in ratios.items()}}
        with open(a.json, "w") as f:
            json.dump(payload, f, indent=2)


if __name__ == "__main__":
    main()
