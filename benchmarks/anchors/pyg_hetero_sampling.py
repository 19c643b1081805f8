"""Times PyG's hetero ``NeighborLoader`` and its sampler alone on a typed graph and seed batches given as files.

Run with the python of an environment where PyG's neighbor sampling has its compiled backend (pyg-lib or
torch-sparse: ``benchmarks/pyg_setup.sh`` builds one); called by ``benchmarks/hetero.py``:

    python pyg_hetero_sampling.py EDGES.npz SEEDS.npy --target-type paper --fanouts 25,20 [--threads 1] [--repeat 3]

The files are those of ``dgl_hetero_sampling.py`` (it describes them); the graph becomes a ``HeteroData`` with
each relation's ``edge_index`` and each type's ``num_nodes``, no features (the loader times its sampling and
the batch it builds, not a feature gather). Two rows, each hop drawing ``--fanouts`` for every relation
(``num_neighbors={edge_type: [...]}``):

* ``pyg NeighborLoader``: ``NeighborLoader(data, num_neighbors, input_nodes=(target, seeds), batch_size,
  shuffle=False)`` over the batches in order: what a PyG training loop iterates (sampling, then the
  ``HeteroData`` batch).
* ``pyg sampler alone``: the loader's ``NeighborSampler.sample_from_nodes`` on each batch: the sampling call.

Prints one JSON line per row: ms per batch (median over repeats, after a warm-up batch), edges per batch,
million sampled edges per second.
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch


def load_hetero_data(path):
    """The ``HeteroData`` of EDGES.npz (edges only) and its edge types in relation-id order."""
    from torch_geometric.data import HeteroData

    z = np.load(path)
    data = HeteroData()
    for t, count in zip(z["node_types"], z["node_counts"]):
        data[str(t)].num_nodes = int(count)
    etypes = [tuple(str(r).split("__")) for r in z["relations"]]
    for r, etype in enumerate(etypes):
        data[etype].edge_index = torch.from_numpy(np.stack([z[f"src_{r}"], z[f"dst_{r}"]]).astype(np.int64))
    return data, etypes


def timed(fn, warm_up, repeat):
    """(median seconds of a call of ``fn``, edges of the last call), after ``warm_up()``."""
    warm_up()
    times, edges = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        edges = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), edges


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
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NodeSamplerInput

    data, etypes = load_hetero_data(a.edges)
    hops = [int(k) for k in a.fanouts.split(",")]
    batches = [torch.from_numpy(b) for b in np.load(a.seeds).astype(np.int64)]
    size = batches[0].numel()

    # Built once, outside the timing: the loader converts every relation to CSC when it is made.
    loader = NeighborLoader(data, {etype: hops for etype in etypes}, input_nodes=(a.target_type, torch.cat(batches)),
                            batch_size=size, shuffle=False)
    sampler = loader.node_sampler

    def loader_pass():
        return sum(sum(batch[etype].edge_index.shape[1] for etype in batch.edge_types) for batch in loader)

    def sample(seeds):
        return sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds, input_type=a.target_type))

    def sampler_pass():
        return sum(sum(row.numel() for row in sample(seeds).row.values()) for seeds in batches)

    rows = (("pyg NeighborLoader", loader_pass, lambda: next(iter(loader))),
            ("pyg sampler alone", sampler_pass, lambda: sample(batches[0])))
    for name, fn, warm_up in rows:
        dt, edges = timed(fn, warm_up, a.repeat)
        print(json.dumps({"sampler": name, "threads": a.threads, "ms_per_batch": 1e3 * dt / len(batches),
                          "edges_per_batch": edges / len(batches), "medges_per_s": edges / dt / 1e6}), flush=True)


if __name__ == "__main__":
    main()
