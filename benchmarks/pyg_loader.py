"""gnnscale's NeighborLoader against PyG's own NeighborLoader: batches per second, the epoch of PyG's
GraphSAGE, and Cora test accuracy, all measured in one run.

    "$(benchmarks/pyg_setup.sh)/bin/python" benchmarks/pyg_loader.py [--scale 0.1] [--fanouts 15,10,5]
        [--batch-size 1024] [--num-batches 10] [--repeat 3] [--epoch-repeat 3] [--hidden 256] [--threads 2]
        [--cora-dir ../shared/data/cora_planetoid] [--cora-seeds 5] [--cora-epochs 30] [--parts loader,epoch,cora]

PyG's loader needs a compiled sampling backend (pyg-lib or torch-sparse) that the registry has no
wheel of for a current torch: ``benchmarks/pyg_setup.sh`` builds an environment with one (torch-sparse
compiled from source) and prints its folder. Without it this script stops and says so.

Three parts, each loader given the same data (a PyG ``Data``: x, y, edge_index, split masks) and the
same seed batches (``input_nodes`` in a fixed order, no shuffling):

* ``loader``: batches per second on the products-shaped synthetic graph (gnnscale's generator at
  ``--scale``, 100 features), iterating ``--num-batches`` batches and touching nothing. gnnscale's row
  at its default ``prefetch=1`` (a background thread) and at ``prefetch=0`` (the calling thread).
  Median over ``--repeat`` passes after a warm-up pass, the rows taking turns within each repeat.
* ``epoch``: one epoch over the training nodes of PyG's ``torch_geometric.nn.GraphSAGE`` (hidden
  ``--hidden``, one layer per hop, Adam) fed by each loader, from the same initial weights; the time
  the training loop waited for batches and the time of its steps are listed beside the epoch.
  Median over ``--epoch-repeat`` epochs, taking turns, after a warm-up of 3 batches each.
* ``cora``: the same GraphSAGE trained on Cora (Planetoid split) with each loader for
  ``--cora-seeds`` seeds; ``torch.manual_seed(seed)`` fixes the initial weights (the same for both
  loaders) and each loader's shuffling. Test accuracy of the last epoch, evaluated on the full graph
  (no sampling), so the loaders differ only in the training batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loader import time_in_turns  # noqa: E402  (benchmarks/loader.py; benchmarks/ is not a package)

SETUP = "benchmarks/pyg_setup.sh"


def require_pyg_backend() -> None:
    """Stop with a message naming the set-up script unless PyG's NeighborLoader can sample here."""
    hint = (f"build an environment that has it with {SETUP} and run this script with its python:\n"
            f"    \"$({SETUP})/bin/python\" benchmarks/pyg_loader.py")
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError as err:
        sys.exit(f"pyg_loader.py: torch_geometric is not installed in {sys.executable} ({err}); {hint}")
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        sys.exit(f"pyg_loader.py: PyG's NeighborLoader needs a compiled sampling backend (pyg-lib or torch-sparse), "
                 f"and {sys.executable} has neither; {hint}")


def make_loader(kind: str, data, fanouts, input_nodes, batch_size: int, *, shuffle: bool = False,
                prefetch: int = 1, seed: int | None = None):
    """PyG's or gnnscale's NeighborLoader, built with the same PyG arguments."""
    if kind == "pyg":
        from torch_geometric.loader import NeighborLoader
        return NeighborLoader(data, list(fanouts), input_nodes=input_nodes, batch_size=batch_size, shuffle=shuffle)
    from gnnscale.loader import NeighborLoader
    return NeighborLoader(data, list(fanouts), input_nodes=input_nodes, batch_size=batch_size, shuffle=shuffle,
                          prefetch=prefetch, seed=seed)


def loader_rows(data, fanouts, order: torch.Tensor, batch_size: int) -> list[dict]:
    rows = []
    for name, kind, prefetch in (("PyG NeighborLoader", "pyg", 0), ("gnnscale, prefetch 1", "gnnscale", 1),
                                 ("gnnscale, prefetch 0", "gnnscale", 0)):
        loader = make_loader(kind, data, fanouts, order, batch_size, prefetch=prefetch, seed=0)
        sizes: list[tuple[int, int]] = []

        def run(loader=loader, sizes=sizes):
            sizes.clear()
            for batch in loader:
                sizes.append((batch.edge_index.shape[1], batch.num_nodes))

        rows.append({"name": name, "run": run, "sizes": sizes})
    return rows


