"""NeighborLoader throughput against the trainer's own batch preparation, same graph, same seeds.

    python benchmarks/loader.py [--scale 0.25] [--fanouts 15,10,5] [--batch-size 1024] [--num-batches 20]
                                [--repeat 3] [--threads 2]

The graph is the products-shaped synthetic one (gnnscale's generator at ``--scale``, 100 features).
Per batch of seeds, each row does what its consumer receives:

* ``trainer blocks``: the single-process trainer's preparation, fused block sampling
  (``NeighborSampler.sample``) plus the input features and seed labels (``gather_rows``), in the
  trainer's background stage (``Prefetcher``) with the same depth as the loader rows beside it.
* ``loader, NodeDataset``: ``NeighborLoader(dataset, ...)`` batches (PyG ``Data``: x, y, edge_index,
  n_id, e_id ...), iterated with ``--prefetch`` batches prepared ahead.

Prefetch 0 prepares on the consumer's thread; 1 on a background thread (the defaults of the trainer
and the loader). The consumer here does nothing with a batch, so the two differ only by where the
work runs.
* ``loader, PyG Data``: the same from a PyG ``Data`` (``to_pyg_data``; PyG's ``filter_data`` slices
  x, y and the split masks).

The two layouts sample different amounts: blocks resample every node known so far at each hop (a
layered model's contract), the loader only the nodes the previous hop added (PyG's node-wise
layout), so the table also lists edges and nodes per batch. Times are the median over ``--repeat``
passes over the same ``--num-batches`` batches, after one warm-up pass; the rows take turns within
each repeat, so that a machine busy with other work slows them alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from gnnscale.graph.features import gather_rows
from gnnscale.graph.synthetic import make_synthetic, products_like_config
from gnnscale.loader import NeighborLoader, to_pyg_data
from gnnscale.prefetch import Prefetcher
from gnnscale.sampling import NeighborSampler, derive_key, set_sampler_threads


def time_in_turns(rows: list[dict], repeat: int) -> None:
    """Adds ``seconds`` (median over ``repeat`` passes, the rows taking turns) and ``all_seconds`` to
    every row. A row's ``warm_up`` (default: its ``run``) runs once first: numba compilation, page faults."""
    for r in rows:
        r.get("warm_up", r["run"])()
    times = [[] for _ in rows]
    for _ in range(repeat):
        for r, t in zip(rows, times):
            start = time.perf_counter()
            r["run"]()
            t.append(time.perf_counter() - start)
    for r, t in zip(rows, times):
        r["seconds"] = statistics.median(t)
        r["all_seconds"] = t


def trainer_row(ds, fanouts, seeds, prefetch) -> dict:
    """The trainer's per-batch preparation, ``prefetch`` batches ahead in its background stage."""
    sampler = NeighborSampler(ds.graph, fanouts)
    sizes = []

    def prepare(step):
        blocks = sampler.sample(seeds[step], derive_key(0, 0, step))
        x = gather_rows(ds.features, blocks[0].src_ids.numpy())
        return blocks, x, ds.labels[seeds[step]]

    def run():
        sizes.clear()
        with Prefetcher(prepare, len(seeds), prefetch) as batches:
            for blocks, x, _ in batches:
                sizes.append((sum(b.num_edges for b in blocks), x.shape[0]))

    return {"name": f"trainer blocks, prefetch {prefetch}", "run": run, "sizes": sizes}


def loader_row(name, data, fanouts, seeds, batch_size, prefetch) -> dict:
    # input_nodes in batch order and no shuffle: the loader's batches are exactly `seeds`.
    loader = NeighborLoader(data, list(fanouts), input_nodes=torch.from_numpy(seeds.reshape(-1)),
                            batch_size=batch_size, prefetch=prefetch, seed=0)
    sizes = []

    def run():
        sizes.clear()
        for batch in loader:
            sizes.append((batch.edge_index.shape[1], batch.x.shape[0]))

    return {"name": f"{name}, prefetch {prefetch}", "run": run, "sizes": sizes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.4M nodes")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-batches", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prefetch", default="0,1", help="loader prefetch depths to time")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    start = time.perf_counter()
    ds = make_synthetic(products_like_config(a.scale, seed=a.seed))
    print(f"graph: {ds.graph.num_nodes} nodes, {ds.graph.num_edges} edges, {ds.feature_dim} features "
          f"(built in {time.perf_counter() - start:.0f} s)", flush=True)
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    rng = np.random.default_rng(a.seed)
    seeds = rng.choice(ds.graph.num_nodes, a.num_batches * a.batch_size, replace=False).reshape(a.num_batches, -1)
    rows = []
    data = to_pyg_data(ds)
    for depth in (int(d) for d in a.prefetch.split(",")):
        rows.append(trainer_row(ds, fanouts, seeds, depth))
        rows.append(loader_row("loader, NodeDataset", ds, fanouts, seeds, a.batch_size, depth))
        rows.append(loader_row("loader, PyG Data", data, fanouts, seeds, a.batch_size, depth))
    time_in_turns(rows, a.repeat)
    print(f"batch {a.batch_size}, fanouts {a.fanouts}, {a.threads} threads, {a.num_batches} batches, "
          f"median of {a.repeat}; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'':32} {'batches/s':>9} {'ms/batch':>9} {'edges/batch':>11} {'nodes/batch':>11}")
    for r in rows:
        edges, nodes = (np.mean([s[i] for s in r["sizes"]]) for i in (0, 1))
        print(f"{r['name']:32} {a.num_batches / r['seconds']:9.1f} {1e3 * r['seconds'] / a.num_batches:9.1f} "
              f"{edges:11.0f} {nodes:11.0f}")


if __name__ == "__main__":
    main()
