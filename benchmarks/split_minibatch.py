"""One mini-batch split by the partition map vs P micro-batches (GSplit Tables 2, 4 and 5), in one process.

    python benchmarks/split_minibatch.py [--scale 0.25] [--workers 4] [--batch-size 1000]
                                         [--fanouts 15,10,5] [--batches 6] [--json FILE]

Per iteration, every worker draws ``--batch-size`` seeds from its own training nodes. Data parallelism
samples each worker's seeds as its own micro-batch (its own key); split parallelism samples the union
of the seeds as one mini-batch (one key) and splits it by the METIS partition. The script reports, as
medians over ``--batches`` iterations after one warm-up (numba compilation):

* the sampling time of the mini-batch and the online-split time of one worker's split (every worker
  splits only its own) and of all splits, both kinds (``partial_sums`` for SAGE/GCN,
  ``source_features`` for GAT), one thread, as the workers run;
* local edge fraction, edge skew and redundancy (0 for split by construction) of split parallelism,
  and the redundancy of the data-parallel micro-batches (GSplit Table 2: 25.5% on products);
* the rows each kind shuffles per iteration (per layer, all workers), and GraphSAGE's shuffle volume
  (rows x layer input width, x 2 with the backward shuffle) next to what data-parallel hybrid training
  fetches for the same seeds (the micro-batches' remote input rows x feature width).

Uses the products-shaped dataset and METIS partition that benchmarks/distributed.py caches under
benchmarks/.cache. No training: the epoch-time comparison is phase 2's benchmarks/split.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import cached_dataset, cached_partition  # noqa: E402  (the shared dataset cache)

from gnnscale.distributed import SHUFFLE_KINDS, data_parallel_edge_metrics, split_blocks, split_edge_metrics  # noqa: E402
from gnnscale.partition import load_partition  # noqa: E402
from gnnscale.sampling import NeighborSampler, derive_key  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=1000, help="seeds per worker")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batches", type=int, default=6, help="measured iterations (after one warm-up)")
    p.add_argument("--hidden", type=int, default=256, help="GraphSAGE width, for the shuffle volume")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed for a cold partitioning")
    p.add_argument("--json", help="write the per-iteration figures here")
    a = p.parse_args()
    a.fanouts = [int(f) for f in a.fanouts.split(",")]
    return a


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def one_iteration(sampler, book, train_parts, a, step: int) -> dict:
    rng = np.random.default_rng((a.seed, step))
    per_worker = [rng.choice(ids, a.batch_size, replace=False) for ids in train_parts]
    seeds = np.concatenate(per_worker)
    blocks, sample_s = timed(lambda: sampler.sample(seeds, derive_key(a.seed, 0, step, 0)))
    row = {"sample_s": sample_s, "minibatch_edges": sum(b.num_edges for b in blocks)}
    for kind in SHUFFLE_KINDS:
        times, rows = [], np.zeros(len(blocks), dtype=np.int64)
        for rank in range(a.workers):
            splits, seconds = timed(lambda: split_blocks(blocks, book, rank, kind=kind))
            times.append(seconds)
            rows += [sum(s.plan.send_counts) for s in splits]
        m = split_edge_metrics(blocks, book, kind=kind)
        row[kind] = {"split_s_per_worker": statistics.median(times), "split_s_all": sum(times),
                     "shuffle_rows": int(rows.sum()), "shuffle_rows_per_layer": rows.tolist(), **m.to_dict()}
    micro, dp_sample_s = timed(lambda: [sampler.sample(s, derive_key(a.seed, 0, step, w))
                                        for w, s in enumerate(per_worker)])
    remote = sum(int(np.count_nonzero(book.owner(b[0].src_ids.numpy()) != w)) for w, b in enumerate(micro))
    row["data_parallel"] = {"sample_s_per_worker": dp_sample_s / a.workers, "remote_input_rows": remote,
                            **data_parallel_edge_metrics(micro, book).to_dict()}
    return row


def report(rows: list[dict], a: argparse.Namespace, feature_dim: int) -> None:
    med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
    total = a.workers * a.batch_size
    print(f"\n{a.workers} workers x {a.batch_size} seeds = {total}, fanouts {a.fanouts}, medians of {len(rows)} "
          f"iterations; mini-batch edges {med(lambda r: r['minibatch_edges']):,.0f}")
    print(f"  sample the mini-batch ({total} seeds, 1 thread):      {1e3 * med(lambda r: r['sample_s']):8.1f} ms")
    print(f"  sample one micro-batch ({a.batch_size} seeds, 1 thread):     "
          f"{1e3 * med(lambda r: r['data_parallel']['sample_s_per_worker']):8.1f} ms")
    print(f"  {'split kind':<16} {'split/worker':>12} {'all splits':>10} {'vs sample':>9} {'local edges':>11} "
          f"{'edge skew':>9} {'redundancy':>10} {'shuffled rows':>13}")
    for kind in SHUFFLE_KINDS:
        k = lambda f: med(lambda r: f(r[kind]))  # noqa: E731
        print(f"  {kind:<16} {1e3 * k(lambda r: r['split_s_per_worker']):9.1f} ms {1e3 * k(lambda r: r['split_s_all']):7.1f} ms "
              f"{k(lambda r: r['split_s_per_worker']) / med(lambda r: r['sample_s']):8.1%} "
              f"{k(lambda r: r['local_edge_fraction']):11.1%} {k(lambda r: r['edge_skew']):9.3f} "
              f"{k(lambda r: r['redundancy']):10.1%} {k(lambda r: r['shuffle_rows']):13,.0f}")
    for kind in SHUFFLE_KINDS:
        per_layer = [med(lambda r: r[kind]["shuffle_rows_per_layer"][l]) for l in range(len(a.fanouts))]
        print(f"  {kind} rows shuffled per layer (input layer first, all workers): "
              + ", ".join(f"{v:,.0f}" for v in per_layer))
    dp = lambda f: med(lambda r: f(r["data_parallel"]))  # noqa: E731
    print(f"  data parallel: {a.workers} micro-batches compute {dp(lambda r: r['edges_computed']):,.0f} edges, "
          f"union {dp(lambda r: r['minibatch_edges']):,.0f}: redundancy {dp(lambda r: r['redundancy']):.1%}, "
          f"edge skew {dp(lambda r: r['edge_skew']):.3f}")
    # Payload bytes per iteration, all workers, float32. GraphSAGE aggregates its input: layer l's partial
    # sums are as wide as its input; layer 0's need no gradient (input features), the others go back.
    widths = [feature_dim] + [a.hidden] * (len(a.fanouts) - 1)
    layer_rows = [med(lambda r: r["partial_sums"]["shuffle_rows_per_layer"][l]) for l in range(len(widths))]
    shuffle_mb = sum(n * w * 4 * (1 if l == 0 else 2) for l, (n, w) in enumerate(zip(layer_rows, widths))) / 1e6
    fetch_mb = dp(lambda r: r["remote_input_rows"]) * feature_dim * 4 / 1e6
    print(f"  GraphSAGE (hidden {a.hidden}, {feature_dim} input features), payload per iteration, all workers: "
          f"split shuffles {shuffle_mb:,.1f} MB (forward + backward); data-parallel hybrid fetches "
          f"{fetch_mb:,.1f} MB of remote input features ({dp(lambda r: r['remote_input_rows']):,.0f} rows)")


def main() -> None:
    a = parse_args()
    numba.set_num_threads(1)  # as one worker of a run on this machine
    torch.set_num_threads(1)
    cache = HERE / ".cache"
    partition = cached_partition(cached_dataset(a.scale, a.seed, cache), a.workers, a.seed, a.timeout)
    parts = [load_partition(partition, p, "whole", verify=False) for p in range(a.workers)]
    graph, book = parts[0].topology, parts[0].book
    print(f"{partition.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    sampler = NeighborSampler(graph, a.fanouts)
    train_parts = [p.train_idx for p in parts]
    one_iteration(sampler, book, train_parts, a, step=0)  # warm-up: numba compilation, page cache
    rows = [one_iteration(sampler, book, train_parts, a, step) for step in range(1, a.batches + 1)]
    report(rows, a, parts[0].feature_dim)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "iterations": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
