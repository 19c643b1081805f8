"""DGS (explanation-guided sampling) against plain sampling, 4 workers, METIS parts: the ablation of
DGS Table III (plain, node sampling only, feature sampling only, both) on Cora, on the ``hard``
synthetic graph and on a PubMed-shaped synthetic graph (``-o preset=pubmed``).

    .venv/bin/python benchmarks/dgs.py [--graphs cora,hard,pubmed] [--seeds 0,1,2]
        [--modes plain,node,feature,both] [--layout hybrid] [--link-gbit inf] [--json FILE] [--plot FILE.png]

Every (graph, mode, seed) is one ``torchrun -m gnnscale train --partitions DIR --layout hybrid
[--dgs --dgs-mode M]`` launch of about 100 iterations at the CLI's DGS schedule (``--period`` sets
``--dgs-period``). Per run: rank 0's feature bytes over the whole run (sent + received, the fetch of
remote rows: what a short run saves, plain iterations included) and, over the epochs in which every
iteration sampled with masks (DGS's first ``W + D`` iterations are plain: see docs/dgs.md), medians of
its feature bytes per epoch, its remote nodes fetched, its ``sample`` seconds (the loading stage's
sampling: the DGS kernel's time per epoch against the fused kernel's in the plain rows) and the training
thread's wait for the loading stage; means of its epoch
time, of its CPU seconds per epoch (every thread: where cores are the limit, what DGS costs) and of the
explainer thread's CPU seconds per epoch (a refresh lands in one epoch of every T / n,
which a median would skip; on a CPU-only worker the thread competes with training for the cores, so
its CPU time is the overhead it adds); and the final test accuracy. Rows: means over the seeds;
ratios against plain sampling of the same graph.

Targets: feature bytes (whole run) <= 0.76x plain, test accuracy at most 0.5 point below
plain (mean of the seeds), explanation CPU <= 10% of the epoch time; on ``hard-full`` the epoch of
both samplings at most 1.05x plain at the loopback and at most 0.9x over an emulated 1 Gbit/s link.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import fail, run_checked, torchrun_command  # noqa: E402
from emulated_link import add_link_argument, check_link_support, link_command, link_label  # noqa: E402
from gnnscale.graph.feature_dtype import FEATURE_DTYPES  # noqa: E402
from gnnscale.train.layouts.dgs_config import DGSConfig  # noqa: E402

MODES = ("plain", "node", "feature", "both")
MB = 1e6
TARGET_BYTES, TARGET_ACC_POINTS, TARGET_OVERHEAD = 0.76, 0.5, 0.10
# The most epoch time of "both" against plain, by link (the loopback and an emulated 1 Gbit/s); checked
# on the graph whose epochs are long enough for the explanation's share to mean something.
TARGET_EPOCH, EPOCH_TARGET_GRAPHS = {"inf": 1.05, "1": 0.9}, ("hard-full",)
# Per graph: how to build it and how to train on it. Cora has 140 training nodes (35 per part): a small
# batch gives enough iterations for several mask refreshes.
GRAPHS = {
    "cora": dict(data=["--dataset", "cora", "--data-dir", str(HERE.parent.parent / "shared/data/cora_planetoid")],
                 train=["--batch-size", "8", "--fanouts", "10,5", "--hidden", "64", "--lr", "0.01",
                        "--dropout", "0.5", "--weight-decay", "0.0005"], epochs=20),
    "hard": dict(data=["--dataset", "synthetic", "-o", "preset=hard", "-o", "scale=0.2"],
                 train=["--batch-size", "128", "--fanouts", "10,5", "--hidden", "128", "--lr", "0.003"],
                 epochs=13),
    # 986 training nodes (about 246 per part): batch 32 gives 8 iterations per epoch. GCN with fanouts
    # 10,10, as a citation-graph user would run it.
    "pubmed": dict(data=["--dataset", "synthetic", "-o", "preset=pubmed"],
                   train=["--model", "gcn", "--batch-size", "32", "--fanouts", "10,10", "--hidden", "64",
                          "--lr", "0.01", "--dropout", "0.5", "--weight-decay", "0.0005"], epochs=13),
    # The whole preset (100,000 nodes, 5,000 training nodes per part) at the CLI's batch: an epoch long
    # enough (10 iterations of 512 seeds) for the explanation's share of it to mean something.
    "hard-full": dict(data=["--dataset", "synthetic", "-o", "preset=hard"],
                      train=["--batch-size", "512", "--fanouts", "10,5", "--hidden", "128", "--lr", "0.003"],
                      epochs=12),
}


def cached_partition(graph: str, workers: int, cache: Path, timeout_s: float, feature_dtype: str = "float32") -> Path:
    out = cache / f"dgs_{graph}_metis{workers}" if feature_dtype == "float32" else \
        cache / f"dgs_{graph}_metis{workers}_{feature_dtype}"
    if (out / "manifest.json").is_file():
        return out
    cmd = [sys.executable, "-m", "gnnscale", "partition", *GRAPHS[graph]["data"], "--parts", str(workers),
           "--method", "metis", "--out", str(out), "--overwrite", "--feature-dtype", feature_dtype]
    run_checked(cmd, env=dict(os.environ), timeout_s=timeout_s, what=f"partitioning {graph}")
    return out


def schedule_flags(a: argparse.Namespace) -> list[str]:
    """The DGS schedule flags given to this benchmark (none: the CLI's defaults)."""
    out = []
    for flag in ("period", "warmup", "lag"):
        value = getattr(a, flag)
        if value is not None:
            out += [f"--dgs-{flag}", str(value)]
    return out


def first_masked_iteration(a: argparse.Namespace) -> int:
    """W + D: the first iteration that samples with masks."""
    period = a.period or DGSConfig().period
    kwargs = {k: v for k, v in (("warmup", a.warmup), ("lag", a.lag)) if v is not None}
    schedule = DGSConfig(period=period, **kwargs).schedule
    return schedule.warmup + schedule.lag


def train_command(parts: Path, graph: str, mode: str, seed: int, a: argparse.Namespace, metrics: Path) -> list[str]:
    g = GRAPHS[graph]
    dgs = [] if mode == "plain" else ["--dgs", "--dgs-mode", mode, *schedule_flags(a)]
    return [*torchrun_command(a.workers), "-m", "gnnscale", "train",
            "--partitions", str(parts), "--layout", a.layout, *g["train"], "--epochs", str(a.epochs or g["epochs"]),
            "--seed", str(seed), "--threads", "1", "--quiet", "--metrics-out", str(metrics), *dgs]


def run_one(parts: Path, graph: str, mode: str, seed: int, rate: float, a, scratch: Path) -> dict:
    metrics = scratch / f"{parts.name}_{mode}_{seed}_{link_label(rate)}.json"
    cmd = link_command(train_command(parts, graph, mode, seed, a, metrics), rate)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    start = time.perf_counter()
    output = run_checked(cmd, env=env, timeout_s=a.timeout, what=f"training {graph} {mode} seed {seed}")
    if not metrics.is_file():
        fail("training finished but wrote no metrics file", cmd, output)
    report = json.loads(metrics.read_text(encoding="utf-8"))
    report["wall_s"] = time.perf_counter() - start
    return report


def summarize(report: dict, first_masked: int) -> dict:
    """Over the epochs whose every iteration sampled with masks (the same epochs for plain): medians,
    except epoch time and explainer CPU, which are means (see the module docstring); feature bytes
    also over the whole run."""
    history = report["history"]
    n = history[0]["num_batches"]
    first = -(-first_masked // n)  # first epoch starting at or after the first masked iteration
    steady = history[first:] or history[-1:]

    def median(get) -> float:
        return statistics.median(get(h) for h in steady)

    def mean(get) -> float:  # a refresh lands in one epoch of every T / n: a median would skip it
        return statistics.mean(get(h) for h in steady)

    dgs = "dgs" in history[0]
    return {"epochs_measured": len(steady), "num_batches": n,
            "run_feature_mb": sum(h["bytes_per_iteration"]["feature"] * h["num_batches"] for h in history) / MB,
            "feature_mb": median(lambda h: h["bytes_per_iteration"]["feature"] * h["num_batches"]) / MB,
            "remote_nodes": median(lambda h: h["dgs"]["remote_nodes"]) if dgs else None,
            "dims": median(lambda h: h["dgs"]["dims_sent_mean"]) if dgs else None,
            "epoch_s": mean(lambda h: h["epoch_s"]), "cpu_s": mean(lambda h: h["cpu_s"]),
            "fetch_s": median(lambda h: h["fetch_s"]),
            "sample_s": median(lambda h: h["sample_s"]), "wait_s": median(lambda h: h["wait_s"]),
            "forward_backward_s": median(lambda h: h["forward_backward_s"]),
            "explain_cpu_s": mean(lambda h: h["dgs"]["explanation_cpu_s"]) if dgs else 0.0,
            "explain_wait_s": median(lambda h: h["dgs"]["explanation_wait_s"]) if dgs else 0.0,
            "staleness": median(lambda h: h["dgs"]["staleness_mean"] or 0) if dgs else None,
            "test_acc": history[-1]["test_acc"], "wall_s": report["wall_s"]}


def mean_rows(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    row = {k: statistics.mean(r[k] for r in runs) for k in keys}
    row["test_acc_per_seed"] = [r["test_acc"] for r in runs]
    row["epoch_s_per_seed"] = [r["epoch_s"] for r in runs]
    for k in ("remote_nodes", "dims", "staleness"):
        row[k] = None if runs[0][k] is None else statistics.mean(r[k] for r in runs)
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'link':>5} {'graph':>9} {'features':>8} {'mode':>8} {'run MB':>8} {'x plain':>7} {'feat MB/ep':>10} "
          f"{'x plain':>7} {'remote':>7} {'dims':>6} {'epoch s':>7} {'x plain':>7} {'cpu s':>6} {'x plain':>7} "
          f"{'sample s':>8} {'x plain':>7} "
          f"{'waited s':>8} {'expl cpu':>8} {'% epoch':>7} {'wait s':>6} {'test acc':>8} {'d pts':>6}")
    for r in rows:
        def fmt(v, spec):
            return "-" if v is None else format(v, spec)
        print(f"{r['link']:>5} {r['graph']:>9} {r['dtype']:>8} {r['mode']:>8} {r['run_feature_mb']:8.2f} "
              f"{r['run_bytes_ratio']:7.3f} {r['feature_mb']:10.3f} {r['bytes_ratio']:7.3f} "
              f"{fmt(r['remote_nodes'], '7.0f')} {fmt(r['dims'], '6.1f')} {r['epoch_s']:7.3f} {r['time_ratio']:7.3f} "
              f"{r['cpu_s']:6.2f} {r['cpu_ratio']:7.2f} {r['sample_s']:8.3f} {r['sample_ratio']:7.2f} "
              f"{r['wait_s']:8.3f} {r['explain_cpu_s']:8.3f} {r['overhead']:7.1%} {r['explain_wait_s']:6.3f} {r['test_acc']:8.4f} {r['acc_points']:+6.2f}")


def add_ratios(rows: list[dict]) -> None:
    plain = {(r["link"], r["graph"]): r for r in rows if r["mode"] == "plain" and r["dtype"] == "float32"}
    for r in rows:
        p = plain.get((r["link"], r["graph"]))
        r["bytes_ratio"] = r["feature_mb"] / p["feature_mb"] if p else float("nan")
        r["run_bytes_ratio"] = r["run_feature_mb"] / p["run_feature_mb"] if p else float("nan")
        r["time_ratio"] = r["epoch_s"] / p["epoch_s"] if p else float("nan")
        # Seed by seed (each mode's run of a seed right after plain's): how far the load moves the ratio.
        r["time_ratio_per_seed"] = [t / q for t, q in zip(r["epoch_s_per_seed"], p["epoch_s_per_seed"])] if p else []
        r["cpu_ratio"] = r["cpu_s"] / p["cpu_s"] if p else float("nan")
        r["sample_ratio"] = r["sample_s"] / p["sample_s"] if p else float("nan")  # DGS's kernel against fused
        r["acc_points"] = 100 * (r["test_acc"] - p["test_acc"]) if p else float("nan")
        r["overhead"] = r["explain_cpu_s"] / r["epoch_s"]


def print_seed_ratios(rows: list[dict]) -> None:
    for r in rows:
        if r["mode"] != "plain" and r["time_ratio_per_seed"]:
            ratios = r["time_ratio_per_seed"]
            print(f"epoch x plain seed by seed, {r['graph']} {r['dtype']} {r['mode']} link {r['link']}: "
                  f"{' '.join(f'{x:.3f}' for x in ratios)} (median {statistics.median(ratios):.3f})")


def print_verdict(rows: list[dict]) -> None:
    for r in rows:
        if r["mode"] != "both":
            continue
        checks = [("feature bytes", r["run_bytes_ratio"] <= TARGET_BYTES, f"{r['run_bytes_ratio']:.3f}x plain over the "
                   f"run (target <= "
                   f"{TARGET_BYTES})"), ("accuracy", r["acc_points"] >= -TARGET_ACC_POINTS,
                   f"{r['acc_points']:+.2f} points (target >= -{TARGET_ACC_POINTS})"),
                  ("explanation", r["overhead"] <= TARGET_OVERHEAD, f"CPU {r['overhead']:.1%} of the epoch "
                   f"(target <= {TARGET_OVERHEAD:.0%})")]
        target = TARGET_EPOCH.get(r["link"])
        if r["graph"] in EPOCH_TARGET_GRAPHS and target is not None:
            checks.append(("epoch", r["time_ratio"] <= target, f"{r['time_ratio']:.3f}x plain (target <= {target})"))
        print(f"{r['graph']} {r['dtype']} (link {r['link']}): " + "; ".join(
            f"{name} {'MET' if ok else 'MISSED'}: {text}" for name, ok, text in checks))


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = sorted({(r["link"], r["graph"], r["dtype"]) for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        sel = [next((r for r in rows if (r["link"], r["graph"], r["dtype"]) == g and r["mode"] == mode), None)
               for g in graphs]
        xs = [j + i * width for j in range(len(graphs))]
        for ax, key in zip(axes, ("bytes_ratio", "time_ratio", "test_acc")):
            ax.bar(xs, [float("nan") if r is None else r[key] for r in sel], width, label=mode)
    for ax, title in zip(axes, ("feature bytes / plain", "epoch time / plain", "test accuracy (mean of seeds)")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(graphs))],
                      [f"{g}\n{d}\nlink {l}" for l, g, d in graphs])
        ax.set_title(title)
    axes[0].axhline(TARGET_BYTES, color="k", ls="--", lw=0.8)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default="cora,hard,pubmed", help=f"comma-separated, of {', '.join(GRAPHS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--seeds", default="0,1,2", help="training seeds; rows are means over them")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--layout", default="hybrid", choices=("hybrid", "vanilla"))
    p.add_argument("--period", type=int, default=None, help="--dgs-period (default: the CLI's)")
    p.add_argument("--warmup", type=int, default=None, help="--dgs-warmup (default: the CLI's)")
    p.add_argument("--lag", type=int, default=None, help="--dgs-lag (default: the CLI's)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs of every run (default: the graph's, about 100 iterations); the per-epoch "
                        "figures are those of the epochs from the first masked iteration on")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    p.add_argument("--cache-dir", default=str(HERE / ".cache"))
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--plot", default=None, help="write a bar chart here (PNG)")
    p.add_argument("--feature-dtypes", default="float32",
                   help="comma-separated, of float32, float16, bfloat16: how the parts store features "
                        "(gnnscale partition --feature-dtype); ratios are against plain float32")
    add_link_argument(p)
    a = p.parse_args()
    a.feature_dtypes = a.feature_dtypes.split(",")
    for dtype in a.feature_dtypes:
        if dtype not in FEATURE_DTYPES:
            p.error(f"--feature-dtypes: unknown type {dtype!r}, expected some of {', '.join(FEATURE_DTYPES)}")
    a.graphs, a.modes = a.graphs.split(","), a.modes.split(",")
    a.seeds = [int(s) for s in a.seeds.split(",")]
    for g in a.graphs:
        if g not in GRAPHS:
            p.error(f"--graphs: unknown graph {g!r}, expected some of {', '.join(GRAPHS)}")
    for m in a.modes:
        if m not in MODES:
            p.error(f"--modes: unknown mode {m!r}, expected some of {', '.join(MODES)}")
    for flag, value in (("--period", a.period), ("--lag", a.lag), ("--epochs", a.epochs)):
        if value is not None and value < 1:
            p.error(f"{flag}: expected an int >= 1, got {value}")
    return a


