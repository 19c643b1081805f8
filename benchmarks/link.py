"""Link prediction: gnnscale's LinkNeighborLoader against PyG's own LinkNeighborLoader (batches per
second, and the test ROC-AUC of a PyG GraphSAGE link-prediction script on Cora with each).

    "$(benchmarks/pyg_setup.sh)/bin/python" benchmarks/link.py [--scale 0.25] [--fanouts 10,10]
        [--batch-size 1024] [--neg-ratio 1] [--num-batches 10] [--repeat 3] [--threads 2]
        [--cora-dir ../shared/data/cora_planetoid] [--cora-seeds 5] [--cora-epochs 20] [--parts loader,cora,cli]
        [--cli-seeds 5]

PyG's loader needs a compiled sampling backend (pyg-lib or torch-sparse): ``benchmarks/pyg_setup.sh``
builds an environment that has one. Run with any other Python, the script says so and runs gnnscale's
rows alone.

Both loaders get the same PyG ``Data`` and the same arguments:

* ``loader``: batches per second on the products-shaped synthetic graph (gnnscale's generator at
  ``--scale``, 100 features): ``--num-batches`` batches of ``--batch-size`` seed edges (drawn from the
  graph's edges, in a fixed order) with ``--neg-ratio`` binary negatives per positive, the batches
  touched by nothing. gnnscale at its default ``prefetch=1`` (a background thread) and at ``prefetch=0``
  (the calling thread). Median over ``--repeat`` passes after a warm-up pass, the rows taking turns.
* ``cora``: PyG's usual link-prediction script on Cora: an 85/5/10 ``RandomLinkSplit`` (undirected,
  validation and test edges out of message passing), ``torch_geometric.nn.GraphSAGE`` (2 layers, 64
  wide) as the encoder, a dot-product decoder, binary cross-entropy over each batch's positives and
  as many binary negatives, ``--cora-epochs`` epochs of batches of 128 edges, fanouts 10,10. The
  seed fixes the split (``random.seed`` too: it draws the validation and test negatives with Python's
  ``random``), the initial weights and each loader's shuffling: per seed both loaders train from the
  same split and weights. Test ROC-AUC on the full graph of the test split (no sampling), so the
  loaders differ only in the training batches.
* ``cli``: gnnscale's own trainer, ``gnnscale train --task link`` (GCN encoder, MLP decoder, 85/5/10
  random split, BCE with one uniform negative per positive, 60 epochs, lr 0.01, no dropout, fanouts
  10,10), on Cora and on the PubMed-shaped synthetic graph (``-o preset=pubmed``; lr 0.003, 15 epochs),
  ``--cli-seeds`` seeds each: the test ROC-AUC at the best-validation epoch and the median epoch time.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loader import time_in_turns  # noqa: E402  (benchmarks/loader.py; benchmarks/ is not a package)

SETUP = "benchmarks/pyg_setup.sh"


def pyg_can_sample() -> bool:
    """Whether PyG's own LinkNeighborLoader can sample in this Python (a compiled backend is installed)."""
    import torch_geometric.typing as pyg_typing
    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def make_loader(kind: str, data, fanouts, *, prefetch: int = 1, seed: int | None = None, **kwargs):
    """PyG's or gnnscale's LinkNeighborLoader, built with the same PyG arguments."""
    if kind == "pyg":
        from torch_geometric.loader import LinkNeighborLoader
        return LinkNeighborLoader(data, list(fanouts), **kwargs)
    from gnnscale.loader import LinkNeighborLoader
    return LinkNeighborLoader(data, list(fanouts), prefetch=prefetch, seed=seed, **kwargs)


def loader_rows(data, fanouts, seed_edges: torch.Tensor, batch_size: int, neg_ratio: float, kinds) -> list[dict]:
    rows = []
    for name, kind, prefetch in (("PyG LinkNeighborLoader", "pyg", 0), ("gnnscale, prefetch 1", "gnnscale", 1),
                                 ("gnnscale, prefetch 0", "gnnscale", 0)):
        if kind not in kinds:
            continue
        loader = make_loader(kind, data, fanouts, prefetch=prefetch, seed=0, edge_label_index=seed_edges,
                             neg_sampling_ratio=neg_ratio, batch_size=batch_size)
        sizes: list[tuple[int, int, int]] = []

        def run(loader=loader, sizes=sizes):
            sizes.clear()
            for batch in loader:
                sizes.append((batch.edge_label_index.shape[1], batch.edge_index.shape[1], batch.num_nodes))

        rows.append({"name": name, "run": run, "sizes": sizes})
    return rows


