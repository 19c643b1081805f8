"""PyG's own GraphSAGE (``torch_geometric.nn.GraphSAGE``) trained with gnnscale's NeighborLoader.

A plain PyG mini-batch training script: the only gnnscale line that matters is the loader's import
(``from gnnscale.loader import NeighborLoader`` instead of ``from torch_geometric.loader import
NeighborLoader``); the dataset comes from gnnscale's registry and is handed over as a PyG ``Data``.

    python examples/pyg_graphsage.py                                   # built-in synthetic graph
    python examples/pyg_graphsage.py --dataset cora --data-dir ../shared/data/cora_planetoid
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.loader import NeighborLoader, to_pyg_data


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic", choices=DATASETS, help="dataset name (default: synthetic)")
    p.add_argument("--data-dir", default=None, help="where the dataset lives (every dataset but synthetic)")
    p.add_argument("--num-nodes", type=int, default=None, help="synthetic only: node count (default 30000)")
    p.add_argument("--fanouts", default="10,5", help="neighbors per hop, seeds outwards; -1 = all (default 10,5)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batches", type=int, default=None, help="stop each epoch after this many batches (smoke runs)")
    return p.parse_args(argv)


def train_epoch(model, loader, optimizer, max_batches):
    model.train()
    loss_sum = correct = seen = batches = 0
    for batch in loader:
        if max_batches is not None and batches == max_batches:
            break
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]  # the seeds come first
        y = batch.y[:batch.batch_size]
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * batch.batch_size
        correct += int((out.argmax(1) == y).sum())
        seen += batch.batch_size
        batches += 1
    return loss_sum / seen, correct / seen, batches


@torch.no_grad()
def accuracy(model, loader, max_batches):
    model.eval()
    correct = seen = 0
    for i, batch in enumerate(loader):
        if max_batches is not None and i == max_batches:
            break
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        seen += batch.batch_size
    return correct / seen


def main(argv=None) -> None:
    args = parse_args(argv)
    options = {} if args.num_nodes is None else {"num_nodes": args.num_nodes}
    data = to_pyg_data(load_dataset(args.dataset, args.data_dir, **options))
    fanouts = [int(f) for f in args.fanouts.split(",")]
    print(f"{args.dataset}: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} features")

    torch.manual_seed(args.seed)  # the model's initialisation and, through it, the loaders' seeds
    num_classes = int(data.y.max()) + 1
    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(fanouts), out_channels=num_classes,
                      dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train_loader = NeighborLoader(data, fanouts, input_nodes=data.train_mask, batch_size=args.batch_size,
                                  shuffle=True)
    # Evaluation on every neighbor (-1 per hop): no sampling noise in the reported accuracy.
    eval_loader = {split: NeighborLoader(data, [-1] * len(fanouts), input_nodes=data[f"{split}_mask"],
                                         batch_size=args.batch_size) for split in ("val", "test")}

    for epoch in range(args.epochs):
        start = time.perf_counter()
        loss, train_acc, batches = train_epoch(model, train_loader, optimizer, args.max_batches)
        seconds = time.perf_counter() - start
        val_acc = accuracy(model, eval_loader["val"], args.max_batches)
        print(f"epoch {epoch}: loss {loss:.4f}  train acc {train_acc:.4f}  val acc {val_acc:.4f}  "
              f"{seconds:.1f} s ({batches / seconds:.1f} batches/s)")
    print(f"test accuracy {accuracy(model, eval_loader['test'], args.max_batches):.4f}")


if __name__ == "__main__":
    main()
