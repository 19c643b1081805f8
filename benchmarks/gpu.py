"""Training on a GPU: where an epoch's time goes, one table from one run on one machine.

    python benchmarks/gpu.py [--scale 1.0] [--fanouts 15,10,5] [--batch-size 1000] [--hidden 256]
                             [--epochs 2] [--threads N] [--accuracy-seeds 0] [--layouts split,dgs,vanilla]
                             [--layout-scale 0.05] [--json FILE]

The graph is the products-shaped synthetic one (``products_like_config(scale)``: 2,449,029 nodes and
123M edges at scale 1.0, 100 features, 47 classes), cached under benchmarks/.cache. The model is the
built-in 3-layer GraphSAGE (hidden 256, dropout 0.5), Adam, no evaluation. Rows:

* ``CPU trainer``: ``fit`` on the CPU with every core (``--threads``, default all of them).
* ``CPU sampler alone``: an epoch of batches (the training nodes shuffled, ``--batch-size`` each)
  sampled by the fused kernel and gathered by the CPU in the trainer's background stage, with nothing
  consuming them: the sampler's own time, the floor of the next row.
* ``CPU sampling, GPU step``: ``fit(device="cuda")``: batches sampled on the CPU, copied on a side
  stream from pinned memory one batch ahead, the step on the GPU.
* ``GPU sampling, GPU step``: ``fit(device="cuda", sample_on="device", gpu_cache_fraction=1)``: the
  topology and every feature row on the GPU, blocks sampled there by the device sampler.
* ``GPU compute bound``: the same model's forward, backward and Adam step over one epoch of batches
  sampled on the GPU beforehand (their features gathered from the device-resident rows inside the
  step, a few microseconds): what no sampler can beat.
* ``PyG user's path``: gnnscale's ``NeighborLoader`` (device "cuda", its batches copied one ahead on a
  side stream, as PyG's ``PrefetchLoader``) feeding PyG's ``GraphSAGE`` on the GPU.
* ``GPU matrix sampling`` and ``GPU LADIES sampling`` (bulk ``--matrix-bulk``, LADIES 512 nodes per layer):
  ``fit(sampler=..., sample_on="device", gpu_cache_fraction=1)``, the sparse products' twins on the GPU
  feeding the step there.
* ``GPU sampling, GPU step, bf16-mixed``: the GPU sampling row under ``--precision bf16-mixed``.

Without CUDA the device rows run on the CPU, through the same code (a smoke test: ``--scale 0.002``): the
matrix and LADIES rows with the device twins on CPU tensors, and ``CPU trainer, bf16-mixed``.

A second table times the matrix samplers (GraphSAGE and LADIES, 512 nodes per layer) on the host against their
torch-ops twins on the device over the epoch's first ``--matrix-batches`` batches, one at a time and all at once
(benchmarks/bulk.py's ``matrix_rows``; 0 leaves it out).

A third table trains the distributed layouts that run on the device (``--layouts``): ``split`` (GSplit's split
parallelism), ``dgs`` (``--layout hybrid --dgs``: the step on the device, the explanation on the CPU) and
``vanilla`` (host sampling, the step on the device), each ``torchrun -m gnnscale train`` of ``--layout-workers``
workers sharing the machine's GPU (gloo for the gradients) with ``--device cuda`` (``cpu`` without CUDA), on the
products-shaped graph at the smaller of ``--scale`` and ``--layout-scale`` (partitioned by METIS once, cached).

Each trainer row reports the median epoch after the first (warm-up: kernel loading, allocation), and
the ratios the issue's targets are stated in: against the compute bound, and against the CPU sampler's
own time. Without CUDA only the CPU rows run (a smoke test: ``--scale 0.002``). With
``--accuracy-seeds K`` the CPU trainer and GPU sampling also train ``--accuracy-epochs`` epochs with
evaluation for K seeds each and print the test accuracy of both.

The rows run in the order the targets need them (the two denominators and the GPU rows first, the CPU
trainer last), each printed and written to ``--json`` as it finishes, so that a run cut short keeps what
it measured; with ``--budget-s S`` a row that would start after S seconds (dataset included) is skipped
and named as such. Run from any directory with any Python that has torch and numba: the script imports
the gnnscale tree it belongs to.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # this tree's gnnscale, installed or not
from bulk import matrix_rows, print_matrix_rows  # noqa: E402
# The shared products-shaped dataset and partition caches, and how the distributed benchmarks launch torchrun.
from distributed import cached_dataset, cached_partition, run_checked, torchrun_command  # noqa: E402

from gnnscale.graph.features import gather_rows  # noqa: E402
from gnnscale.graph.storage import load_dataset_dir  # noqa: E402
from gnnscale.keys import STREAM_ORDER, derive_key  # noqa: E402
from gnnscale.nn import ModelConfig  # noqa: E402
from gnnscale.prefetch import Prefetcher  # noqa: E402
from gnnscale.sampling import NeighborSampler, set_sampler_threads  # noqa: E402
from gnnscale.train import TrainConfig, fit  # noqa: E402
from gnnscale.train.inputs import seeded_model  # noqa: E402


def model_config(ds, a) -> ModelConfig:
    return ModelConfig(name="sage", in_dim=ds.feature_dim, num_classes=ds.num_classes, num_layers=len(a.fanouts),
                       hidden_dim=a.hidden)


def train_config(a, *, device: str, seed: int = 0, epochs: int | None = None, evaluate: bool = False,
                 **kw) -> TrainConfig:
    """The table's training settings; ``kw``: more :class:`TrainConfig` fields (sampling place, cache, sampler,
    precision)."""
    return TrainConfig(fanouts=a.fanouts, batch_size=a.batch_size, epochs=epochs or a.epochs, threads=a.threads,
                       seed=seed, evaluate=evaluate, device=device, **kw)


def epoch_seconds(history: list[dict]) -> dict:
    """Median per-epoch figures after the first epoch (all of them when there is one)."""
    timed = history[1:] or history
    return {key: statistics.median(m[key] for m in timed)
            for key in ("epoch_s", "sample_s", "fetch_s", "forward_backward_s", "wait_s")}


def trainer_row(name: str, ds, a, **kw) -> dict:
    model = seeded_model(model_config(ds, a), 0)
    report = fit(model, ds, inputs="blocks", config=train_config(a, **kw), progress=False)
    return {"row": name, **epoch_seconds(report.history)}


def epoch_batches(ds, a, epoch: int = 1) -> list[np.ndarray]:
    """The seeds of an epoch of batches: the training nodes in a keyed random order."""
    rng = np.random.default_rng(derive_key(0, epoch, stream=STREAM_ORDER))
    order = rng.permutation(np.asarray(ds.train_idx))
    return [order[i:i + a.batch_size] for i in range(0, order.shape[0], a.batch_size)]


def sampler_alone_row(ds, a) -> dict:
    """The CPU sampler and feature gather over one epoch's batches in the background stage, unconsumed."""
    sampler = NeighborSampler(ds.graph, a.fanouts)
    batches = epoch_batches(ds, a)

    def prepare(step: int):
        blocks = sampler.sample(batches[step], derive_key(0, 1, step))
        return blocks, gather_rows(ds.features, blocks[0].src_ids.numpy())

    def run() -> float:
        start = time.perf_counter()
        with Prefetcher(prepare, len(batches), 1) as prepared:
            for _ in prepared:
                pass
        return time.perf_counter() - start

    run()  # warm-up
    return {"row": "CPU sampler alone", "epoch_s": statistics.median(run() for _ in range(a.repeat))}


