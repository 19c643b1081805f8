"""Matrix bulk sampling (Tripathy et al.): throughput against the fused kernel, sparse libraries, and
LADIES accuracy against neighbor sampling.

    python benchmarks/bulk.py throughput [--scale 0.25] [--batch-size 1024] [--fanouts 15,10,5]
                                         [--bulks 1,8,48,all] [--threads 2] [--repeat 3] [--ladies 512]
    python benchmarks/bulk.py libraries  [--scale 0.25] [--batches 4]
    python benchmarks/bulk.py accuracy --data-dir ../shared/data/cora_planetoid [--seeds 5] [--layer-size 512]

throughput: one epoch's batches (the products split's 8% training nodes, in a fixed random order) on
the products-shaped graph cached by benchmarks/sampling.py; the fused kernel samples them one by one,
the matrix sampler ``k`` at a time for every ``k`` in ``--bulks`` (``all``: the whole epoch in one
stack), in the same run, round-robin, median over ``--repeat`` passes. Ratios are against the matrix
sampler with k = 1 and against the fused kernel. ``--ladies S`` adds LADIES (S nodes per layer) at the
same bulks. The peak memory growth of one bulk (measured outside the timed passes) is what a bulk costs.

libraries: the product ``P = Q A`` of one stack, through scipy (the row gather gnnscale uses, and the
general SpGEMM) and torch.sparse (CSR @ CSR), and LADIES' ``Q (P ∘ P)`` through both.

accuracy: GCN on Cora (standard split, benchmarks/cora_accuracy.py's settings: neighbor sampling with
fanouts above the largest degree) against the same GCN trained on LADIES blocks, ``--seeds`` seeds each.

    python benchmarks/bulk.py device [--scale 0.25] [--batches 48] [--bulks 1,8,48] [--ladies 512]
                                     [--device auto] [--threads 2] [--repeat 3] [--json F]

device: the matrix samplers on the host (numba, scipy) against their torch-ops twins on ``--device`` (CUDA:
cuSPARSE; the CPU: the same code on CPU tensors, a check that it runs, not a speed), over the first
``--batches`` batches of the throughput epoch, ``k`` at a time for every ``k`` in ``--bulks``, round-robin,
median over ``--repeat`` passes; each row also says whether the device drew the host's blocks
(:func:`matrix_rows`, which benchmarks/gpu.py calls too).

    python benchmarks/bulk.py layouts [--scale 0.02] [--workers 4] [--replications 1,2,4] [--bulk 4] [--plot F]

layouts: the distributed matrix sampler on a products-shaped dataset partitioned (METIS, cached) into
``--workers`` parts, one torchrun launch (gloo, 1 thread per worker, 2 epochs: the second is reported) per layout: ``1d`` (topology
replicated) and ``1.5d --replication C`` for every C. Per bulk (rank 0, from its metrics JSON):
sampling and feature bytes and rounds, seconds of sampling; per worker (max over workers): the topology
and feature bytes held and the peak RSS. ``--plot`` draws bytes and memory against C.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.synthetic import make_synthetic, products_like_config
from gnnscale.partition import write_partition_dir
from gnnscale.nn import ModelConfig
from gnnscale.sampling import NeighborSampler, derive_key, set_sampler_threads
from gnnscale.devices import resolve_device
from gnnscale.graph.csc import CSCGraph
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.sampling.matrix.device_ladies import DeviceLadiesSampler
from gnnscale.sampling.matrix.device_sage import DeviceMatrixSampler
from gnnscale.sampling.matrix.products import adjacency_pattern, batch_selection, gcn_operator, stack_rows
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model
from gnnscale.train.layouts.registry import layout_spec

from cora_accuracy import SETTINGS
from sampling import cached_graph

HERE = Path(__file__).resolve().parent
TRAIN_FRACTION = 0.08  # products' training split (products_like_config)


def epoch_batches(num_nodes: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """One epoch: the training nodes (8% of the graph) in a fixed random order, cut into batches."""
    rng = np.random.default_rng(seed)
    train = rng.choice(num_nodes, int(round(TRAIN_FRACTION * num_nodes)), replace=False)
    return [b for b in np.array_split(train, math.ceil(train.shape[0] / batch_size))]


def sample_epoch(sampler, batches: list[np.ndarray], k: int, repeat: int) -> tuple[int, int]:
    """(sampled edges, number of sampler calls) for one pass, ``k`` batches per call."""
    edges = calls = 0
    for first in range(0, len(batches), k):
        group = batches[first:first + k]
        keys = [derive_key(repeat, 0, first + i) for i in range(len(group))]
        for blocks in sampler.sample_many(group, keys):
            edges += sum(b.num_edges for b in blocks)
        calls += 1
    return edges, calls


def peak_mb(sampler, batches: list[np.ndarray], k: int) -> float:
    """Growth of the peak resident memory while one bulk is sampled and its blocks held (Linux: the
    kernel's high-water mark, reset through /proc/self/clear_refs), in MB. numba's arrays are not
    seen by tracemalloc, hence the kernel's count."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_mb("VmRSS")
    blocks = sampler.sample_many(batches[:k], list(range(min(k, len(batches)))))
    grown = _status_mb("VmHWM") - before
    del blocks
    return grown


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def throughput(a) -> None:
    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    graph, _ = cached_graph(a.scale, a.seed, Path(a.cache_dir))
    batches = epoch_batches(graph.num_nodes, a.batch_size, a.seed)
    bulks = [len(batches) if k == "all" else int(k) for k in a.bulks.split(",")]
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; {len(batches)} batches of {a.batch_size}, "
          f"fanouts {fanouts}, {a.threads} threads", flush=True)
    runs = {("fused", 1): NeighborSampler(graph, fanouts)}
    runs.update({("matrix", k): MatrixSampler(graph, fanouts, bulk=k) for k in bulks})
    if a.ladies:
        ladies = LadiesSampler(graph, (a.ladies,) * len(fanouts))
        runs.update({("ladies", k): ladies for k in bulks})
    for (name, k), sampler in runs.items():  # warm-up: numba compilation, first-touch of the graph
        sample_epoch(sampler, batches[:2], min(k, 2), 0)
    memory = {run: peak_mb(sampler, batches, run[1]) for run, sampler in runs.items()}
    times = {run: [] for run in runs}
    phases = {run: [] for run in runs}
    edges = {}
    for r in range(a.repeat):
        for (name, k), sampler in runs.items():
            before = dict(getattr(sampler, "phase_seconds", {}))
            start = time.perf_counter()
            edges[(name, k)], _ = sample_epoch(sampler, batches, k, r)
            times[(name, k)].append(time.perf_counter() - start)
            phases[(name, k)].append({p: sampler.phase_seconds[p] - before[p] for p in before})
    rows = [throughput_row(run, statistics.median(times[run]), edges[run], len(batches), memory[run])
            for run in runs]
    for row, run in zip(rows, runs):  # per step of the matrix samplers, ms per batch, from the median pass
        median_pass = sorted(range(a.repeat), key=lambda i: times[run][i])[a.repeat // 2]
        row["phase_ms_per_batch"] = {p: 1e3 * s / len(batches) for p, s in phases[run][median_pass].items()}
    print_throughput(rows)
    if a.json:
        Path(a.json).write_text(json.dumps({"graph": {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges},
                                            "batch_size": a.batch_size, "fanouts": fanouts, "threads": a.threads,
                                            "rows": rows}, indent=2))


def throughput_row(run, seconds: float, edges: int, num_batches: int, memory_mb: float) -> dict:
    name, k = run
    return {"sampler": name, "bulk": k, "ms_per_batch": 1e3 * seconds / num_batches,
            "ms_per_bulk": 1e3 * seconds / math.ceil(num_batches / k), "medges_per_s": edges / seconds / 1e6,
            "peak_mb_per_bulk": memory_mb}


def print_throughput(rows: list[dict]) -> None:
    fused = next(r for r in rows if r["sampler"] == "fused")
    print(f"{'sampler':8} {'bulk':>5} {'ms/batch':>9} {'ms/bulk':>9} {'Medges/s':>9} {'x bulk 1':>9} "
          f"{'x fused':>8} {'peak MB/bulk':>12}  ms/batch per step")
    for r in rows:
        single = next(s for s in rows if s["sampler"] == r["sampler"] and s["bulk"] == 1)
        # LADIES draws other blocks than the fused kernel: a time ratio against it would compare apples to pears.
        vs_fused = f"{fused['ms_per_batch'] / r['ms_per_batch']:8.2f}" if r["sampler"] != "ladies" else f"{'-':>8}"
        print(f"{r['sampler']:8} {r['bulk']:5d} {r['ms_per_batch']:9.2f} {r['ms_per_bulk']:9.1f} "
              f"{r['medges_per_s']:9.2f} {single['ms_per_batch'] / r['ms_per_batch']:9.2f} {vs_fused} "
              f"{r['peak_mb_per_bulk']:12.0f}  {_phases(r['phase_ms_per_batch'])}", flush=True)


def _phases(ms: dict) -> str:
    return " ".join(f"{name} {value:.1f}" for name, value in ms.items())


def libraries(a) -> None:
    """``Q A`` of one stack through scipy and torch.sparse (single thread each: scipy has one)."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # torch: "Sparse CSR tensor support is in beta"
    graph, _ = cached_graph(a.scale, a.seed, Path(a.cache_dir))
    batches = epoch_batches(graph.num_nodes, a.batch_size, a.seed)[:a.batches]
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    # Q's rows: the destinations of the stack's second hop (seeds and their sampled neighbors).
    blocks = MatrixSampler(graph, fanouts).sample_many(batches, list(range(len(batches))))
    dst = [b[-2].dst_ids.numpy() for b in blocks]
    ptr = np.concatenate([[0], np.cumsum([d.shape[0] for d in dst])])
    stacked = stack_rows(np.concatenate(dst), ptr, np.full(graph.num_nodes, -1, dtype=np.int64))
    n, rows = graph.num_nodes, stacked.nodes.shape[0]
    a_pattern = adjacency_pattern(graph)
    a_float = sp.csr_matrix((np.ones(graph.num_edges, np.float32), graph.indices, graph.indptr), shape=(n, n))
    q = sp.csr_matrix((np.ones(rows, np.float32), stacked.nodes, np.arange(rows + 1)), shape=(rows, n))
    a_torch = torch.sparse_csr_tensor(torch.from_numpy(graph.indptr), torch.from_numpy(graph.indices.astype(np.int64)),
                                      torch.ones(graph.num_edges), (n, n))
    q_torch = torch.sparse_csr_tensor(torch.arange(rows + 1), torch.from_numpy(stacked.nodes), torch.ones(rows),
                                      (rows, n))
    op = gcn_operator(graph, self_loops=True)
    op2 = op.multiply(op).tocsr()
    q_ladies = batch_selection(stack_rows(np.concatenate(batches), np.concatenate(
        [[0], np.cumsum([b.shape[0] for b in batches])]), np.full(n, -1, dtype=np.int64)))
    needed = stack_rows(np.concatenate(batches), np.concatenate([[0], np.cumsum([b.shape[0] for b in batches])]),
                        np.full(n, -1, dtype=np.int64)).needed
    op2_needed = op2[needed]
    op2_torch = torch.sparse_csr_tensor(torch.from_numpy(op2_needed.indptr.astype(np.int64)),
                                        torch.from_numpy(op2_needed.indices.astype(np.int64)),
                                        torch.from_numpy(op2_needed.data), op2_needed.shape)
    ql_torch = torch.sparse_csr_tensor(torch.from_numpy(q_ladies.indptr.astype(np.int64)),
                                       torch.from_numpy(q_ladies.indices.astype(np.int64)),
                                       torch.from_numpy(q_ladies.data), q_ladies.shape)
    cases = [
        ("GraphSAGE P = Q A", "scipy row gather A[needed] (gnnscale)", lambda: a_pattern[stacked.needed]),
        ("GraphSAGE P = Q A", "scipy row gather A[rows of Q] (P unfactored)", lambda: a_pattern[stacked.nodes]),
        ("GraphSAGE P = Q A", "scipy SpGEMM Q @ A", lambda: q @ a_float),
        ("GraphSAGE P = Q A", "torch.sparse.mm CSR @ CSR", lambda: torch.sparse.mm(q_torch, a_torch)),
        ("LADIES Q (P o P)", "scipy SpGEMM (gnnscale)", lambda: q_ladies @ op2_needed),
        ("LADIES Q (P o P)", "torch.sparse.mm CSR @ CSR", lambda: torch.sparse.mm(ql_torch, op2_torch)),
    ]
    print(f"stack of {len(batches)} batches: {rows} rows of Q (hop 2), {needed.shape[0]} seeds for LADIES")
    print(f"{'product':20} {'library call':40} {'ms':>9} {'x gnnscale':>10}")
    base = {}
    for product, call, fn in cases:
        seconds = statistics.median(_timed(fn) for _ in range(a.repeat))
        base.setdefault(product, seconds)
        print(f"{product:20} {call:40} {1e3 * seconds:9.1f} {base[product] / seconds:10.2f}", flush=True)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def device(a) -> None:
    """The matrix samplers on the host against their twins on a device (see the module docstring)."""
    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    graph, _ = cached_graph(a.scale, a.seed, Path(a.cache_dir))
    batches = epoch_batches(graph.num_nodes, a.batch_size, a.seed)[:a.batches]
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    where = resolve_device(a.device)
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; {len(batches)} batches of {a.batch_size}, "
          f"fanouts {fanouts}, LADIES {a.ladies} per layer; host: {a.threads} threads, device: {where}", flush=True)
    rows = matrix_rows(graph, batches, fanouts=fanouts, layer_size=a.ladies, bulks=[int(k) for k in a.bulks.split(",")],
                       device=where, repeat=a.repeat)
    print_matrix_rows(rows)
    if a.json:
        Path(a.json).write_text(json.dumps({"graph": {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges},
                                            "batch_size": a.batch_size, "device": str(where), "rows": rows}, indent=2))


def matrix_rows(graph: CSCGraph, batches: list[np.ndarray], *, fanouts: tuple[int, ...], layer_size: int,
                bulks: list[int], device: torch.device, repeat: int) -> list[dict]:
    """GraphSAGE (``fanouts``) and LADIES (``layer_size`` nodes per layer, GCN's operator) sampled on the host and
    on ``device`` over ``batches``, ``k`` at a time for every ``k`` in ``bulks``: one row per (sampler, k) with
    both median times per batch, their ratio and whether the device drew the host's blocks on the first stack
    (GraphSAGE: bit for bit; LADIES: the same nodes and edges, its weights within rounding)."""
    layers = (layer_size,) * len(fanouts)
    pairs = {"matrix": (MatrixSampler(graph, fanouts), DeviceMatrixSampler(graph, fanouts, device=device)),
             "ladies": (LadiesSampler(graph, layers), DeviceLadiesSampler(graph, layers, device=device))}
    rows = []
    for name, (host, on_device) in pairs.items():
        for k in bulks:
            first, keys = batches[:k], [derive_key(0, 0, i) for i in range(min(k, len(batches)))]
            same = _same_structure(on_device.sample_many(first, keys), host.sample_many(first, keys))  # and warm-up
            times = {"host": [], "device": []}
            for r in range(repeat):
                for side, sampler in (("host", host), ("device", on_device)):
                    start = time.perf_counter()
                    sample_epoch(sampler, batches, k, r)
                    if side == "device" and device.type == "cuda":
                        torch.cuda.synchronize(device)  # the device's work, not only its launch
                    times[side].append(time.perf_counter() - start)
            host_ms, device_ms = (1e3 * statistics.median(times[s]) / len(batches) for s in ("host", "device"))
            rows.append({"sampler": name, "bulk": k, "host_ms_per_batch": host_ms, "device_ms_per_batch": device_ms,
                         "host_over_device": host_ms / device_ms, "same_blocks": same})
    return rows


def _same_structure(got: list[list], want: list[list]) -> bool:
    """The same sources and edges in every block (weights aside: LADIES' are equal within rounding)."""
    return all(torch.equal(g.src_ids.cpu(), w.src_ids) and torch.equal(g.indptr.cpu(), w.indptr)
               and torch.equal(g.indices.cpu(), w.indices)
               for batch_got, batch_want in zip(got, want, strict=True)
               for g, w in zip(batch_got, batch_want, strict=True))


def print_matrix_rows(rows: list[dict]) -> None:
    print(f"{'sampler':8} {'bulk':>5} {'host ms/batch':>14} {'device ms/batch':>16} {'host/device':>12} "
          f"{'same blocks':>12}")
    for r in rows:
        print(f"{r['sampler']:8} {r['bulk']:5d} {r['host_ms_per_batch']:14.2f} {r['device_ms_per_batch']:16.2f} "
              f"{r['host_over_device']:12.2f} {str(r['same_blocks']):>12}", flush=True)


def accuracy(a) -> None:
    """GCN on Cora: neighbor sampling (full neighborhoods) against LADIES, mean test accuracy over seeds."""
    dataset = load_dataset("cora", a.data_dir)
    model_opts, train_opts, _, _ = SETTINGS["gcn"]
    model_cfg = ModelConfig(name="gcn", in_dim=dataset.feature_dim, num_classes=dataset.num_classes, num_layers=2,
                            **model_opts)
    results = {}
    for label, extra in (("neighbor sampling", dict(sampler="fused")),
                         (f"LADIES {a.layer_size}/layer", dict(sampler="ladies", layer_size=a.layer_size))):
        start = time.perf_counter()
        accs = []
        for seed in range(a.seeds):
            cfg = TrainConfig(batch_size=int(dataset.train_idx.size), seed=seed, threads=a.threads, **train_opts,
                              **extra)
            report = fit(seeded_model(model_cfg, cfg.seed), dataset, inputs="blocks", config=cfg, progress=False)
            accs.append(report.test_acc_at_best_val)
            print(f"  {label} seed {seed}: {accs[-1]:.4f}", flush=True)
        results[label] = (accs, time.perf_counter() - start)
    (base_label, (base, _)), = [(k, v) for k, v in results.items() if k == "neighbor sampling"]
    print(f"{'GCN on Cora':24} {'mean test acc':>13} {'std':>6} {'vs neighbor':>11} {'s':>6}")
    for label, (accs, seconds) in results.items():
        diff = statistics.mean(accs) - statistics.mean(base)
        print(f"{label:24} {statistics.mean(accs):13.4f} {statistics.pstdev(accs):6.4f} {100 * diff:+10.2f}pt "
              f"{seconds:6.0f}")
    if a.json:
        Path(a.json).write_text(json.dumps({k: {"accs": v[0], "seconds": v[1]} for k, v in results.items()}, indent=2))


def layouts(a) -> None:
    """1d and 1.5d at every C: bytes, rounds and seconds per bulk, memory per worker."""
    parts = cached_partitions(a.scale, a.workers, Path(a.cache_dir))
    runs = [("1d", 1)] + [("1.5d", c) for c in (int(c) for c in a.replications.split(","))]
    rows = []
    for layout, c in runs:
        out = Path(a.cache_dir) / f"layout_{layout}_{c}.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.workers),
               "-m", "gnnscale", "train", "--partitions", str(parts), "--layout", layout, "--sampler", "matrix",
               "--bulk", str(a.bulk), "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--epochs", "2",
               "--no-eval", "--quiet", "--threads", "1", "--model", "sage", "--hidden", "64", "--overwrite",
               "--metrics-out", str(out), "--timeout", "600"]
        if layout_spec(layout).replication:
            cmd += ["--replication", str(c)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
        h = json.loads(out.read_text())["history"][-1]  # epoch 2: JIT compilation done
        rows.append({"layout": layout, "C": c, "bulk": h["bulk"], "num_bulks": h["num_bulks"],
                     "sample_rounds": h["rounds_per_bulk"]["sample"], "sample_bytes": h["bytes_per_bulk"]["sample"],
                     "feature_rounds": h["rounds_per_bulk"]["feature"],
                     "feature_bytes": h["bytes_per_bulk"]["feature"], "seconds_per_bulk": h["seconds_per_bulk"],
                     "epoch_s": h["epoch_s"], "held_mb": h["memory"]["held_bytes_max"] / 2**20,
                     "peak_rss_mb": h["memory"]["peak_rss_bytes_max"] / 2**20,
                     "launch_s": time.perf_counter() - start})
        print(f"  {layout} C={c}: done in {rows[-1]['launch_s']:.0f}s", flush=True)
    print_layouts(rows)
    sampled = [r["sample_bytes"] for r in replicated(rows)]
    falls = all(x > y for x, y in zip(sampled, sampled[1:]))
    print(f"1.5D sampling bytes fall as C grows: {'yes' if falls else 'NO'} ({', '.join(f'{b:.0f}' for b in sampled)})")
    if a.json:
        Path(a.json).write_text(json.dumps({"scale": a.scale, "workers": a.workers, "rows": rows}, indent=2))
    if a.plot:
        plot_layouts(rows, a.plot)


def replicated(rows: list[dict]) -> list[dict]:
    """The rows of the layout that takes --replication (1.5d), in the order run."""
    return [r for r in rows if layout_spec(r["layout"]).replication]


def cached_partitions(scale: float, workers: int, cache: Path) -> Path:
    """A METIS partition directory of the products-shaped dataset (features included), built once."""
    out = cache / f"products_scale{scale:g}_p{workers}"
    if not (out / "manifest.json").exists():
        dataset = make_synthetic(products_like_config(scale))
        write_partition_dir(dataset, workers, "metis", out, overwrite=True)
    return out


def print_layouts(rows: list[dict]) -> None:
    print(f"{'layout':8} {'C':>2} {'bulk':>4} {'sample rnd':>10} {'sample KB':>10} {'feat rnd':>8} {'feat KB':>9} "
          f"{'s/bulk':>7} {'held MB':>8} {'peak RSS MB':>11}")
    for r in rows:
        print(f"{r['layout']:8} {r['C']:>2} {r['bulk']:>4} {r['sample_rounds']:>10.0f} {r['sample_bytes'] / 1e3:>10.1f} "
              f"{r['feature_rounds']:>8.0f} {r['feature_bytes'] / 1e3:>9.1f} {r['seconds_per_bulk']:>7.3f} "
              f"{r['held_mb']:>8.1f} {r['peak_rss_mb']:>11.0f}")


def plot_layouts(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one_half = replicated(rows)
    cs = [r["C"] for r in one_half]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(cs, [r["sample_bytes"] / 1e3 for r in one_half], "o-", label="sampling")
    left.plot(cs, [r["feature_bytes"] / 1e3 for r in one_half], "s-", label="features")
    left.set(xlabel="replication C", ylabel="KB per bulk (rank 0)", xticks=cs, title="communication")
    left.legend()
    right.plot(cs, [r["held_mb"] for r in one_half], "o-", label="topology + features held")
    whole = next(r for r in rows if not layout_spec(r["layout"]).replication)
    right.axhline(whole["held_mb"], ls="--", c="grey", label=whole["layout"])
    right.set(xlabel="replication C", ylabel="MB per worker (max)", xticks=cs, title="memory")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot -> {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("throughput", "libraries"):
        s = sub.add_parser(name)
        s.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.4M nodes (0.25)")
        s.add_argument("--batch-size", type=int, default=1024)
        s.add_argument("--fanouts", default="15,10,5")
        s.add_argument("--repeat", type=int, default=3)
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--cache-dir", default=str(HERE / ".cache"), help="where the graph is cached "
                       "(default benchmarks/.cache, shared with benchmarks/sampling.py)")
    t = sub.choices["throughput"]
    t.add_argument("--bulks", default="1,8,48,all", help="batches per sampler call; 'all' = one epoch")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--ladies", type=int, default=0, help="also time LADIES with this many nodes per layer")
    t.add_argument("--json", default=None)
    sub.choices["libraries"].add_argument("--batches", type=int, default=4, help="batches in the stack")
    dev = sub.add_parser("device")
    dev.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.4M nodes (0.25)")
    dev.add_argument("--batch-size", type=int, default=1024)
    dev.add_argument("--fanouts", default="15,10,5")
    dev.add_argument("--batches", type=int, default=48, help="batches timed (the first of the epoch)")
    dev.add_argument("--bulks", default="1,8,48", help="batches per sampler call")
    dev.add_argument("--ladies", type=int, default=512, help="LADIES nodes per layer")
    dev.add_argument("--device", default="auto", help="where the twins sample: cpu, cuda, cuda:N or auto")
    dev.add_argument("--threads", type=int, default=2, help="the host samplers' threads")
    dev.add_argument("--repeat", type=int, default=3)
    dev.add_argument("--seed", type=int, default=0)
    dev.add_argument("--cache-dir", default=str(HERE / ".cache"))
    dev.add_argument("--json", default=None)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--data-dir", required=True)
    acc.add_argument("--seeds", type=int, default=5)
    acc.add_argument("--layer-size", type=int, default=512)
    acc.add_argument("--threads", type=int, default=1)
    acc.add_argument("--json", default=None)
    lay = sub.add_parser("layouts")
    lay.add_argument("--scale", type=float, default=0.02, help="fraction of products' 2.4M nodes (0.02)")
    lay.add_argument("--workers", type=int, default=4)
    lay.add_argument("--replications", default="1,2,4")
    lay.add_argument("--bulk", type=int, default=4)
    lay.add_argument("--batch-size", type=int, default=128)
    lay.add_argument("--fanouts", default="15,10,5")
    lay.add_argument("--cache-dir", default=str(HERE / ".cache"))
    lay.add_argument("--json", default=None)
    lay.add_argument("--plot", default=None, help="write the bytes/memory figure here (png)")
    a = p.parse_args()
    {"throughput": throughput, "libraries": libraries, "accuracy": accuracy, "layouts": layouts,
     "device": device}[a.command](a)


if __name__ == "__main__":
    main()
