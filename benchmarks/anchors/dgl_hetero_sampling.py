"""Times DGL's CPU neighbor samplers on a typed graph (a DGL heterograph) and seed batches given as files.

Run with the anchor environment's python (``../shared/tools/anchors/setup.sh`` prints it); called by
``benchmarks/hetero.py``:

    python dgl_hetero_sampling.py EDGES.npz SEEDS.npy --target-type paper --fanouts 25,20 [--threads 1] [--repeat 3]

EDGES.npz (``benchmarks/hetero.py`` writes it) holds ``node_types`` and ``node_counts`` (the types in id
order and their node counts), ``relations`` (``"src__name__dst"`` in id order) and, for relation ``r``,
``src_r`` and ``dst_r``: its edges as local ids of its source and destination types. SEEDS.npy is an int64
array (num_batches, batch_size) of unique local ids of ``--target-type``. Fanouts are listed from the seeds
outwards, each applied to every relation (the fanout dict ``{etype: k}`` of a hop).

Two samplers, each hop drawing ``{etype: k}`` for every relation: ``dgl.sampling.sample_neighbors`` +
``dgl.to_block`` (``NeighborSampler`` on one thread), and ``sample_neighbors_fused`` with a persistent
``mapping`` (``NeighborSampler(fused=True)`` on more than one thread). Prints one JSON line per sampler: ms per
batch (median over repeats, after a warm-up batch), edges per batch, million sampled edges per second.
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch


def load_heterograph(dgl, path):
    """The heterograph of EDGES.npz and its canonical edge types in relation-id order."""
    z = np.load(path)
    types = [str(t) for t in z["node_types"]]
    counts = {t: int(c) for t, c in zip(types, z["node_counts"])}
    etypes = [tuple(str(r).split("__")) for r in z["relations"]]
    data = {etype: (torch.from_numpy(z[f"src_{r}"].astype(np.int64)), torch.from_numpy(z[f"dst_{r}"].astype(np.int64)))
            for r, etype in enumerate(etypes)}
    g = dgl.heterograph(data, num_nodes_dict=counts)
    g.create_formats_()
    return g, etypes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("edges")
    p.add_argument("seeds")
    p.add_argument("--target-type", default="paper")
    p.add_argument("--fanouts", default="25,20")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import dgl  # noqa: E402  (after the thread count is set)

    g, etypes = load_heterograph(dgl, a.edges)
    hops = [{etype: int(k) for etype in etypes} for k in a.fanouts.split(",")]
    batches = [{a.target_type: torch.from_numpy(b)} for b in np.load(a.seeds).astype(np.int64)]

    def two_step(seeds):
        blocks = []
        for fanout in hops:
            block = dgl.to_block(dgl.sampling.sample_neighbors(g, seeds, fanout), seeds)
            seeds = block.srcdata[dgl.NID]
            blocks.append(block)
        return blocks

    mapping = {}  # reused across calls, as DGL's own NeighborSampler(fused=True) does

    def fused(seeds):
        blocks = []
        for fanout in hops:
            block = dgl.sampling.sample_neighbors_fused(g, seeds, fanout, mapping=mapping)
            seeds = block.srcdata[dgl.NID]
            blocks.append(block)
        return blocks

    for name, fn in (("dgl_sample_neighbors+to_block", two_step), ("dgl_sample_neighbors_fused", fused)):
        fn(batches[0])  # warm-up
        times, edges = [], 0
        for _ in range(a.repeat):
            start = time.perf_counter()
            edges = 0
            for seeds in batches:
                edges += sum(b.num_edges() for b in fn(seeds))
            times.append(time.perf_counter() - start)
        dt = statistics.median(times)
        print(json.dumps({"sampler": name, "threads": a.threads, "ms_per_batch": 1e3 * dt / len(batches),
                          "edges_per_batch": edges / len(batches), "medges_per_s": edges / dt / 1e6}), flush=True)


if __name__ == "__main__":
    main()
