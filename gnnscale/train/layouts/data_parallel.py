"""Data parallelism: the ``hybrid`` and ``vanilla`` layouts (FastSample, section 3.3).

Every worker trains on mini-batches of its own training nodes; the loss is the mean over the worker's
seeds and gradients are averaged over workers. The layouts differ in how a batch is sampled and fetched:

- ``hybrid``: the whole topology on every worker, sampled locally (0 rounds); features fetched
  from their owners (2 rounds).
- ``vanilla``: each worker holds its part's in-edges; every hop after the first asks the owners
  (2 rounds per hop, the requester's key travels with the request); then the 2 feature rounds.

Both train typed graphs too (:func:`build_typed_data_parallel`): the typed kernel over the whole typed graph or
over each part's typed rows (:mod:`gnnscale.distributed.typed_sampling`), every node type's rows fetched in the
same 2 feature rounds (:class:`~gnnscale.features.typed.TypedPartitionedStore`).

The matrix samplers' layouts (:mod:`gnnscale.train.layouts.matrix`) and DGS
(:mod:`gnnscale.train.layouts.dgs`) train through :class:`DataParallel` too.

Edge metrics (GSplit Tables 2 and 5), per epoch, for every layout: edges computed (summed over
workers), edges of the union mini-batch, redundancy, local edges and edge skew. A data-parallel
worker's edges and local edges come from its own micro-batch, but the union mini-batch needs every
worker's micro-batches. They are not gathered during training (that would add traffic and time to
the iterations being compared): for the first ``UNION_ITERATIONS`` iterations of each epoch every
worker keeps a compact ``(layer, destination, sampled in-degree)`` list of its micro-batch (a timed
``metrics`` phase of the loading stage, a few ms per batch), and after the epoch's timed loop
each such iteration's lists go to one worker (round robin), which counts the union's edges
(category ``"eval"``). The data-parallel figures are therefore over those iterations only.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.distributed.typed_sampling import TypedHybridSampler, TypedVanillaSampler
from gnnscale.distributed.edge_metrics import epoch_edge_metrics, local_edges, minibatch_signature, union_minibatch_edges
from gnnscale.features.device_cache import device_store
from gnnscale.features.host_cache import CachedFeatureStore, global_in_degrees
from gnnscale.features.hot_set import check_fraction
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.features.typed import TypedPartitionedStore
from gnnscale.partition.directory import LocalPartition
from gnnscale.partition.typed import TypedPartition
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.sampling import BatchSampler, Block
from gnnscale.sampling.registry import sampler_spec
from gnnscale.sampling.typed import with_relation_fanouts
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import EdgeLedger, LayoutContext, LayoutSpec
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.samplers import build_samplers, sampler_inputs
from gnnscale.train.steps import Batch, Sampled, Step
from gnnscale.settings import setting

# Data parallelism: iterations per epoch whose union mini-batch is measured (see the module docstring).
UNION_ITERATIONS = 8


class DataParallel:
    """Data-parallel training with a sampler and a feature store (the ``hybrid`` and ``vanilla`` layouts).

    Args:
        sampler, eval_sampler: samplers of this worker's seeds (training and inference fanouts);
            collective when the layout samples remotely, so built on the loader Comm.
        store: the feature store (collective fetches, on the loader Comm), with or without a cache.
        part: this worker's partition (its partition book, for the edge metrics).
        loader: the loader's Comm.
        data_comm: whose accounting a batch reads: the loader's (default), or (1.5D) the process column its
            collectives use.
        held_bytes: topology and feature bytes this worker holds (matrix layouts: reported per epoch).
    """

    def __init__(self, sampler: BatchSampler, eval_sampler: BatchSampler, store: PartitionedFeatureStore,
                 part: LocalPartition, loader: Comm, *, data_comm: Comm | None = None,
                 held_bytes: int | None = None) -> None:
        self.sampler, self.eval_sampler, self.store = sampler, eval_sampler, store
        self.part, self.loader = part, loader
        self.data_comm = data_comm if data_comm is not None else loader
        self.held_bytes = held_bytes
        self.rank, self.world_size = loader.rank, loader.world_size
        self._ledger = EdgeLedger(self.rank, self.world_size)
        self._signatures: list[np.ndarray] = []

    @property
    def bulk(self) -> int:
        return self.sampler.bulk

    def start_epoch(self) -> None:
        """Start the epoch's edge metrics and cache counts."""
        self._ledger = EdgeLedger(self.rank, self.world_size)
        self._signatures = []
        if isinstance(self.store, CachedFeatureStore):
            self.store.reset_counts()

    def sample(self, steps: list[Step], seeds: list[Tensor], timer: PhaseTimer, *,
               training: bool = True) -> list[Sampled]:
        """One ``sample_many`` call for the group (a bulk sampler draws the group at once); the seeds are the
        outputs' ids."""
        sampler = self.sampler if training else self.eval_sampler
        with timer.phase("sample"):
            sampled = sampler.sample_many(seeds, [s.key for s in steps])
        if training:
            for blocks in sampled:
                self._record_edges(blocks, timer)
        return [Sampled(step=step, blocks=blocks, out_ids=ids, sampled_edges=sum(b.num_edges for b in blocks))
                for step, ids, blocks in zip(steps, seeds, sampled)]

    def _record_edges(self, blocks: list, timer: PhaseTimer) -> None:
        """The edge metrics of the first iterations' micro-batches as sampled, before a task's exclusion: a link
        batch drops its own target edges, so after it one node's sampled in-degree differs between micro-batches
        and they have no common union. The union mini-batch assumes node-wise sampling (a node's sampled
        in-neighbors are the same in every micro-batch); LADIES (weighted blocks) draws per batch, so it has
        none."""
        if len(self._signatures) < UNION_ITERATIONS and is_plain_nodewise(blocks[0]):
            with timer.phase("metrics"):
                on_host = [b.to("cpu") for b in blocks]  # blocks sampled on a GPU: the first few only
                self._ledger.record(sum(b.num_edges for b in blocks), local_edges(on_host, self.part.book))
                self._signatures.append(minibatch_signature(on_host))

    def fetch(self, sampled: Sampled, timer: PhaseTimer, *, training: bool = True) -> tuple[list, Tensor]:
        """The rows of the first block's sources from the store."""
        blocks = sampled.blocks
        with timer.phase("fetch"):
            x = self.store.gather(blocks[0].src_ids)
        return blocks, x

    def loss_total(self, batch: Batch) -> None:
        """The mean over this worker's terms: with averaged gradients, the step is the average of the
        workers' steps (data parallelism)."""
        return None

    def after_step(self, model: nn.Module, iterations_done: int) -> None:
        """Training thread, after each optimizer step: nothing to do here (DGS hands the model to its
        explainer)."""

    def close(self) -> None:
        """Release what the layout started (nothing here; DGS stops its explainer thread)."""

    def checkpoint_state(self, iterations_done: int) -> dict:
        """What a checkpoint must hold of this layout beyond the model (nothing: its state is the model's)."""
        return {}

    def load_checkpoint_state(self, state: dict, iterations_done: int, timer: PhaseTimer) -> None:
        """Nothing to restore (see :meth:`checkpoint_state`)."""

    def finish_epoch(self, comm: Comm) -> dict:
        """The epoch's layout metrics over all workers: edge metrics of the measured iterations and, with
        a cache, its hit rate. Collective (on ``comm``, category ``"eval"``), after the training loop."""
        for i, signature in enumerate(self._signatures):
            target = i % self.world_size  # this iteration's union is counted there
            send = [torch.from_numpy(signature) if q == target else torch.zeros((0, 3), dtype=torch.int64)
                    for q in range(self.world_size)]
            # Collective: every worker's (layer, destination, degree) list of iteration i to its counter.
            received = comm.all_to_allv(send, "eval")
            if self.rank == target:
                self._ledger.rows[i][2] = union_minibatch_edges([r.cpu().numpy() for r in received])
        out = {"edge_metrics": epoch_edge_metrics(self._ledger.reduce(comm))}
        if self.held_bytes is not None:
            out["memory"] = worker_memory(self.held_bytes, comm)
        if isinstance(self.store, CachedFeatureStore):
            counts = torch.tensor([self.store.hits, self.store.remote_requests], dtype=torch.int64)
            comm.all_reduce_(counts, torch.distributed.ReduceOp.SUM, "eval")  # collective: global hit rate
            hits, requests = counts.tolist()
            out["cache"] = {"fraction": self.store.fraction, "rows_per_worker": self.store.num_cached,
                            "hits": hits, "remote_requests": requests,
                            "hit_rate": hits / requests if requests else 0.0}
        return out

    @property
    def gradient_divisor(self) -> int:
        """Gradients are summed over workers, then divided by this."""
        return self.world_size


