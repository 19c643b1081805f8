"""Cora test accuracy of GraphSAGE, GCN and GAT on the standard Planetoid split, mean over seeds.

    python benchmarks/cora_accuracy.py --data-dir ../shared/data/cora_planetoid [--seeds 5] [--json FILE]
    python benchmarks/cora_accuracy.py --data-dir ../shared/data/cora_planetoid --workers 2 [--layout hybrid]
                                       [--feature-dtype float32|float16|bfloat16]

With ``--workers N`` Cora is partitioned with METIS into N parts and every seed is trained by a
torchrun job of N workers (gloo on 127.0.0.1) with ``--batch-size`` 140 / N, so that one iteration
per epoch covers the training set as on a single machine: with the data-parallel layouts (``hybrid``,
``vanilla``) each worker's batch is 140 / N of its own training nodes; with ``--layout split`` the
batch size is per worker too, so the iteration's one mini-batch is N x 140 / N = all 140 training
nodes, the single machine's batch, split across the workers. The table then shows the
single-machine accuracy beside the distributed one. ``--feature-dtype`` stores the parts' features in
half precision (the single machine keeps float32): the difference is then what half precision costs.

Test accuracy is read at the epoch of best validation accuracy (model selection as in Kipf & Welling
and Veličković et al.). Hyperparameters follow those papers; GCN and GAT use fanouts above Cora's
largest degree (168), i.e. full neighborhoods, as the papers train full-batch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.feature_dtype import FEATURE_DTYPES
from gnnscale.nn import ModelConfig
from gnnscale.partition import write_partition_dir
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model

FULL = (200, 200)  # above Cora's maximum in-degree: every neighbor is taken

# name -> (model options, training options); target = the bar, paper = the published figure
SETTINGS = {
    "sage": (dict(hidden_dim=64, dropout=0.5, input_dropout=0.5),
             dict(fanouts=(25, 10), eval_fanouts=FULL, lr=0.01, weight_decay=5e-4, epochs=100), 0.79, None),
    "gcn": (dict(hidden_dim=16, dropout=0.5, input_dropout=0.5),
            dict(fanouts=FULL, lr=0.01, weight_decay=5e-4, epochs=200), 0.80, 0.815),
    "gat": (dict(hidden_dim=8, heads=8, dropout=0.6, input_dropout=0.6, attn_dropout=0.6),
            dict(fanouts=FULL, lr=0.005, weight_decay=5e-4, epochs=200), 0.81, 0.830),
}


def single_machine_accuracy(dataset, name: str, seed: int, threads: int) -> float:
    model_opts, train_opts, _, _ = SETTINGS[name]
    model_cfg = ModelConfig(name=name, in_dim=dataset.feature_dim, num_classes=dataset.num_classes, num_layers=2,
                            **model_opts)
    train_cfg = TrainConfig(batch_size=dataset.train_idx.size, seed=seed, threads=threads, **train_opts)
    model = seeded_model(model_cfg, train_cfg.seed)
    return fit(model, dataset, inputs="blocks", config=train_cfg, progress=False).test_acc_at_best_val


def cli_args(name: str) -> list[str]:
    """The SETTINGS of one model as `gnnscale train` options."""
    model_opts, train_opts, _, _ = SETTINGS[name]
    joined = lambda xs: ",".join(map(str, xs))  # noqa: E731
    args = ["--model", name, "--hidden", str(model_opts["hidden_dim"]), "--dropout", str(model_opts["dropout"]),
            "--input-dropout", str(model_opts["input_dropout"]), "--fanouts", joined(train_opts["fanouts"]),
            "--lr", str(train_opts["lr"]), "--weight-decay", str(train_opts["weight_decay"]),
            "--epochs", str(train_opts["epochs"])]
    if "eval_fanouts" in train_opts:
        args += ["--eval-fanouts", joined(train_opts["eval_fanouts"])]
    if "heads" in model_opts:
        args += ["--heads", str(model_opts["heads"]), "--attn-dropout", str(model_opts["attn_dropout"])]
    return args


def distributed_accuracy(partition_dir: Path, workers: int, layout: str, name: str, seed: int, num_train: int,
                         out: Path) -> float:
    # --standalone: torchrun binds a free port itself (a port found free here could be taken before it binds).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers),
           "-m", "gnnscale", "train", "--partitions", str(partition_dir),
           "--layout", layout, *cli_args(name), "--batch-size", str(math.ceil(num_train / workers)),
           "--seed", str(seed), "--threads", "1", "--quiet", "--metrics-out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if run.returncode != 0:
        raise RuntimeError(f"torchrun failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return json.loads(out.read_text())["test_acc_at_best_val"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--models", default="sage,gcn,gat")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--workers", type=int, default=0, help="also train with N torchrun workers (0: single machine only)")
    p.add_argument("--layout", default="hybrid", choices=("hybrid", "vanilla", "split"))
    p.add_argument("--feature-dtype", default="float32", choices=FEATURE_DTYPES, help="how the parts store features")
    a = p.parse_args()
    dataset = load_dataset("cora", a.data_dir)
    tmp = Path(tempfile.mkdtemp(prefix="cora_parts_"))
    if a.workers:
        write_partition_dir(dataset, a.workers, "metis", tmp / "parts", feature_dtype=a.feature_dtype)
    rows = []
    for name in a.models.split(","):
        _, _, target, paper = SETTINGS[name]
        start = time.perf_counter()
        accs = [single_machine_accuracy(dataset, name, seed, a.threads) for seed in range(a.seeds)]
        print(f"{name}: single machine, test accuracy per seed {', '.join(f'{x:.4f}' for x in accs)}", flush=True)
        dist_accs = [distributed_accuracy(tmp / "parts", a.workers, a.layout, name, seed, dataset.train_idx.size,
                                          tmp / f"{name}{seed}.json") for seed in range(a.seeds)] if a.workers else []
        if dist_accs:
            print(f"{name}: {a.workers} workers, test accuracy per seed {', '.join(f'{x:.4f}' for x in dist_accs)}",
                  flush=True)
        rows.append({"model": name, "seeds": a.seeds, "mean_test_acc": statistics.mean(accs),
                     "std_test_acc": statistics.pstdev(accs), "accs": accs, "target": target, "paper": paper,
                     "workers": a.workers, "dist_accs": dist_accs,
                     "dist_mean_test_acc": statistics.mean(dist_accs) if dist_accs else None,
                     "seconds": time.perf_counter() - start})
    dist_head = f" {f'{a.workers} workers':>10} {'diff':>6}" if a.workers else ""
    print(f"{'model':6} {'mean test acc':>14} {'std':>6} {'target':>7} {'paper':>6} {'pass':>5}{dist_head} {'s':>6}")
    for r in rows:
        paper = f"{r['paper']:.3f}" if r["paper"] else "-"
        dist = (f" {r['dist_mean_test_acc']:10.4f} {r['dist_mean_test_acc'] - r['mean_test_acc']:+6.4f}"
                if a.workers else "")
        print(f"{r['model']:6} {r['mean_test_acc']:14.4f} {r['std_test_acc']:6.4f} {r['target']:7.2f} {paper:>6} "
              f"{'yes' if r['mean_test_acc'] >= r['target'] else 'NO':>5}{dist} {r['seconds']:6.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
