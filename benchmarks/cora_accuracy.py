"""Cora test accuracy of GraphSAGE, GCN and GAT on the standard Planetoid split, mean over seeds.

    python benchmarks/cora_accuracy.py --data-dir ../shared/data/cora_planetoid [--seeds 5] [--json FILE]

Test accuracy is read at the epoch of best validation accuracy (model selection as in Kipf & Welling
and Veličković et al.). Hyperparameters follow those papers; GCN and GAT use fanouts above Cora's
largest degree (168), i.e. full neighborhoods, as the papers train full-batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from gnnscale.graph.datasets import load_dataset
from gnnscale.nn import ModelConfig
from gnnscale.train.config import TrainConfig
from gnnscale.train.run import run_training

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--models", default="sage,gcn,gat")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    dataset = load_dataset("cora", a.data_dir)
    rows = []
    for name in a.models.split(","):
        model_opts, train_opts, target, paper = SETTINGS[name]
        accs, start = [], time.perf_counter()
        for seed in range(a.seeds):
            model_cfg = ModelConfig(name=name, in_dim=dataset.feature_dim, num_classes=dataset.num_classes,
                                    num_layers=2, **model_opts)
            train_cfg = TrainConfig(batch_size=dataset.train_idx.size, seed=seed, threads=a.threads, **train_opts)
            report = run_training(dataset, model_cfg, train_cfg, progress=False)
            accs.append(report.test_acc_at_best_val)
        rows.append({"model": name, "seeds": a.seeds, "mean_test_acc": statistics.mean(accs),
                     "std_test_acc": statistics.pstdev(accs), "accs": accs, "target": target, "paper": paper,
                     "seconds": time.perf_counter() - start})
    print(f"{'model':6} {'mean test acc':>14} {'std':>6} {'target':>7} {'paper':>6} {'pass':>5} {'s':>6}")
    for r in rows:
        paper = f"{r['paper']:.3f}" if r["paper"] else "-"
        print(f"{r['model']:6} {r['mean_test_acc']:14.4f} {r['std_test_acc']:6.4f} {r['target']:7.2f} {paper:>6} "
              f"{'yes' if r['mean_test_acc'] >= r['target'] else 'NO':>5} {r['seconds']:6.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