def graphsage(in_dim: int, hidden: int, num_layers: int, num_classes: int, dropout: float):
    from torch_geometric.nn import GraphSAGE
    return GraphSAGE(in_dim, hidden, num_layers=num_layers, out_channels=num_classes, dropout=dropout)


def train_epoch(model, optimizer, loader, max_batches: int | None = None) -> tuple[float, float]:
    """One pass of PyG's usual mini-batch loop; returns (seconds waiting for batches, seconds in steps)."""
    model.train()
    wait = step = 0.0
    batches = iter(loader)
    for i in range(len(loader) if max_batches is None else min(max_batches, len(loader))):
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]  # the seeds come first
        torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        wait, step = wait + t1 - t0, step + time.perf_counter() - t1
    del batches  # closes gnnscale's background stage when the pass stopped early
    return wait, step


def epoch_rows(data, fanouts, order: torch.Tensor, batch_size: int, hidden: int) -> list[dict]:
    torch.manual_seed(0)
    init = graphsage(data.num_features, hidden, len(fanouts), int(data.y.max()) + 1, 0.5).state_dict()
    rows = []
    for name, kind in (("PyG NeighborLoader", "pyg"), ("gnnscale NeighborLoader", "gnnscale")):
        model = graphsage(data.num_features, hidden, len(fanouts), int(data.y.max()) + 1, 0.5)
        model.load_state_dict(init)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
        loader = make_loader(kind, data, fanouts, order, batch_size, seed=0)
        row = {"name": name, "batches": len(loader), "split": []}
        row["run"] = lambda m=model, o=optimizer, ld=loader, r=row: r["split"].append(train_epoch(m, o, ld))
        row["warm_up"] = lambda m=model, o=optimizer, ld=loader: train_epoch(m, o, ld, max_batches=3)
        rows.append(row)
    return rows


