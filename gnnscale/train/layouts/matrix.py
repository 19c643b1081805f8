"""The matrix samplers' layouts (Tripathy et al.; docs/matrix_sampling.md): ``1d`` and ``1.5d``.

Both are data parallelism (:class:`~gnnscale.train.layouts.data_parallel.DataParallel`) whose batches
are sampled ``--bulk`` at a time by sparse products (``--sampler matrix`` or ``ladies``), block-identical
to the single-process matrix sampler:

- ``1d``: the whole topology on every worker, its own batches sampled with no communication, features
  fetched from their owners (as hybrid).
- ``1.5d --replication C``: block rows of the adjacency and features replicated C times; rows of ``A``
  and features fetched inside the process column (:mod:`gnnscale.distributed.matrix.grid15d`).

Both follow the device policy (``--sample-on``, ``--gpu-cache-fraction``): on the device, ``1d`` holds the
sampler's topology there and ``1.5d`` copies each hop's fetched rows there; either way the products, draws
and extraction run there and a device feature cache stands in front of the store.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnscale.distributed.matrix.grid15d import Layout15D, build_15d, check_replication
from gnnscale.features.device_cache import device_store
from gnnscale.features.host_cache import global_in_degrees
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.sampling.registry import samplers_with
from gnnscale.settings import setting
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.layouts.data_parallel import DataParallel
from gnnscale.train.samplers import build_samplers, is_gcn


def build_1d(ctx: LayoutContext) -> DataParallel:
    part, cfg, loader, policy = ctx.part, ctx.cfg, ctx.loader, ctx.policy
    graph = part.topology
    train, evaluate = build_samplers(graph, ctx.model, cfg, policy)
    store = device_store(PartitionedFeatureStore(part.book, loader.rank, part.features, loader), np.diff(graph.indptr),
                         policy.gpu_cache_fraction, policy.device, policy.sample_on_device)
    held = graph.indptr.nbytes + graph.indices.nbytes + part.features.nbytes
    return DataParallel(train, evaluate, store, part, loader, held_bytes=int(held))


def build_15d_layout(ctx: LayoutContext) -> DataParallel:
    cfg, policy = ctx.cfg, ctx.policy
    sizes = (cfg.ladies_layer_size,) * cfg.num_layers
    grid = build_15d(ctx.partition_dir, ctx.part, ctx.loader, ctx.options.settings.replication, sampler=cfg.sampler,
                     fanouts=cfg.fanouts, inference_fanouts=cfg.inference_fanouts, bulk=cfg.bulk, replace=cfg.replace,
                     layer_sizes=sizes, self_loops=is_gcn(ctx.model),
                     device=policy.device if policy.sample_on_device else None)
    store = column_store(grid)
    if policy.rows_on_device:
        # Collective on the column (every worker alike: the policy is agreed): the in-degrees the cache ranks by.
        degrees = global_in_degrees(np.diff(grid.block.indptr), grid.book, grid.column)
        store = device_store(store, degrees, policy.gpu_cache_fraction, policy.device, policy.sample_on_device)
    grid.column.stats.snapshot_and_reset()  # set-up rounds are not part of any iteration
    return DataParallel(grid.sampler, grid.eval_sampler, store, ctx.part, ctx.loader,
                        data_comm=grid.column, held_bytes=grid.block.nbytes)


def column_store(grid: Layout15D) -> PartitionedFeatureStore:
    """The 1.5D feature store: the block row's features, fetched inside the process column (block row
    ``i`` is rank ``i`` of the column). Collective on the column: one "setup" round."""
    return PartitionedFeatureStore(grid.book, grid.grid.row, grid.block.features, grid.column)


def check_15d(options: LayoutOptions, cfg: TrainConfig, model_name: str, world_size: int | None) -> None:
    """``--replication`` must divide the worker count (known once the launch is)."""
    if world_size is not None:
        check_replication(options.settings.replication, world_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationOptions:
    """The options of the 1.5D layout.

    Args:
        replication: C, copies of every block row of the adjacency and the features (C divides the worker
            count; 1: fully partitioned, all workers: fully replicated).
    """

    replication: int = setting(1, "copies C of every block row of the adjacency and features (C divides the worker "
                                  "count; 1: fully partitioned, all workers: fully replicated)")

    def __post_init__(self) -> None:
        value = self.replication
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"replication: expected an int >= 1, got {value!r}")


ONE_D = LayoutSpec(
    name="1d", summary="matrix samplers, topology replicated: no sampling rounds", view="whole",
    samplers=samplers_with("bulk"), per_worker_batches=True, device_sampling=True, build=build_1d)
ONE_POINT_FIVE_D = LayoutSpec(
    name="1.5d", summary="matrix samplers, block rows of the adjacency on --replication workers each", view="own",
    samplers=samplers_with("bulk"), per_worker_batches=True, options=ReplicationOptions, device_sampling=True,
    check=check_15d, build=build_15d_layout)
