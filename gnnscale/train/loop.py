"""The training loop: sample, gather features, forward+backward, step; evaluate every epoch.

Sampling and gathering run in a bounded background stage (:func:`batch_stream`) while the current
batch trains, so an epoch costs about max(sample + gather, forward+backward) instead of their sum.

It receives built objects (model, optimizer, samplers, data) and reads top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from gnnscale.sampling import BatchSampler, Block, derive_key
from gnnscale.sampling.keys import STREAM_DROPOUT, STREAM_ORDER
from gnnscale.train.config import TrainConfig
from gnnscale.train.metrics import EpochMetrics, PhaseTimer
from gnnscale.train.prefetch import stream_in_groups

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One prepared mini-batch: everything the training (or inference) step reads.

    Args:
        seeds: int64 [b], the batch's seed nodes.
        blocks: the sampled blocks in model order (input layer first).
        x: float32 [blocks[0].num_src, feature_dim], input features of the first block's sources.
        y: int64 [b], labels of the seeds.
    """

    seeds: torch.Tensor
    blocks: list[Block]
    x: torch.Tensor
    y: torch.Tensor


def batch_stream(sampler, data: TrainData, batches: list[torch.Tensor], keys: list[int], *, prefetch: int,
                 timer: PhaseTimer) -> Iterator[Batch]:
    """Sample and gather ``batches`` (seeds, with their keys) in order, ``prefetch`` groups ahead.

    A sampler draws ``sampler.bulk`` consecutive batches in one ``sample_many`` call (1 for neighbor
    sampling); with ``prefetch >= 1`` whole groups are prepared by a background thread while the
    caller trains (:class:`Prefetcher`). Sampling is keyed by ``keys`` and gathering is a lookup, so
    the batches are the same with or without the background stage. ``timer`` receives ``sample`` and
    ``gather`` (busy time of the stage, overlapped or not) and ``wait`` (time the caller waited).
    """
    loader = PhaseTimer()  # written by the stage's thread only; merged when the stream ends

    def produce(items: range) -> list[Batch]:
        seeds = batches[items.start:items.stop]
        with loader.phase("sample"):
            sampled = sampler.sample_many(seeds, keys[items.start:items.stop])
        with loader.phase("gather"):
            return [Batch(seeds=s, blocks=blocks, x=data.gather(blocks[0].src_ids), y=data.labels[s])
                    for s, blocks in zip(seeds, sampled)]

    yield from stream_in_groups(produce, len(batches), sampler.bulk, prefetch,
                                wait_seconds=lambda s: timer.add("wait", s))
    timer.merge(loader)


def train_epoch(model, optimizer, sampler: BatchSampler, data: TrainData, cfg: TrainConfig, epoch: int,
                timer: PhaseTimer, progress: bool) -> tuple[float, float, int, int, list[float]]:
    """One pass over the training nodes. Returns (mean loss, train accuracy, sampled edges, sampler
    calls: groups of ``sampler.bulk`` batches, every iteration's mean loss)."""
    model.train()
    batches = epoch_batches(data.train_idx, num_batches_for(data.train_idx.numel(), cfg.batch_size), cfg.seed, epoch)
    keys = [derive_key(cfg.seed, epoch, step, 0) for step in range(len(batches))]
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.long)
    edges, losses = 0, []
    stream = batch_stream(sampler, data, batches, keys, prefetch=cfg.prefetch, timer=timer)
    for step, batch in enumerate(tqdm(stream, total=len(batches), desc=f"epoch {epoch}", leave=False,
                                      disable=not progress)):
        with timer.phase("forward_backward"):
            seed_dropout(cfg.seed, epoch, step, 0)
            logits = model(batch.blocks, batch.x)
            loss = F.cross_entropy(logits, batch.y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        edges += sum(b.num_edges for b in batch.blocks)
        # Accumulate as tensors: no .item() (a sync point on GPU) inside the loop.
        loss_sum += loss.detach().double() * batch.seeds.numel()
        correct += (logits.detach().argmax(1) == batch.y).sum()
        losses.append(loss.detach())
    n = data.train_idx.numel()
    return float(loss_sum) / n, float(correct) / n, edges, -(-len(losses) // sampler.bulk), torch.stack(losses).tolist()


def seed_dropout(seed: int, epoch: int, step: int, rank: int) -> None:
    """Seed torch's global RNG (dropout draws from it) for one iteration: every iteration's masks are a
    function of ``(seed, epoch, step, rank)``, so a run resumed at any iteration continues exactly (a
    seed per epoch would need the RNG state of the iteration the run stopped at)."""
    torch.manual_seed(derive_key(seed, epoch, step, rank, STREAM_DROPOUT))


@torch.no_grad()
def evaluate(model, sampler: BatchSampler, data: TrainData, node_ids: torch.Tensor, batch_size: int,
             seed: int, prefetch: int = 1) -> float:
    """Accuracy on ``node_ids`` with sampled inference; a fixed key makes it repeatable. NaN when empty."""
    if node_ids.numel() == 0:
        return float("nan")
    model.eval()
    batches = list(node_ids.split(batch_size))
    keys = [derive_key(seed, EVAL_EPOCH, step, 0) for step in range(len(batches))]
    correct = 0
    for batch in batch_stream(sampler, data, batches, keys, prefetch=prefetch, timer=PhaseTimer()):
        correct += int((model(batch.blocks, batch.x).argmax(1) == batch.y).sum())
    return correct / node_ids.numel()


def fit(model, optimizer, train_sampler: BatchSampler, eval_sampler: BatchSampler, data: TrainData,
        cfg: TrainConfig, *, start_epoch: int = 0, on_epoch_end: Callable[[int, EpochMetrics], None] | None = None,
        progress: bool = True) -> list[EpochMetrics]:
    """Train epochs ``start_epoch .. cfg.epochs - 1``; return their metrics."""
    history = []
    for epoch in range(start_epoch, cfg.epochs):
        timer = PhaseTimer()
        with timer.phase("epoch"):
            loss, train_acc, edges, num_bulks, losses = train_epoch(model, optimizer, train_sampler, data, cfg, epoch,
                                                                    timer, progress)
        val_acc = test_acc = float("nan")
        if cfg.evaluate:
            val_acc = evaluate(model, eval_sampler, data, data.val_idx, cfg.eval_batch_size, cfg.seed, cfg.prefetch)
            test_acc = evaluate(model, eval_sampler, data, data.test_idx, cfg.eval_batch_size, cfg.seed, cfg.prefetch)
        metrics = EpochMetrics(
            epoch=epoch, sample_s=timer.seconds.get("sample", 0.0), gather_s=timer.seconds.get("gather", 0.0),
            forward_backward_s=timer.seconds.get("forward_backward", 0.0), wait_s=timer.seconds.get("wait", 0.0),
            epoch_s=timer.seconds["epoch"],
            loss=loss, train_acc=train_acc, val_acc=val_acc, test_acc=test_acc, num_batches=len(losses),
            num_bulks=num_bulks, sampled_edges=edges, iteration_losses=losses,
        )
        history.append(metrics)
        if on_epoch_end is not None:
            on_epoch_end(epoch, metrics)
    return history
