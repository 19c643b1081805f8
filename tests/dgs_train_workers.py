"""Worker functions for tests/train/test_dgs_train.py: the trainer's DGS layout on real processes, run by
``test_distributed.spawn_run`` (``fn(rank, world_size, port)``, assertions inside)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dgs_workers import FANOUTS, local_partition, made_masks
from dist_workers import FEATURE_DIM, PG_TIMEOUT_S, assert_blocks_equal, make_features, make_graph
from gnnscale.distributed import Comm, init_for_test, shutdown
from gnnscale.distributed.comm import AgreementFailure
from gnnscale.distributed.dgs.sampling import policy_for
from gnnscale.nn import ModelConfig, build_model
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.dgs import sample_blocks_dgs
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.dgs import DGSConfig, build_dgs
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.tasks.node import NodeTask

# Explanations of the models after 1, 3, 5, ... iterations, each used from 1 iteration later.
PERIOD, WARMUP, LAG = 2, 1, 1
EPSILON, RATE = 0.3, 0.5


def model_factory():
    return build_model(ModelConfig(name="sage", in_dim=FEATURE_DIM, hidden_dim=16, num_classes=3, num_layers=2))


def build(comm: Comm, mode: str = "both"):
    """The DGS layout of this worker and the node task that plans its steps."""
    part = local_partition(comm.rank, comm.world_size, "whole")
    cfg = TrainConfig(fanouts=FANOUTS, batch_size=8, seed=3, threads=1)
    dgs = DGSConfig(period=PERIOD, warmup=WARMUP, lag=LAG, epsilon=EPSILON, feature_rate=RATE, mode=mode, probes=8, clusters_per_part=4)
    task = NodeTask(part, cfg, comm.rank, comm.world_size, torch.from_numpy(np.array(part.train_idx)), shared=False)
    return build_dgs(part, cfg, comm, model_factory, dgs), task


def prepare(layout, step, training: bool = True):
    """``(blocks, x)`` of ``step``: the layout's sample and fetch (the stages' layout part)."""
    (sampled,) = layout.sample([step], [step.items], PhaseTimer(), training=training)
    return layout.fetch(sampled, PhaseTimer(), training=training)


def check_dgs_layout(rank: int, world_size: int, port: int) -> dict:
    """Iterations before W + D sample and fetch plainly; from then on the masks of the last model the
    schedule explained at least D iterations earlier: blocks are single-process DGS sampling with them,
    remote rows arrive on their top dimensions (the rest filled with the cluster mean), local rows
    whole; staleness D..D+T-1."""
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        layout, task = build(comm)
        torch.manual_seed(0)
        model = model_factory()
        graph, full = make_graph(), make_features()
        clusters = layout.store.clusters
        steps = task.plan_epoch(0, 5) + task.plan_epoch(1, 5)[:3]  # iterations 0 .. 7
        layout.start_epoch()
        seen = []
        for t in range(8):
            step = steps[t]
            assert step.iteration == t
            blocks, x = prepare(layout, step)
            ids = blocks[0].src_ids.numpy()
            if t < WARMUP + LAG:
                assert layout.masks is None and layout.dims is None
                assert_blocks_equal(blocks, sample_blocks(graph, step.items, FANOUTS, key=step.key))
                torch.testing.assert_close(x, torch.from_numpy(full[ids]), rtol=0, atol=0)
            else:
                masks = layout.masks
                assert LAG <= t - masks.iteration < LAG + PERIOD
                policy = policy_for(masks, clusters, rank, EPSILON)
                assert_blocks_equal(blocks, sample_blocks_dgs(graph, step.items, FANOUTS, key=step.key,
                                                              policy=policy))
                dims = masks.top_dims(RATE)
                assert np.array_equal(layout.dims, dims) and dims.shape[0] == FEATURE_DIM // 2
                expected = full[ids].copy()
                remote = layout.part.book.owner(ids) != rank
                dropped = np.setdiff1d(np.arange(FEATURE_DIM), dims)
                expected[np.ix_(remote, dropped)] = clusters.cluster_mean[clusters.node_cluster[ids[remote]]][:, dropped]
                torch.testing.assert_close(x, torch.from_numpy(expected), rtol=0, atol=0)
                seen.append((t, masks.iteration, bool(remote.any())))
            with torch.no_grad():  # the model moves, so every explanation explains another model
                for p in model.parameters():
                    p.add_(0.05 * (t + 1))
            layout.after_step(model, t + 1)
        metrics = layout.finish_epoch(comm)["dgs"]
        assert metrics["refreshes"] == 3 and metrics["staleness_max"] == LAG + PERIOD - 1
        assert metrics["dims_sent_mean"] == (2 * FEATURE_DIM + 6 * FEATURE_DIM // 2) / 8
        assert metrics["explanation_cpu_s"] > 0 and metrics["feature_bytes_all_workers"] > metrics["feature_bytes"]
        # Evaluation stays plain: full rows, plain blocks.
        blocks, x = prepare(layout, steps[0], training=False)
        torch.testing.assert_close(x, torch.from_numpy(full[blocks[0].src_ids.numpy()]))
        layout.close()
        return {"seen": seen}
    finally:
        shutdown()


def check_dgs_failures(rank: int, world_size: int, port: int) -> dict:
    """A failed explanation on one worker (a model with NaN weights) and foreign masks on another stop
    every worker at the refresh with the failing worker's message: nobody samples with bad masks."""
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        messages = []
        for case in ("nan", "foreign"):
            layout, task = build(comm, mode="feature")
            torch.manual_seed(0)
            model = model_factory()
            if case == "nan" and rank == 1:
                with torch.no_grad():
                    next(model.parameters()).fill_(math.nan)
            if case == "foreign" and rank == 0:
                other = made_masks(layout.store.clusters, 1 % world_size, iteration=WARMUP)
                layout.explainer.wait = lambda iteration, timeout_s: other
            first = WARMUP + LAG  # the first refresh
            steps = task.plan_epoch(0, first + 1)
            for t in range(first):
                prepare(layout, steps[t])
                layout.after_step(model, t + 1)
            with pytest.raises(AgreementFailure) as caught:
                prepare(layout, steps[first])
            assert layout.masks is None and layout.dims is None  # nothing refreshed anywhere
            messages.append(str(caught.value))
            layout.close()
        assert "rank 1" in messages[0] and "ExplanationError" in messages[0] and "nan" in messages[0].lower()
        assert "rank 0" in messages[1] and "masks: computed on explanation graph" in messages[1]
        return {"messages": messages}
    finally:
        shutdown()
