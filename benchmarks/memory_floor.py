"""How far is the fused sampler from what the memory system allows? A floor estimate.

    python benchmarks/memory_floor.py [--scale 1.0] [--batch-size 1024] [--fanouts 15,10,5]

1. Measures this machine, one thread: streaming read bandwidth (GB/s), the latency of a dependent
   random read (pointer chasing, ns), and the cost of an independent random read when many are in
   flight (a gather, ns per access), over arrays far larger than the caches; and the same gather
   over an array the size of the sampler's mapping array (cache-resident or not).
2. Counts what one batch must touch, from a real sampled batch: per destination one random line of
   ``indptr`` and the cache lines of ``indices`` that hold its chosen neighbors; per edge one lookup
   in the mapping array; sequential bytes for the CSC output (chosen ids written, read and rewritten
   by the relabel, the node list).
3. Floor = random DRAM lines x independent-read cost + mapping lookups x their gather cost +
   sequential bytes / bandwidth, and compares it with the measured ms per batch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numba
import numpy as np

from gnnscale.sampling import NeighborSampler, derive_key, set_sampler_threads

HERE = Path(__file__).resolve().parent


@numba.njit(cache=True)
def _stream_sum(a):
    s = 0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@numba.njit(cache=True)
def _chase(next_index, steps):
    i = 0
    for _ in range(steps):
        i = next_index[i]
    return i


@numba.njit(cache=True)
def _gather_sum(a, idx):
    s = 0
    for i in range(idx.shape[0]):
        s += a[idx[i]]
    return s


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def machine(rng: np.random.Generator, map_entries: int, map_itemsize: int) -> dict:
    big = np.ones(256 * 2**20 // 8, dtype=np.int64)  # 256 MB, far beyond the 32 MB L3
    _stream_sum(big[:10])
    bandwidth = big.nbytes / best_of(lambda: _stream_sum(big)) / 1e9
    # One random cycle through 16M slots (128 MB): every step a dependent miss.
    n = 2**24
    order = rng.permutation(n)
    chain = np.empty(n, dtype=np.int64)
    chain[order[:-1]] = order[1:]
    chain[order[-1]] = order[0]
    steps = 2_000_000
    _chase(chain, 10)
    dependent_ns = best_of(lambda: _chase(chain, steps), 3) / steps * 1e9
    idx = rng.integers(0, big.shape[0], 4_000_000)
    _gather_sum(big, idx[:10])
    independent_ns = best_of(lambda: _gather_sum(big, idx), 3) / idx.shape[0] * 1e9
    small = np.ones(map_entries, dtype=np.int32 if map_itemsize == 4 else np.int64)
    small_idx = rng.integers(0, map_entries, 4_000_000)
    map_ns = best_of(lambda: _gather_sum(small, small_idx), 3) / small_idx.shape[0] * 1e9
    return {"bandwidth_gb_s": bandwidth, "dependent_read_ns": dependent_ns, "independent_read_ns": independent_ns,
            "mapping_lookup_ns": map_ns}


def batch_traffic(graph, blocks, itemsize: int) -> dict:
    """Random DRAM lines, mapping lookups and sequential bytes of one sampled batch (all hops)."""
    deg = np.diff(graph.indptr)
    ids_per_line = 64 // itemsize
    random_lines = 0
    mapping_lookups = 0
    seq_bytes = 0
    for block in blocks:
        dst = block.dst_ids.numpy()
        counts = block.in_degrees().numpy()
        span = -(-deg[dst] // ids_per_line)  # lines holding each neighborhood
        random_lines += dst.shape[0] + int(np.minimum(span, counts).sum())  # indptr line + touched lines
        mapping_lookups += block.num_edges
        # chosen ids written once (8 B), read and rewritten by the relabel (16 B), offsets, node list
        seq_bytes += 24 * block.num_edges + 8 * (dst.shape[0] + 1) + 8 * (block.num_src - block.num_dst)
    return {"random_dram_lines": random_lines, "mapping_lookups": mapping_lookups, "sequential_bytes": seq_bytes,
            "edges": sum(b.num_edges for b in blocks)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cache-dir", default=str(HERE / ".cache"), help="where sampling.py's graph and seeds are cached")
    a = p.parse_args()
    from sampling import cached_graph, seed_batches  # the benchmark's own cached graph and seeds

    cache = Path(a.cache_dir)
    graph, _ = cached_graph(a.scale, 0, cache)
    batches, _ = seed_batches(graph.num_nodes, a.batch_size, 0, cache)  # 8 batches
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    set_sampler_threads(1)
    sampler = NeighborSampler(graph, fanouts)
    rng = np.random.default_rng(0)
    print("measuring the memory system (1 thread)...", flush=True)
    m = machine(rng, graph.num_nodes, sampler.workspace.node_map.itemsize)
    print(f"machine (1 thread): stream read {m['bandwidth_gb_s']:.1f} GB/s, dependent random read "
          f"{m['dependent_read_ns']:.0f} ns, independent random read {m['independent_read_ns']:.1f} ns/access, "
          f"mapping-array lookup {m['mapping_lookup_ns']:.1f} ns/access", flush=True)
    sampler.sample(batches[0], derive_key(0))
    per_batch = []
    for r in range(a.repeat):
        start = time.perf_counter()
        for step, seeds in enumerate(batches):
            sampler.sample(seeds, derive_key(r, 0, step))
        per_batch.append((time.perf_counter() - start) / len(batches))
    measured_ms = statistics.median(per_batch) * 1e3
    traffic = [batch_traffic(graph, sampler.sample(s, derive_key(9, 0, i)), graph.indices.itemsize)
               for i, s in enumerate(batches)]
    t = {k: statistics.mean(x[k] for x in traffic) for k in traffic[0]}
    floor_random = t["random_dram_lines"] * m["independent_read_ns"] * 1e-6
    floor_map = t["mapping_lookups"] * m["mapping_lookup_ns"] * 1e-6
    floor_seq = t["sequential_bytes"] / (m["bandwidth_gb_s"] * 1e9) * 1e3
    floor_ms = floor_random + floor_map + floor_seq
    print(f"per batch (batch {a.batch_size}, fanouts {a.fanouts}): {t['edges']:.0f} edges, "
          f"{t['random_dram_lines']:.0f} random DRAM lines ({t['random_dram_lines'] / t['edges']:.2f}/edge), "
          f"{t['mapping_lookups']:.0f} mapping lookups, {t['sequential_bytes'] / 1e6:.1f} MB sequential "
          f"({t['sequential_bytes'] / t['edges']:.0f} B/edge)")
    print(f"floor: {floor_random:.1f} ms random lines + {floor_map:.1f} ms mapping + {floor_seq:.1f} ms streaming "
          f"= {floor_ms:.1f} ms per batch; measured fused (1 thread) {measured_ms:.1f} ms = "
          f"{measured_ms / floor_ms:.2f}x the floor")


if __name__ == "__main__":
    main()
