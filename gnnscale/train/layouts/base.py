"""What every distributed layout shares: the values between the loop and a layout, the layout
protocol, and the spec through which the registry (:mod:`gnnscale.train.layouts.registry`) knows a
layout.

A layout turns an epoch into this worker's steps (:meth:`Layout.plan_epoch`), prepares each step's
batch (:meth:`Layout.prepare`: sampling and the feature fetch, collective where the layout needs it),
and says how the loss is normalised and gradients reduced, so that a distributed step equals the
single-process step it stands for. ``prepare`` runs in the background data-loading stage, on a process
group of its own (the *loader* Comm), while the training step runs on the main group: the two never
share a group, so their collectives cannot interleave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.edge_metrics import EdgeMetrics
from gnnscale.nn import ModelConfig
from gnnscale.nn.cooperative import SplitAwareBlock
from gnnscale.partition.directory import LocalPartition
from gnnscale.sampling import Block
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.metrics import PhaseTimer



@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One iteration's input on this worker.

    Args:
        seeds: int64 [b], the seed nodes this worker samples for.
        key: the sampling key of the batch (:func:`gnnscale.sampling.derive_key`).
        real: False for a stand-in step of a worker that has run out of nodes but must still take
            part in the collectives (evaluation); its result is ignored.
        iteration: the training iteration counted over the whole run (set by layouts that follow a
            schedule over iterations, such as DGS's mask refreshes; 0 otherwise).
    """

    seeds: Tensor
    key: int
    real: bool = True
    iteration: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DistBatch:
    """One prepared iteration on this worker.

    Args:
        step: what was prepared.
        blocks: what the model runs on, in model order: the sampled blocks (data parallelism), or this
            worker's cooperative splits of the mini-batch (split parallelism).
        x: float32 [blocks[0].num_src, feature_dim], input features of the first block's sources.
        y: int64 [b], labels of the seeds whose loss this worker computes (logits' rows, in order).
        sampled_edges: edges of this worker's blocks.
        comm: this batch's communication in the loader's process group, ``{category: {"rounds",
            "calls", "bytes_sent", "bytes_received", "seconds"}}`` (see :class:`gnnscale.distributed.CommStats`).
    """

    step: Step
    blocks: list[Block] | list[SplitAwareBlock]
    x: Tensor
    y: Tensor
    sampled_edges: int
    comm: dict[str, dict[str, float]]


class EdgeLedger:
    """This worker's edge counts, one row per measured iteration of an epoch, summed over workers once at
    its end. Every worker must record the same number of rows."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.rows: list[list[int]] = []

    def record(self, computed: int, local: int, minibatch: int = 0) -> None:
        """Edges this worker computed, how many of them are local, and (from one worker only) the
        iteration's mini-batch edges."""
        self.rows.append([computed, local, minibatch])

    def reduce(self, comm: Comm) -> list[EdgeMetrics]:
        """Every measured iteration's metrics over all workers: one all-reduce (category ``"eval"``)."""
        p = self.world_size
        table = torch.zeros((len(self.rows), p + 2), dtype=torch.int64)
        for i, (computed, local, minibatch) in enumerate(self.rows):
            table[i, self.rank], table[i, p], table[i, p + 1] = computed, local, minibatch
        comm.all_reduce_(table, torch.distributed.ReduceOp.SUM, "eval")  # collective: every worker's counts
        return [EdgeMetrics(edges_per_worker=tuple(row[:p]), local_edges=row[p], minibatch_edges=row[p + 1])
                for row in table.tolist()]




