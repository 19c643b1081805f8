"""The cost of one DGS explanation refresh against training iterations, on one worker's part.

    python benchmarks/dgs_explanation.py [--scale 1.0] [--parts 4] [--train-iterations 60] [--repeats 5]
                                         [--probes 64] [--clusters 32] [--threads 1] [--json FILE]
                                         [--quality-at 0,2,5,10,20,30,60 [--seeds 0,1,2]]

The ``hard`` synthetic graph (``-o preset=hard``) is partitioned with METIS into ``--parts`` parts and
relabelled (as ``gnnscale partition`` does). GraphSAGE (CLI defaults: fanouts 10,5, batch 512, hidden
128) trains ``--train-iterations`` iterations on part 0's training nodes in this process, each timed
(sample, gather, forward, backward, step: a worker's compute without communication). Then part 0's
explanation graph is built (``--clusters`` clusters per part, ``--probes`` probes, as the workers build
it) and the model after those iterations is explained ``--repeats`` times with the default
ExplainConfig; wall and thread CPU seconds are the medians. The table relates one refresh to the
``T_ex`` = 30 iterations it runs beside (the issue's target: the explanation adds at most 10%). Last,
``--overlap-iterations`` iterations are timed alone and then beside an OnlineExplainer kept busy
(resubmitted as soon as a refresh finishes, i.e. far more often than every 30 iterations): the upper
bound of what the thread (GIL, cores) costs the training loop.

Quality, from the generator (which knows the informative half of the dimensions): how many of the
dimensions DGS drops at N_f = 0.85 are informative (chance: half), and the spread of the node mask.

``--quality-at I1,I2,...`` measures only that quality, as training goes on: for every seed of
``--seeds``, the model is explained after each of those iterations (one explanation each), and the
table gives, per iteration count, the informative dimensions among the dropped ones (mean over the
seeds) and how close the node mask is to the one of the last count (Spearman rank correlation over
the super-nodes): the earliest point at which an explanation is as good as a later one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from gnnscale.distributed.dgs.explainer import ExplainConfig, OnlineExplainer, explain
from gnnscale.distributed.dgs.explanation import (DEFAULT_CLUSTERS_PER_PART, DEFAULT_PROBES, build_cluster_map_local,
                                              explanation_graph_from_batch)
from gnnscale.graph.synthetic import hard_config, informative_dimensions, make_synthetic
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition import assign_parts, relabel
from gnnscale.sampling import NeighborSampler, derive_key, sample_blocks, set_sampler_threads

PERIOD = 30  # T_ex, the default
FEATURE_RATE = 0.85  # N_f


class Part0Trainer:
    """GraphSAGE (CLI defaults) trained on mini-batches of part 0's training nodes, each iteration timed."""

    def __init__(self, graph, features, labels, train0: np.ndarray, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = build_model(ModelConfig(name="sage", in_dim=features.shape[1],
                                             num_classes=int(labels.max()) + 1, num_layers=2, hidden_dim=128))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.003)
        self.sampler = NeighborSampler(graph, (10, 5))
        self.x, self.y = torch.from_numpy(features), torch.from_numpy(labels)
        self.train0, self.seed, self.step = train0, seed, 0
        self.rng = np.random.default_rng(seed)

    def run(self, iterations: int) -> list[float]:
        """Seconds of each of ``iterations`` iterations (sample, gather, forward, backward, step)."""
        seconds = []
        for _ in range(iterations):
            seeds = torch.from_numpy(np.sort(self.rng.choice(self.train0, min(512, self.train0.shape[0]),
                                                             replace=False)))
            start = time.perf_counter()
            blocks = self.sampler.sample(seeds, derive_key(self.seed, 0, self.step))
            loss = F.cross_entropy(self.model(blocks, self.x.index_select(0, blocks[0].src_ids)), self.y[seeds])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            seconds.append(time.perf_counter() - start)
            self.step += 1
        return seconds