def print_loader_table(rows: list[dict], num_batches: int) -> None:
    base = rows[0]["seconds"] if rows[0]["name"].startswith("PyG") else None
    print(f"\n{'loader':24} {'batches/s':>9} {'ms/batch':>9} {'pairs/batch':>11} {'edges/batch':>11} "
          f"{'nodes/batch':>11} {'x PyG':>6}")
    for r in rows:
        pairs, edges, nodes = (np.mean([s[i] for s in r["sizes"]]) for i in range(3))
        ratio = f"{base / r['seconds']:6.2f}" if base else f"{'-':>6}"
        print(f"{r['name']:24} {num_batches / r['seconds']:9.2f} {1e3 * r['seconds'] / num_batches:9.1f} "
              f"{pairs:11.0f} {edges:11.0f} {nodes:11.0f} {ratio}")


def cora_link_auc(data, kind: str, seed: int, epochs: int) -> float:
    """Test ROC-AUC of PyG's GraphSAGE link predictor trained with loader ``kind`` under ``seed``."""
    from torch_geometric.nn import GraphSAGE
    from torch_geometric.transforms import RandomLinkSplit

    from gnnscale.inference.metrics import roc_auc

    # RandomLinkSplit draws the validation and test negatives with Python's random.sample, the rest with torch.
    random.seed(seed)
    torch.manual_seed(seed)
    train, _, test = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                     add_negative_train_samples=False)(data)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    # seed=None: gnnscale draws its seed from torch's generator, as PyG's loader draws its shuffling.
    loader = make_loader(kind, train, (10, 10), edge_label_index=train.edge_label_index, edge_label=train.edge_label,
                         neg_sampling_ratio=1.0, batch_size=128, shuffle=True)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            z = model(batch.x, batch.edge_index)
            score = (z[batch.edge_label_index[0]] * z[batch.edge_label_index[1]]).sum(-1)
            torch.nn.functional.binary_cross_entropy_with_logits(score, batch.edge_label).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        z = model(test.x, test.edge_index)
        score = (z[test.edge_label_index[0]] * z[test.edge_label_index[1]]).sum(-1)
    return roc_auc(test.edge_label.numpy(), score.numpy())


