"""DGS in the distributed trainer (``--dgs``): the data-parallel layouts with explanation-guided node
and feature sampling (Wan et al.; docs/dgs.md has the design and the schedule).

The schedule is deterministic (:class:`~gnnscale.train.layouts.dgs_config.DGSSchedule`, docs/dgs.md
"The schedule"): with ``W = --dgs-warmup``, ``T = --dgs-period`` and ``D = --dgs-lag``, after the
optimizer step that completes ``s = W + k T`` iterations the training thread hands a copy of the model
to the worker's :class:`~gnnscale.distributed.dgs.explainer.OnlineExplainer` (a background thread) and
goes on; the loading stage, before it prepares iteration ``s + D``, takes that model's masks (normally
finished by then: waiting is the exception and is timed) and samples with them until the next refresh.
So the first ``W + D`` iterations sample plainly, the masks in use are ``D`` to ``D + T - 1``
iterations old, and a run is reproducible (the same key and masks give the same blocks on every
worker, in both layouts).

Every refresh ends with one agreement round on the loader group: an explanation that failed, or masks
that belong to another explanation graph, stop every worker with that worker's message instead of
letting one worker sample with garbage (or wait forever for the others).

Evaluation keeps the plain samplers and whole feature rows, so accuracy is measured on the same
inputs in every run.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.dgs.sampling import DGSHybridSampler, DGSVanillaSampler
from gnnscale.distributed.dgs.explainer import Masks, OnlineExplainer, check_masks
from gnnscale.distributed.dgs.explanation import build_cluster_map, build_explanation_graph, default_probes
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.distributed.edge_metrics import local_edges, minibatch_signature
from gnnscale.features.dgs import FeatureSampledStore
from gnnscale.nn import build_model
from gnnscale.partition.directory import LocalPartition
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import LayoutContext
from gnnscale.train.layouts.data_parallel import UNION_ITERATIONS, DataParallel
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.steps import Sampled, Step

class EpochTally:
    """This worker's DGS counts over an epoch's training iterations."""

    def __init__(self) -> None:
        self.feature_bytes = 0.0
        self.remote_nodes = 0
        self.dims: list[int] = []
        self.staleness: list[int] = []
        self.wait_s = 0.0
        self.refreshes = 0


class DGSDataParallel(DataParallel):
    """The ``hybrid``/``vanilla`` layout with DGS (see the module docstring). Built by :func:`build_dgs`.

    Args:
        sampler: a DGS sampler (plain until refreshed) or, in feature-only mode, a plain one.
        eval_sampler, store, part, loader: as :class:`DataParallel`; ``store`` is a
            :class:`FeatureSampledStore`.
        explainer: this worker's online explainer (closed by :meth:`close`).
        dgs: the DGS settings.
    """

    def __init__(self, sampler, eval_sampler, store: FeatureSampledStore, part: LocalPartition, loader: Comm,
                 explainer: OnlineExplainer, dgs: DGSConfig) -> None:
        super().__init__(sampler, eval_sampler, store, part, loader)
        self.explainer, self.dgs = explainer, dgs
        self.schedule = dgs.schedule
        self.masks: Masks | None = None  # the masks sampling uses now (None: plain)
        self.dims: np.ndarray | None = None  # the dimensions remote rows travel on (None: all)
        self._submitted = -1
        self._submit_cond = threading.Condition()
        # The last two submitted model snapshots, by iteration: what a checkpoint needs (checkpoint_state).
        self._snapshots: dict[int, dict] = {}
        self._tally = EpochTally()
        self._busy = (0.0, 0.0)

    @property
    def bulk(self) -> int:
        return 1  # masks change between iterations: one batch per group

    def start_epoch(self) -> None:
        super().start_epoch()
        self._tally = EpochTally()

    def after_step(self, model: nn.Module, iterations_done: int) -> None:
        """Training thread, after the optimizer step that completes ``iterations_done`` iterations:
        when the schedule explains that model, hand a copy of it to the explainer (non-blocking). The copy
        is on the CPU, where the explainer runs (as in the paper: train on the GPU, explain on the CPU); from
        a GPU it is a host sync, once per refresh."""
        if self.schedule.explains(iterations_done):
            self._submit({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
                         iterations_done)

    def close(self) -> None:
        self.explainer.close()

    def needed_snapshots(self, iterations_done: int) -> list[int]:
        """The snapshots whose masks a run continuing after ``iterations_done`` iterations samples with:
        those in use and those submitted but not yet used (:meth:`DGSSchedule.needed`). Explanations are
        deterministic, so these model states give back the masks exactly."""
        return self.schedule.needed(iterations_done)

    def checkpoint_state(self, iterations_done: int) -> dict:
        """The model snapshots a resumed run needs (the same on every worker): see :meth:`needed_snapshots`."""
        return {"snapshots": {s: self._snapshots[s] for s in self.needed_snapshots(iterations_done)}}

    def load_checkpoint_state(self, state: dict, iterations_done: int, timer: PhaseTimer) -> None:
        """Give the explainer the checkpoint's snapshots again and, unless the next batch refreshes anyway,
        sample with the masks of the last refresh from the first batch on. Collective on the loader group,
        like a refresh."""
        snapshots = state.get("snapshots", {})
        missing = [s for s in self.needed_snapshots(iterations_done) if s not in snapshots]
        if missing:
            raise ValueError(f"checkpoint: holds no DGS snapshot of iteration {missing[0]} (written without --dgs, "
                             "with another --dgs-period, --dgs-warmup, --dgs-lag or another worker count); resume with the settings and "
                             "workers that wrote it")
        for s in sorted(snapshots):
            self._submit(snapshots[s], s)
        in_use = self.schedule.in_use(iterations_done)
        if in_use is not None and self.schedule.refresh_at(iterations_done) is None:
            self._refresh(in_use, timer)

    def _submit(self, state: dict, iteration: int) -> None:
        """Hand the model after ``iteration`` iterations to the explainer, keep it for a checkpoint (the
        last two), and tell the loading stage it is there."""
        kept = {s: v for s, v in self._snapshots.items() if s > iteration - 2 * self.dgs.period}
        self._snapshots = {**kept, iteration: state}
        self.explainer.submit(state, iteration)
        with self._submit_cond:
            self._submitted = iteration
            self._submit_cond.notify_all()

    def sample(self, steps: list[Step], seeds: list[Tensor], timer: PhaseTimer, *,
               training: bool = True) -> list[Sampled]:
        """Refresh the masks when the schedule says so (training only) and sample with them (one step at a
        time: ``bulk`` is 1); evaluation samples plainly."""
        if not training:
            return super().sample(steps, seeds, timer, training=False)
        out = []
        for step, step_seeds in zip(steps, seeds):
            source = self.schedule.refresh_at(step.iteration)
            if source is not None:
                self._refresh(source, timer)
            with timer.phase("sample"):
                blocks = self.sampler.sample(step_seeds, step.key)
            out.append(Sampled(step=step, blocks=blocks, out_ids=step_seeds,
                               sampled_edges=sum(b.num_edges for b in blocks)))
        return out

    def fetch(self, sampled: Sampled, timer: PhaseTimer, *, training: bool = True) -> tuple[list, Tensor]:
        """The remote rows on the kept dimensions (training); evaluation fetches whole rows."""
        if not training:
            return super().fetch(sampled, timer, training=False)
        blocks = sampled.blocks
        before = self.loader.stats.snapshot()["feature"]
        with timer.phase("fetch"):
            x = self.store.gather(blocks[0].src_ids, self.dims)
        after = self.loader.stats.snapshot()["feature"]
        if len(self._signatures) < UNION_ITERATIONS:
            with timer.phase("metrics"):
                self._ledger.record(sum(b.num_edges for b in blocks), local_edges(blocks, self.part.book))
                self._signatures.append(minibatch_signature(blocks))
        moved = after["bytes_sent"] + after["bytes_received"] - before["bytes_sent"] - before["bytes_received"]
        self._count(blocks, moved, sampled.step.iteration)
        return blocks, x

    def _refresh(self, iteration: int, timer: PhaseTimer) -> None:
        """Take the masks of the model after ``iteration`` iterations and sample with them. Collective on
        the loader group (one agreement round; vanilla node sampling: one more "sample" round)."""
        start = time.perf_counter()
        masks, error = None, ""
        try:
            masks = self._wait_for(iteration)
            check_masks(masks, self.store.clusters.graph_fingerprint(self.rank), self.rank,
                        self.store.clusters.num_clusters, self.store.feature_dim)
        except Exception as err:  # ExplanationError, TimeoutError, masks of another graph: every worker stops
            masks, error = None, f"DGS explanation on rank {self.rank}: {type(err).__name__}: {err}"
        self._tally.wait_s += time.perf_counter() - start
        # Collective: every worker learns whether every explanation arrived (and stops together if not).
        self.loader.agree(masks is not None, error, "sample")
        with timer.phase("sample"):
            if self.dgs.node_sampling:
                self.sampler.refresh(masks)  # vanilla: collective
        if self.dgs.feature_sampling:
            self.dims = masks.top_dims(self.dgs.feature_rate)
        self.masks = masks
        self._tally.refreshes += 1

    def _wait_for(self, iteration: int) -> Masks:
        """The explainer's masks of ``iteration``, once the training thread has submitted that model."""
        timeout = self.dgs.wait_timeout_s
        with self._submit_cond:
            if not self._submit_cond.wait_for(lambda: self._submitted >= iteration, timeout):
                raise TimeoutError(f"the model after {iteration} iterations was not submitted within {timeout} s")
        return self.explainer.wait(iteration, timeout)

    def _count(self, blocks, feature_bytes: float, iteration: int) -> None:
        tally = self._tally
        tally.feature_bytes += feature_bytes
        src = blocks[0].src_ids.cpu().numpy()
        # A part owns one id range: two comparisons, not the book's owner() search (15 against 218 us
        # for 20,000 ids, every iteration).
        lo, hi = self.part.book.node_range(self.rank)
        tally.remote_nodes += int(src.shape[0] - np.count_nonzero((src >= lo) & (src < hi)))
        tally.dims.append(self.store.feature_dim if self.dims is None else int(self.dims.shape[0]))
        if self.masks is not None:
            tally.staleness.append(iteration - self.masks.iteration)

    def finish_epoch(self, comm: Comm) -> dict:
        """The layout's epoch metrics plus ``"dgs"``: feature bytes and remote nodes (this worker's and
        summed over workers), dimensions sent, explanation time (of the explanations finished since the
        previous epoch's end), waits and mask staleness."""
        out = super().finish_epoch(comm)
        tally = self._tally
        # Explanations finished since the last epoch's end: one submitted at an epoch's last step runs
        # during evaluation and counts with the next epoch.
        busy = self.explainer.busy_seconds - self._busy[0]
        busy_cpu = self.explainer.busy_cpu_seconds - self._busy[1]
        self._busy = (self.explainer.busy_seconds, self.explainer.busy_cpu_seconds)
        totals = torch.tensor([tally.feature_bytes, float(tally.remote_nodes), busy_cpu], dtype=torch.float64)
        comm.all_reduce_(totals, torch.distributed.ReduceOp.SUM, "eval")  # collective: totals over workers
        n = max(1, len(tally.dims))
        out["dgs"] = {
            "mode": self.dgs.mode, "period": self.dgs.period, "warmup": self.schedule.warmup,
            "lag": self.schedule.lag, "epsilon": self.dgs.epsilon,
            "feature_rate": self.dgs.feature_rate,
            "feature_bytes": tally.feature_bytes, "feature_bytes_all_workers": float(totals[0]),
            "remote_nodes": tally.remote_nodes, "remote_nodes_all_workers": int(totals[1]),
            "dims_sent_mean": sum(tally.dims) / n, "explanation_s": busy, "explanation_cpu_s": busy_cpu,
            "explanation_cpu_s_all_workers": float(totals[2]), "explanation_wait_s": tally.wait_s,
            "refreshes": tally.refreshes,
            "staleness_mean": float(np.mean(tally.staleness)) if tally.staleness else None,
            "staleness_max": int(max(tally.staleness)) if tally.staleness else None,
            "mask_iteration": None if self.masks is None else self.masks.iteration,
        }
        return out