def compute_bound_row(ds, a) -> dict:
    """Forward, backward and Adam over one epoch of batches sampled on the GPU beforehand."""
    from gnnscale.sampling.device import DeviceNeighborSampler

    device = torch.device("cuda")
    sampler = DeviceNeighborSampler(ds.graph, a.fanouts, device="cuda")
    features = torch.from_numpy(np.ascontiguousarray(ds.features)).to(device)
    labels = torch.from_numpy(np.asarray(ds.labels)).to(device)
    batches = [sampler.sample(torch.from_numpy(s).to(device), derive_key(0, 1, i))
               for i, s in enumerate(epoch_batches(ds, a))]
    model = seeded_model(model_config(ds, a), 0).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003, fused=True)

    def epoch() -> None:
        for step, blocks in enumerate(batches):
            logits = model(blocks, features.index_select(0, blocks[0].src_ids), dropout_key=derive_key(0, 1, step, 0, 2))
            adam_step(optimizer, logits, labels.index_select(0, blocks[-1].dst_ids))

    return {"row": "GPU compute bound", "epoch_s": median_gpu_seconds(epoch, a.repeat)}


def adam_step(optimizer: torch.optim.Optimizer, logits: torch.Tensor, labels: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def median_gpu_seconds(epoch, repeat: int) -> float:
    """Median wall time of ``epoch()`` over ``repeat`` runs after a warm-up run, the GPU synchronised."""
    def timed() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        epoch()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    timed()
    return statistics.median(timed() for _ in range(repeat))


def pyg_row(ds, a) -> dict:
    """A PyG user's path: gnnscale's NeighborLoader (device cuda: the copy one batch ahead on a side stream)
    and PyG's GraphSAGE, trimmed to the layer (PyG's fastest form of the model)."""
    from torch_geometric.nn import GraphSAGE

    from gnnscale.loader import NeighborLoader

    device = torch.device("cuda")
    loader = NeighborLoader(ds, list(a.fanouts), input_nodes=torch.from_numpy(np.asarray(ds.train_idx)),
                            batch_size=a.batch_size, shuffle=True, seed=0, device="cuda")
    model = GraphSAGE(ds.feature_dim, a.hidden, len(a.fanouts), ds.num_classes, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003, fused=True)

    def epoch() -> None:
        for batch in loader:
            out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)
            adam_step(optimizer, out[:batch.batch_size], batch.y[:batch.batch_size])

    return {"row": "PyG user's path (gnnscale loader)", "epoch_s": median_gpu_seconds(epoch, a.repeat)}


