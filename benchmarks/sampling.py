"""Sampler throughput: gnnscale fused vs gnnscale two-step vs DGL's two samplers, same graph, same seeds.

    python benchmarks/sampling.py [--scale 1.0] [--batch-sizes 1024,8192] [--fanouts 15,10,5 20,20,20]
                                  [--threads 1,2] [--repeat 3] [--dgl-python PATH] [--json FILE]
                                  [--samplers fused,two_step,device] [--device cpu|cuda]

``device`` is the torch-ops sampler (gnnscale/sampling/device.py, the fused sampler's blocks) on
``--device``; on the CPU its torch ops are slower than the numba kernels: its home is the GPU.

The graph is shaped like ogbn-products (2.4M nodes, ~50 in-edges per node, power-law in-degree; the
gnnscale synthetic generator at ``--scale``), built once and cached under benchmarks/.cache together
with fixed batches of unique seeds, as the files DGL's timing script reads
(``../shared/tools/anchors/dgl_sampling.py``). Every sampler is timed in this one run on the same
files; ratios are against DGL's ``sample_neighbors_fused`` with the same thread count. Times are the
median over ``--repeat`` passes over all batches, after one warm-up batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.synthetic import make_synthetic, products_like_config
from gnnscale.sampling import NeighborSampler, derive_key, set_sampler_threads
from gnnscale.sampling.device import DeviceNeighborSampler

HERE = Path(__file__).resolve().parent
DGL_SCRIPT = HERE.parent.parent / "shared" / "tools" / "anchors" / "dgl_sampling.py"


def cached_graph(scale: float, seed: int, cache: Path) -> tuple[CSCGraph, Path]:
    """The products-shaped topology, built once per (scale, seed) and kept as an .npz."""
    path = cache / f"products_scale{scale:g}_seed{seed}.npz"
    if not path.exists():
        start = time.perf_counter()
        cfg = dataclasses.replace(products_like_config(scale), feature_dim=1, seed=seed)
        graph = make_synthetic(cfg).graph
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, indptr=graph.indptr, indices=graph.indices)
        os.replace(tmp, path)
        print(f"built {graph.num_nodes} nodes, {graph.num_edges} edges in {time.perf_counter() - start:.0f}s "
              f"-> {path}", flush=True)
    z = np.load(path)
    graph = CSCGraph(indptr=z["indptr"], indices=z["indices"], num_nodes=z["indptr"].shape[0] - 1)
    return graph, path


def seed_batches(num_nodes: int, batch_size: int, seed: int, cache: Path, num_batches: int = 8
                 ) -> tuple[np.ndarray, Path]:
    """int64 [num_batches, batch_size]: unique seeds per batch, as DGL's script reads them."""
    path = cache / f"seeds_n{num_nodes}_b{batch_size}_k{num_batches}_seed{seed}.npy"
    rng = np.random.default_rng(seed)
    batches = np.stack([rng.choice(num_nodes, batch_size, replace=False) for _ in range(num_batches)])
    np.save(path, batches.astype(np.int64))
    return batches, path


def time_gnnscale(graph, batches, fanouts, threads, method, repeat, device: str = "cpu") -> dict:
    set_sampler_threads(threads)
    import torch

    torch.set_num_threads(threads)
    if method == "device":
        sampler = DeviceNeighborSampler(graph, fanouts, device=device)
        batches = [torch.from_numpy(seeds).to(sampler.device) for seeds in batches]
    else:
        sampler = NeighborSampler(graph, fanouts, method=method)
    sampler.sample(batches[0], derive_key(0))  # warm-up (and numba compilation)
    times, edges = [], 0
    for r in range(repeat):
        start = time.perf_counter()
        edges = 0
        for step, seeds in enumerate(batches):
            edges += sum(b.num_edges for b in sampler.sample(seeds, derive_key(r, 0, step)))
        if method == "device" and sampler.device.type == "cuda":
            torch.cuda.synchronize(sampler.device)  # the last hop's kernels may still be running
        times.append(time.perf_counter() - start)
    dt = statistics.median(times)
    return {"sampler": f"gnnscale_{method}", "ms_per_batch": 1e3 * dt / len(batches),
            "edges_per_batch": edges / len(batches), "medges_per_s": edges / dt / 1e6}


def time_dgl(dgl_python, graph_path, seeds_path, fanouts, threads, repeat) -> list[dict]:
    cmd = [dgl_python, str(DGL_SCRIPT), str(graph_path), str(seeds_path), "--fanouts", ",".join(map(str, fanouts)),
           "--threads", str(threads), "--repeat", str(repeat)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DGLBACKEND": "pytorch"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [{k: r[k] for k in ("sampler", "ms_per_batch", "edges_per_batch", "medges_per_s")} for r in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of products' 2.4M nodes")
    p.add_argument("--batch-sizes", default="1024,8192")
    p.add_argument("--fanouts", nargs="+", default=["15,10,5", "20,20,20"])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--num-batches", type=int, default=8, help="fixed seed batches timed per repeat")
    p.add_argument("--samplers", default="fused,two_step", help="of fused, two_step, device (torch ops)")
    p.add_argument("--device", default="cpu", help="where the device sampler runs (cpu, cuda, cuda:N)")
    p.add_argument("--dgl-python", default=None, help="python of the anchor environment (shared/tools/anchors)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--cache-dir", default=str(HERE / ".cache"), help="where the graph and seed batches are cached "
                   "(default benchmarks/.cache; the full-size graph takes about 1.5 GB)")
    a = p.parse_args()
    cache = Path(a.cache_dir)
    graph, graph_path = cached_graph(a.scale, a.seed, cache)
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges, indices {graph.indices.dtype}", flush=True)
    rows = []
    print_header()
    for batch_size in (int(b) for b in a.batch_sizes.split(",")):
        batches, seeds_path = seed_batches(graph.num_nodes, batch_size, a.seed, cache, a.num_batches)
        for fanouts in (tuple(int(f) for f in spec.split(",")) for spec in a.fanouts):
            for threads in (int(t) for t in a.threads.split(",")):
                results = [time_gnnscale(graph, batches, fanouts, threads, m, a.repeat, a.device)
                           for m in a.samplers.split(",")]
                if a.dgl_python:
                    results += time_dgl(a.dgl_python, graph_path, seeds_path, fanouts, threads, a.repeat)
                dgl_fused = next((r["ms_per_batch"] for r in results if r["sampler"] == "dgl_sample_neighbors_fused"),
                                 None)
                for r in results:
                    r.update(batch_size=batch_size, fanouts=",".join(map(str, fanouts)), threads=threads,
                             speedup_vs_dgl_fused=dgl_fused / r["ms_per_batch"] if dgl_fused else None)
                    rows.append(r)
                    print_row(r)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process (graph + sampling): {peak_mb:.0f} MB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"graph": {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges}, "rows": rows,
                       "peak_rss_mb": peak_mb}, f, indent=2)


def print_header() -> None:
    print(f"{'batch':>6} {'fanouts':>9} {'thr':>3} {'sampler':32} {'ms/batch':>9} {'Medges/s':>9} {'x dgl_fused':>11}")


def print_row(r: dict) -> None:
    ratio = f"{r['speedup_vs_dgl_fused']:.2f}" if r["speedup_vs_dgl_fused"] else "-"
    print(f"{r['batch_size']:6d} {r['fanouts']:>9} {r['threads']:3d} {r['sampler']:32} {r['ms_per_batch']:9.2f} "
          f"{r['medges_per_s']:9.2f} {ratio:>11}", flush=True)


if __name__ == "__main__":
    main()
