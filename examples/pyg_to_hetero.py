"""PyG's ``to_hetero(GraphSAGE)`` trained on a typed graph with gnnscale's NeighborLoader.

A plain PyG heterogeneous mini-batch script: the only gnnscale line that matters is the loader's import
(``from gnnscale.loader import NeighborLoader`` instead of ``from torch_geometric.loader import
NeighborLoader``). The graph is gnnscale's mag-shaped synthetic preset (papers with features; authors,
institutions and fields of study without, so the model learns an embedding per node of theirs), handed
over as a PyG ``HeteroData``; the task is the papers' classes.

    python examples/pyg_to_hetero.py                          # mag preset at scale 0.003 (about 2,200 papers)
    python examples/pyg_to_hetero.py --scale 0.05 --epochs 10
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GraphSAGE, to_hetero

from gnnscale.graph.datasets import load_dataset
from gnnscale.loader import to_pyg_hetero_data
from gnnscale.loader import NeighborLoader  # the line a PyG script changes


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.003, help="size of the mag-shaped graph (1.0: ogbn-mag's)")
    p.add_argument("--fanouts", default="10,5", help="neighbors per edge type per hop, seeds outwards (default 10,5)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class HeteroSAGE(nn.Module):
    """``to_hetero(GraphSAGE)`` summing over edge types, with an embedding per node for the featureless types."""

    def __init__(self, data, hidden: int, num_classes: int, num_layers: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleDict({t: nn.Embedding(data[t].num_nodes, hidden) for t in data.node_types
                                         if "x" not in data[t]})
        gnn = GraphSAGE((-1, -1), hidden, num_layers=num_layers, out_channels=num_classes, dropout=0.2)
        self.gnn = to_hetero(gnn, data.metadata(), aggr="sum")

    def forward(self, batch):
        x = {t: batch[t].x if t not in self.embeddings else self.embeddings[t](batch[t].n_id) for t in batch.node_types}
        return self.gnn(x, batch.edge_index_dict)


def train_epoch(model, loader, optimizer) -> float:
    model.train()
    loss_sum = seen = 0
    for batch in loader:
        optimizer.zero_grad()
        size = batch["paper"].batch_size  # the seeds come first
        out = model(batch)["paper"][:size]
        loss = F.cross_entropy(out, batch["paper"].y[:size])
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * size
        seen += size
    return loss_sum / seen


@torch.no_grad()
def accuracy(model, loader) -> float:
    model.eval()
    correct = seen = 0
    for batch in loader:
        size = batch["paper"].batch_size
        pred = model(batch)["paper"][:size].argmax(1)
        correct += int((pred == batch["paper"].y[:size]).sum())
        seen += size
    return correct / seen


def main(argv=None) -> float:
    """Trains and prints one line per epoch; returns the test accuracy."""
    args = parse_args(argv)
    data = to_pyg_hetero_data(load_dataset("synthetic", None, preset="mag", scale=args.scale))
    fanouts = [int(f) for f in args.fanouts.split(",")]
    papers = data["paper"]
    print(f"mag-shaped graph: {papers.num_nodes} papers, {sum(data[e].num_edges for e in data.edge_types)} edges, "
          f"{len(data.node_types)} node types, {len(data.edge_types)} edge types")

    torch.manual_seed(args.seed)  # the model's initialisation and, through it, the loaders' seeds
    num_classes = int(papers.y.max()) + 1
    train_loader = NeighborLoader(data, num_neighbors=fanouts, input_nodes=("paper", papers.train_mask),
                                  batch_size=args.batch_size, shuffle=True)
    eval_loader = {split: NeighborLoader(data, num_neighbors=fanouts, input_nodes=("paper", papers[f"{split}_mask"]),
                                         batch_size=args.batch_size) for split in ("val", "test")}
    model = HeteroSAGE(data, args.hidden, num_classes, num_layers=len(fanouts))
    with torch.no_grad():  # the lazy layers learn their input widths from one batch
        model(next(iter(train_loader)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        start = time.perf_counter()
        loss = train_epoch(model, train_loader, optimizer)
        seconds = time.perf_counter() - start
        print(f"epoch {epoch}: loss {loss:.4f}  val acc {accuracy(model, eval_loader['val']):.4f}  {seconds:.1f} s")
    test_acc = accuracy(model, eval_loader["test"])
    print(f"test accuracy {test_acc:.4f}")
    return test_acc


if __name__ == "__main__":
    main()