def main() -> None:
    a = parse_args()
    check_link_support(a.link_gbit)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-dgs-bench-") as tmp:
        for graph in a.graphs:
            for dtype in a.feature_dtypes:
                parts = cached_partition(graph, a.workers, Path(a.cache_dir), a.timeout, dtype)
                for rate in a.link_gbit:
                    # Seed by seed, every mode in turn: a load that drifts during the run weighs on every mode alike.
                    runs = {mode: [] for mode in a.modes}
                    for seed in a.seeds:
                        for mode in a.modes:
                            runs[mode].append(summarize(run_one(parts, graph, mode, seed, rate, a, Path(tmp)),
                                                        first_masked_iteration(a)))
                            last = runs[mode][-1]
                            print(f"  ran {graph} {dtype} {mode} seed {seed} link {link_label(rate)}: "
                                  f"{last['wall_s']:.0f}s wall, epoch {last['epoch_s']:.2f}s, sample "
                                  f"{last['sample_s']:.3f}s, test {last['test_acc']:.4f}", flush=True)
                    rows += [{"link": link_label(rate), "graph": graph, "dtype": dtype, "mode": mode,
                              **mean_rows(runs[mode])} for mode in a.modes]
    add_ratios(rows)
    print(f"\n{a.workers} workers, --layout {a.layout}, METIS parts, seeds {a.seeds}; rank 0's feature bytes per epoch "
          "(sent + received): over the whole run, and medians over the epochs sampled with masks; explanation = the "
          "explainer thread's CPU; cpu = rank 0's CPU per epoch, every thread; wait = the loading stage waiting for "
          "masks, per epoch")
    print_table(rows)
    print_seed_ratios(rows)
    print_verdict(rows)
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": {k: v for k, v in vars(a).items() if k != "link_gbit"},
                                            "graphs": GRAPHS, "rows": rows}, indent=2, default=str))
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
