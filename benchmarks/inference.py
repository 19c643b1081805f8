"""Layer-wise full-neighborhood inference against sampled inference, per node, on a products-shaped graph.

    python benchmarks/inference.py [--scale 0.25] [--model sage] [--fanouts 10,5] [--hidden 128]
                                   [--chunk-size 8192] [--eval-batch-size 4096] [--sampled-nodes N] [--threads 2]

Both run the same model (random weights, seed 0, or ``--model-file``) in this process on the synthetic ``products`` preset
at ``--scale``. Layer-wise: :func:`gnnscale.inference.layerwise.layerwise_inference` over every node,
each layer written to a memory-mapped file in a temporary folder. Sampled: the trainer's evaluation
(``--fanouts`` per hop, ``--eval-batch-size`` seeds per batch, the sampling and feature gather
included) over ``--sampled-nodes`` random nodes (default: every node). Printed: seconds, microseconds
per node, the ratio, and the peak RSS growth of each over the RSS before it (Linux ``VmHWM``, reset
for each).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import numpy as np
import torch

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_single_process, shutdown
from gnnscale.distributed.device_policy import HOST
from gnnscale.graph.datasets import load_dataset
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layerwise_inference
from gnnscale.nn import MODELS, ModelConfig, build_model
from gnnscale.nn.model_file import read_model_file
from gnnscale.sampling import set_sampler_threads
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import BuiltinBlockInputs
from gnnscale.train.layouts.single import one_worker, whole_partition
from gnnscale.train.stages import Pipeline
from gnnscale.train.tasks.base import TaskContext
from gnnscale.train.tasks.node import build_node_task


def reset_peak_rss() -> None:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM to the current RSS)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--model", default="sage", choices=MODELS)
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--eval-batch-size", type=int, default=4096)
    p.add_argument("--sampled-nodes", type=int, default=None, help="random nodes for sampled inference (default all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model-file", default=None, help="a --save-model file to run (default: random weights)")
    args = p.parse_args()
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    torch.set_num_threads(args.threads)
    set_sampler_threads(args.threads)
    dataset = load_dataset("synthetic", None, preset="products", scale=args.scale)
    n = dataset.graph.num_nodes
    print(f"products-shaped graph at scale {args.scale}: {n:,} nodes, {dataset.graph.num_edges:,} edges; "
          f"model {args.model}, {len(fanouts)} layers, hidden {args.hidden}; {args.threads} threads", flush=True)
    cfg = ModelConfig(name=args.model, in_dim=dataset.feature_dim, hidden_dim=args.hidden,
                      num_classes=dataset.num_classes, num_layers=len(fanouts))
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    if args.model_file is not None:
        loaded = read_model_file(args.model_file)
        model, cfg = loaded.model, loaded.config

    reset_peak_rss()
    before = rss_mb("VmRSS")
    with tempfile.TemporaryDirectory(prefix="gnnscale-bench-") as tmp:
        start = time.perf_counter()
        logits = np.load(layerwise_inference(model, dataset.graph, dataset.features, tmp,
                                             chunk_size=args.chunk_size)[-1], mmap_mode="r")
        layerwise_s = time.perf_counter() - start
        predicted = np.asarray(logits.argmax(axis=1))
    layerwise_growth = rss_mb("VmHWM") - before
    layerwise_us = 1e6 * layerwise_s / n
    print(f"layer-wise, every neighbor: {layerwise_s:.1f} s for {n:,} nodes = {layerwise_us:.1f} us per node; "
          f"peak RSS +{layerwise_growth:.0f} MB", flush=True)

    rng = np.random.default_rng(0)
    nodes = np.arange(n, dtype=np.int64) if args.sampled_nodes is None else \
        np.sort(rng.choice(n, size=min(args.sampled_nodes, n), replace=False)).astype(np.int64)
    train_cfg = TrainConfig(fanouts=fanouts, eval_batch_size=args.eval_batch_size, threads=args.threads, prefetch=1)
    ctx = init_single_process()
    try:
        comm = Comm(ctx)
        part = replace(whole_partition(dataset), val_idx=nodes)  # the nodes scored as the "val" split
        task = build_node_task(TaskContext(part=part, cfg=train_cfg, settings=None, comm=comm, partition_dir=None,
                                           shared_batches=False))
        layout = one_worker(part, cfg, train_cfg, comm.new_group(), HOST)
        pipeline = Pipeline(task, layout, BuiltinBlockInputs(), HOST, train_cfg.prefetch)
        reset_peak_rss()
        before = rss_mb("VmRSS")
        start = time.perf_counter()
        sampled_acc = task.score(model, pipeline, comm, "val")
        sampled_s = time.perf_counter() - start
    finally:
        shutdown()
    sampled_us = 1e6 * sampled_s / nodes.size
    print(f"sampled, fanouts {args.fanouts}: {sampled_s:.1f} s for {nodes.size:,} nodes = {sampled_us:.1f} us per "
          f"node; peak RSS +{rss_mb('VmHWM') - before:.0f} MB", flush=True)
    full_acc = float(np.mean(predicted[nodes] == dataset.labels[nodes]))
    print(f"accuracy on those nodes: layer-wise {full_acc:.4f}, sampled {sampled_acc:.4f}")
    print(f"layer-wise is {sampled_us / layerwise_us:.2f}x faster per node than sampled inference")


if __name__ == "__main__":
    main()
