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

Split parallelism (``split``, :mod:`gnnscale.train.split_layout`) implements the same interface.

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

import math
import resource
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.feature_cache import CachedFeatureStore, global_in_degrees
from gnnscale.distributed.features import PartitionedFeatureStore
from gnnscale.distributed.matrix15d import build_15d
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.distributed.split_metrics import (EdgeMetrics, epoch_edge_metrics, local_edges, minibatch_signature,
                                                union_minibatch_edges)
from gnnscale.nn.cooperative import SplitAwareBlock
from gnnscale.partition.directory import LocalPartition
from gnnscale.sampling import BatchSampler, Block, derive_key
from gnnscale.train.config import TrainConfig
from gnnscale.train.loop import EVAL_EPOCH, epoch_batches
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.run import build_samplers

DATA_PARALLEL_LAYOUTS = ("hybrid", "vanilla", "1d", "1.5d")
MATRIX_LAYOUTS = ("1d", "1.5d")  # the matrix samplers' layouts (Tripathy et al.)
# Data parallelism: iterations per epoch whose union mini-batch is measured (see the module docstring).
UNION_ITERATIONS = 8


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


class DataParallel:
    """Data-parallel training with a sampler and a feature store (the ``hybrid`` and ``vanilla`` layouts).

    Args:
        sampler, eval_sampler: samplers of this worker's seeds (training and inference fanouts);
            collective when the layout samples remotely, so built on the loader Comm.
        store: the feature store (collective fetches, on the loader Comm), with or without a cache.
        part: this worker's partition (labels of its own nodes, its training nodes).
        cfg: training settings (``batch_size`` per worker, ``seed``).
        loader: the loader's Comm, whose accounting is read after each prepared batch.
    """

    def __init__(self, sampler: BatchSampler, eval_sampler: BatchSampler, store: PartitionedFeatureStore,
                 part: LocalPartition, cfg: TrainConfig, loader: Comm, *, data_comm: Comm | None = None,
                 held_bytes: int | None = None) -> None:
        self.sampler, self.eval_sampler, self.store = sampler, eval_sampler, store
        self.part, self.cfg, self.loader = part, cfg, loader
        # Whose accounting a batch reads: the loader's, or (1.5D) the process column its collectives use.
        self.data_comm = data_comm if data_comm is not None else loader
        # Topology and feature bytes this worker holds (matrix layouts: reported per epoch with peak RSS).
        self.held_bytes = held_bytes
        self.rank, self.world_size = loader.rank, loader.world_size
        self.labels = torch.from_numpy(part.labels.copy())
        self.train_idx = torch.from_numpy(part.train_idx.copy())
        self._ledger = EdgeLedger(self.rank, self.world_size)
        self._signatures: list[np.ndarray] = []

    @property
    def bulk(self) -> int:
        return self.sampler.bulk

    def local_batches(self) -> int:
        """Iterations this worker's own training nodes need (workers then agree on the largest)."""
        return max(1, -(-self.train_idx.numel() // self.cfg.batch_size))

    def check_num_batches(self, num_batches: int) -> str:
        """Why this worker cannot run ``num_batches`` iterations per epoch ("" if it can)."""
        local = self.train_idx.numel()
        if local >= num_batches:
            return ""
        return (f"part {self.rank} has {local} training nodes, fewer than the {num_batches} iterations per epoch the "
                "largest part needs; repartition with --method metis (it balances training nodes) or raise --batch-size")

    def plan_epoch(self, epoch: int, num_batches: int) -> list[Step]:
        """This worker's steps: its training nodes in an order fixed by ``(seed, epoch, rank)``. Starts the
        epoch's metrics."""
        self._ledger = EdgeLedger(self.rank, self.world_size)
        self._signatures = []
        if isinstance(self.store, CachedFeatureStore):
            self.store.reset_counts()
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
        comm = self.data_comm.stats.snapshot_and_reset()
        out = []
        for step, blocks in zip(steps, sampled):
            with timer.phase("fetch"):
                x = self.store.gather(blocks[0].src_ids)
            # The union mini-batch assumes node-wise sampling (a node's sampled in-neighbors are the
            # same in every micro-batch); LADIES (weighted blocks) draws per batch, so it has none.
            if training and len(self._signatures) < UNION_ITERATIONS and blocks[0].edge_weight is None:
                with timer.phase("metrics"):
                    self._ledger.record(sum(b.num_edges for b in blocks), local_edges(blocks, self.part.book))
                    self._signatures.append(minibatch_signature(blocks))
            counts = _add_counts(comm, self.data_comm.stats.snapshot_and_reset())
            comm = None
            out.append(DistBatch(step=step, blocks=blocks, x=x, y=self.labels[step.seeds - self.part.node_offset],
                                 sampled_edges=sum(b.num_edges for b in blocks), comm=counts))
        return out

    def loss(self, logits: Tensor, batch: DistBatch) -> Tensor:
        """Mean cross-entropy over this worker's seeds; with averaged gradients, the step is the
        average of the workers' steps (data parallelism)."""
        return F.cross_entropy(logits, batch.y)

    def loss_sum(self, loss: Tensor, batch: DistBatch) -> Tensor:
        """float64: the cross-entropy summed over this worker's seeds, which ``loss`` stands for."""
        return loss.detach().double() * batch.y.numel()

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


def worker_memory(held_bytes: int, comm: Comm) -> dict:
    """The largest topology+feature bytes held and peak resident memory (RSS) over all workers: one
    all-reduce (category ``"eval"``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    t = torch.tensor([held_bytes, peak], dtype=torch.int64)
    comm.all_reduce_(t, torch.distributed.ReduceOp.MAX, "eval")  # collective: the largest worker's figures
    held, rss = t.tolist()
    return {"held_bytes_max": held, "peak_rss_bytes_max": rss}


def build_data_parallel(layout: str, part: LocalPartition, cfg: TrainConfig, loader: Comm, *,
                        cache_fraction: float = 0.0, model_name: str = "sage", partition_dir=None,
                        replication: int = 1) -> DataParallel:
    """The ``hybrid``, ``vanilla``, ``1d`` or ``1.5d`` layout of this worker, its collectives on ``loader``;
    with ``cache_fraction`` > 0 its feature store caches that fraction of all nodes' rows (the hottest remote
    ones, :class:`~gnnscale.distributed.feature_cache.CachedFeatureStore`; collective set-up). The matrix
    layouts (``1d``, ``1.5d --replication C``) sample with ``cfg.sampler`` (matrix or ladies)."""
    if layout not in DATA_PARALLEL_LAYOUTS:
        raise ValueError(f"layout: expected one of {DATA_PARALLEL_LAYOUTS}, got {layout!r}")
    if layout in MATRIX_LAYOUTS:
        return build_matrix_layout(layout, part, cfg, loader, model_name, partition_dir, replication)

    def sampler(fanouts):
        if layout == "hybrid":
            return HybridSampler(part.topology, part.book, loader.rank, fanouts, replace=cfg.replace,
                                 method=cfg.sampler)
        rows = part.topology
        return VanillaSampler(part.book, loader.rank, rows.local_indptr, rows.local_indices, fanouts, loader,
                              replace=cfg.replace)

    store = build_store(layout, part, loader, cache_fraction)
    return DataParallel(sampler(cfg.fanouts), sampler(cfg.inference_fanouts), store, part, cfg, loader)


def build_matrix_layout(layout: str, part: LocalPartition, cfg: TrainConfig, loader: Comm, model_name: str,
                        partition_dir, replication: int) -> DataParallel:
    """``1d``: the whole topology on every worker, its own batches sampled ``bulk`` at a time with no
    communication, features fetched from their owners (as hybrid). ``1.5d``: block rows replicated
    ``replication`` times, rows of ``A`` and features fetched inside the process column
    (:mod:`gnnscale.distributed.matrix15d`). Both give the single-process matrix sampler's blocks."""
    if layout == "1d":
        train, evaluate = build_samplers(part.topology, _model_for_sampler(model_name, cfg), cfg)
        store = PartitionedFeatureStore(part.book, loader.rank, part.features, loader)
        graph = part.topology
        held = graph.indptr.nbytes + graph.indices.nbytes + part.features.nbytes
        return DataParallel(train, evaluate, store, part, cfg, loader, held_bytes=int(held))
    sizes = (cfg.ladies_layer_size,) * cfg.num_layers
    grid = build_15d(partition_dir, part, loader, replication, sampler=cfg.sampler, fanouts=cfg.fanouts,
                     inference_fanouts=cfg.inference_fanouts, bulk=cfg.bulk, replace=cfg.replace,
                     layer_sizes=sizes, self_loops=model_name == "gcn")
    grid.column.stats.snapshot_and_reset()  # set-up rounds are not part of any iteration
    return DataParallel(grid.sampler, grid.eval_sampler, grid.store, part, cfg, loader, data_comm=grid.column,
                        held_bytes=grid.block.nbytes)


def _model_for_sampler(model_name: str, cfg: TrainConfig):
    """What :func:`build_samplers` reads of the model: its name (LADIES' operator) and layer count."""
    return SimpleNamespace(name=model_name, num_layers=cfg.num_layers)


def build_store(layout: str, part: LocalPartition, loader: Comm, cache_fraction: float) -> PartitionedFeatureStore:
    """The feature store of a data-parallel layout; cached when ``cache_fraction`` > 0 (in-degrees from the
    replicated topology, or gathered from the parts' in-edges in the vanilla layout)."""
    if cache_fraction == 0:
        return PartitionedFeatureStore(part.book, loader.rank, part.features, loader)
    if layout == "hybrid":
        degrees = np.diff(part.topology.indptr)
    else:
        degrees = global_in_degrees(np.diff(part.topology.local_indptr), part.book, loader)
    return CachedFeatureStore(part.book, loader.rank, part.features, loader, degrees=degrees, fraction=cache_fraction)


def _add_counts(a: dict | None, b: dict) -> dict:
    """Per-category sum of two :meth:`CommStats.snapshot` dicts (``a`` may be None)."""
    if a is None:
        return b
    return {cat: {k: a[cat][k] + b[cat][k] for k in b[cat]} for cat in b}
