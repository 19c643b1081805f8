"""Link prediction's per-worker set-up, observed: the graph a layout's sampler passes messages over and the
supervision edges a worker's task owns. One function for a run in this process, one for a spawned worker
(tests/train/test_link_distributed.py), both through the task and layout builders the setup path uses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnscale.distributed import Comm, init_for_test, shutdown
from gnnscale.distributed.device_policy import HOST
from gnnscale.graph.dataset import NodeDataset
from gnnscale.sampling.exclude import block_edges
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts import LayoutContext, LayoutOptions, build_layout, layout_options, layout_spec
from gnnscale.train.layouts.single import SINGLE, whole_partition
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.sources.in_process import InProcess
from gnnscale.train.sources.partitioned import load_local_partition
from gnnscale.train.steps import Step
from gnnscale.train.tasks.base import TaskContext
from gnnscale.train.tasks.link import LINK, LinkTask
from gnnscale.train.tasks.link_config import LinkConfig

# One layer: the inference sampler takes every in-edge of its seeds.
SPLIT_CFG = TrainConfig(fanouts=(4,), eval_fanouts=(-1,), batch_size=64, epochs=1, seed=3, threads=1)
SPLIT_LINK = LinkConfig(edge_split=(0.7, 0.1, 0.2))


def edge_set(pairs: np.ndarray) -> set[tuple[int, int]]:
    """The (source, destination) pairs of int [2, n] ``pairs``."""
    return set(zip(*np.asarray(pairs).tolist()))


def graph_edges(graph) -> set[tuple[int, int]]:
    """Every edge of a CSC graph, counted from its arrays in Python."""
    indptr, indices = np.asarray(graph.indptr).tolist(), np.asarray(graph.indices).tolist()
    return {(indices[e], v) for v in range(graph.num_nodes) for e in range(indptr[v], indptr[v + 1])}


def both_ways(pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return pairs | {(v, u) for u, v in pairs}


def message_passing_edges(layout, num_nodes: int) -> np.ndarray:
    """int64 [2, e]: every edge the layout's inference sampler gives for all ``num_nodes`` nodes as seeds (one
    full-neighborhood hop): the graph messages pass over, as the layout holds it."""
    [sampled] = layout.sample([Step(items=torch.zeros((2, 0), dtype=torch.int64), key=0)],
                              [torch.arange(num_nodes)], PhaseTimer(), training=False)
    return torch.stack(block_edges(sampled.blocks[-1])).numpy()


def worker_view(task: LinkTask, layout) -> dict:
    """What a test compares of one worker: the message-passing edges its layout samples, its supervision
    edges (global ids), the nodes it owns and those whose in-edges it holds."""
    part = task.part
    indptr = part.topology.indptr if part.view == "whole" else part.topology.local_indptr
    return {"message_passing": message_passing_edges(layout, int(part.book.num_nodes)),
            "train": task.edges.train.numpy(), "val": task.edges.val.pos.numpy(), "test": task.edges.test.pos.numpy(),
            "owned": part.book.node_range(part.part), "rows": indptr.shape[0] - 1}


def one_process_view(dataset: NodeDataset, comm: Comm) -> dict:
    """:func:`worker_view` of a run in this process (``comm``: a process group of this process alone)."""
    task = LINK.build(TaskContext(part=whole_partition(dataset), cfg=SPLIT_CFG, settings=SPLIT_LINK, comm=comm,
                                  partition_dir=None, shared_batches=False))
    layout = InProcess(dataset, LINK, SPLIT_LINK).build(
        LayoutContext(part=task.part, cfg=SPLIT_CFG, model=None, comm=comm, loader=comm,
                      options=LayoutOptions(layout=SINGLE.name), partition_dir=None, policy=HOST, seeds_anywhere=True))
    return worker_view(task, layout)


def link_views(partition_dir: str, rank: int, world_size: int, port: int) -> dict:
    """Spawned worker: ``{layout: worker_view}`` for hybrid and vanilla, each built as
    :func:`gnnscale.train.setup.train_run` builds it (the part in the layout's view, the link task from it,
    the layout over the task's part)."""
    comm = Comm(init_for_test(rank, world_size, port))
    try:
        out = {}
        for name in ("hybrid", "vanilla"):
            part = load_local_partition(partition_dir, layout_spec(name).view, comm)
            task = LINK.build(TaskContext(part=part, cfg=SPLIT_CFG, settings=SPLIT_LINK, comm=comm,
                                          partition_dir=Path(partition_dir), shared_batches=False))
            layout = build_layout(LayoutContext(part=task.part, cfg=SPLIT_CFG, model=None, comm=comm, loader=comm,
                                                options=layout_options(name), partition_dir=Path(partition_dir),
                                                policy=HOST, seeds_anywhere=True))
            out[name] = worker_view(task, layout)
        return out
    finally:
        shutdown()