def device_rows(ds, a, cuda: bool) -> list[tuple[str, Callable[[], dict]]]:
    """The matrix and LADIES samplers' device twins feeding the step, and bf16-mixed: on the GPU, or without one
    on the CPU through the same code (the twins on CPU tensors). (name, how to measure it), as planned_rows."""
    where, device = ("GPU", "cuda") if cuda else ("CPU", "cpu")
    on_device = dict(device=device, sample_on="device", gpu_cache_fraction=1.0 if cuda else 0.0)
    matrix = f"{where} matrix sampling (bulk {a.matrix_bulk}), {where} step"
    ladies = f"{where} LADIES sampling (bulk {a.matrix_bulk}), {where} step"
    rows = [(matrix, lambda: trainer_row(matrix, ds, a, sampler="matrix", bulk=a.matrix_bulk, **on_device)),
            (ladies, lambda: trainer_row(ladies, ds, a, sampler="ladies", bulk=a.matrix_bulk, layer_size=512,
                                         **on_device))]
    if cuda:
        bf16 = "GPU sampling, GPU step, bf16-mixed"
        rows.append((bf16, lambda: trainer_row(bf16, ds, a, precision="bf16-mixed", **on_device)))
    else:
        bf16 = "CPU trainer, bf16-mixed"
        rows.append((bf16, lambda: trainer_row(bf16, ds, a, device="cpu", precision="bf16-mixed")))
    return rows


# --layouts: the flags of each distributed layout row (the device and the shapes are added).
LAYOUT_FLAGS = {"split": ["--layout", "split"], "dgs": ["--layout", "hybrid", "--dgs"],
                "vanilla": ["--layout", "vanilla"]}


