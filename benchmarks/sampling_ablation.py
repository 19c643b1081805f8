"""What each kernel change is worth: the fused sampler minus one change at a time, same graph and seeds.

    python benchmarks/sampling_ablation.py [--scale 1.0] [--batch-size 1024] [--fanouts 15,10,5]
                                           [--threads 1,2] [--repeat 5]

Variants (each in its own process with an empty numba cache, so the patched constants are compiled in):
  full           the kernel as shipped
  no_prefetch    no software prefetch (row pointers, neighborhoods, mapping-array lookups)
  int64_map      the mapping array in int64 instead of int32
  no_pipeline    one chunk per hop: all threads choose, then thread 0 relabels (serial after parallel)
  none           all three removed: the first version of the kernel

Prints ms per batch (median of --repeat passes over 8 batches) and each variant's slowdown against
``full`` with the same thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("full", "no_prefetch", "int64_map", "no_pipeline", "none")
NEVER = 1 << 40  # a prefetch distance or chunk size no loop ever reaches


def apply_variant(variant: str) -> None:
    """Patch module constants before anything is compiled (the child process does this first)."""
    import numpy as np

    from gnnscale.sampling import choose, fused

    if variant in ("no_prefetch", "none"):
        choose.PREFETCH_DISTANCE = NEVER
        fused.RELABEL_PREFETCH = NEVER
    if variant in ("int64_map", "none"):
        fused.index_dtype = lambda num_nodes: np.dtype(np.int64)
    if variant in ("no_pipeline", "none"):
        fused.CHUNK_EDGES = NEVER


def child(variant: str, scale: float, batch_size: int, fanouts: str, threads: str, repeat: int) -> None:
    apply_variant(variant)
    from sampling import cached_graph, seed_batches, time_gnnscale

    graph, _ = cached_graph(scale, 0, HERE / ".cache")
    batches, _ = seed_batches(graph.num_nodes, batch_size, 0, HERE / ".cache")
    for t in (int(x) for x in threads.split(",")):
        row = time_gnnscale(graph, batches, tuple(int(f) for f in fanouts.split(",")), t, "fused", repeat)
        print(json.dumps({"variant": variant, "threads": t, **row}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.scale, a.batch_size, a.fanouts, a.threads, a.repeat)
        return
    rows = []
    for variant in VARIANTS:
        with tempfile.TemporaryDirectory() as cache_dir:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--scale", str(a.scale),
                                  "--batch-size", str(a.batch_size), "--fanouts", a.fanouts, "--threads", a.threads,
                                  "--repeat", str(a.repeat)],
                                 check=True, capture_output=True, text=True,
                                 env={**os.environ, "NUMBA_CACHE_DIR": cache_dir}).stdout
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    full = {r["threads"]: r["ms_per_batch"] for r in rows if r["variant"] == "full"}
    print(f"batch {a.batch_size}, fanouts {a.fanouts}, scale {a.scale}")
    print(f"{'variant':12} {'thr':>3} {'ms/batch':>9} {'Medges/s':>9} {'x full':>7}")
    for r in rows:
        print(f"{r['variant']:12} {r['threads']:3d} {r['ms_per_batch']:9.2f} {r['medges_per_s']:9.2f} "
              f"{r['ms_per_batch'] / full[r['threads']]:7.2f}")


if __name__ == "__main__":
    main()