def build_dgs(part: LocalPartition, cfg: TrainConfig, loader: Comm, model_factory,
              dgs: DGSConfig) -> DGSDataParallel:
    """The ``hybrid`` (the partition in the ``"whole"`` view) or ``vanilla`` (``"own"`` view) layout with
    DGS. Collective on ``loader`` (every worker, at start-up):
    the cluster map (2 "setup" rounds), the feature store (1), the vanilla sampler (1) and the
    explanation graph (the layout's sampling rounds and 2 feature rounds, once)."""
    rank = loader.rank
    clusters = build_cluster_map(part, loader, clusters_per_part=dgs.clusters_per_part, seed=cfg.seed)
    rows = part.topology
    if part.view == "whole":
        if dgs.node_sampling:
            sampler = DGSHybridSampler(rows, part.book, rank, cfg.fanouts, clusters, dgs.epsilon, cfg.replace)
        else:
            sampler = HybridSampler(rows, part.book, rank, cfg.fanouts, replace=cfg.replace)
        eval_sampler = HybridSampler(rows, part.book, rank, cfg.inference_fanouts, replace=cfg.replace)
    else:
        if dgs.node_sampling:
            sampler = DGSVanillaSampler(part.book, rank, rows.local_indptr, rows.local_indices, cfg.fanouts, loader,
                                        clusters, dgs.epsilon, cfg.replace)
        else:
            sampler = VanillaSampler(part.book, rank, rows.local_indptr, rows.local_indices, cfg.fanouts, loader,
                                     replace=cfg.replace)
        eval_sampler = VanillaSampler(part.book, rank, rows.local_indptr, rows.local_indices,
                                      cfg.inference_fanouts, loader, replace=cfg.replace)
    store = FeatureSampledStore(part.book, rank, part.features, loader, clusters)
    probes = default_probes(cfg.fanouts) if dgs.probes is None else dgs.probes
    graph = build_explanation_graph(part, sampler, store, clusters, num_probes=probes, seed=cfg.seed)
    explainer = OnlineExplainer(graph, model_factory, dgs.explain_config(cfg.seed))
    return DGSDataParallel(sampler, eval_sampler, store, part, loader, explainer, dgs)


def build_dgs_layout(ctx: LayoutContext) -> DGSDataParallel:
    """DGS on top of the context's layout (one whose spec takes ``--dgs``)."""
    return build_dgs(ctx.part, ctx.cfg, ctx.loader, lambda: build_model(ctx.model), ctx.options.dgs)