def layout_rows(a, cuda: bool) -> list[dict]:
    """One row per ``--layouts`` entry: rank 0's median epoch after the first of a torchrun launch of
    ``--layout-workers`` workers on the training device (the workers share the machine's GPU)."""
    scale, workers = min(a.scale, a.layout_scale), a.layout_workers
    parts = cached_partition(cached_dataset(scale, 0, a.cache_dir), workers, 0, timeout_s=a.layout_timeout)
    device = "cuda" if cuda else "cpu"
    threads = max(1, a.threads // workers)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "NUMBA_NUM_THREADS": str(threads)}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in a.layouts:
            metrics = Path(scratch) / f"{name}.json"
            cmd = [*torchrun_command(workers), "-m", "gnnscale", "train", "--partitions", str(parts),
                   *LAYOUT_FLAGS[name], "--device", device, "--fanouts", ",".join(map(str, a.fanouts)),
                   "--batch-size", str(a.batch_size), "--hidden", str(a.hidden), "--epochs", str(a.epochs),
                   "--threads", str(threads), "--no-eval", "--quiet", "--metrics-out", str(metrics)]
            run_checked(cmd, env=env, timeout_s=a.layout_timeout, what=f"--layout row {name}")
            history = json.loads(metrics.read_text())["history"]
            row = {"row": f"{name}, {workers} workers, {device}", "scale": scale, **epoch_seconds(history)}
            if name == "dgs":  # the explanation's CPU, off the critical path (docs/dgs.md)
                row["explanation_cpu_s"] = statistics.median(h["dgs"]["explanation_cpu_s_all_workers"]
                                                             for h in history[1:] or history)
            rows.append(row)
    return rows


def print_layout_rows(rows: list[dict]) -> None:
    print(f"\ndistributed layouts on the device, products-shaped scale {rows[0]['scale']:g}")
    print("| row | epoch s | sample s | fetch s | fwd+bwd s | wait s | DGS explanation cpu s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        cells = [f"{r[k]:.2f}" if k in r else "" for k in ("epoch_s", "sample_s", "fetch_s", "forward_backward_s",
                                                           "wait_s", "explanation_cpu_s")]
        print(f"| {r['row']} | {' | '.join(cells)} |", flush=True)


def accuracy_rows(ds, a, cuda: bool) -> list[dict]:
    """Test accuracy of the CPU trainer and (on a GPU) of GPU sampling, in float32 and bf16-mixed (without a GPU:
    the CPU trainer in bf16-mixed), ``--accuracy-seeds`` seeds each."""
    out = []
    setups = [("CPU trainer", {"device": "cpu"})]
    if cuda:
        gpu = {"device": "cuda", "sample_on": "device", "gpu_cache_fraction": 1.0}
        setups += [("GPU sampling, GPU step", gpu), ("GPU sampling, GPU step, bf16-mixed",
                                                     {**gpu, "precision": "bf16-mixed"})]
    else:
        setups.append(("CPU trainer, bf16-mixed", {"device": "cpu", "precision": "bf16-mixed"}))
    for name, kw in setups:
        accs = []
        for seed in range(a.accuracy_seeds):
            model = seeded_model(model_config(ds, a), seed)
            cfg = train_config(a, seed=seed, epochs=a.accuracy_epochs, evaluate=True, **kw)
            accs.append(fit(model, ds, inputs="blocks", config=cfg, progress=False).test_acc_at_best_val)
        out.append({"row": name, "test_acc": accs, "mean": float(np.mean(accs))})
    return out


def print_table(rows: list[dict], a, graph: str) -> None:
    by = {r["row"]: r for r in rows}
    bound = by.get("GPU compute bound", {}).get("epoch_s")
    sampler = by.get("CPU sampler alone", {}).get("epoch_s")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"\n{graph}; GraphSAGE {len(a.fanouts)} layers, hidden {a.hidden}, fanouts {a.fanouts}, batch "
          f"{a.batch_size}; {a.threads} threads, {device}")
    print("| row | epoch s | sample s | fetch s | fwd+bwd s | wait s | / compute bound | / CPU sampler |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['row']} | skipped: {r['skipped']} | | | | | | |")
            continue
        cells = [f"{r[k]:.2f}" if k in r else "" for k in ("epoch_s", "sample_s", "fetch_s", "forward_backward_s",
                                                           "wait_s")]
        ratio_bound = f"{r['epoch_s'] / bound:.2f}x" if bound else ""
        ratio_sampler = f"{r['epoch_s'] / sampler:.2f}x" if sampler else ""
        print(f"| {r['row']} | {' | '.join(cells)} | {ratio_bound} | {ratio_sampler} |")


def planned_rows(ds, a, cuda: bool) -> list[tuple[str, Callable[[], dict]]]:
    """(name, how to measure it), in the order they run: the ratios' denominators and the GPU rows first, the
    slowest row (the CPU trainer on the whole graph) last."""
    rows = [("CPU sampler alone", lambda: sampler_alone_row(ds, a))]
    if cuda:
        rows += [("GPU compute bound", lambda: compute_bound_row(ds, a)),
                 ("GPU sampling, GPU step", lambda: trainer_row("GPU sampling, GPU step", ds, a, device="cuda",
                                                                sample_on="device", gpu_cache_fraction=1.0)),
                 ("CPU sampling, GPU step", lambda: trainer_row("CPU sampling, GPU step", ds, a, device="cuda")),
                 ("PyG user's path (gnnscale loader)", lambda: pyg_row(ds, a))]
    rows += device_rows(ds, a, cuda)
    rows.append(("CPU trainer", lambda: trainer_row("CPU trainer", ds, a, device="cpu")))
    return rows


