"""The training loop: sample, gather features, forward+backward, step; evaluate every epoch.

It receives built objects (model, optimizer, samplers, data) and reads top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from gnnscale.sampling import BulkSampler, derive_key
from gnnscale.sampling.keys import STREAM_DROPOUT, STREAM_ORDER
from gnnscale.train.config import TrainConfig
from gnnscale.train.metrics import EpochMetrics, PhaseTimer

# Keys of inference batches live in their own "epoch" so they never collide with training keys.
EVAL_EPOCH = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainData:
    """Per-node data the loop reads.

    Args:
        features: float32 [num_nodes, feature_dim], numpy (possibly memory-mapped) or torch.
        labels: int64 tensor [num_nodes].
        train_idx, val_idx, test_idx: int64 tensors of node ids.
    """

    features: np.ndarray | torch.Tensor
    labels: torch.Tensor
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    test_idx: torch.Tensor

    def __post_init__(self) -> None:
        if self.train_idx.numel() == 0:
            raise ValueError("train_idx: the training set is empty; nothing to train on")

    def gather(self, node_ids: torch.Tensor) -> torch.Tensor:
        """float32 [len(node_ids), feature_dim]: input features of the given nodes."""
        if isinstance(self.features, torch.Tensor):
            return self.features.index_select(0, node_ids)
        return torch.from_numpy(np.ascontiguousarray(self.features[node_ids.numpy()]))


def num_batches_for(num_train: int, batch_size: int) -> int:
    return max(1, -(-num_train // batch_size))


def epoch_batches(train_idx: torch.Tensor, num_batches: int, seed: int, epoch: int, rank: int = 0) -> list[torch.Tensor]:
    """The epoch's mini-batches: a permutation of the training nodes fixed by ``(seed, epoch, rank)``,
    cut into ``num_batches`` near-equal parts. Distributed workers agree on ``num_batches`` so that
    every worker runs the same number of iterations; one worker is exactly the single-machine run."""
    gen = torch.Generator().manual_seed(derive_key(seed, epoch, 0, rank, STREAM_ORDER))
    order = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
    return list(order.tensor_split(num_batches))


def train_epoch(model, optimizer, sampler: BulkSampler, data: TrainData, cfg: TrainConfig, epoch: int,
                timer: PhaseTimer, progress: bool) -> tuple[float, float, int, int, int]:
    """One pass over the training nodes, sampling ``sampler.bulk`` batches at a time.
    Returns (mean loss, train accuracy, sampled edges, batches, bulks)."""
    model.train()
    # Dropout draws from torch's global RNG: re-seeding per epoch makes a resumed run exact.
    torch.manual_seed(derive_key(cfg.seed, epoch, 0, 0, STREAM_DROPOUT))
    batches = epoch_batches(data.train_idx, num_batches_for(data.train_idx.numel(), cfg.batch_size), cfg.seed, epoch)
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.long)
    edges = num_bulks = 0
    bar = tqdm(total=len(batches), desc=f"epoch {epoch}", leave=False, disable=not progress)
    for first in range(0, len(batches), sampler.bulk):
        group = batches[first:first + sampler.bulk]
        with timer.phase("sample"):
            # A batch's key depends on its step, not on the bulk: any --bulk draws the same blocks.
            group_blocks = sampler.sample_many(group, [derive_key(cfg.seed, epoch, first + i, 0)
                                                       for i in range(len(group))])
        num_bulks += 1
        for seeds, blocks in zip(group, group_blocks):
            with timer.phase("gather"):
                x = data.gather(blocks[0].src_ids)
                y = data.labels[seeds]
            with timer.phase("forward_backward"):
                logits = model(blocks, x)
                loss = F.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            edges += sum(b.num_edges for b in blocks)
            # Accumulate as tensors: no .item() (a sync point on GPU) inside the loop.
            loss_sum += loss.detach().double() * seeds.numel()
            correct += (logits.detach().argmax(1) == y).sum()
            bar.update(1)
    bar.close()
    n = data.train_idx.numel()
    return float(loss_sum) / n, float(correct) / n, edges, len(batches), num_bulks


@torch.no_grad()
def evaluate(model, sampler: BulkSampler, data: TrainData, node_ids: torch.Tensor, batch_size: int,
             seed: int) -> float:
    """Accuracy on ``node_ids`` with sampled inference; a fixed key makes it repeatable. NaN when empty."""
    if node_ids.numel() == 0:
        return float("nan")
    model.eval()
    correct = 0
    for step, seeds in enumerate(node_ids.split(batch_size)):
        blocks = sampler.sample(seeds, derive_key(seed, EVAL_EPOCH, step, 0))
        logits = model(blocks, data.gather(blocks[0].src_ids))
        correct += int((logits.argmax(1) == data.labels[seeds]).sum())
    return correct / node_ids.numel()


def fit(model, optimizer, train_sampler: BulkSampler, eval_sampler: BulkSampler, data: TrainData,
        cfg: TrainConfig, *, start_epoch: int = 0, on_epoch_end: Callable[[int, EpochMetrics], None] | None = None,
        progress: bool = True) -> list[EpochMetrics]:
    """Train epochs ``start_epoch .. cfg.epochs - 1``; return their metrics."""
    history = []
    for epoch in range(start_epoch, cfg.epochs):
        timer = PhaseTimer()
        with timer.phase("epoch"):
            loss, train_acc, edges, num_batches, num_bulks = train_epoch(model, optimizer, train_sampler, data,
                                                                         cfg, epoch, timer, progress)
        val_acc = test_acc = float("nan")
        if cfg.evaluate:
            val_acc = evaluate(model, eval_sampler, data, data.val_idx, cfg.eval_batch_size, cfg.seed)
            test_acc = evaluate(model, eval_sampler, data, data.test_idx, cfg.eval_batch_size, cfg.seed)
        metrics = EpochMetrics(
            epoch=epoch, sample_s=timer.seconds.get("sample", 0.0), gather_s=timer.seconds.get("gather", 0.0),
            forward_backward_s=timer.seconds.get("forward_backward", 0.0), epoch_s=timer.seconds["epoch"],
            loss=loss, train_acc=train_acc, val_acc=val_acc, test_acc=test_acc, num_batches=num_batches,
            num_bulks=num_bulks, sampled_edges=edges,
        )
        history.append(metrics)
        if on_epoch_end is not None:
            on_epoch_end(epoch, metrics)
    return history
