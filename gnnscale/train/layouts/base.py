"""What every layout shares: the layout protocol and the spec through which the registry
(:mod:`gnnscale.train.layouts.registry`) knows a layout.

A layout says where data lives and who computes what. It samples the seeds a task hands it
(:meth:`Layout.sample`) and fetches their input rows (:meth:`Layout.fetch`), collective where the layout
needs it, and says how the loss is normalised and gradients reduced, so that a distributed step equals the
single-process step it stands for. Both run in the background data-loading stage
(:mod:`gnnscale.train.stages`), on a process group of its own (the *loader* Comm), while the training step
runs on the main group: the two never share a group, so their collectives cannot interleave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.distributed.edge_metrics import EdgeMetrics
from gnnscale.nn import ModelConfig
from gnnscale.partition.directory import LocalPartition
from gnnscale.partition.typed import TypedPartition
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.steps import Batch, Sampled, Step


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
        part: this worker's partition, loaded in the spec's ``view`` (a typed graph's, for a ``typed`` layout).
        cfg: training settings.
        model: the built-in model's config; None for a model of one's own (which the layouts that need a
            config, split and DGS, refuse when their options are checked).
        comm: the training step's Comm: split parallelism's shuffles and the gradients' all-reduce, on NCCL
            where every worker has a GPU of its own (:func:`~gnnscale.distributed.device_policy.step_comm`).
        loader: the loading stage's Comm (sampling and fetching rounds).
        options: the validated distributed options (``options.settings`` never None: the layout's own).
        partition_dir: the partition directory (1.5D reads other parts' rows from it); None in one process.
        policy: where this worker trains, samples and holds feature rows
            (:mod:`gnnscale.distributed.device_policy`): every layout holds its hottest feature rows on the device
            where the policy says (``--gpu-cache-fraction``); one with ``device_sampling`` samples there too.
        seeds_anywhere: the task's seeds may be any nodes, not only this worker's (a link task's pairs).
    """

    part: LocalPartition | TypedPartition
    cfg: TrainConfig
    model: ModelConfig | None
    comm: Comm
    loader: Comm
    options: LayoutOptions
    partition_dir: Path | None
    policy: DevicePolicy
    seeds_anywhere: bool = False


class Layout(Protocol):
    """One worker's share of the training: what the stages (:mod:`gnnscale.train.stages`) and the loop
    (:mod:`gnnscale.train.loop`) call. Data parallelism
    (:class:`~gnnscale.train.layouts.data_parallel.DataParallel`) and split parallelism
    (:class:`~gnnscale.train.layouts.split.SplitParallel`) implement it.

    ``data_comm`` is the Comm whose accounting a batch reads (the loader's, or the process column 1.5D's
    collectives run on); ``bulk`` the steps one :meth:`sample` call draws together; ``gradient_divisor`` what
    the summed gradients are divided by.
    """

    data_comm: Comm

    @property
    def bulk(self) -> int: ...

    @property
    def gradient_divisor(self) -> int: ...

    def loss_total(self, batch: Batch) -> int | None:
        """None: this worker's loss is the mean over its own terms (data parallelism); N: the sum over its terms
        divided by N (split parallelism: its share of the whole mini-batch's mean)."""

    def start_epoch(self) -> None:
        """Start the epoch's layout metrics."""

    def sample(self, steps: list[Step], seeds: list[Tensor], timer: PhaseTimer, *,
               training: bool) -> list[Sampled]:
        """The blocks of every step, ``seeds[i]`` step ``i``'s seed nodes (one call for the group)."""

    def fetch(self, sampled: Sampled, timer: PhaseTimer, *, training: bool) -> tuple[list, Tensor]:
        """``(blocks, x)``: what the model runs on (the sampled blocks, or split parallelism's cooperative
        ones) and the input rows of the first block's sources."""

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
        device_sampling: samples on the training device (``--sample-on device``): a layout whose workers draw
            their batches with a sampler that has a device build, over what they hold (the whole topology, or 1.5D's
            block rows, fetched per hop).
        seeds_anywhere: its samplers take seeds owned by any worker (what a task that samples for node pairs
            needs: :attr:`~gnnscale.train.tasks.base.TaskSpec.needs`).
        typed: trains typed graphs (a typed partition directory, R-GCN, R-SAGE, R-GAT).
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
    device_sampling: bool = False
    seeds_anywhere: bool = False
    typed: bool = False
    check: OptionCheck = no_check