def is_plain_nodewise(block) -> bool:
    """Whether the edge metrics' union mini-batch applies: a plain (untyped) block of node-wise sampling."""
    return isinstance(block, Block) and block.edge_weight is None


def worker_memory(held_bytes: int | None, comm: Comm) -> dict:
    """The largest peak resident memory (RSS) over all workers and, when ``held_bytes`` is given (the
    matrix layouts' topology+feature bytes), the largest held: one all-reduce (category ``"eval"``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    t = torch.tensor([held_bytes or 0, peak], dtype=torch.int64)
    comm.all_reduce_(t, torch.distributed.ReduceOp.MAX, "eval")  # collective: the largest worker's figures
    held, rss = t.tolist()
    return {"peak_rss_bytes_max": rss} if held_bytes is None else {"held_bytes_max": held, "peak_rss_bytes_max": rss}


def build_data_parallel(part: LocalPartition, cfg: TrainConfig, loader: Comm, policy: DevicePolicy, *,
                        cache_fraction: float = 0.0, seeds_anywhere: bool = False) -> DataParallel:
    """The ``hybrid`` (the partition loaded in the ``"whole"`` view) or ``vanilla`` (``"own"`` view) layout
    of this worker, its collectives on ``loader``; with ``cache_fraction`` > 0 its feature store caches that
    fraction of all nodes' rows (the hottest remote ones,
    :class:`~gnnscale.features.host_cache.CachedFeatureStore`; collective set-up). The hybrid
    layout samples on the policy's device; both hold feature rows there where ``policy`` says (collective:
    the device cache's set-up gathers through the store, and vanilla's in-degrees come from every part).
    Vanilla samples on the host: its hops after the first are owners' rounds. ``seeds_anywhere``: its
    samplers take seeds owned anywhere (link prediction's pairs)."""
    spec = sampler_spec(cfg.sampler)

    def sampler(fanouts, device=None):
        if part.view == "whole":
            inputs = sampler_inputs(part.topology, fanouts, cfg)
            return HybridSampler(part.topology, part.book, loader.rank, fanouts, sampler=spec.build(inputs, device),
                                 any_seeds=seeds_anywhere)
        rows = part.topology
        return VanillaSampler(part.book, loader.rank, rows.local_indptr, rows.local_indices, fanouts, loader,
                              replace=cfg.replace, any_seeds=seeds_anywhere)

    store = build_store(part, loader, cache_fraction)
    if policy.rows_on_device:  # the same on every worker (the policy is agreed): the set-up is collective
        store = device_store(store, in_degrees(part, loader), policy.gpu_cache_fraction, policy.device,
                             policy.sample_on_device)
    train_device = policy.device if policy.sample_on_device else None
    return DataParallel(sampler(cfg.fanouts, train_device), sampler(cfg.inference_fanouts), store, part, loader)


def build_store(part: LocalPartition, loader: Comm, cache_fraction: float) -> PartitionedFeatureStore:
    """The feature store of a data-parallel layout; cached when ``cache_fraction`` > 0 (in-degrees from the
    replicated topology, or gathered from the parts' in-edges when a worker holds only its own)."""
    if cache_fraction == 0:
        return PartitionedFeatureStore(part.book, loader.rank, part.features, loader)
    return CachedFeatureStore(part.book, loader.rank, part.features, loader, degrees=in_degrees(part, loader),
                              fraction=cache_fraction)


def in_degrees(part: LocalPartition, loader: Comm) -> np.ndarray:
    """int64 [num_nodes]: every node's in-degree, which ranks the rows a cache holds: read off the replicated
    topology (hybrid), or gathered from every worker's part (vanilla: collective, one "setup" round)."""
    if part.view == "whole":
        return np.diff(part.topology.indptr)
    return global_in_degrees(np.diff(part.topology.local_indptr), part.book, loader)


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheOptions:
    """The options of the data-parallel layouts that fetch feature rows (hybrid, vanilla).

    Args:
        cache_fraction: share of all nodes whose feature rows each worker caches, the highest in-degree
            remote ones (0: no cache).
    """

    cache_fraction: float = setting(0.0, "each worker caches the features of the highest in-degree remote nodes, "
                                          "this fraction of all nodes (0: no cache)")

    def __post_init__(self) -> None:
        check_fraction(self.cache_fraction, "cache_fraction")


def build_typed_data_parallel(part: TypedPartition, cfg: TrainConfig, loader: Comm) -> DataParallel:
    """The ``hybrid`` (the whole typed topology: the sampler a run in one process has, for the seeds this worker
    owns) or ``vanilla`` (the part's typed rows, later hops asked of their owners) layout of a typed partition,
    every type's rows fetched in the same 2 rounds (:class:`~gnnscale.features.typed.TypedPartitionedStore`);
    sampled and fetched on the host. Inference draws without replacement, as in one process."""
    if part.view == "whole":
        train, evaluate = build_samplers(part.topology, None, cfg)
        samplers = [TypedHybridSampler(s, part.book, loader.rank) for s in (train, evaluate)]
    else:
        samplers = [TypedVanillaSampler(part.topology, with_relation_fanouts(part.topology.schema, fanouts, own), loader,
                                        replace=replace)
                    for fanouts, own, replace in ((cfg.fanouts, cfg.relation_fanout_table, cfg.replace),
                                                  (cfg.inference_fanouts, cfg.inference_relation_fanouts, False))]
    return DataParallel(*samplers, TypedPartitionedStore(part.schema, part.book, part.features, loader), part, loader)


def _build(ctx: LayoutContext) -> DataParallel:
    if isinstance(ctx.part, TypedPartition):
        return build_typed_data_parallel(ctx.part, ctx.cfg, ctx.loader)
    return build_data_parallel(ctx.part, ctx.cfg, ctx.loader, ctx.policy,
                               cache_fraction=ctx.options.settings.cache_fraction, seeds_anywhere=ctx.seeds_anywhere)


HYBRID = LayoutSpec(
    name="hybrid", summary="topology replicated, features partitioned: 2 rounds per iteration", view="whole",
    samplers=("fused", "two_step"), per_worker_batches=True, options=CacheOptions, dgs=True, layerwise_inference=True,
    repartitionable=True, device_sampling=True, seeds_anywhere=True, typed=True, build=_build)
VANILLA = LayoutSpec(
    name="vanilla", summary="topology and features partitioned: 2L rounds per iteration", view="own",
    samplers=("fused",), per_worker_batches=True, options=CacheOptions, dgs=True, layerwise_inference=True,
    seeds_anywhere=True, typed=True, build=_build)
