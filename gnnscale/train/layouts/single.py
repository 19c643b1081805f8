"""One process is a layout too: the whole dataset as the one part of a one-worker partition.

A run in one process (:mod:`gnnscale.train.in_process`) goes through the distributed run's setup, loop
and checkpoints (:mod:`gnnscale.train.run`) on a process group of its own alone
(:func:`gnnscale.distributed.context.init_single_process`) with this layout: data parallelism over one
worker, whose sampler is any of the samplers and whose features are all local, read by the numba gather
kernel (no fetch rounds). One worker of a distributed run on a one-part partition therefore trains
exactly like it. It is not in the registry: ``--layout`` names how workers share a partition directory.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.feature_dtype import decode
from gnnscale.graph.features import gather_rows
from gnnscale.nn import ModelConfig
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.directory import LocalPartition
from gnnscale.train.config import SAMPLERS, TrainConfig
from gnnscale.train.layouts.base import LayoutContext, LayoutSpec
from gnnscale.train.layouts.data_parallel import DataParallel
from gnnscale.train.samplers import build_samplers, device_store


class LocalFeatureStore:
    """Every feature row in this process: a gather, no communication.

    Args:
        features: float32 [num_nodes, d], numpy (possibly memory-mapped).
        pinned: gather float32 rows straight into pinned host memory (training on a GPU: the copy stage
            then sends them without pinning them in another host copy, the largest tensor of a batch).
    """

    def __init__(self, features: np.ndarray, pinned: bool = False) -> None:
        self.features = features
        self.feature_dim = int(features.shape[1])
        self.pinned = pinned and features.dtype == np.float32 and features.flags.c_contiguous

    def gather(self, node_ids: Tensor) -> Tensor:
        """float32 [len(node_ids), d]: the rows of ``node_ids`` (a numba kernel that releases the GIL)."""
        if self.pinned:
            rows = torch.empty((node_ids.shape[0], self.feature_dim), dtype=torch.float32, pin_memory=True)
            gather_rows(self.features, node_ids.numpy(), out=rows.numpy())
            return rows
        return decode(gather_rows(self.features, node_ids.numpy()))


def whole_partition(dataset: NodeDataset) -> LocalPartition:
    """The dataset as part 0 of a one-part partition (ids unchanged, the whole topology)."""
    n = dataset.graph.num_nodes
    return LocalPartition(dataset_name=dataset.name, book=PartitionBook(offsets=np.array([0, n], dtype=np.int64)),
                          part=0, view="whole", topology=dataset.graph, features=dataset.features,
                          labels=np.asarray(dataset.labels), train_idx=np.asarray(dataset.train_idx),
                          val_idx=np.asarray(dataset.val_idx), test_idx=np.asarray(dataset.test_idx),
                          num_classes=dataset.num_classes)


def one_worker(part: LocalPartition, model: ModelConfig | None, cfg: TrainConfig, loader: Comm,
               policy: DevicePolicy) -> DataParallel:
    """``cfg.sampler``'s sampler over ``part``'s whole graph, every feature local; on the policy's device where
    it puts sampling and feature rows there."""
    graph = part.topology
    train, evaluate = build_samplers(graph, model, cfg, policy)
    store = device_store(LocalFeatureStore(part.features, pinned=policy.pin_rows), np.diff(graph.indptr), policy)
    return DataParallel(train, evaluate, store, part, loader)


def build_single(ctx: LayoutContext) -> DataParallel:
    """The one-process layout from a layout context (its part: :func:`whole_partition`)."""
    return one_worker(ctx.part, ctx.model, ctx.cfg, ctx.loader, ctx.policy)


# What a checkpoint records as the layout of a run in one process.
SINGLE = LayoutSpec(name="single", summary="one process: the whole dataset, every feature local", view="whole",
                    samplers=SAMPLERS, per_worker_batches=True, device_data=True, seeds_anywhere=True,
                    build=build_single)
