"""Models of one's own for the tests of ``gnnscale.train.fit``, and the one-process reference that
trains them step by step as P data-parallel workers would (imported by the tests and by
``fit_script.py``, which torchrun runs)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnscale.graph.feature_dtype import decode
from gnnscale.partition import load_partition
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.keys import STREAM_DROPOUT
from gnnscale.sampling.nodewise import NodewiseSampler
from gnnscale.train.batches import epoch_batches, num_batches_for
from gnnscale.train.config import TrainConfig
from gnnscale.train.loop import build_optimizer

HIDDEN = 16
DROPOUT = 0.2  # drawn from torch's generator, which fit seeds per step


class MeanSAGE(nn.Module):
    """A GraphSAGE of one's own over gnnscale blocks, in plain torch: each layer concatenates a node's
    features with the mean of its sampled in-neighbors' and applies a linear map."""

    def __init__(self, in_dim: int, num_classes: int, num_layers: int) -> None:
        super().__init__()
        dims = [in_dim] + [HIDDEN] * (num_layers - 1) + [num_classes]
        self.lins = nn.ModuleList(nn.Linear(2 * i, o) for i, o in zip(dims[:-1], dims[1:]))

    def forward(self, blocks, x):
        for i, (lin, block) in enumerate(zip(self.lins, blocks)):
            summed = torch.zeros(block.num_dst, x.shape[1]).index_add_(0, block.dst_index(), x[block.indices])
            mean = summed / block.in_degrees().clamp(min=1).unsqueeze(1)
            x = lin(torch.cat([x[:block.num_dst], mean], dim=1))
            if i < len(self.lins) - 1:
                x = F.dropout(F.relu(x), DROPOUT, self.training)
        return x


def make_model(kind: str, in_dim: int, num_classes: int, num_layers: int) -> nn.Module:
    """``"blocks"``: :class:`MeanSAGE`; ``"pyg"``: PyG's own GraphSAGE. Initialised from seed 0."""
    torch.manual_seed(0)
    if kind == "blocks":
        return MeanSAGE(in_dim, num_classes, num_layers)
    from torch_geometric.nn import GraphSAGE as PygGraphSAGE  # here: the gpu tests collect without PyG

    return PygGraphSAGE(in_dim, HIDDEN, num_layers=num_layers, out_channels=num_classes, dropout=DROPOUT)


def whole_dataset(partition_dir, num_parts: int):
    """The partitioned (relabelled) graph, every node's features and labels, and each part's training
    nodes (global ids), read from the partition directory."""
    parts = [load_partition(partition_dir, p, "whole") for p in range(num_parts)]
    features = torch.cat([decode(np.asarray(p.features)) for p in parts]).float()
    labels = torch.from_numpy(np.concatenate([np.asarray(p.labels) for p in parts])).long()
    return parts[0].topology, features, labels, [torch.from_numpy(np.array(p.train_idx, dtype=np.int64))
                                                 for p in parts]


def reference_losses(model: nn.Module, kind: str, graph, features, labels, train_parts, cfg: TrainConfig) -> list:
    """Per-epoch lists of per-step losses of ``len(train_parts)`` data-parallel workers, computed in this
    process: each step, every worker's micro-batch (its seeds and key, as the hybrid layout draws them)
    through the model, the gradients averaged over the workers, one fused Adam step. The loss of a step
    is the mean over all the workers' seeds."""
    optimizer = build_optimizer(model, cfg)
    workers = len(train_parts)
    num_batches = max(num_batches_for(t.numel(), cfg.batch_size) for t in train_parts)
    nodewise = NodewiseSampler(graph, cfg.fanouts)
    history = []
    for epoch in range(cfg.epochs):
        model.train()
        plans = [epoch_batches(t, num_batches, cfg.seed, epoch, rank) for rank, t in enumerate(train_parts)]
        losses = []
        for step in range(num_batches):
            optimizer.zero_grad(set_to_none=True)
            grads, total, count = None, 0.0, 0
            for rank in range(workers):
                seeds, key = plans[rank][step], derive_key(cfg.seed, epoch, step, rank)
                torch.manual_seed(derive_key(cfg.seed, epoch, step, rank, STREAM_DROPOUT))
                if kind == "blocks":
                    blocks = sample_blocks(graph, seeds, cfg.fanouts, key=key)
                    logits = model(blocks, features[blocks[0].src_ids])
                else:  # gnnscale's NeighborLoader sampler: PyG's node-wise batch of the same seeds and key
                    sample = nodewise.sample(seeds, key)
                    out = model(features[sample.nodes], torch.stack([sample.row, sample.col]))
                    logits = out[:seeds.numel()]
                loss = F.cross_entropy(logits, labels[seeds])
                model.zero_grad(set_to_none=True)
                loss.backward()
                mine = [p.grad.clone() for p in model.parameters()]
                grads = mine if grads is None else [g + m for g, m in zip(grads, mine)]
                total += float(loss.detach().double() * seeds.numel())
                count += seeds.numel()
            for p, g in zip(model.parameters(), grads):
                p.grad = g / workers
            optimizer.step()
            losses.append(total / count)
        history.append(losses)
    return history
