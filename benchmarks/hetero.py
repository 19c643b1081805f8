"""Typed graphs: the typed sampler against DGL 2.1 and PyG, an R-GCN epoch against DGL's, and the accuracy of
R-GCN, R-SAGE and R-GAT against an MLP, on the mag-shaped graph; every table from one run.

    python benchmarks/hetero.py --dgl-python "$(../shared/tools/anchors/setup.sh)/bin/python" \
        --pyg-python "$(benchmarks/pyg_setup.sh)/bin/python" [--scale 1.0] [--parts sampler,epoch,accuracy] \
        [--fanouts 25,20] [--batch-size 1024] [--threads 1,2] [--num-batches 8] [--repeat 3] \
        [--epoch-threads 2] [--epochs 2] [--iterations K] [--hidden 64] \
        [--accuracy-scale 0.01] [--accuracy-seeds 0,1,2] [--accuracy-epochs 5] [--loader-epochs 30] [--full-batch-epochs 200] [--accuracy-rows ...] [--json FILE]

The graph is the synthetic ``mag`` preset (:mod:`gnnscale.graph.typed_synthetic`: ogbn-mag's types, counts and
relations at ``--scale``, with reverses; 128-d features on papers only, labels on papers), written once under
``--cache-dir`` as a typed dataset directory, with beside it every relation's edges in local ids
(``<dataset>.edges.npz``), the file the DGL and PyG scripts build their own graphs from. Three parts:

* ``sampler``: ms per batch of ``--num-batches`` fixed batches of ``--batch-size`` unique training papers
  (``seeds_*.npy``, the same file for every sampler), fanouts ``--fanouts`` for every relation at every hop,
  median over ``--repeat`` passes after a warm-up batch, at each of ``--threads``. gnnscale's typed fused kernel
  and its two-step per-relation baseline (``TypedNeighborSampler``); DGL 2.1's ``sample_neighbors`` with a fanout
  dict + ``to_block`` and its ``sample_neighbors_fused`` (``benchmarks/anchors/dgl_hetero_sampling.py``, with
  ``--dgl-python``); PyG's hetero ``NeighborLoader`` and its sampler alone
  (``benchmarks/anchors/pyg_hetero_sampling.py``, with ``--pyg-python``: an environment with a compiled sampling
  backend, which ``benchmarks/pyg_setup.sh`` builds). Ratios are DGL's faster sampler's time over each row's, at
  the same thread count.
* ``epoch``: an R-GCN epoch on the CPU (``--epoch-threads`` threads, no evaluation): ``gnnscale train --model
  rgcn`` against DGL's R-GCN as its ogbn-mag example (``benchmarks/anchors/dgl_hetero_train.py``:
  ``HeteroGraphConv`` of ``GraphConv``, ``NeighborSampler`` and ``DataLoader``), the same fanouts, batch, hidden
  size, dropout, learning rate, paper features and learnable embeddings for the featureless types. The
  embeddings are dense tables on both sides, and Adam steps every row of them each iteration, as DGL's example
  does (a row's moments decay even without a gradient): DGL's ``HeteroEmbedding`` with torch's default Adam
  (its for-loop form on the CPU), gnnscale's ``nn.Embedding`` with fused Adam. Each side is its own process; the median epoch after the first (warm-up). ``--iterations K`` cuts every epoch, on both
  sides alike, to its first K batches (the table says so).
* ``accuracy``: R-GCN, R-SAGE and R-GAT (``fit``, 2 layers) and a two-layer MLP of the papers' own features on
  the mag-shaped graph at ``--accuracy-scale``, one run per seed; test accuracy at the best validation epoch,
  mean and spread over the seeds, beside the generator's ``feature_accuracy`` and margin. Then PyG's
  ``to_hetero(GraphSAGE)`` of examples/pyg_to_hetero.py trained with gnnscale's ``NeighborLoader`` (as that script
  does, ``--loader-epochs``) and full batch (``--full-batch-epochs`` steps), both scored on the whole graph;
  ``--accuracy-rows`` picks the rows.

A last table puts the run's ratios to DGL side by side: the typed fused sampler's at each thread count and the R-GCN
epoch's, each beside its target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from end_to_end import run_json_lines, summarize, with_fewer_iterations  # noqa: E402  (benchmarks/ is no package)

ANCHORS = HERE / "anchors"
MODELS = ("rgcn", "rsage", "rgat")


def cached_mag(scale: float, seed: int, cache: Path) -> tuple[Path, Path]:
    """The mag-shaped typed dataset directory for (scale, seed) and its per-relation edge file, built once."""
    path = cache / f"mag_scale{scale:g}_seed{seed}_dataset"
    edges = path.with_name(path.name + ".edges.npz")
    if (path / "meta.json").is_file() and edges.is_file():
        return path, edges
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.graph.typed_storage import save_typed_dataset

    start = time.perf_counter()
    ds = load_dataset("synthetic", None, preset="mag", scale=scale, seed=seed)
    cache.mkdir(parents=True, exist_ok=True)
    save_typed_dataset(ds, path, overwrite=path.exists())
    write_edges(ds.graph, edges)
    print(f"built mag-shaped dataset: {ds.graph.num_nodes:,} nodes, {ds.graph.num_edges:,} edges, "
          f"{len(ds.graph.relations)} relations in {time.perf_counter() - start:.0f}s -> {path}", flush=True)
    return path, edges


def write_edges(graph, path: Path) -> None:
    """Every relation's edges as local ids (``src_r``, ``dst_r``), with the types, counts and relation names: what
    the DGL and PyG scripts build their graphs from (benchmarks/anchors/dgl_hetero_sampling.py documents it)."""
    arrays = {"node_types": np.array(graph.node_types),
              "node_counts": np.array([graph.count(t) for t in graph.node_types], dtype=np.int64),
              "relations": np.array([str(rel) for rel in graph.relations])}
    for r, rel in enumerate(graph.relations):
        src, dst = graph.edges(rel)
        arrays[f"src_{r}"], arrays[f"dst_{r}"] = src.astype(np.int32), dst.astype(np.int32)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def seed_batches(train_local: np.ndarray, batch_size: int, num_batches: int, seed: int, cache: Path, tag: str
                 ) -> tuple[np.ndarray, Path]:
    """int64 [num_batches, batch_size]: unique training papers (local ids) per batch, and the file that holds them."""
    rng = np.random.default_rng(seed)
    batches = np.stack([rng.choice(train_local, batch_size, replace=False) for _ in range(num_batches)])
    path = cache / f"{tag}_seeds_b{batch_size}_k{num_batches}_seed{seed}.npy"
    np.save(path, batches.astype(np.int64))
    return batches, path


# ---------------------------------------------------------------------------------------------------- sampler


def time_gnnscale_sampler(graph, batches: np.ndarray, fanouts: list[int], threads: int, method: str,
                          repeat: int) -> dict:
    import torch

    from gnnscale.keys import derive_key
    from gnnscale.sampling import set_sampler_threads
    from gnnscale.sampling.typed import TypedNeighborSampler

    set_sampler_threads(threads)
    torch.set_num_threads(threads)
    sampler = TypedNeighborSampler(graph, fanouts, method=method)
    sampler.sample(batches[0], derive_key(0))  # warm-up (and numba's compilation)
    times, edges = [], 0
    for r in range(repeat):
        start = time.perf_counter()
        edges = 0
        for step, seeds in enumerate(batches):
            edges += sum(b.num_edges for b in sampler.sample(seeds, derive_key(r, 0, step)))
        times.append(time.perf_counter() - start)
    dt = statistics.median(times)
    return {"sampler": f"gnnscale typed {method}", "ms_per_batch": 1e3 * dt / len(batches),
            "edges_per_batch": edges / len(batches), "medges_per_s": edges / dt / 1e6}


def time_anchor(python: str, script: str, edges: Path, seeds: Path, a, threads: int, extra: dict) -> list[dict]:
    """Rows of an anchor script (one JSON line per sampler) run with ``python`` on the same files."""
    cmd = [python, str(ANCHORS / script), str(edges), str(seeds), "--target-type", "paper", "--fanouts", a.fanouts,
           "--threads", str(threads), "--repeat", str(a.repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **extra, "OMP_NUM_THREADS": str(threads)}).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def sampler_rows(dataset: Path, edges: Path, a) -> list[dict]:
    from gnnscale.graph.typed_storage import load_typed_dataset_dir

    ds = load_typed_dataset_dir(dataset, mmap=False)
    lo = int(ds.target_range[0])
    batches, seeds_path = seed_batches(ds.train_idx - lo, a.batch_size, a.num_batches, a.seed, a.cache, dataset.name)
    fanouts = [int(f) for f in a.fanouts.split(",")]
    rows = []
    print(f"\nsampler: batch {a.batch_size}, fanouts {a.fanouts} for every relation, {a.num_batches} batches, "
          f"median of {a.repeat}")
    print_sampler_header()
    for threads in (int(t) for t in a.threads.split(",")):
        found = [time_gnnscale_sampler(ds.graph, batches + lo, fanouts, threads, m, a.repeat)
                 for m in a.samplers.split(",")]
        if a.dgl_python:
            found += time_anchor(a.dgl_python, "dgl_hetero_sampling.py", edges, seeds_path, a, threads,
                                 {"DGLBACKEND": "pytorch"})
        if a.pyg_python:
            found += time_anchor(a.pyg_python, "pyg_hetero_sampling.py", edges, seeds_path, a, threads, {})
        dgl = [r["ms_per_batch"] for r in found if r["sampler"].startswith("dgl")]
        for r in found:
            r.update(threads=threads, x_dgl=min(dgl) / r["ms_per_batch"] if dgl else None)
            rows.append(r)
            print_sampler_row(r)
    return rows


def print_sampler_header() -> None:
    print("| threads | sampler | ms/batch | M edges/s | edges/batch | x DGL (faster) |")
    print("| --- | --- | --- | --- | --- | --- |")


def print_sampler_row(r: dict) -> None:
    ratio = f"{r['x_dgl']:.2f}" if r["x_dgl"] else "-"
    print(f"| {r['threads']} | {r['sampler']} | {r['ms_per_batch']:.1f} | {r['medges_per_s']:.2f} | "
          f"{r['edges_per_batch']:,.0f} | {ratio} |", flush=True)


# ---------------------------------------------------------------------------------------------------- epoch


def gnnscale_rgcn_epochs(dataset: Path, a) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.json"
        cmd = [sys.executable, "-m", "gnnscale", "train", "--dataset", "dir", "--data-dir", str(dataset),
               "-o", "mmap=false", "--model", "rgcn", "--fanouts", a.fanouts, "--batch-size", str(a.batch_size),
               "--hidden", str(a.hidden), "--dropout", "0.5", "--lr", str(a.lr), "--epochs", str(a.epochs),
               "--threads", str(a.epoch_threads), "--no-eval", "--prefetch", "1", "--quiet", "--metrics-out",
               str(metrics)]
        env = {**os.environ, "OMP_NUM_THREADS": str(a.epoch_threads), "PYTHONPATH": str(HERE.parent)}
        run_json_lines(cmd, env, a)
        # gnnscale names the feature gather fetch_s (one schema with distributed runs); DGL's script gather_s.
        return [{**h, "gather_s": h["fetch_s"]} for h in json.loads(metrics.read_text())["history"]]


def dgl_rgcn_epochs(dataset: Path, edges: Path, a) -> list[dict]:
    cmd = [a.dgl_python, str(ANCHORS / "dgl_hetero_train.py"), str(dataset), str(edges), "--fanouts", a.fanouts,
           "--batch-size", str(a.batch_size), "--hidden", str(a.hidden), "--epochs", str(a.epochs),
           "--threads", str(a.epoch_threads), "--lr", str(a.lr), "--dropout", "0.5"]
    out = run_json_lines(cmd, {**os.environ, "OMP_NUM_THREADS": str(a.epoch_threads), "DGLBACKEND": "pytorch"}, a)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def epoch_rows(dataset: Path, edges: Path, a) -> list[dict]:
    if a.iterations:
        dataset = with_fewer_iterations(dataset, a.iterations, a.batch_size)
    rows = [summarize("gnnscale rgcn (prefetch 1)", gnnscale_rgcn_epochs(dataset, a))]
    print_epoch_rows(rows, a)
    if a.dgl_python:
        rows.append(summarize("DGL 2.1 HeteroGraphConv", dgl_rgcn_epochs(dataset, edges, a)))
        print_epoch_rows(rows, a)
    return rows


def print_epoch_rows(rows: list[dict], a) -> None:
    unit = f"{a.iterations} iterations per 'epoch', both sides" if a.iterations else "whole epochs"
    dgl = next((r for r in rows if r["system"].startswith("DGL")), None)
    print(f"\nR-GCN epoch, {a.epoch_threads} threads, fanouts {a.fanouts}, batch {a.batch_size}, hidden {a.hidden} "
          f"(seconds; median over the epochs after the first; {unit})")
    print("| system | epoch s | sample | gather | fwd+bwd | x DGL epoch | x DGL fwd+bwd |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = f"{dgl['epoch_s'] / r['epoch_s']:.2f}" if dgl else "-"
        fb = f"{dgl['forward_backward_s'] / r['forward_backward_s']:.2f}" if dgl else "-"
        print(f"| {r['system']} | {r['epoch_s']:.1f} | {r['sample_s']:.2f} | {r['gather_s']:.2f} | "
              f"{r['forward_backward_s']:.1f} | {ratio} | {fb} |", flush=True)


# ---------------------------------------------------------------------------------------------------- summary


def summary_rows(results: dict) -> list[tuple[str, str, str]]:
    """``(measure, gnnscale over DGL, target)`` of this run's sampler and epoch parts: the typed fused sampler's
    ratio to DGL's faster sampler at each thread count, and the R-GCN epoch's ratio to DGL's."""
    rows = []
    for r in results.get("sampler", []):
        if r["sampler"] == "gnnscale typed fused" and r["x_dgl"]:
            rows.append((f"sampler, {r['threads']} thread(s)", f"{r['x_dgl']:.2f}x", ">= 3x"))
    epochs = {r["system"].split()[0]: r for r in results.get("epoch", [])}
    if "gnnscale" in epochs and "DGL" in epochs:
        rows.append(("R-GCN epoch", f"{epochs['DGL']['epoch_s'] / epochs['gnnscale']['epoch_s']:.2f}x", ">= 2x"))
    return rows