def add_counts(a: dict | None, b: dict) -> dict:
    """Per-category sum of two :meth:`CommStats.snapshot` dicts (``a`` may be None)."""
    if a is None:
        return b
    return {cat: {k: a[cat][k] + b[cat][k] for k in b[cat]} for cat in b}


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOptions:
    """The options of a layout that has none of its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutOptions:
    """The distributed options of a run, validated once against the layout's spec
    (:func:`gnnscale.train.layouts.registry.check_layout_options`).

    Args:
        layout: the registered layout's name (``--layout``).
        settings: the layout's own options, an instance of its spec's ``options`` class (split:
            :class:`~gnnscale.train.layouts.split.SplitOptions`; hybrid and vanilla:
            :class:`~gnnscale.train.layouts.data_parallel.CacheOptions`; 1.5d:
            :class:`~gnnscale.train.layouts.matrix.ReplicationOptions`); None: that class's defaults.
            :func:`~gnnscale.train.layouts.registry.layout_options` builds both from keywords.
        dgs: explanation-guided sampling on top of the layout (``--dgs``), or None.
    """

    layout: str = "hybrid"
    settings: object | None = None
    dgs: DGSConfig | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutContext:
    """What a layout is built from on one worker.

    Args:
        part: this worker's partition, loaded in the spec's ``view``.
        cfg: training settings.
        model: the built-in model's config; None for a model of one's own (which the layouts that need a
            config, split and DGS, refuse when their options are checked).
        comm: the training step's Comm (split parallelism's shuffles, gradients).
        loader: the loading stage's Comm (sampling and fetching rounds).
        options: the validated distributed options (``options.settings`` never None: the layout's own).
        partition_dir: the partition directory (1.5D reads other parts' rows from it); None in one process.
        device: where this worker trains (``cfg.device`` resolved): a layout with ``device_data`` samples
            and keeps feature rows there when ``cfg`` asks.
    """

    part: LocalPartition
    cfg: TrainConfig
    model: ModelConfig | None
    comm: Comm
    loader: Comm
    options: LayoutOptions
    partition_dir: Path | None
    device: torch.device = torch.device("cpu")


class Layout(Protocol):
    """One worker's share of the distributed training: what the loop in
    :mod:`gnnscale.train.distributed` calls. Data parallelism
    (:class:`~gnnscale.train.layouts.data_parallel.DataParallel`) and split parallelism
    (:class:`~gnnscale.train.layouts.split.SplitParallel`) implement it."""

    @property
    def bulk(self) -> int: ...

    @property
    def gradient_divisor(self) -> int: ...

    def local_batches(self) -> int: ...

    def check_num_batches(self, num_batches: int) -> str: ...

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]: ...

    def plan_eval(self, node_ids: np.ndarray, batch_size: int, num_steps: int) -> list[Step]: ...

    def eval_steps_needed(self, node_ids: np.ndarray, batch_size: int) -> int: ...

    def prepare(self, steps: list[Step], timer: PhaseTimer, *, training: bool = True) -> list[DistBatch]: ...

    def loss(self, logits: Tensor, batch: DistBatch) -> Tensor: ...

    def loss_sum(self, loss: Tensor, batch: DistBatch) -> Tensor: ...

    def after_step(self, model: nn.Module, iterations_done: int) -> None: ...

    def finish_epoch(self, comm: Comm) -> dict: ...

    def checkpoint_state(self, iterations_done: int) -> dict: ...

    def load_checkpoint_state(self, state: dict, iterations_done: int, timer: PhaseTimer) -> None: ...

    def close(self) -> None: ...


# What a spec's check receives: the options, the training settings, the model name and the launch's
# worker count (None while only the flags are known). It raises ValueError naming the flag.
OptionCheck = Callable[[LayoutOptions, TrainConfig, str, "int | None"], None]


def no_check(options: LayoutOptions, cfg: TrainConfig, model_name: str, world_size: int | None) -> None:
    """A layout with no rules beyond its spec's fields."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutSpec:
    """A layout as the registry, the option checks, partition loading and checkpoints know it.

    Args:
        name: ``--layout`` value.
        summary: one line for ``--help``.
        view: which topology a worker loads from the partition directory: ``"whole"`` (the replicated
            graph) or ``"own"`` (its part's in-edges) (:func:`gnnscale.partition.load_partition`).
        samplers: the ``--sampler`` values it trains with (:mod:`gnnscale.sampling.registry`).
        options: the dataclass of its own options, whose flagged fields are its flags
            (:mod:`gnnscale.settings`; :class:`NoOptions` where it has none).
        per_worker_batches: ``--batch-size`` is each worker's micro-batch (data parallelism), not a
            worker's share of one mini-batch.
        dgs: takes ``--dgs``.
        layerwise_inference: a worker can run layer-wise inference over its partition view
            (``--eval full``, ``gnnscale predict --partitions``).
        repartitionable: a checkpoint may resume on another partition (worker count) at an epoch boundary.
        device_data: samples on the training device (``--sample-on device``) and holds feature rows there
            (``--gpu-cache-fraction``): a layout whose workers hold the whole topology and gather through a
            feature store.
        check: the layout's own option rules beyond its options' own validation (which needs the model
            or the worker count).
        build: this worker's layout (collective on the context's Comms).
    """

    name: str
    summary: str
    view: str
    samplers: tuple[str, ...]
    per_worker_batches: bool
    build: Callable[[LayoutContext], Layout]
    options: type = NoOptions
    dgs: bool = False
    layerwise_inference: bool = False
    repartitionable: bool = False
    device_data: bool = False
    check: OptionCheck = no_check
