"""DGS's node-sampling kernel against the fused kernel, alone: one worker's epoch of batches, per shape
of the node mask.

    .venv/bin/python benchmarks/dgs_kernel.py [--graph hard-full] [--workers 4] [--rank 0] [--batch-size 512]
        [--fanouts 10,5] [--masks bimodal,flat,skewed] [--repeat 9] [--against REV] [--threads 1]

The partition is ``benchmarks/dgs.py``'s (METIS, cached under ``--cache-dir``) and the sampling is what
one hybrid worker does in a training epoch: its training nodes in a fixed random order, cut into
batches of ``--batch-size``, every hop sampled on the whole (replicated) topology with the fused kernel
(``sample_blocks``) and with DGS's (``sample_blocks_dgs``, epsilon 0.1), into one reused workspace.
The clusters are DGS's (METIS on each part's own subgraph, 32 per part). The node masks:

* ``bimodal``: half the clusters near 0.05, half near 0.94, the shape the explainer gives (the masks of
  a ``hard-full`` run had their 10th-90th percentiles at 0.05-0.95 and ``max / mean`` 1.6-2.0);
* ``flat``: every weight 1 (rejection never rejects: the kernel's floor);
* ``skewed``: 90% of the clusters at 0.04, the rest at 0.96 (``max / mean`` 7: rejection's worst
  case in practice);
* a ``.npy`` file of cluster weights (e.g. saved from ``Masks.cluster_weight``).

``--against REV`` also times the DGS kernel of git revision ``REV`` of this repository (its
``gnnscale/sampling/dgs.py``, imported beside today's; ``b9036e8``: the kernel that scanned every
neighbor). Times are the CPU seconds of one epoch (``time.process_time``: less sensitive than wall time
to other processes on a shared machine), the minimum over ``--repeat`` rounds in which every kernel
runs once in turn, after one warm-up epoch each.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dgs import GRAPHS, cached_partition  # noqa: E402

from gnnscale.distributed.dgs.explanation import cluster_part  # noqa: E402
from gnnscale.partition.directory import load_partition  # noqa: E402
from gnnscale.sampling import derive_key, sample_blocks, set_sampler_threads  # noqa: E402
from gnnscale.sampling.dgs import DGSPolicy, rows_sorted, sample_blocks_dgs  # noqa: E402
from gnnscale.sampling.fused import SamplerWorkspace  # noqa: E402

CLUSTERS_PER_PART = 32


def node_clusters(graph, book) -> np.ndarray:
    """int32 [num_nodes]: DGS's clusters (what build_cluster_map computes on every worker)."""
    out = []
    for p in range(book.num_parts):
        lo, hi = book.node_range(p)
        rows = graph.indptr[lo:hi + 1] - graph.indptr[lo], graph.indices[graph.indptr[lo]:graph.indptr[hi]]
        out.append((cluster_part(*rows, lo, hi, CLUSTERS_PER_PART, 0) + p * CLUSTERS_PER_PART).astype(np.int32))
    return np.concatenate(out)