def cora_accuracy(data, kind: str, seed: int, epochs: int) -> float:
    """Test accuracy of GraphSAGE trained with loader ``kind`` (full-graph evaluation after ``epochs``)."""
    torch.manual_seed(seed)
    model = graphsage(data.num_features, 64, 2, int(data.y.max()) + 1, 0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    # seed=None: gnnscale draws its seed from torch's generator, as PyG's loader draws its shuffling.
    loader = make_loader(kind, data, (10, 10), data.train_mask, 32, shuffle=True)
    for _ in range(epochs):
        train_epoch(model, optimizer, loader)
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def print_loader_table(rows: list[dict], num_batches: int) -> None:
    base = rows[0]["seconds"]
    print(f"\n{'loader':24} {'batches/s':>9} {'ms/batch':>9} {'edges/batch':>11} {'nodes/batch':>11} {'x PyG':>6}")
    for r in rows:
        edges, nodes = (np.mean([s[i] for s in r["sizes"]]) for i in (0, 1))
        print(f"{r['name']:24} {num_batches / r['seconds']:9.2f} {1e3 * r['seconds'] / num_batches:9.1f} "
              f"{edges:11.0f} {nodes:11.0f} {base / r['seconds']:6.2f}")


def print_epoch_table(rows: list[dict]) -> None:
    base = rows[0]["seconds"]
    print(f"\n{'GraphSAGE epoch':24} {'batches':>7} {'epoch s':>8} {'waiting s':>9} {'steps s':>8} {'x PyG':>6}")
    for r in rows:
        # the waiting / steps split of the epoch whose time is the median
        wait, step = r["split"][r["all_seconds"].index(r["seconds"])]
        print(f"{r['name']:24} {r['batches']:7d} {r['seconds']:8.2f} {wait:9.2f} {step:8.2f} {base / r['seconds']:6.2f}")


def run_cora(cora_dir: str, seeds: int, epochs: int) -> None:
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.loader import to_pyg_data
    data = to_pyg_data(load_dataset("cora", cora_dir))
    print(f"\nCora ({data.num_nodes} nodes), GraphSAGE hidden 64, fanouts 10,10, batch 32, {epochs} epochs; "
          f"test accuracy %")
    print(f"{'seed':>4} {'PyG':>7} {'gnnscale':>9}")
    acc = {"pyg": [], "gnnscale": []}
    for seed in range(seeds):
        for kind in acc:
            acc[kind].append(100 * cora_accuracy(data, kind, seed, epochs))
        print(f"{seed:4d} {acc['pyg'][-1]:7.2f} {acc['gnnscale'][-1]:9.2f}", flush=True)
    mean = {k: statistics.mean(v) for k, v in acc.items()}
    # The standard error of the mean paired difference: how far apart two loaders that sample the same
    # law would land by chance with this many seeds.
    diffs = [g - p for g, p in zip(acc["gnnscale"], acc["pyg"])]
    error = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    print(f"mean {mean['pyg']:7.2f} {mean['gnnscale']:9.2f}   difference {mean['gnnscale'] - mean['pyg']:+.2f} points "
          f"(standard error {error:.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.1, help="fraction of products' 2.4M nodes (default 0.1)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-batches", type=int, default=10, help="batches per loader pass (loader part)")
    p.add_argument("--repeat", type=int, default=3, help="loader passes per row (median)")
    p.add_argument("--epoch-repeat", type=int, default=3, help="epochs per loader (median)")
    p.add_argument("--hidden", type=int, default=256, help="GraphSAGE hidden width (epoch part)")
    p.add_argument("--threads", type=int, default=2, help="torch and numba threads")
    p.add_argument("--cora-dir", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
                                             / "cora_planetoid"))
    p.add_argument("--cora-seeds", type=int, default=5)
    # 30 epochs of 5 batches: trained (10 epochs stop mid-training, where seeds spread 1.1-1.3 points).
    p.add_argument("--cora-epochs", type=int, default=30)
    p.add_argument("--parts", default="loader,epoch,cora", help="comma-separated: loader, epoch, cora")
    p.add_argument("--seed", type=int, default=0, help="graph and seed-batch seed")
    a = p.parse_args()
    parts = set(a.parts.split(","))
    if parts - {"loader", "epoch", "cora"}:
        p.error(f"--parts: expected loader, epoch or cora, got {sorted(parts - {'loader', 'epoch', 'cora'})}")
    require_pyg_backend()
    import torch_geometric

    from gnnscale.graph.synthetic import make_synthetic, preset_config
    from gnnscale.loader import to_pyg_data
    from gnnscale.sampling import set_sampler_threads

    set_sampler_threads(a.threads)
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, {a.threads} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    if parts & {"loader", "epoch"}:
        start = time.perf_counter()
        data = to_pyg_data(make_synthetic(preset_config("products", a.scale, seed=a.seed)))
        print(f"products-shaped graph at scale {a.scale:g}: {data.num_nodes} nodes, {data.num_edges} edges, "
              f"{data.num_features} features (built in {time.perf_counter() - start:.0f} s); batch {a.batch_size}, "
              f"fanouts {a.fanouts}", flush=True)
        rng = np.random.default_rng(a.seed)
        if "loader" in parts:
            order = torch.from_numpy(rng.choice(data.num_nodes, a.num_batches * a.batch_size, replace=False))
            rows = loader_rows(data, fanouts, order, a.batch_size)
            time_in_turns(rows, a.repeat)
            print(f"loader: {a.num_batches} batches a pass, median of {a.repeat}; load average "
                  f"{os.getloadavg()[0]:.1f} at the end")
            print_loader_table(rows, a.num_batches)
        if "epoch" in parts:
            train = data.train_mask.nonzero().view(-1)
            order = train[torch.from_numpy(rng.permutation(train.numel()))]
            rows = epoch_rows(data, fanouts, order, a.batch_size, a.hidden)
            time_in_turns(rows, a.epoch_repeat)
            print(f"\nepoch: {order.numel()} training nodes, GraphSAGE hidden {a.hidden}, {len(fanouts)} layers, "
                  f"median of {a.epoch_repeat}; load average {os.getloadavg()[0]:.1f} at the end")
            print_epoch_table(rows)
    if "cora" in parts:
        run_cora(a.cora_dir, a.cora_seeds, a.cora_epochs)


if __name__ == "__main__":
    main()
