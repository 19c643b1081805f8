"""DGL's mini-batch training, written as DGL's own examples do, on a gnnscale dataset directory.

Run with the anchor environment's python (``../shared/tools/anchors/setup.sh`` prints it); called by
``benchmarks/end_to_end.py``:

    python dgl_train.py DATASET_DIR --model sage --fanouts 15,10,5 --batch-size 1000 --hidden 256 \
        --epochs 3 --threads 2 --lr 0.003 --dropout 0.5

As in DGL 2.1's ``examples/pytorch/graphsage/node_classification.py``: ``NeighborSampler(fused=True)``
and ``DataLoader`` (shuffled, no worker processes on CPU), ``dgl.nn.SAGEConv('mean')`` layers with
ReLU and dropout between them, cross-entropy, Adam. ``--model gcn`` uses ``SAGEConv('gcn')`` (the
same random-walk-normalised aggregator as gnnscale's GCN); ``--model gat`` uses ``GATConv`` (hidden
layers concatenate ``--heads`` heads of ``--hidden`` features, the output layer averages one head;
ELU between layers). Fanouts are given from the seeds outwards, like gnnscale's; DGL lists them from
the input layer, so they are reversed for its sampler.

Per iteration, ``next()`` on the loader is the sampling time, indexing the feature and label
tensors the gather time (what the loader's ``prefetch_node_feats`` does, timed apart), and
forward + loss + backward + optimizer step the forward_backward time. Prints one JSON line per epoch.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(dglnn, name, in_dim, hidden, num_classes, num_layers, heads, dropout):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList()
            if name == "gat":
                dims = [in_dim] + [hidden * heads] * (num_layers - 1)
                for d in dims[:-1]:
                    self.layers.append(dglnn.GATConv(d, hidden, heads, allow_zero_in_degree=True))
                self.layers.append(dglnn.GATConv(dims[-1], num_classes, 1, allow_zero_in_degree=True))
            else:
                aggregator = "mean" if name == "sage" else "gcn"
                dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
                for i, o in zip(dims[:-1], dims[1:]):
                    self.layers.append(dglnn.SAGEConv(i, o, aggregator))
            self.dropout = nn.Dropout(dropout)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if name == "gat":
                    h = h.flatten(1) if i < len(self.layers) - 1 else h.mean(1)
                if i < len(self.layers) - 1:
                    h = self.dropout(F.elu(h) if name == "gat" else F.relu(h))
            return h

    return Model()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset_dir")
    p.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import dgl  # noqa: E402  (after the thread count is set)
    import dgl.nn as dglnn

    d = Path(a.dataset_dir)
    indptr = torch.from_numpy(np.load(d / "indptr.npy").astype(np.int64))
    indices = torch.from_numpy(np.load(d / "indices.npy").astype(np.int64))
    n = indptr.numel() - 1
    g = dgl.graph((indices, torch.repeat_interleave(torch.arange(n), indptr.diff())), num_nodes=n)
    g.create_formats_()
    del indices
    feat = torch.from_numpy(np.load(d / "features.npy"))
    labels = torch.from_numpy(np.load(d / "labels.npy"))
    train_idx = torch.from_numpy(np.load(d / "train_idx.npy"))
    num_classes = int(labels.max()) + 1
    fanouts = [int(f) for f in a.fanouts.split(",")][::-1]  # DGL: input layer first

    torch.manual_seed(a.seed)
    model = build_model(dglnn, a.model, feat.shape[1], a.hidden, num_classes, len(fanouts), a.heads, a.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sampler = dgl.dataloading.NeighborSampler(fanouts, fused=True)
    loader = dgl.dataloading.DataLoader(g, train_idx, sampler, batch_size=a.batch_size, shuffle=True,
                                        drop_last=False, num_workers=0)
    for epoch in range(a.epochs):
        model.train()
        sample_s = gather_s = fb_s = 0.0
        loss_sum, count = 0.0, 0
        start = time.perf_counter()
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                input_nodes, output_nodes, blocks = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            x = feat[input_nodes]
            y = labels[output_nodes]
            t2 = time.perf_counter()
            logits = model(blocks, x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t3 = time.perf_counter()
            sample_s += t1 - t0
            gather_s += t2 - t1
            fb_s += t3 - t2
            loss_sum += float(loss) * y.numel()
            count += y.numel()
        print(json.dumps({"epoch": epoch, "sample_s": sample_s, "gather_s": gather_s, "forward_backward_s": fb_s,
                          "epoch_s": time.perf_counter() - start, "loss": loss_sum / count}), flush=True)


if __name__ == "__main__":
    main()
