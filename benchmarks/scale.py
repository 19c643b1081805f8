"""Every stage of the out-of-core pipeline on papers100M-shaped graphs: wall time, peak memory and bytes
on disk per stage, scale by scale.

    python benchmarks/scale.py [--scales 0.01,0.05] [--feature-dim D] [--methods kaminpar[,metis,random]]
                               [--parts 8] [--workers 4] [--iterations 20] [--epochs 3] [--layouts hybrid]
                               [--threads 2] [--chunk-edges N]
                               [--work-dir DIR] [--keep] [--files] [--no-train] [--timeout 7200] [--json FILE]
                               [--plot FILE.png] [--products-compare [--products-scale 1.0]
                               [--products-batch-size 1000] [--cache-dir DIR]]

For each scale the script runs, each as its own child process under ``/usr/bin/time -v``:

    generate             gnnscale generate --preset papers100M --scale S (the dataset directory)
    partition M          gnnscale partition --dataset dir --method M --parts P, for each M in --methods
    partition M (W)      the same with --parts W (= --workers) when W does not divide P (each worker
                         holds P / W consecutive parts)
    train L              torchrun --nproc-per-node W -m gnnscale train --partitions ... --layout L for each
                         L in --layouts (default hybrid),
                         --epochs E (default 3) of about --iterations iterations each (the batch size is
                         chosen so) on the first method's partition; the first epoch is warm-up (numba
                         compilation, page cache), the table reports the median of the others

Columns: wall seconds of the child; peak RSS of the stage's largest process (``/usr/bin/time``'s maximum
resident set size covers the child and every descendant it waited for, so for torchrun it is the
largest worker or the launcher; "worker" is the largest worker's own peak from the metrics, where the
layout reports it); bytes on disk of the directory the stage wrote (the sum of its files' sizes;
``--files`` lists them); edges per second: the graph's directed edges over the wall time for generate and
partition, sampled edges of all workers per second of the median epoch for train. Large runs (scale 0.25, or 1.0
with ``--feature-dim 16``) are asked for explicitly; the files go under ``--work-dir`` (default
benchmarks/.cache/scale, git-ignored) and the free disk is checked first against an estimate. Unless
``--keep``, each partition directory is removed once its row (and the training on it) is done and the
dataset after the scale's last row, so the disk holds the dataset and one partition directory at a time;
``--no-train`` leaves training (and its --workers-part partition) out, for the full-size topology.
Children inherit this process's niceness.

``--products-compare`` adds METIS against KaMinPar on the products-shaped graph (the dataset
benchmarks/distributed.py and partitioners.py cache under ``--cache-dir``): for each method,
``gnnscale partition --parts W`` timed whole (time, peak RSS, edge cut), then W hybrid workers train
--epochs epochs of ``--products-batch-size`` seeds per worker on its parts (the median epoch time of
all but the first, bytes per iteration), each figure also as a ratio against METIS. ``--scales ""`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import (  # noqa: E402  (benchmarks/ is not a package)
    add_cache_dir_argument, cached_dataset, exit_on_sigterm, partition_info, run_checked, torchrun_command)
from partitioners import TIME_V, peak_rss_bytes  # noqa: E402

PAPERS_NODES = 111_059_956  # the papers100M preset's nodes at scale 1
# Directed edges per node after symmetrising, for the disk estimate only (measured: 28.8 at scale 0.01;
# the issue's ~3.2B / 111M = 28.8), rounded up.
EDGES_PER_NODE = 29
GB = 1e9


@dataclass(frozen=True, kw_only=True, slots=True)
class StageRow:
    """One stage at one scale: what the table prints (and the JSON holds)."""

    scale: float
    stage: str  # "generate", "partition kaminpar", "partition kaminpar (4)", "train hybrid", ...
    num_nodes: int
    num_edges: int  # directed edges of the graph
    wall_s: float  # the child's wall time, start-up included
    peak_rss_bytes: int  # /usr/bin/time's maximum RSS: the stage's largest process
    worker_peak_rss_bytes: int | None  # train: the largest worker's own peak (None where not reported)
    disk_bytes: int  # sum of the sizes of the files the stage wrote (train: 0)
    edges_per_s: float
    note: str  # partition: edge cut; train: epoch and iteration time, bytes per iteration


# --- files ----------------------------------------------------------------------------------------


def files_of(directory: Path) -> list[tuple[str, int]]:
    """(path relative to ``directory``, size in bytes) of every file under it, sorted."""
    return sorted((str(p.relative_to(directory)), p.stat().st_size) for p in directory.rglob("*") if p.is_file())


def disk_bytes(directory: Path) -> int:
    """The bytes of every file under ``directory`` (apparent sizes: the .npy files are not sparse)."""
    return sum(size for _, size in files_of(directory))


def estimate_bytes(scale: float, feature_dim: int, partitions: int) -> int:
    """Disk one scale needs at its fullest, plus 10%: the dataset and ``partitions`` partition directories
    at once (each holds the topology again, in-edges per part, the features split, and a node map). The
    one being written is preceded by KaMinPar's temporary files (in the system's temporary directory,
    assumed on the same disk), removed before the directory is written: the ParHIP file (int64 offsets,
    int32 ids) and, where the graph is coarsened, level files of at most 8 bytes per fine edge (ids and
    weights; the full-size graph's first level measured 0.1 GB, 0.4% of that bound)."""
    nodes = PAPERS_NODES * scale
    edges = nodes * EDGES_PER_NODE
    dataset = nodes * (8 + 8 + 4 * feature_dim) + 4 * edges  # indptr, labels, features, int32 indices
    partition = dataset + 4 * edges + 16 * nodes
    temporary = (4 * edges + 8 * nodes) + (8 * edges + 12 * nodes)
    return int(1.1 * (dataset + (partitions - 1) * partition + max(partition, temporary)))


def partitions_on_disk(a: argparse.Namespace) -> int:
    """The most partition directories one scale holds at once (see :func:`run_scale`)."""
    if a.keep:
        return len(a.methods) + (not a.no_train and a.workers != a.parts)
    # The --workers-part directory stays until training is done while the other methods write theirs.
    return 2 if not a.no_train and a.workers == a.parts and len(a.methods) > 1 else 1


def check_free_disk(work_dir: Path, need: int) -> None:
    """Refuse to start when ``need`` bytes would not fit: a disk that fills mid-run wastes the hours before."""
    free = shutil.disk_usage(work_dir).free
    if need > free:
        sys.exit(f"--work-dir {work_dir}: the run needs about {need / GB:.1f} GB on disk but only "
                 f"{free / GB:.1f} GB are free; choose another --work-dir, fewer --methods or smaller --scales")


# --- stages ---------------------------------------------------------------------------------------


def timed(cmd: list[str], timeout_s: float, what: str) -> tuple[float, int, str]:
    """Run ``cmd`` under ``/usr/bin/time -v``: (wall seconds, peak RSS bytes, its output). One thread per
    process for numerical libraries: with torchrun the workers already share the cores."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    output = run_checked([*TIME_V, *cmd], env=env, timeout_s=timeout_s, what=what)
    return time.perf_counter() - start, peak_rss_bytes(output), output


def gnnscale(*args: str) -> list[str]:
    return [sys.executable, "-m", "gnnscale", *args]


def generate(scale: float, out: Path, a: argparse.Namespace) -> tuple[StageRow, dict]:
    """The generate row and the dataset's meta.json."""
    cmd = gnnscale("generate", "--preset", "papers100M", "--scale", f"{scale:g}", "--out", str(out),
                   "--seed", str(a.seed))
    cmd += ["--feature-dim", str(a.feature_dim)] if a.feature_dim else []
    cmd += ["--chunk-edges", str(a.chunk_edges)] if a.chunk_edges else []
    wall, peak, _ = timed(cmd, a.timeout, f"generate, scale {scale:g}")
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    row = StageRow(scale=scale, stage="generate", num_nodes=meta["num_nodes"], num_edges=meta["num_edges"],
                   wall_s=wall, peak_rss_bytes=peak, worker_peak_rss_bytes=None, disk_bytes=disk_bytes(out),
                   edges_per_s=meta["num_edges"] / wall,
                   note=f"{meta['feature_dim']} features, {meta['shapes']['train_idx'][0]:,} train nodes")
    return row, meta


def partition(scale: float, dataset: Path, out: Path, method: str, parts: int, meta: dict, label: str,
              a: argparse.Namespace) -> StageRow:
    cmd = gnnscale("partition", "--dataset", "dir", "--data-dir", str(dataset), "--parts", str(parts),
                   "--method", method, "--threads", str(a.threads), "--seed", str(a.seed), "--out", str(out))
    cmd += ["--memory-gb", str(a.memory_gb)] if a.memory_gb else []
    wall, peak, output = timed(cmd, a.timeout, f"partition {method} ({parts} parts), scale {scale:g}")
    info = partition_info(out)
    # Whether KaMinPar ran on a streamed coarse graph (the budget, --memory-gb, defaults to MemAvailable at
    # the start, so on a shared machine the same graph may take either path): it sets the peak and time.
    coarsened = re.search(r"coarsened first \((\d+) levels?\) to ([\d,]+) nodes", output)
    path = "" if coarsened is None else f", coarsened ({coarsened.group(1)}) to {coarsened.group(2)} nodes"
    return StageRow(scale=scale, stage=label, num_nodes=meta["num_nodes"], num_edges=meta["num_edges"], wall_s=wall,
                    peak_rss_bytes=peak, worker_peak_rss_bytes=None, disk_bytes=disk_bytes(out),
                    edges_per_s=meta["num_edges"] / wall,
                    note=f"{parts} parts, cut {info['edge_cut_fraction']:.1%}{path}")


def batch_size_for(train_nodes: int, workers: int, iterations: int) -> int:
    """Seeds per worker per batch that give about ``iterations`` iterations per epoch."""
    return max(1, math.ceil(train_nodes / (workers * iterations)))


def train(scale: float, partition_dir: Path, meta: dict, scratch: Path, batch: int, a: argparse.Namespace,
          label: str = "train hybrid", layout: str = "hybrid") -> tuple[StageRow, dict]:
    """``a.epochs`` epochs in ``layout`` on ``a.workers`` workers, ``batch`` seeds per worker per
    iteration; the row gives the median epoch after the first (warm-up). Returns the row and rank 0's
    metrics of the last epoch, its ``epoch_s`` replaced by that median."""
    metrics = scratch / f"metrics_{label.replace(' ', '_')}.json"  # one per run: train refuses to overwrite
    cmd = [*torchrun_command(a.workers), "-m", "gnnscale", "train", "--partitions", str(partition_dir),
           "--layout", layout, "--epochs", str(a.epochs), "--batch-size", str(batch), "--fanouts", a.fanouts,
           "--seed", str(a.seed), "--threads", "1", "--no-eval", "--quiet", "--metrics-out", str(metrics)]
    wall, peak, _ = timed(cmd, a.timeout, f"train ({a.workers} workers), scale {scale:g}")
    history = json.loads(metrics.read_text(encoding="utf-8"))["history"]
    last = {**history[-1], "epoch_s": statistics.median(e["epoch_s"] for e in history[1:])}
    iterations = last["num_batches"]
    per_iteration = sum(last["bytes_per_iteration"].values())  # every category: features, gradients, ...
    worker_peak = last.get("memory", {}).get("peak_rss_bytes_max")
    note = (f"epoch {last['epoch_s']:.2f} s, {iterations} it of {batch}/worker, "
            f"{last['epoch_s'] / iterations * 1e3:.0f} ms/it, {per_iteration / 1e6:.2f} MB/it")
    row = StageRow(scale=scale, stage=label, num_nodes=meta["num_nodes"], num_edges=meta["num_edges"],
                   wall_s=wall, peak_rss_bytes=peak, worker_peak_rss_bytes=worker_peak, disk_bytes=0,
                   edges_per_s=last["edge_metrics"]["edges_computed"] / last["epoch_s"], note=note)
    return row, last


def run_scale(scale: float, a: argparse.Namespace) -> list[StageRow]:
    """Every stage at one scale, each printed as it finishes. Without --keep each partition directory
    is removed as soon as its row (and training, for the one trained on) is done, and the dataset at the
    end: at full scale the disk holds the dataset and one partition directory, not all of them."""
    here = Path(a.work_dir) / f"papers100M_scale{scale:g}"
    if here.exists():  # a leftover of an interrupted run of this script: its own directory
        shutil.rmtree(here)
    here.mkdir(parents=True)
    dataset = here / "dataset"
    row, meta = generate(scale, dataset, a)
    rows = [row]
    print_row(row)
    # Each worker holds --parts / --workers consecutive parts; another partition only where that is no integer.
    train_parts = here / f"partition_{a.methods[0]}_{a.parts if a.parts % a.workers == 0 else a.workers}"
    for method in a.methods:
        out = here / f"partition_{method}_{a.parts}"
        rows.append(partition(scale, dataset, out, method, a.parts, meta, f"partition {method}", a))
        print_row(rows[-1])
        if out != train_parts or a.no_train:
            release(out, a)
    if not a.no_train:
        if not train_parts.exists():  # --workers does not divide --parts
            rows.append(partition(scale, dataset, train_parts, a.methods[0], a.workers, meta,
                                  f"partition {a.methods[0]} ({a.workers})", a))
            print_row(rows[-1])
        batch = batch_size_for(meta["shapes"]["train_idx"][0], a.workers, a.iterations)
        for layout in a.layouts:
            rows.append(train(scale, train_parts, meta, here, batch, a, f"train {layout}", layout)[0])
            print_row(rows[-1])
        release(train_parts, a)
    release(dataset, a)
    if not a.keep:
        shutil.rmtree(here)
    return rows


def release(directory: Path, a: argparse.Namespace) -> None:
    """List ``directory``'s files (--files), then remove it unless --keep."""
    if a.files:
        print_files([directory])
    if not a.keep:
        shutil.rmtree(directory)


# --- METIS vs KaMinPar on the products-shaped graph -----------------------------------------------


def products_compare(a: argparse.Namespace) -> list[dict]:
    """METIS and KaMinPar on the products-shaped graph (the dataset benchmarks/distributed.py and
    partitioners.py cache, generated in this process on first use): each writes a --workers-part
    directory (``gnnscale partition``, timed whole) and --workers hybrid workers train two epochs of
    --products-batch-size seeds per worker on it (the second timed). Rows: one per method."""
    dataset = cached_dataset(a.products_scale, a.seed, Path(a.cache_dir))
    meta = json.loads((dataset / "meta.json").read_text(encoding="utf-8"))
    here = Path(a.work_dir) / f"products_scale{a.products_scale:g}_compare"
    if here.exists():  # a leftover of an interrupted run of this script: its own directory
        shutil.rmtree(here)
    here.mkdir(parents=True)
    rows = []
    for method in ("metis", "kaminpar"):
        out = here / f"partition_{method}_{a.workers}"
        cut = partition(a.products_scale, dataset, out, method, a.workers, meta, f"partition {method}", a)
        print_row(cut)
        run, epoch = train(a.products_scale, out, meta, here, a.products_batch_size, a, f"train on {method}")
        print_row(run)
        rows.append({"method": method, "partition_s": cut.wall_s, "partition_peak_rss_bytes": cut.peak_rss_bytes,
                     "edge_cut_fraction": partition_info(out)["edge_cut_fraction"], "epoch_s": epoch["epoch_s"],
                     "iterations": epoch["num_batches"],
                     "bytes_per_iteration": sum(epoch["bytes_per_iteration"].values()),
                     "train_peak_rss_bytes": run.peak_rss_bytes})
        if not a.keep:
            shutil.rmtree(out)
    if not a.keep:
        shutil.rmtree(here)
    return rows


def print_compare(rows: list[dict], scale: float) -> None:
    """The comparison table, each figure also as a ratio against METIS measured in the same run."""
    ref = rows[0]

    def cell(r: dict, key: str, fmt: str) -> str:
        return f"{format(r[key], fmt)} ({r[key] / ref[key]:.2f})"

    print(f"\nproducts-shaped, scale {scale:g}, {rows[0]['iterations']} iterations per epoch (x METIS in brackets)\n")
    print("| method | partition s | partition peak RSS GB | edge cut | epoch s | MB/iteration | train peak RSS GB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['method']} | {cell(r, 'partition_s', '.1f')} | {r['partition_peak_rss_bytes'] / GB:.2f} "
              f"({r['partition_peak_rss_bytes'] / ref['partition_peak_rss_bytes']:.2f}) | "
              f"{cell(r, 'edge_cut_fraction', '.4f')} | {cell(r, 'epoch_s', '.2f')} | "
              f"{r['bytes_per_iteration'] / 1e6:.2f} ({r['bytes_per_iteration'] / ref['bytes_per_iteration']:.2f}) | "
              f"{r['train_peak_rss_bytes'] / GB:.2f} |")


# --- report ---------------------------------------------------------------------------------------

HEADER = ("| scale | stage | nodes | edges | wall s | peak RSS GB | worker GB | on disk GB | edges/s | |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def format_row(r: StageRow) -> str:
    worker = "-" if r.worker_peak_rss_bytes is None else f"{r.worker_peak_rss_bytes / GB:.2f}"
    return (f"| {r.scale:g} | {r.stage} | {r.num_nodes:,} | {r.num_edges:,} | {r.wall_s:.1f} | "
            f"{r.peak_rss_bytes / GB:.2f} | {worker} | {r.disk_bytes / GB:.3f} | {r.edges_per_s:,.0f} | {r.note} |")


def print_row(r: StageRow) -> None:
    print(f"  done: scale {r.scale:g}, {r.stage}: {r.wall_s:.1f} s, peak {r.peak_rss_bytes / GB:.2f} GB", flush=True)


def print_files(directories: list[Path]) -> None:
    for directory in directories:
        print(f"  {directory.name}: {disk_bytes(directory):,} bytes")
        for name, size in files_of(directory):
            print(f"    {name:<40} {size:>16,}")


def plot(rows: list[StageRow], path: str) -> None:
    """Peak RSS against the graph's edges, one line per stage, log-log: flat lines are bounded stages."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for stage in dict.fromkeys(r.stage for r in rows):
        mine = sorted((r.num_edges, r.peak_rss_bytes / GB) for r in rows if r.stage == stage)
        ax.plot([e for e, _ in mine], [m for _, m in mine], marker="o", label=stage)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("directed edges")
    ax.set_ylabel("peak RSS of the largest process (GB)")
    ax.set_title("papers100M-shaped graphs: peak memory per stage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", default="0.01,0.05", help="papers100M scales, comma-separated (default 0.01,0.05)")
    p.add_argument("--feature-dim", type=int, default=None, help="feature dimension (default: the preset's 128)")
    p.add_argument("--methods", default="kaminpar",
                   help="partitioners, comma-separated (default kaminpar; metis holds the whole graph in memory)")
    p.add_argument("--parts", type=int, default=8, help="parts of each partition stage (default 8)")
    p.add_argument("--workers", type=int, default=4, help="training workers (default 4)")
    p.add_argument("--iterations", type=int, default=20, help="training iterations per epoch, about (default 20)")
    p.add_argument("--epochs", type=int, default=3,
                   help="training epochs, >= 2: the first is warm-up, the median of the others is reported (default 3)")
    p.add_argument("--fanouts", default="10,5", help="training fanouts (default 10,5)")
    p.add_argument("--layouts", default="hybrid",
                   help="training layouts, comma-separated, each a row (default hybrid; vanilla, split, ...)")
    p.add_argument("--threads", type=int, default=2, help="KaMinPar's threads (default 2)")
    p.add_argument("--memory-gb", type=float, default=None, help="gnnscale partition --memory-gb (default: its own)")
    p.add_argument("--chunk-edges", type=int, default=None, help="gnnscale generate --chunk-edges (default: its own)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator and the partitioners")
    p.add_argument("--work-dir", default=str(HERE / ".cache" / "scale"), help="where the datasets and partitions go")
    p.add_argument("--keep", action="store_true", help="keep each scale's files (default: removed after its rows)")
    p.add_argument("--no-train", action="store_true",
                   help="generate and partition only (the full-size topology: no --workers-part partition)")
    p.add_argument("--files", action="store_true", help="list every file the stages wrote, with its size")
    p.add_argument("--timeout", type=float, default=7200, help="seconds one stage may run (default 7200)")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    p.add_argument("--plot", default=None, help="peak memory against edges, per stage, as a PNG here")
    p.add_argument("--products-compare", action="store_true",
                   help="also METIS vs KaMinPar on the products-shaped graph: partitioning and a --workers epoch")
    p.add_argument("--products-scale", type=float, default=1.0, help="--products-compare: its scale (default 1.0)")
    p.add_argument("--products-batch-size", type=int, default=1000,
                   help="--products-compare: seeds per worker per iteration (default 1000)")
    add_cache_dir_argument(p)
    a = p.parse_args()
    a.scales = [float(s) for s in a.scales.split(",") if s]
    a.methods = [m for m in a.methods.split(",") if m]
    a.layouts = [name for name in a.layouts.split(",") if name]
    if a.epochs < 2:
        p.error(f"--epochs: expected at least 2 (the first is warm-up), got {a.epochs}")
    if not (a.scales or a.products_compare) or not a.methods:
        p.error(f"--scales and --methods: expected at least one value (--scales may be empty with "
                f"--products-compare), got {a.scales!r} and {a.methods!r}")
    if min(a.parts, a.workers, a.iterations) < 1:
        p.error(f"--parts, --workers, --iterations: expected >= 1, got {a.parts}, {a.workers}, {a.iterations}")
    return a


def main() -> None:
    a = parse_args()
    exit_on_sigterm()
    work_dir = Path(a.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    need = [estimate_bytes(s, a.feature_dim or 128, partitions_on_disk(a)) for s in a.scales] or [0]
    check_free_disk(work_dir, sum(need) if a.keep else max(need))
    print(f"papers100M-shaped, scales {a.scales}; {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = [row for scale in a.scales for row in run_scale(scale, a)]
    compare = products_compare(a) if a.products_compare else []
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if rows:
        print(HEADER)
        for r in rows:
            print(format_row(r))
    if compare:
        print_compare(compare, a.products_scale)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": [asdict(r) for r in rows],
                                            "products_compare": compare}, indent=2))
    if a.plot and rows:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