def print_summary(results: dict) -> None:
    """The sampler and epoch ratios of this run in one table (nothing without DGL rows)."""
    rows = summary_rows(results)
    if not rows:
        return
    print("\nsummary: gnnscale against DGL 2.1, this run (times faster)")
    print("| measure | x DGL | target |")
    print("| --- | --- | --- |")
    for measure, ratio, target in rows:
        print(f"| {measure} | {ratio} | {target} |")


# ---------------------------------------------------------------------------------------------------- accuracy


def mlp_accuracy(ds, seed: int, epochs: int) -> float:
    """Test accuracy at the best validation epoch of a two-layer MLP (hidden 64, Adam 0.01, full batch) on the
    target type's own features: what the papers' features alone tell. One thread: a tiny model, which more threads
    only slow down on a shared machine."""
    import torch
    from torch import nn

    torch.set_num_threads(1)

    lo = ds.target_range[0]
    x = torch.from_numpy(np.asarray(ds.features[ds.target_type]))
    y = torch.from_numpy(np.asarray(ds.labels))
    train, val, test = (torch.from_numpy(np.asarray(idx) - lo) for idx in (ds.train_idx, ds.val_idx, ds.test_idx))
    torch.manual_seed(seed)
    mlp = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, ds.num_classes))
    opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
    best_val, test_at_best = -1.0, 0.0
    for _ in range(epochs):
        mlp.train()
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x[train]), y[train]).backward()
        opt.step()
        mlp.eval()
        with torch.no_grad():
            pred = mlp(x).argmax(1)
        val_acc = float((pred[val] == y[val]).double().mean())
        if val_acc > best_val:
            best_val, test_at_best = val_acc, float((pred[test] == y[test]).double().mean())
    return test_at_best