def overlapped_iterations(trainer: Part0Trainer, graph, iterations: int, seed: int) -> tuple[list[float], int]:
    """Iteration seconds while an OnlineExplainer keeps explaining in its thread (resubmitted as soon as
    one finishes), and the number of refreshes it finished meanwhile: what the thread costs training."""
    factory = lambda: build_model(ModelConfig(name="sage", in_dim=graph.feature_dim,  # noqa: E731
                                              num_classes=trainer.model.layers[-1].out_dim, num_layers=2,
                                              hidden_dim=128))
    seconds, done = [], 0
    with OnlineExplainer(graph, factory, ExplainConfig(seed=seed)) as explainer:
        submitted = trainer.step
        explainer.submit(trainer.model.state_dict(), submitted)
        for _ in range(iterations):
            latest = explainer.latest()
            if latest is not None and latest.iteration == submitted and trainer.step > submitted:
                done += 1
                submitted = trainer.step
                explainer.submit(trainer.model.state_dict(), submitted)
            seconds += trainer.run(1)
    return seconds, done


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(np.float64)


def quality_over_training(args, cfg, rl, features, labels, train0) -> None:
    """The ``--quality-at`` table (see the module docstring)."""
    points = sorted({int(i) for i in args.quality_at.split(",")})
    seeds = [int(s) for s in args.seeds.split(",")]
    dropped_by = {p: [] for p in points}
    spearman_by = {p: [] for p in points}
    for seed in seeds:
        clusters = build_cluster_map_local(rl.graph, rl.book, features, args.clusters, seed)
        probes = np.sort(np.random.default_rng(seed).choice(train0, args.probes, replace=False))
        blocks = sample_blocks(rl.graph, probes, (10, 5), key=derive_key(seed, 0, 2))
        graph = explanation_graph_from_batch(blocks, torch.from_numpy(features[blocks[0].src_ids.numpy()]),
                                             clusters, 0)
        trainer = Part0Trainer(rl.graph, features, labels, train0, seed)
        masks = {}
        for p in points:
            trainer.run(p - trainer.step)
            masks[p] = explain(trainer.model, graph, ExplainConfig(seed=seed), p)
        last = _ranks(masks[points[-1]].cluster_weight[graph.super_cluster])
        for p in points:
            dropped = np.setdiff1d(np.arange(cfg.feature_dim), masks[p].top_dims(FEATURE_RATE))
            dropped_by[p].append(int(np.isin(dropped, informative_dimensions(cfg)).sum()))
            spearman_by[p].append(float(np.corrcoef(_ranks(masks[p].cluster_weight[graph.super_cluster]), last)[0, 1]))
        print(f"seed {seed}: informative dropped {[dropped_by[p][-1] for p in points]}", flush=True)
    num_dropped = cfg.feature_dim - int(masks[points[-1]].top_dims(FEATURE_RATE).shape[0])
    print(f"\n| explained after (iterations) | informative among the {num_dropped} dropped (chance "
          f"{num_dropped * cfg.informative_features:.1f}), mean of {len(seeds)} seeds | node mask vs the one after "
          f"{points[-1]} (Spearman) |\n| --- | --- | --- |")
    for p in points:
        print(f"| {p} | {statistics.mean(dropped_by[p]):.1f} ({', '.join(map(str, dropped_by[p]))}) | "
              f"{statistics.mean(spearman_by[p]):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--train-iterations", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--overlap-iterations", type=int, default=30,
                        help="iterations timed alone, then beside an explainer kept busy")
    parser.add_argument("--probes", type=int, default=DEFAULT_PROBES)
    parser.add_argument("--clusters", type=int, default=DEFAULT_CLUSTERS_PER_PART)
    parser.add_argument("--threads", type=int, default=1, help="torch and numba threads (a worker of 4 on 2 cores: 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--quality-at", default=None,
                        help="comma-separated iteration counts: only the explanation quality as training goes on")
    parser.add_argument("--seeds", default="0,1,2", help="--quality-at: seeds of the runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    set_sampler_threads(args.threads)

    cfg = hard_config(args.scale)
    dataset = make_synthetic(cfg)
    start = time.perf_counter()
    rl = relabel(dataset.graph, assign_parts(dataset.graph, args.parts, "metis", train_idx=dataset.train_idx),
                 args.parts)
    features, labels = dataset.features[rl.new_to_old], dataset.labels[rl.new_to_old]
    lo, hi = rl.book.node_range(0)
    train = rl.map_ids(dataset.train_idx)
    train0 = train[(train >= lo) & (train < hi)]
    print(f"hard graph: {cfg.num_nodes} nodes, {dataset.graph.num_edges} edges, {args.parts} METIS parts "
          f"({time.perf_counter() - start:.1f} s); part 0: {hi - lo} nodes, {train0.shape[0]} training nodes")

    if args.quality_at:
        quality_over_training(args, cfg, rl, features, labels, train0)
        return
    trainer = Part0Trainer(rl.graph, features, labels, train0, args.seed)
    iteration_s = trainer.run(args.train_iterations)
    iteration = statistics.median(iteration_s[len(iteration_s) // 4:])  # the first ones compile and warm up
    model = trainer.model

    start = time.perf_counter()
    clusters = build_cluster_map_local(rl.graph, rl.book, features, args.clusters, args.seed)
    cluster_s = time.perf_counter() - start
    probes = np.sort(np.random.default_rng(args.seed).choice(train0, args.probes, replace=False))
    blocks = sample_blocks(rl.graph, probes, (10, 5), key=derive_key(args.seed, 0, 2))
    graph = explanation_graph_from_batch(blocks, torch.from_numpy(features[blocks[0].src_ids.numpy()]), clusters, 0)
    runs = [explain(model, graph, ExplainConfig(seed=args.seed), args.train_iterations)
            for _ in range(args.repeats)]
    wall = statistics.median(m.seconds for m in runs)
    cpu = statistics.median(m.cpu_seconds for m in runs)

    alone = trainer.run(args.overlap_iterations)
    beside, refreshes = overlapped_iterations(trainer, graph, args.overlap_iterations, args.seed)

    masks = runs[-1]
    dropped = np.setdiff1d(np.arange(cfg.feature_dim), masks.top_dims(FEATURE_RATE))
    informative_dropped = int(np.isin(dropped, informative_dimensions(cfg)).sum())
    node_mask = masks.cluster_weight[graph.super_cluster]
    print(f"explanation graph: {graph.num_probes} probes, {graph.x.shape[0]} input rows "
          f"({int((graph.super_of_row >= 0).sum())} remote), {graph.num_super} super-nodes; "
          f"cluster map {cluster_s:.1f} s (once)")
    print("\n| quantity | value |\n| --- | --- |")
    print(f"| training iteration, part 0, median of {len(iteration_s) - len(iteration_s) // 4} | "
          f"{iteration * 1e3:.0f} ms |")
    print(f"| one refresh ({masks.epochs} steps), wall, median of {args.repeats} | {wall * 1e3:.0f} ms |")
    print(f"| one refresh, thread CPU | {cpu * 1e3:.0f} ms |")
    print(f"| refresh CPU / {PERIOD} iterations | {cpu / (PERIOD * iteration):.1%} |")
    print(f"| training iteration alone / beside a busy explainer thread ({refreshes} refreshes), mean of "
          f"{args.overlap_iterations} | {statistics.mean(alone) * 1e3:.0f} ms / {statistics.mean(beside) * 1e3:.0f} ms "
          f"({statistics.mean(beside) / statistics.mean(alone) - 1:+.1%}) |")
    print(f"| dropped dimensions (N_f {FEATURE_RATE}) that are informative | {informative_dropped} of "
          f"{dropped.shape[0]} (chance: {dropped.shape[0] * cfg.informative_features:.1f}) |")
    print(f"| node mask over {graph.num_super} super-nodes | {node_mask.min():.3f} to {node_mask.max():.3f}, "
          f"median {np.median(node_mask):.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "iteration_s": iteration_s, "alone_s": alone, "beside_s": beside,
                       "refreshes_beside": refreshes, "refresh_wall_s": [m.seconds for m in runs],
                       "refresh_cpu_s": [m.cpu_seconds for m in runs], "informative_dropped": informative_dropped,
                       "dropped": int(dropped.shape[0]), "node_mask": node_mask.tolist()}, f, indent=2)


if __name__ == "__main__":
    main()