def run_cora(cora_dir: str, seeds: int, epochs: int, kinds) -> None:
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.loader import to_pyg_data
    ds = to_pyg_data(load_dataset("cora", cora_dir))
    data = type(ds)(x=ds.x, edge_index=ds.edge_index, num_nodes=ds.num_nodes)  # the graph alone: no node split
    print(f"\nCora ({data.num_nodes} nodes, {data.num_edges} directed edges), 85/5/10 link split, GraphSAGE 64, "
          f"dot decoder, fanouts 10,10, batch 128 + 128 negatives, {epochs} epochs; test ROC-AUC %", flush=True)
    print(f"{'seed':>4} {'PyG':>7} {'gnnscale':>9}")
    auc = {kind: [] for kind in kinds}
    for seed in range(seeds):
        for kind in kinds:
            auc[kind].append(100 * cora_link_auc(data, kind, seed, epochs))
        cells = [f"{auc[k][-1]:7.2f}" if k in auc else f"{'-':>7}" for k in ("pyg",)] + [f"{auc['gnnscale'][-1]:9.2f}"]
        print(f"{seed:4d} {' '.join(cells)}", flush=True)
    mean = {k: statistics.mean(v) for k, v in auc.items()}
    if "pyg" not in auc:
        print(f"mean {'-':>7} {mean['gnnscale']:9.2f}")
        return
    # The standard error of the mean paired difference: how far apart two loaders that sample the same
    # law land by chance with this many seeds.
    diffs = [g - p for g, p in zip(auc["gnnscale"], auc["pyg"])]
    error = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    print(f"mean {mean['pyg']:7.2f} {mean['gnnscale']:9.2f}   difference {mean['gnnscale'] - mean['pyg']:+.2f} points "
          f"(standard error {error:.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.4M nodes (default 0.25)")
    p.add_argument("--fanouts", default="10,10")
    p.add_argument("--batch-size", type=int, default=1024, help="seed edges per batch")
    p.add_argument("--neg-ratio", type=float, default=1.0, help="binary negatives per seed edge")
    p.add_argument("--num-batches", type=int, default=10, help="batches per loader pass (loader part)")
    p.add_argument("--repeat", type=int, default=3, help="loader passes per row (median)")
    p.add_argument("--threads", type=int, default=2, help="torch and numba threads")
    p.add_argument("--cora-dir", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
                                             / "cora_planetoid"))
    p.add_argument("--cora-seeds", type=int, default=5)
    p.add_argument("--cora-epochs", type=int, default=20)
    p.add_argument("--cli-seeds", type=int, default=5)
    p.add_argument("--parts", default="loader,cora", help="comma-separated: loader, cora, cli")
    p.add_argument("--seed", type=int, default=0, help="graph and seed-edge seed")
    a = p.parse_args()
    parts = set(a.parts.split(","))
    if parts - {"loader", "cora", "cli"}:
        p.error(f"--parts: expected loader, cora or cli, got {sorted(parts - {'loader', 'cora', 'cli'})}")
    import torch_geometric

    from gnnscale.graph.synthetic import make_synthetic, preset_config
    from gnnscale.loader import to_pyg_data
    from gnnscale.sampling import set_sampler_threads

    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    kinds = ("pyg", "gnnscale") if pyg_can_sample() else ("gnnscale",)
    print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, {a.threads} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    if kinds == ("gnnscale",):
        print(f"PyG's LinkNeighborLoader needs a compiled sampling backend (pyg-lib or torch-sparse) that "
              f"{sys.executable} lacks: gnnscale's rows only. For PyG's, run this script with the python of the "
              f"environment {SETUP} builds:\n    \"$({SETUP})/bin/python\" benchmarks/link.py", flush=True)
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    if "loader" in parts:
        start = time.perf_counter()
        data = to_pyg_data(make_synthetic(preset_config("products", a.scale, seed=a.seed)))
        data = type(data)(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes)  # features and edges
        print(f"products-shaped graph at scale {a.scale:g}: {data.num_nodes} nodes, {data.num_edges} edges, "
              f"{data.num_features} features (built in {time.perf_counter() - start:.0f} s); batch {a.batch_size} "
              f"edges + {a.neg_ratio:g}x binary negatives, fanouts {a.fanouts}", flush=True)
        rng = np.random.default_rng(a.seed)
        picked = torch.from_numpy(rng.choice(data.num_edges, a.num_batches * a.batch_size, replace=False))
        rows = loader_rows(data, fanouts, data.edge_index[:, picked], a.batch_size, a.neg_ratio, kinds)
        time_in_turns(rows, a.repeat)
        print(f"loader: {a.num_batches} batches a pass, median of {a.repeat}; load average "
              f"{os.getloadavg()[0]:.1f} at the end")
        print_loader_table(rows, a.num_batches)
    if "cora" in parts:
        run_cora(a.cora_dir, a.cora_seeds, a.cora_epochs, kinds)
    if "cli" in parts:
        run_cli(a.cora_dir, a.cli_seeds, a.threads)


# gnnscale train --task link as docs/training.md's measured command (Cora: test ROC-AUC 0.918 over 5 seeds).
CLI_LINK = ["--task", "link", "--model", "gcn", "--decoder", "mlp", "--dropout", "0", "--lr", "0.01", "--fanouts",
            "10,10", "--epochs", "60", "--quiet"]


def run_cli(cora_dir: str, seeds: int, threads: int) -> None:
    """``gnnscale train --task link`` on Cora and the PubMed-shaped graph: test ROC-AUC and epoch time."""
    import json
    import subprocess
    import tempfile

    # The PubMed-shaped graph with Cora's lr of 0.01 reached 0.75 by epoch 6 and then fell to 0.50 (its
    # embeddings collapsed, seed 0); at 0.003 it holds 0.77 by epoch 15.
    datasets = {"cora": ["--dataset", "cora", "--data-dir", cora_dir],
                "pubmed-shaped": ["--dataset", "synthetic", "-o", "preset=pubmed", "--lr", "0.003", "--epochs", "15"]}
    print("| dataset | test ROC-AUC mean | range | epoch s (median) |\n| --- | ---: | ---: | ---: |", flush=True)
    for name, flags in datasets.items():
        aucs, epoch_s = [], []
        for seed in range(seeds):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "m.json"
                cmd = [sys.executable, "-m", "gnnscale", "train", *flags, *CLI_LINK, "--seed", str(seed),
                       "--threads", str(threads), "--metrics-out", str(out)]
                subprocess.run(cmd, check=True)
                m = json.loads(out.read_text())
            best = max(m["history"], key=lambda h: h["val_score"])
            aucs.append(best["test_score"])
            epoch_s += [h["epoch_s"] for h in m["history"][1:]]
        print(f"| {name} | {statistics.mean(aucs):.3f} | {min(aucs):.3f}-{max(aucs):.3f} | "
              f"{statistics.median(epoch_s):.2f} |", flush=True)


if __name__ == "__main__":
    main()
