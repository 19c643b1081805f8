"""One process is a layout too: the whole dataset as the one part of a one-worker partition.

A run in one process (:mod:`gnnscale.train.sources.in_process`) goes through the distributed run's setup, loop
and checkpoints (:mod:`gnnscale.train.run`) on a process group of its own alone
(:func:`gnnscale.distributed.context.init_single_process`) with this layout: data parallelism over one
worker, whose sampler is any of the samplers and whose features are all local, read by the numba gather
kernel (no fetch rounds). One worker of a distributed run on a one-part partition therefore trains
exactly like it. It is not in the registry: ``--layout`` names how workers share a partition directory.
"""

from __future__ import annotations

import numpy as np

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.features.device_cache import device_store
from gnnscale.features.local import LocalFeatureStore
from gnnscale.features.typed import TypedLocalStore
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.nn import ModelConfig
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.directory import LocalPartition
from gnnscale.partition.typed import TypedPartition, whole_typed_partition
from gnnscale.train.config import SAMPLERS, TrainConfig
from gnnscale.train.layouts.base import LayoutContext, LayoutSpec
from gnnscale.train.layouts.data_parallel import DataParallel
from gnnscale.train.samplers import build_samplers


def whole_partition(dataset: NodeDataset | TypedDataset) -> LocalPartition | TypedPartition:
    """The dataset as part 0 of a one-part partition (ids unchanged, the whole topology)."""
    if isinstance(dataset, TypedDataset):
        return whole_typed_partition(dataset)
    n = dataset.graph.num_nodes
    return LocalPartition(dataset_name=dataset.name, book=PartitionBook(offsets=np.array([0, n], dtype=np.int64)),
                          part=0, view="whole", topology=dataset.graph, features=dataset.features,
                          labels=np.asarray(dataset.labels), train_idx=np.asarray(dataset.train_idx),
                          val_idx=np.asarray(dataset.val_idx), test_idx=np.asarray(dataset.test_idx),
                          num_classes=dataset.num_classes)


def one_worker(part: LocalPartition | TypedPartition, model: ModelConfig | None, cfg: TrainConfig, loader: Comm,
               policy: DevicePolicy) -> DataParallel:
    """``cfg.sampler``'s sampler over ``part``'s whole graph, every feature local; on the policy's device where
    it puts sampling and feature rows there. A typed part samples and reads its rows per node type on the host."""
    graph = part.topology
    train, evaluate = build_samplers(graph, model, cfg, policy)
    if isinstance(part, TypedPartition):
        return DataParallel(train, evaluate, TypedLocalStore(graph, part.features), part, loader)
    store = device_store(LocalFeatureStore(part.features, pinned=policy.pin_rows), np.diff(graph.indptr),
                         policy.gpu_cache_fraction, policy.device, policy.sample_on_device)
    return DataParallel(train, evaluate, store, part, loader)


def build_single(ctx: LayoutContext) -> DataParallel:
    """The one-process layout from a layout context (its part: :func:`whole_partition`)."""
    return one_worker(ctx.part, ctx.model, ctx.cfg, ctx.loader, ctx.policy)


# What a checkpoint records as the layout of a run in one process.
SINGLE = LayoutSpec(name="single", summary="one process: the whole dataset, every feature local", view="whole",
                    samplers=SAMPLERS, per_worker_batches=True, device_sampling=True, seeds_anywhere=True, typed=True,
                    build=build_single)
