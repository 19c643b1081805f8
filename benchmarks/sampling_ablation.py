"""What each kernel change is worth: the fused sampler minus one change at a time, same graph and seeds.

    python benchmarks/sampling_ablation.py [--scale 1.0] [--batch-size 1024] [--fanouts 15,10,5]
                                           [--threads 1,2] [--repeat 5]

Variants (each in its own process with an empty numba cache, so the patched constants are compiled in):
  full           the kernel as shipped
  no_prefetch    no software prefetch (row pointers, neighborhoods, mapping-array lookups)
  int64_map      the mapping array in int64 instead of int32
  no_pipeline    one chunk per hop: all threads choose, then thread 0 relabels (serial after parallel)
  none           all three removed: the first version of the kernel

The machine drifts between processes by more than some of these effects, so the variants run
round-robin for ``--rounds`` rounds; the table shows, per variant and thread count, the median over
rounds of each child's ms per batch (itself the median of ``--repeat`` passes over 8 batches), and
the slowdown against ``full`` with the same thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def child(variant: str, scale: float, batch_size: int, fanouts: str, threads: str, repeat: int, cache: Path) -> None:
    apply_variant(variant)
    from sampling import cached_graph, seed_batches, time_gnnscale

    graph, _ = cached_graph(scale, 0, cache)
    batches, _ = seed_batches(graph.num_nodes, batch_size, 0, cache)
    for t in (int(x) for x in threads.split(",")):
        row = time_gnnscale(graph, batches, tuple(int(f) for f in fanouts.split(",")), t, "fused", repeat)
        print(json.dumps({"variant": variant, "threads": t, **row}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cache-dir", default=str(HERE / ".cache"), help="where sampling.py's graph and seeds are cached")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.scale, a.batch_size, a.fanouts, a.threads, a.repeat, Path(a.cache_dir))
        return
    samples: dict[tuple[str, int], list[dict]] = {}
    for r in range(a.rounds):
        # Rotate the order: a child's position in the round shifted its time by ~9% (same code measured
        # 33.6 vs 30.5 ms), so every variant takes every position once in len(VARIANTS) rounds.
        for variant in VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]:
            for row in run_child(variant, a):
                samples.setdefault((variant, row["threads"]), []).append(row)
                print(f"round {r + 1}/{a.rounds}: {variant} {row['threads']} thread(s) {row['ms_per_batch']:.1f} ms",
                      flush=True)
    ms = {k: statistics.median(r["ms_per_batch"] for r in rows) for k, rows in samples.items()}
    print(f"batch {a.batch_size}, fanouts {a.fanouts}, scale {a.scale}, median of {a.rounds} rounds")
    print(f"{'variant':12} {'thr':>3} {'ms/batch':>9} {'Medges/s':>9} {'x full':>7}   per round")
    for (variant, threads), value in ms.items():
        edges = samples[(variant, threads)][0]["edges_per_batch"]
        rounds = " ".join(f"{r['ms_per_batch']:.1f}" for r in samples[(variant, threads)])
        print(f"{variant:12} {threads:3d} {value:9.2f} {edges / value / 1e3:9.2f} {value / ms[('full', threads)]:7.2f}"
              f"   {rounds}")


def run_child(variant: str, a) -> list[dict]:
    with tempfile.TemporaryDirectory() as cache_dir:
        out = subprocess.run([sys.executable, __file__, "--child", variant, "--scale", str(a.scale),
                              "--batch-size", str(a.batch_size), "--fanouts", a.fanouts, "--threads", a.threads,
                              "--repeat", str(a.repeat), "--cache-dir", a.cache_dir],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "NUMBA_CACHE_DIR": cache_dir}).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


if __name__ == "__main__":
    main()