def typed_model_accuracy(ds, name: str, seed: int, a) -> float:
    from gnnscale.nn.typed_models import TypedModelConfig
    from gnnscale.train import TrainConfig, fit
    from gnnscale.train.inputs import seeded_model

    dims = {t: d for t, d in ds.feature_dims.items() if d is not None}
    cfg = TypedModelConfig.for_graph(ds.graph, feature_dims=dims, name=name, num_classes=ds.num_classes, num_layers=2,
                                     hidden_dim=a.hidden // 4 if name == "rgat" else a.hidden, heads=4, dropout=0.5)
    train = TrainConfig(fanouts=tuple(int(f) for f in a.fanouts.split(",")), batch_size=a.batch_size,
                        epochs=a.accuracy_epochs, lr=a.lr, seed=seed, threads=a.epoch_threads)
    return fit(seeded_model(cfg, seed), ds, inputs="blocks", config=train, progress=False).test_acc_at_best_val


def pyg_accuracy(ds, seed: int, epochs: int, a, loader: bool) -> float:
    """Test accuracy at the best validation epoch of PyG's ``to_hetero(GraphSAGE)`` (``HeteroSAGE`` of
    examples/pyg_to_hetero.py), trained with gnnscale's ``NeighborLoader`` (``loader``) or full batch (one step
    of the whole graph per epoch). Both are scored the same way, by the model on the whole graph: what separates
    them is the training's neighborhoods alone."""
    import torch
    from torch.nn import functional as F

    sys.path.insert(0, str(HERE.parent / "examples"))
    from pyg_to_hetero import HeteroSAGE, train_epoch

    from gnnscale.loader import NeighborLoader, to_pyg_hetero_data

    torch.set_num_threads(a.epoch_threads)
    data = to_pyg_hetero_data(ds)
    for t in data.node_types:  # the whole graph as one batch: every node is its own n_id, every paper a seed
        data[t].n_id = torch.arange(data[t].num_nodes)
    papers = data["paper"]
    papers.batch_size = papers.num_nodes
    fanouts = [int(f) for f in a.fanouts.split(",")]
    torch.manual_seed(seed)
    model = HeteroSAGE(data, a.hidden, ds.num_classes, num_layers=len(fanouts))
    with torch.no_grad():  # the lazy layers learn their input widths
        model(data)
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    train_loader = NeighborLoader(data, num_neighbors=fanouts, input_nodes=("paper", papers.train_mask),
                                  batch_size=a.batch_size, shuffle=True) if loader else None
    best_val, test_at_best = -1.0, 0.0
    for _ in range(epochs):
        if loader:
            train_epoch(model, train_loader, optimizer)
        else:
            model.train()
            optimizer.zero_grad()
            F.cross_entropy(model(data)["paper"][papers.train_mask], papers.y[papers.train_mask]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(data)["paper"].argmax(1)
        val_acc = float((pred[papers.val_mask] == papers.y[papers.val_mask]).double().mean())
        if val_acc > best_val:
            best_val = val_acc
            test_at_best = float((pred[papers.test_mask] == papers.y[papers.test_mask]).double().mean())
    return test_at_best


def accuracy_rows(a) -> list[dict]:
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.graph.typed_synthetic import typed_preset_config

    ds = load_dataset("synthetic", None, preset="mag", scale=a.accuracy_scale, seed=a.seed)
    gen = typed_preset_config("mag", a.accuracy_scale)
    seeds = [int(s) for s in a.accuracy_seeds.split(",")]
    print(f"\naccuracy: mag-shaped graph at scale {a.accuracy_scale:g} ({ds.graph.count(ds.target_type):,} papers, "
          f"{ds.num_classes} classes, {ds.train_idx.shape[0]:,} training); feature_accuracy "
          f"{gen.feature_accuracy:.2f}, margin {gen.margin:.2f}; {a.accuracy_epochs} epochs, seeds {seeds}")
    print("| model | test acc at best val (mean) | min | max | (model - MLP) / margin |")
    print("| --- | --- | --- | --- | --- |")
    rows, mlp_mean = [], None
    runs = {"mlp": lambda s: mlp_accuracy(ds, s, 200),
            **{name: (lambda s, name=name: typed_model_accuracy(ds, name, s, a)) for name in MODELS},
            "pyg_loader": lambda s: pyg_accuracy(ds, s, a.loader_epochs, a, True),
            "pyg_full_batch": lambda s: pyg_accuracy(ds, s, a.full_batch_epochs, a, False)}
    labels = {"pyg_loader": "PyG to_hetero(SAGE), gnnscale NeighborLoader", "pyg_full_batch": "PyG to_hetero(SAGE), full batch"}
    for name in a.accuracy_rows.split(","):
        run = runs[name]
        start = time.perf_counter()
        accs = [run(s) for s in seeds]
        mean = statistics.mean(accs)
        mlp_mean = mean if name == "mlp" else mlp_mean
        beat = "-" if mlp_mean is None or name == "mlp" else f"{(mean - mlp_mean) / gen.margin:.2f}"
        rows.append({"model": name, "test_acc": accs, "mean": mean, "seconds": time.perf_counter() - start})
        print(f"| {labels.get(name, name)} | {mean:.4f} | {min(accs):.4f} | {max(accs):.4f} | {beat} |", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="of ogbn-mag's counts (sampler and epoch parts)")
    p.add_argument("--parts", default="sampler,epoch,accuracy")
    p.add_argument("--fanouts", default="25,20", help="every relation's, from the seeds outwards")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--threads", default="1,2", help="sampler part: thread counts")
    p.add_argument("--samplers", default="fused,two_step", help="gnnscale's typed samplers timed")
    p.add_argument("--num-batches", type=int, default=8, help="fixed seed batches timed per repeat")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dgl-python", default=None, help="python of the anchor environment (shared/tools/anchors)")
    p.add_argument("--pyg-python", default=None, help="python of an environment where PyG's NeighborLoader samples "
                   "(benchmarks/pyg_setup.sh)")
    p.add_argument("--epoch-threads", type=int, default=2, help="epoch and accuracy parts: threads per side")
    p.add_argument("--epochs", type=int, default=2, help="epochs per training run; the first is warm-up")
    p.add_argument("--iterations", type=int, default=None, help="iterations per epoch, both sides (default: whole)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width (R-GAT: 4 heads of hidden / 4)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--accuracy-scale", type=float, default=0.01)
    p.add_argument("--accuracy-seeds", default="0,1,2")
    p.add_argument("--accuracy-epochs", type=int, default=5)
    p.add_argument("--full-batch-epochs", type=int, default=200, help="accuracy part: full-batch PyG's steps")
    p.add_argument("--loader-epochs", type=int, default=30, help="accuracy part: epochs of PyG's model with "
                   "gnnscale's NeighborLoader")
    p.add_argument("--accuracy-rows", default="mlp,rgcn,rsage,rgat,pyg_loader,pyg_full_batch",
                   help="accuracy part: the rows run (the MLP's first when the margins are wanted)")
    p.add_argument("--seed", type=int, default=0, help="the dataset's and the seed batches'")
    p.add_argument("--timeout", type=float, default=7200, help="seconds per training process")
    p.add_argument("--lock", default=None, help="hold this lock file (flock) during each training process")
    p.add_argument("--cache-dir", default=str(HERE / ".cache"))
    p.add_argument("--json", default=None)
    a = p.parse_args()
    parts = set(a.parts.split(","))
    if parts - {"sampler", "epoch", "accuracy"}:
        p.error(f"--parts: expected some of sampler, epoch, accuracy, got {a.parts}")
    rows = {"mlp", *MODELS, "pyg_loader", "pyg_full_batch"}
    if set(a.accuracy_rows.split(",")) - rows:
        p.error(f"--accuracy-rows: expected some of {', '.join(sorted(rows))}, got {a.accuracy_rows}")
    if a.epochs < 2:
        p.error("--epochs: at least 2 (the first is warm-up)")
    a.cache = Path(a.cache_dir)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    results: dict = {"config": {k: v for k, v in vars(a).items() if k != "cache"}}
    if parts & {"sampler", "epoch"}:
        dataset, edges = cached_mag(a.scale, a.seed, a.cache)
        meta = json.loads((dataset / "meta.json").read_text())
        print(f"graph: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, {len(meta['relations'])} relations")
        if "sampler" in parts:
            results["sampler"] = sampler_rows(dataset, edges, a)
        if "epoch" in parts:
            results["epoch"] = epoch_rows(dataset, edges, a)
    if "accuracy" in parts:
        results["accuracy"] = accuracy_rows(a)
    print_summary(results)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
