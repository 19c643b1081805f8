"""What each worker samples, fetches and computes per iteration: the distributed layouts.

A layout turns an epoch into this worker's steps (:meth:`plan_epoch`), prepares each step's batch
(:meth:`prepare`: sampling and the feature fetch, collective where the layout needs it), and says
how the loss is normalised and gradients reduced, so that a distributed step equals the
single-process step it stands for. ``prepare`` runs in the background data-loading stage, on a
process group of its own (the *loader* Comm), while the training step runs on the main group: the
two never share a group, so their collectives cannot interleave.

Data parallelism (this module): every worker trains on mini-batches of its own training nodes;
the loss is the mean over the worker's seeds and gradients are averaged over workers. The layouts
differ in how a batch is sampled and fetched (FastSample, section 3.3):

- ``hybrid``: the whole topology on every worker, sampled locally (0 rounds); features fetched
  from their owners (2 rounds).
- ``vanilla``: each worker holds its part's in-edges; every hop after the first asks the owners
  (2 rounds per hop, the requester's key travels with the request); then the 2 feature rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.features import PartitionedFeatureStore
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.partition.directory import LocalPartition
from gnnscale.sampling import BatchSampler, Block, derive_key
from gnnscale.train.config import TrainConfig
from gnnscale.train.loop import EVAL_EPOCH, epoch_batches
from gnnscale.train.metrics import PhaseTimer

DATA_PARALLEL_LAYOUTS = ("hybrid", "vanilla")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One iteration's input on this worker.

    Args:
        seeds: int64 [b], the seed nodes this worker samples for.
        key: the sampling key of the batch (:func:`gnnscale.sampling.derive_key`).
        real: False for a stand-in step of a worker that has run out of nodes but must still take
            part in the collectives (evaluation); its result is ignored.
    """

    seeds: Tensor
    key: int
    real: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class DistBatch:
    """One prepared iteration on this worker.

    Args:
        step: what was prepared.
        blocks: the blocks the model runs on, in model order.
        x: float32 [blocks[0].num_src, feature_dim], input features of the first block's sources.
        y: int64 [b], labels of the seeds whose loss this worker computes.
        sampled_edges: edges of this worker's blocks.
        comm: this batch's communication in the loader's process group, ``{category: {"rounds",
            "calls", "bytes_sent", "bytes_received"}}`` (see :class:`gnnscale.distributed.CommStats`).
    """

    step: Step
    blocks: list[Block]
    x: Tensor
    y: Tensor
    sampled_edges: int
    comm: dict[str, dict[str, int]]


class DataParallel:
    """Data-parallel training with a sampler and a feature store (the ``hybrid`` and ``vanilla`` layouts).

    Args:
        sampler, eval_sampler: samplers of this worker's seeds (training and inference fanouts);
            collective when the layout samples remotely, so built on the loader Comm.
        store: the feature store (collective fetches, on the loader Comm).
        part: this worker's partition (labels of its own nodes, its training nodes).
        cfg: training settings (``batch_size`` per worker, ``seed``).
        loader: the loader's Comm, whose accounting is read after each prepared batch.
    """

    def __init__(self, sampler: BatchSampler, eval_sampler: BatchSampler, store: PartitionedFeatureStore,
                 part: LocalPartition, cfg: TrainConfig, loader: Comm) -> None:
        self.sampler, self.eval_sampler, self.store = sampler, eval_sampler, store
        self.part, self.cfg, self.loader = part, cfg, loader
        self.rank, self.world_size = loader.rank, loader.world_size
        self.labels = torch.from_numpy(part.labels.copy())
        self.train_idx = torch.from_numpy(part.train_idx.copy())

    @property
    def bulk(self) -> int:
        return self.sampler.bulk

    def local_batches(self) -> int:
        """Iterations this worker's own training nodes need (workers then agree on the largest)."""
        return max(1, -(-self.train_idx.numel() // self.cfg.batch_size))

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]:
        """This worker's steps: its training nodes in an order fixed by ``(seed, epoch, rank)``."""
        batches = epoch_batches(self.train_idx, num_batches, self.cfg.seed, epoch, self.rank)
        return [Step(seeds=seeds, key=derive_key(self.cfg.seed, epoch, step, self.rank))
                for step, seeds in enumerate(batches)]

    def plan_eval(self, node_ids: np.ndarray, batch_size: int, num_steps: int) -> list[Step]:
        """``num_steps`` inference steps over this worker's ``node_ids`` (the same count on every
        worker: sampling and fetching are collective); a worker out of nodes samples a stand-in."""
        chunks = list(torch.from_numpy(node_ids.copy()).split(batch_size))
        stand_in = torch.tensor([self.part.node_offset])
        return [Step(seeds=chunks[i] if i < len(chunks) else stand_in,
                     key=derive_key(self.cfg.seed, EVAL_EPOCH, i, self.rank), real=i < len(chunks))
                for i in range(num_steps)]

    def eval_steps_needed(self, node_ids: np.ndarray, batch_size: int) -> int:
        return math.ceil(node_ids.shape[0] / batch_size)

    def prepare(self, steps: list[Step], timer: PhaseTimer, *, training: bool = True) -> list[DistBatch]:
        """Sample (one ``sample_many`` call for the group) and fetch the features of ``steps``."""
        sampler = self.sampler if training else self.eval_sampler
        with timer.phase("sample"):
            sampled = sampler.sample_many([s.seeds for s in steps], [s.key for s in steps])
        # A bulk's sampling rounds are counted with the first batch of the group.
        comm = self.loader.stats.snapshot_and_reset()
        out = []
        for step, blocks in zip(steps, sampled):
            with timer.phase("fetch"):
                x = self.store.gather(blocks[0].src_ids)
            counts = _add_counts(comm, self.loader.stats.snapshot_and_reset())
            comm = None
            out.append(DistBatch(step=step, blocks=blocks, x=x, y=self.labels[step.seeds - self.part.node_offset],
                                 sampled_edges=sum(b.num_edges for b in blocks), comm=counts))
        return out

    def loss(self, logits: Tensor, batch: DistBatch) -> Tensor:
        """Mean cross-entropy over this worker's seeds; with averaged gradients, the step is the
        average of the workers' steps (data parallelism)."""
        return F.cross_entropy(logits, batch.y)

    @property
    def gradient_divisor(self) -> int:
        """Gradients are summed over workers, then divided by this."""
        return self.world_size


def build_data_parallel(layout: str, part: LocalPartition, cfg: TrainConfig, loader: Comm) -> DataParallel:
    """The ``hybrid`` or ``vanilla`` layout of this worker, its collectives on ``loader``."""
    if layout not in DATA_PARALLEL_LAYOUTS:
        raise ValueError(f"layout: expected one of {DATA_PARALLEL_LAYOUTS}, got {layout!r}")

    def sampler(fanouts):
        if layout == "hybrid":
            return HybridSampler(part.topology, part.book, loader.rank, fanouts, replace=cfg.replace,
                                 method=cfg.sampler)
        rows = part.topology
        return VanillaSampler(part.book, loader.rank, rows.local_indptr, rows.local_indices, fanouts, loader,
                              replace=cfg.replace)

    store = PartitionedFeatureStore(part.book, loader.rank, part.features, loader)
    return DataParallel(sampler(cfg.fanouts), sampler(cfg.inference_fanouts), store, part, cfg, loader)


def _add_counts(a: dict | None, b: dict) -> dict:
    """Per-category sum of two :meth:`CommStats.snapshot` dicts (``a`` may be None)."""
    if a is None:
        return b
    return {cat: {k: a[cat][k] + b[cat][k] for k in b[cat]} for cat in b}
