"""PyG's own GraphSAGE (``torch_geometric.nn.GraphSAGE``) trained by gnnscale, over a partition with one
worker per part (torchrun), or in one process.

The model is plain PyG; ``gnnscale.train.fit`` samples, fetches features across workers, averages
gradients, evaluates, checkpoints and writes metrics. Partition once, then launch one worker per part::

    python -m gnnscale partition --parts 2 --out runs/parts/synthetic            # the built-in synthetic graph
    torchrun --nproc-per-node 2 examples/pyg_graphsage_distributed.py --partitions runs/parts/synthetic --layout hybrid

    python -m gnnscale partition --dataset cora --data-dir ../shared/data/cora_planetoid --parts 2 --out runs/parts/cora
    torchrun --nproc-per-node 2 examples/pyg_graphsage_distributed.py --partitions runs/parts/cora --batch-size 32

Without ``--partitions`` it trains in this process (no torchrun) on ``--dataset``.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch_geometric.nn import GraphSAGE

from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.partition import read_manifest
from gnnscale.train import LayoutOptions, RunOutputs, TrainConfig, fit
from gnnscale.train.layouts import LAYOUTS


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default=None, help="a directory from `gnnscale partition` (launch with torchrun, "
                                                      "one worker per part)")
    p.add_argument("--layout", default="hybrid", choices=[name for name in LAYOUTS if name != "split"],
                   help="distributed layout (default hybrid; split needs gnnscale's split-aware layers)")
    p.add_argument("--dataset", default="synthetic", choices=DATASETS, help="without --partitions: the dataset")
    p.add_argument("--data-dir", default=None, help="without --partitions: where the dataset lives")
    p.add_argument("--num-nodes", type=int, default=None, help="synthetic, without --partitions: node count")
    p.add_argument("--sampler", default="fused", choices=("fused", "matrix"),
                   help="fused kernel, or matrix (sparse products, for --layout 1d and 1.5d)")
    p.add_argument("--fanouts", default="10,5", help="neighbors per hop, seeds outwards (default 10,5)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=512, help="seed nodes per worker and step")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per worker")
    p.add_argument("--metrics-out", default=None, help="write per-epoch metrics as JSON here (rank 0)")
    p.add_argument("--checkpoint", default=None, help="save after every epoch here (rank 0); --resume continues it")
    p.add_argument("--resume", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.partitions is not None:
        manifest = read_manifest(args.partitions)
        data, feature_dim, num_classes = args.partitions, manifest["feature_dim"], manifest["num_classes"]
        layout = LayoutOptions(layout=args.layout)
    else:
        options = {} if args.num_nodes is None else {"num_nodes": args.num_nodes}
        data = load_dataset(args.dataset, args.data_dir, **options)
        feature_dim, num_classes, layout = data.feature_dim, data.num_classes, None
    fanouts = tuple(int(f) for f in args.fanouts.split(","))

    torch.manual_seed(args.seed)  # fit starts every worker from rank 0's weights in any case
    model = GraphSAGE(feature_dim, args.hidden, num_layers=len(fanouts), out_channels=num_classes, dropout=0.5)
    config = TrainConfig(fanouts=fanouts, batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
                         seed=args.seed, threads=args.threads, sampler=args.sampler)
    outputs = RunOutputs(metrics_out=args.metrics_out, checkpoint=args.checkpoint, resume=args.resume,
                         overwrite=args.checkpoint is not None and not args.resume)
    report = fit(model, data, inputs="pyg", config=config, layout=layout, outputs=outputs)
    if os.environ.get("RANK", "0") == "0":  # every worker has the same report
        print(f"test accuracy {report.final_test_acc:.4f} (best validation {report.best_val_acc:.4f} at epoch "
              f"{report.best_epoch} -> test {report.test_acc_at_best_val:.4f})")


if __name__ == "__main__":
    main()
