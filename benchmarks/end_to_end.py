"""End-to-end epoch time: gnnscale against DGL 2.1 training the same model on the same graph.

    python benchmarks/end_to_end.py --dgl-python "$(../shared/tools/anchors/setup.sh)/bin/python" \
        [--scale 0.25] [--models sage,gcn,gat] [--epochs 3] [--fanouts 15,10,5] [--batch-size 1000] \
        [--hidden 256] [--threads 2] [--prefetch 0,1] [--dgl-malloc default,tuned] [--lock FILE] [--json FILE]

The products-shaped dataset (``products_like_config(scale)``: 612,257 nodes, 30.9M edges, 100
features at scale 0.25) is built once and cached under benchmarks/.cache as a dataset directory
(shared with benchmarks/distributed.py). Both sides read that directory, load the features into
memory, and train with the same fanouts, batch size, hidden size, dropout (0.5), learning rate and
thread count, without evaluation:

- gnnscale: the CLI, ``gnnscale train --dataset dir -o mmap=false ... --no-eval --prefetch P``,
  once per ``--prefetch`` value (0: loading on the training thread; 1: one batch ahead in the
  background), its per-epoch split read from ``--metrics-out``.
- DGL: ``benchmarks/anchors/dgl_train.py`` in the anchor environment, written as DGL's examples
  (``NeighborSampler(fused=True)`` + ``DataLoader``, ``dgl.nn.SAGEConv``, Adam). gnnscale's trainer
  tunes glibc's malloc for itself (:mod:`gnnscale.train.memory`); DGL does not, so with
  ``--dgl-malloc tuned`` DGL also runs with the same settings (as environment variables), and the
  ratios are against the faster DGL run of the two.

Each run is a separate process; the first epoch is warm-up, the table shows the median of the others.
``--iterations K`` shortens every epoch, on both sides alike, to K iterations: the runs read a copy
of the dataset directory (links to the same graph and features) whose training nodes are the first
K x batch-size of the full set, so an "epoch" is K batches of the same graph (whole epochs take
minutes per run on a busy 2-core machine); the table header says so.
Ratios: DGL's epoch time / gnnscale's (> 1: gnnscale faster), per phase as well. With overlap
(prefetch 1), ``overlap`` is gnnscale's epoch time / max(sample + gather, forward+backward) of the
same run: 1.0 is perfect overlap, and sample + gather + forward+backward over the same max is what
no overlap would give.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import cached_dataset  # noqa: E402  (the shared products-shaped dataset cache)

DGL_SCRIPT = HERE / "anchors" / "dgl_train.py"
PHASES = ("sample_s", "gather_s", "forward_backward_s", "epoch_s")
# What gnnscale's trainer sets with mallopt (gnnscale/train/memory.py), as glibc's environment variables.
GLIBC_KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 62),
                     "MALLOC_ARENA_MAX": "1"}
GAT_HEADS = 8


def run_json_lines(cmd: list[str], env: dict, a) -> str:
    """Run one training process (under ``flock --lock`` if given) and return its standard output."""
    if a.lock:
        cmd = ["flock", a.lock, *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-4000:]}")
    return done.stdout


def with_fewer_iterations(dataset: Path, iterations: int, batch_size: int) -> Path:
    """A dataset directory beside ``dataset`` with the same graph, features and labels (symbolic links)
    and only the first ``iterations * batch_size`` training nodes: an epoch of ``iterations`` batches."""
    import numpy as np

    keep = iterations * batch_size
    out = dataset.with_name(f"{dataset.name}_train{keep}")
    if (out / "meta.json").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    meta = json.loads((dataset / "meta.json").read_text())
    train_idx = np.load(dataset / "train_idx.npy")
    if keep > train_idx.shape[0]:
        sys.exit(f"--iterations: {iterations} x {batch_size} exceeds the {train_idx.shape[0]} training nodes")
    np.save(tmp / "train_idx.npy", train_idx[:keep])
    meta["shapes"]["train_idx"] = [keep]
    for item in dataset.iterdir():
        if item.name not in ("train_idx.npy", "meta.json"):
            (tmp / item.name).symlink_to(item.resolve())
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    tmp.rename(out)
    return out


def hidden_for(model: str, hidden: int) -> int:
    """GAT's --hidden is per head: keep the hidden representation ``hidden`` wide."""
    return max(1, hidden // GAT_HEADS) if model == "gat" else hidden


def gnnscale_epochs(dataset: Path, model: str, a, prefetch: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.json"
        cmd = [sys.executable, "-m", "gnnscale", "train", "--dataset", "dir", "--data-dir", str(dataset),
               "-o", "mmap=false", "--model", model, "--fanouts", a.fanouts, "--batch-size", str(a.batch_size),
               "--hidden", str(hidden_for(model, a.hidden)), "--heads", str(GAT_HEADS), "--dropout", "0.5",
               "--lr", str(a.lr), "--epochs", str(a.epochs), "--threads", str(a.threads), "--no-eval",
               "--prefetch", str(prefetch), "--quiet", "--metrics-out", str(metrics)]
        run_json_lines(cmd, {**os.environ, "OMP_NUM_THREADS": str(a.threads)}, a)
        # gnnscale names the feature gather fetch_s (one schema with distributed runs); DGL's script gather_s.
        return [{**h, "gather_s": h["fetch_s"]} for h in json.loads(metrics.read_text())["history"]]


def dgl_epochs(dataset: Path, model: str, a, malloc: str) -> list[dict]:
    cmd = [a.dgl_python, str(DGL_SCRIPT), str(dataset), "--model", model, "--fanouts", a.fanouts,
           "--batch-size", str(a.batch_size), "--hidden", str(hidden_for(model, a.hidden)), "--heads", str(GAT_HEADS),
           "--epochs", str(a.epochs), "--threads", str(a.threads), "--lr", str(a.lr), "--dropout", "0.5"]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "DGLBACKEND": "pytorch"}
    if malloc == "tuned":
        env.update(GLIBC_KEEP_MEMORY)
    out = run_json_lines(cmd, env, a)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def summarize(system: str, history: list[dict]) -> dict:
    """Median of every phase over the epochs after the first (warm-up)."""
    timed = history[1:] or history
    row = {"system": system, "epochs_timed": len(timed)}
    for phase in PHASES + ("wait_s",):
        if phase in timed[0]:
            row[phase] = statistics.median(h[phase] for h in timed)
    row["loading_s"] = row["sample_s"] + row["gather_s"]
    row["overlap"] = row["epoch_s"] / max(row["loading_s"], row["forward_backward_s"])
    row["no_overlap"] = (row["loading_s"] + row["forward_backward_s"]) / max(row["loading_s"],
                                                                             row["forward_backward_s"])
    return row


def print_table(model: str, rows: list[dict], iterations: int | None) -> None:
    dgl_rows = [r for r in rows if r["system"].startswith("dgl")]
    best_dgl = min(dgl_rows, key=lambda r: r["epoch_s"]) if dgl_rows else None
    unit = f"{iterations} iterations per 'epoch', both sides" if iterations else "whole epochs"
    print(f"\n{model}: median over epochs after the first (seconds per epoch; {unit})")
    print(f"{'system':28} {'epoch':>7} {'sample':>7} {'gather':>7} {'fwd+bwd':>8} {'wait':>6} {'overlap':>8} "
          f"{'x dgl epoch':>11} {'x dgl fwd+bwd':>13}")
    for r in rows:
        ratio = f"{best_dgl['epoch_s'] / r['epoch_s']:.2f}" if best_dgl else "-"
        fb = f"{best_dgl['forward_backward_s'] / r['forward_backward_s']:.2f}" if best_dgl else "-"
        wait = f"{r['wait_s']:.1f}" if "wait_s" in r else "-"
        print(f"{r['system']:28} {r['epoch_s']:7.1f} {r['sample_s']:7.2f} {r['gather_s']:7.2f} "
              f"{r['forward_backward_s']:8.1f} {wait:>6} {r['overlap']:8.2f} {ratio:>11} {fb:>13}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--models", default="sage")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up")
    p.add_argument("--fanouts", default="15,10,5", help="from the seeds outwards (gnnscale's order)")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=256, help="hidden width (GAT: heads x per-head width)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--prefetch", default="0,1", help="gnnscale runs, one per background-loading depth")
    p.add_argument("--dgl-python", default=None, help="python of the anchor environment (shared/tools/anchors)")
    p.add_argument("--dgl-malloc", default="default,tuned",
                   help="DGL runs: glibc's default malloc and/or the settings gnnscale's trainer uses")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=None,
                   help="iterations per epoch on both sides (the first K x batch-size training nodes); "
                        "default: whole epochs")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--lock", default=None,
                   help="hold this lock file (flock) during each training process, e.g. on a shared machine")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.epochs < 2:
        p.error("--epochs: at least 2 (the first is warm-up)")
    if a.iterations is not None and a.iterations < 1:
        p.error("--iterations: expected an int >= 1")
    dataset = cached_dataset(a.scale, a.seed, HERE / ".cache")
    if a.iterations:
        dataset = with_fewer_iterations(dataset, a.iterations, a.batch_size)
    results = {}
    for model in a.models.split(","):
        rows = []
        for prefetch in (int(x) for x in a.prefetch.split(",") if x):
            rows.append(summarize(f"gnnscale prefetch {prefetch}", gnnscale_epochs(dataset, model, a, prefetch)))
        if a.dgl_python:
            for malloc in (m for m in a.dgl_malloc.split(",") if m):
                rows.append(summarize(f"dgl 2.1 malloc {malloc}", dgl_epochs(dataset, model, a, malloc)))
        print_table(model, rows, a.iterations)
        results[model] = rows
    if a.json:
        Path(a.json).write_text(json.dumps({"config": vars(a), "dataset": str(dataset), "results": results},
                                           indent=2))


if __name__ == "__main__":
    main()
