"""DGL's R-GCN on a typed graph, written as DGL's ogbn-mag example (``examples/pytorch/ogb/ogbn-mag/hetero_rgcn.py``).

Run with the anchor environment's python (``../shared/tools/anchors/setup.sh`` prints it); called by
``benchmarks/hetero.py``:

    python dgl_hetero_train.py DATASET_DIR EDGES.npz --fanouts 25,20 --batch-size 1024 --hidden 64 \
        --epochs 2 --threads 2 --lr 0.01 --dropout 0.5

DATASET_DIR is a gnnscale typed dataset directory (its ``meta.json`` names the target type, ``features.<type>.npy``
the types with features, ``labels.npy`` and ``train_idx.npy``, global ids of the target type); EDGES.npz holds every
relation's edges in local ids (``dgl_hetero_sampling.py`` describes it).

As the example: a heterograph, ``NeighborSampler`` (``fused=True``, DGL's default: ``sample_neighbors_fused`` on
more than one thread) with one fanout for every relation, ``DataLoader`` over the target type's training nodes
(shuffled, no worker processes on the CPU); layers of ``HeteroGraphConv({rel: GraphConv(norm="right",
weight=False, bias=False)})`` (the mean over each relation's neighbors) with a weight per relation passed in
``mod_kwargs``, plus a self-loop Linear per node type, summed; ReLU and dropout after the first layer; learnable
embeddings (``HeteroEmbedding``) for the types without features; cross-entropy on log-softmax; Adam over the model
and the embeddings. One change so that both systems compute the same model: the example feeds the papers' raw
128-d features and 128-d embeddings into a first layer of 128 inputs; here, as gnnscale's R-GCN, a Linear
projects each featured type to ``--hidden`` and the embeddings are ``--hidden`` wide.

Per iteration, ``next()`` on the loader is the sampling time, indexing the features and labels the gather time
(the embedding lookup belongs to the forward pass, as in gnnscale's model), forward + loss + backward + optimizer step the forward_backward time. Prints one JSON line per epoch.
"""
import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from dgl_hetero_sampling import load_heterograph


def build_model(dglnn, ntypes, rel_names, hidden, num_classes, dropout):
    class RelGraphConvLayer(nn.Module):
        """The example's layer: per relation the right-normalised sum (the mean) times the relation's weight,
        plus a self loop per node type."""

        def __init__(self, in_feat, out_feat, activation, dropout):
            super().__init__()
            self.conv = dglnn.HeteroGraphConv({rel: dglnn.GraphConv(in_feat, out_feat, norm="right", weight=False,
                                                                    bias=False) for rel in rel_names})
            self.weight = nn.ModuleDict({rel: nn.Linear(in_feat, out_feat, bias=False) for rel in rel_names})
            self.loop_weights = nn.ModuleDict({t: nn.Linear(in_feat, out_feat, bias=True) for t in ntypes})
            self.activation, self.dropout = activation, nn.Dropout(dropout)

        def forward(self, g, inputs):
            g = g.local_var()
            wdict = {rel: {"weight": self.weight[rel].weight.T} for rel in rel_names}
            inputs_dst = {k: v[: g.number_of_dst_nodes(k)] for k, v in inputs.items()}
            hs = self.conv(g, inputs, mod_kwargs=wdict)

            def apply(ntype, h):
                h = h + self.loop_weights[ntype](inputs_dst[ntype])
                if self.activation:
                    h = self.activation(h)
                return self.dropout(h)

            return {ntype: apply(ntype, h) for ntype, h in hs.items()}

    class EntityClassify(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([RelGraphConvLayer(hidden, hidden, F.relu, dropout),
                                         RelGraphConvLayer(hidden, num_classes, None, 0.0)])

        def forward(self, h, blocks):
            for layer, block in zip(self.layers, blocks):
                h = layer(block, h)
            return h

    return EntityClassify()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset_dir")
    p.add_argument("edges")
    p.add_argument("--fanouts", default="25,20")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import dgl  # noqa: E402  (after the thread count is set)
    import dgl.nn as dglnn

    d = Path(a.dataset_dir)
    meta = json.loads((d / "meta.json").read_text())
    target = meta["target_type"]
    g, etypes = load_heterograph(dgl, a.edges)
    offsets = dict(zip(meta["node_types"], np.cumsum([0] + [g.num_nodes(t) for t in meta["node_types"]])))
    featured = [t for t, dim in meta["feature_dims"].items() if dim is not None]
    feats = {t: torch.from_numpy(np.load(d / f"features.{t}.npy")) for t in featured}
    labels = torch.from_numpy(np.load(d / "labels.npy"))
    train_idx = torch.from_numpy(np.load(d / "train_idx.npy") - offsets[target])  # local ids of the target type
    num_classes = int(meta["num_classes"])
    fanouts = [int(f) for f in a.fanouts.split(",")][::-1]  # DGL: input layer first

    torch.manual_seed(a.seed)
    rel_names = sorted({etype[1] for etype in etypes})
    model = build_model(dglnn, g.ntypes, rel_names, a.hidden, num_classes, a.dropout)
    project = nn.ModuleDict({t: nn.Linear(feats[t].shape[1], a.hidden) for t in featured})
    embed = dglnn.HeteroEmbedding({t: g.num_nodes(t) for t in g.ntypes if t not in feats}, a.hidden)
    params = itertools.chain(model.parameters(), project.parameters(), embed.parameters())
    opt = torch.optim.Adam(params, lr=a.lr)
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(g, {target: train_idx}, sampler, batch_size=a.batch_size, shuffle=True,
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
                input_nodes, seeds, blocks = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            x = {t: feats[t][input_nodes[t]] for t in featured}
            y = labels[seeds[target]]
            t2 = time.perf_counter()
            # The embedding lookup is part of the forward pass, as in gnnscale's model (its fetch reads features).
            h = {**embed({t: ids for t, ids in input_nodes.items() if t not in feats}),
                 **{t: project[t](x[t]) for t in featured}}
            logits = model(h, blocks)[target]
            loss = F.nll_loss(logits.log_softmax(dim=-1), y)
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
