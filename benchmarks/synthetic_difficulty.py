"""How hard a synthetic preset is: GraphSAGE against a model that ignores the graph, same data, same run.

    python benchmarks/synthetic_difficulty.py [--preset hard] [--scale 1.0] [--seeds 0,1,2] [--epochs 5]
                                              [--mlp-epochs 30] [--json FILE]

GraphSAGE is trained exactly as ``gnnscale train --dataset synthetic -o preset=P -o scale=S`` does with
its default hyper-parameters (2 layers, fanouts 10,5, batch 512, hidden 128, dropout 0.5, Adam lr
0.003, ``--epochs``). The baseline is a 2-layer MLP on the node features alone (hidden 128, dropout
0.5, the same optimiser and batch size), trained ``--mlp-epochs`` epochs since an epoch of it is
cheap. Both report the test accuracy at the epoch of best validation accuracy. The graph is the
preset's (its seed 0); ``--seeds`` are the training seeds (initialisation, batch order, sampling).
A preset on which neighbors matter shows a large gap; ``hard`` is meant to sit between 60% and 85%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from gnnscale.graph.datasets import load_dataset
from gnnscale.nn import ModelConfig
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model

HIDDEN, DROPOUT, LR, BATCH = 128, 0.5, 0.003, 512  # the CLI defaults


def sage_accuracy(dataset, seed: int, epochs: int, threads: int) -> tuple[float, float]:
    """(test accuracy at best validation, seconds) of default GraphSAGE."""
    model_cfg = ModelConfig(name="sage", in_dim=dataset.feature_dim, num_classes=dataset.num_classes, num_layers=2,
                            hidden_dim=HIDDEN, dropout=DROPOUT)
    train_cfg = TrainConfig(fanouts=(10, 5), batch_size=BATCH, epochs=epochs, lr=LR, seed=seed, threads=threads)
    start = time.perf_counter()
    report = fit(seeded_model(model_cfg, train_cfg.seed), dataset, inputs="blocks", config=train_cfg, progress=False)
    return report.test_acc_at_best_val, time.perf_counter() - start


def mlp_accuracy(dataset, seed: int, epochs: int) -> tuple[float, float]:
    """(test accuracy at best validation, seconds) of a 2-layer MLP on the features alone."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    x, y = torch.from_numpy(dataset.features), torch.from_numpy(dataset.labels)
    train, val, test = (torch.from_numpy(dataset.train_idx), torch.from_numpy(dataset.val_idx),
                        torch.from_numpy(dataset.test_idx))
    model = torch.nn.Sequential(torch.nn.Linear(dataset.feature_dim, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(DROPOUT),
                                torch.nn.Linear(HIDDEN, dataset.num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    order = torch.Generator().manual_seed(seed)
    best_val, test_at_best = -1.0, float("nan")
    for _ in range(epochs):
        model.train()
        for batch in train[torch.randperm(train.numel(), generator=order)].split(BATCH):
            loss = F.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_acc = float((model(x[val]).argmax(1) == y[val]).float().mean())
            if val_acc > best_val:
                best_val = val_acc
                test_at_best = float((model(x[test]).argmax(1) == y[test]).float().mean())
    return test_at_best, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="hard")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=5, help="GraphSAGE epochs (the CLI default: 5)")
    parser.add_argument("--mlp-epochs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.set_num_threads(args.threads)
    dataset = load_dataset("synthetic", preset=args.preset, scale=args.scale)
    summary = dataset.summary()
    print(f"preset {args.preset} scale {args.scale:g}: {summary['num_nodes']} nodes, {summary['num_edges']} edges, "
          f"{dataset.num_classes} classes, train/val/test {summary['train/val/test']}")
    rows = []
    for seed in seeds:
        sage, sage_s = sage_accuracy(dataset, seed, args.epochs, args.threads)
        mlp, mlp_s = mlp_accuracy(dataset, seed, args.mlp_epochs)
        rows.append({"seed": seed, "sage": sage, "mlp": mlp, "sage_s": sage_s, "mlp_s": mlp_s})
        print(f"seed {seed}: GraphSAGE {sage:.4f} ({sage_s:.0f} s)  MLP {mlp:.4f} ({mlp_s:.0f} s)", flush=True)
    print(f"\n| model | test accuracy, mean of {len(seeds)} seeds | min | max |\n| --- | --- | --- | --- |")
    for name, label in (("sage", f"GraphSAGE, {args.epochs} epochs"), ("mlp", f"MLP, {args.mlp_epochs} epochs")):
        values = [r[name] for r in rows]
        print(f"| {label} | {statistics.mean(values):.4f} | {min(values):.4f} | {max(values):.4f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "scale": args.scale, "summary": summary, "runs": rows}, f, indent=2)


if __name__ == "__main__":
    main()