def mask_weights(spec: str, num_clusters: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if spec == "flat":
        return np.ones(num_clusters)
    if spec == "bimodal":
        high = rng.random(num_clusters) < 0.5
        return np.where(high, 0.94, 0.05) + rng.uniform(-0.02, 0.02, num_clusters)
    if spec == "skewed":
        return np.where(rng.random(num_clusters) < 0.9, 0.04, 0.96)
    weights = np.load(spec).astype(np.float64)
    if weights.shape != (num_clusters,):
        raise SystemExit(f"--masks: {spec} holds {weights.shape} weights, the partition has {num_clusters} clusters")
    return weights


def dgs_module_at(rev: str, scratch: Path):
    """The module gnnscale/sampling/dgs.py of git revision ``rev``, imported as ``dgs_at_<rev>``."""
    source = subprocess.run(["git", "show", f"{rev}:gnnscale/sampling/dgs.py"], cwd=HERE.parent, check=True,
                            capture_output=True, text=True).stdout
    name = f"dgs_at_{rev.replace('/', '_').replace('~', '_').replace('^', '_')}"
    path = scratch / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def epoch_seconds(sample, batches) -> float:
    start = time.process_time()
    for step, seeds in enumerate(batches):
        sample(seeds, derive_key(0, 0, step))
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", default="hard-full", choices=sorted(GRAPHS))
    p.add_argument("--workers", type=int, default=4, help="parts of the partition (dgs.py's, cached)")
    p.add_argument("--rank", type=int, default=0, help="the worker whose epoch is sampled")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--masks", default="bimodal,flat,skewed",
                   help="comma-separated: bimodal, flat, skewed or .npy files of cluster weights")
    p.add_argument("--epsilon", type=float, default=0.1)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--threads", type=int, default=1, help="sampler threads (the benchmarks' trainers use 1)")
    p.add_argument("--against", default=None, help="also time the DGS kernel of this git revision")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for partitioning")
    p.add_argument("--cache-dir", default=str(HERE / ".cache"))
    a = p.parse_args()
    set_sampler_threads(a.threads)
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    part = load_partition(cached_partition(a.graph, a.workers, Path(a.cache_dir), a.timeout), a.rank, "whole")
    graph, book = part.topology, part.book
    lo, hi = book.node_range(a.rank)
    order = np.random.default_rng(0).permutation(part.train_idx)
    batches = [np.sort(order[i:i + a.batch_size]) for i in range(0, order.shape[0], a.batch_size)]
    clusters = node_clusters(graph, book)
    sorted_rows = rows_sorted(graph.indptr, graph.indices)
    print(f"{a.graph}, {a.workers} METIS parts, rank {a.rank}: {graph.num_nodes:,} nodes, {graph.num_edges:,} "
          f"edges (rows sorted: {sorted_rows}); an epoch is {len(batches)} batches of {a.batch_size} seeds, "
          f"fanouts {a.fanouts}, {a.threads} thread(s); CPU seconds per epoch, min of {a.repeat}")
    workspace = SamplerWorkspace(graph.num_nodes)
    with tempfile.TemporaryDirectory(prefix="gnnscale-dgs-kernel-") as tmp:
        old = dgs_module_at(a.against, Path(tmp)) if a.against else None
        print(f"{'masks':>8} {'max/mean':>8} {'fused s':>8} {'DGS s':>8} {'x fused':>7}"
              + (f" {a.against + ' s':>12} {'x fused':>7} {'speed-up':>8}" if old else ""))
        for spec in a.masks.split(","):
            weights = mask_weights(spec, book.num_parts * CLUSTERS_PER_PART)
            policy = DGSPolicy(local_lo=lo, local_hi=hi, node_cluster=clusters, cluster_weight=weights,
                               epsilon=a.epsilon)
            kernels = {
                "fused": lambda s, k: sample_blocks(graph, s, fanouts, key=k, workspace=workspace),
                "dgs": lambda s, k: sample_blocks_dgs(graph, s, fanouts, key=k, policy=policy, workspace=workspace,
                                                      sorted_rows=sorted_rows),
            }
            if old is not None:
                old_policy = old.DGSPolicy(local_lo=lo, local_hi=hi, node_cluster=clusters, cluster_weight=weights,
                                           epsilon=a.epsilon)
                kernels["old"] = lambda s, k: old.sample_blocks_dgs(graph, s, fanouts, key=k, policy=old_policy,
                                                                    workspace=workspace)
            for sample in kernels.values():
                epoch_seconds(sample, batches)  # warm-up (and compilation)
            best = {name: float("inf") for name in kernels}
            for _ in range(a.repeat):
                for name, sample in kernels.items():
                    best[name] = min(best[name], epoch_seconds(sample, batches))
            remote = np.delete(weights, np.arange(a.rank * CLUSTERS_PER_PART, (a.rank + 1) * CLUSTERS_PER_PART))
            line = (f"{Path(spec).name:>8} {remote.max() / remote.mean():8.2f} {best['fused']:8.4f} {best['dgs']:8.4f} "
                    f"{best['dgs'] / best['fused']:7.2f}")
            if old is not None:
                line += f" {best['old']:12.4f} {best['old'] / best['fused']:7.2f} {best['old'] / best['dgs']:8.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