def main() -> None:
    started = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of products' 2.45M nodes")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2, help="epochs per trainer row; the first is warm-up")
    p.add_argument("--repeat", type=int, default=1, help="timed passes of the non-trainer rows (median)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--accuracy-seeds", type=int, default=0, help="seeds of the accuracy comparison (0: none)")
    p.add_argument("--accuracy-epochs", type=int, default=5)
    p.add_argument("--matrix-batches", type=int, default=48, help="batches of the matrix samplers' table (0: none)")
    p.add_argument("--budget-s", type=float, help="skip the rows (and accuracy runs) that would start after this "
                                                  "many seconds from the start (default: no limit)")
    p.add_argument("--matrix-bulk", type=int, default=8, help="--bulk of the matrix and LADIES trainer rows")
    p.add_argument("--layouts", default="split,dgs,vanilla",
                   help=f"distributed layout rows, of {', '.join(LAYOUT_FLAGS)} (empty: none)")
    p.add_argument("--layout-scale", type=float, default=0.05, help="the layout rows' graph: at most this scale")
    p.add_argument("--layout-workers", type=int, default=2)
    p.add_argument("--layout-timeout", type=float, default=600.0, help="seconds per partitioning or launch")
    p.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    p.add_argument("--json", type=Path, help="also write the rows here (after each row)")
    a = p.parse_args()
    a.fanouts = tuple(int(f) for f in a.fanouts.split(","))
    # cuBLAS reads its workspace setting at the process's first product; the trainer rows run with
    # deterministic kernels, which want the deterministic workspace, after rows that make products of their own.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    a.layouts = [name for name in a.layouts.split(",") if name]
    unknown = sorted(set(a.layouts) - set(LAYOUT_FLAGS))
    if unknown:
        p.error(f"--layouts: expected names of {', '.join(LAYOUT_FLAGS)}, got {', '.join(unknown)}")
    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    ds = load_dataset_dir(cached_dataset(a.scale, 0, a.cache_dir), mmap=False)
    graph = f"products-shaped scale {a.scale:g}: {ds.graph.num_nodes:,} nodes, {ds.graph.num_edges:,} edges"
    print(f"{graph} ({time.perf_counter() - started:.0f} s in)", flush=True)
    cuda = torch.cuda.is_available()
    if not cuda:
        print("no CUDA here: the CPU rows, and the device rows on the CPU", flush=True)
    result = {"graph": graph, "rows": [], "matrix": [], "layouts": [], "accuracy": []}

    def time_left() -> bool:
        return a.budget_s is None or time.perf_counter() - started < a.budget_s

    def record() -> None:
        if a.json is not None:
            a.json.write_text(json.dumps(result, indent=1))

    for name, measure in planned_rows(ds, a, cuda):
        row = measure() if time_left() else {"row": name, "skipped": f"--budget-s {a.budget_s:g} spent"}
        result["rows"].append(row)
        print(f"{name}: {row} ({time.perf_counter() - started:.0f} s in)", flush=True)
        record()
    print_table(result["rows"], a, graph)
    if a.matrix_batches and time_left():
        result["matrix"] = matrix_rows(ds.graph, epoch_batches(ds, a)[:a.matrix_batches], fanouts=a.fanouts,
                                       layer_size=512, bulks=[1, a.matrix_batches],
                                       device=torch.device("cuda" if cuda else "cpu"), repeat=a.repeat)
        print_matrix_rows(result["matrix"])
        record()
    if a.layouts and time_left():
        result["layouts"] = layout_rows(a, cuda)
        print_layout_rows(result["layouts"])
        record()
    if a.accuracy_seeds and time_left():
        result["accuracy"] = accuracy_rows(ds, a, cuda)
        record()
    for r in result["accuracy"]:
        print(f"test accuracy, {r['row']}: mean {r['mean']:.4f} over seeds {', '.join(f'{x:.4f}' for x in r['test_acc'])}")


if __name__ == "__main__":
    main()
