"""Distributed data-parallel training over a partition directory, one worker per part (torchrun).

Every worker trains on mini-batches of its own training nodes and all-reduces gradients. The layout
decides how the sampled neighborhood is built (FastSample, section 3.3):

- ``hybrid``: every worker memory-maps the whole topology and samples locally with the fused
  kernel; only input features cross the network: 2 rounds per iteration (request, reply).
- ``vanilla``: a worker holds its part's in-edges only; each hop after the first asks the owners of
  remote nodes to sample for it (2 rounds per hop, the requester's key travels with the request),
  then features: 2L rounds per iteration.

Both give identical blocks for the same key (counter-based randomness), so they train identically:
only the communication differs. With one worker this is exactly the single-machine trainer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_from_env, shutdown
from gnnscale.distributed.features import PartitionedFeatureStore
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition.directory import LocalPartition, load_partition
from gnnscale.sampling import derive_key, set_sampler_threads
from gnnscale.sampling.keys import STREAM_DROPOUT, STREAM_INIT
from gnnscale.train.config import TrainConfig
from gnnscale.train.loop import EVAL_EPOCH, epoch_batches, num_batches_for
from gnnscale.train.metrics import PhaseTimer, write_json_atomic
from gnnscale.train.run import TrainReport, summarize

LAYOUTS = ("hybrid", "vanilla")


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """What one worker trains with.

    Args:
        comm: the accounted collectives.
        part: this worker's partition (features and labels of its own nodes).
        sampler, eval_sampler: hybrid or vanilla samplers (training and inference fanouts).
        store: the partitioned feature store (2 rounds per gather).
        labels: int64 tensor [n_p], labels of the owned nodes (row = global id - node_offset).
        train_idx: int64 tensor, the owned training nodes (global ids).
    """

    comm: Comm
    part: LocalPartition
    sampler: HybridSampler | VanillaSampler
    eval_sampler: HybridSampler | VanillaSampler
    store: PartitionedFeatureStore
    labels: torch.Tensor
    train_idx: torch.Tensor

    def labels_of(self, seeds: torch.Tensor) -> torch.Tensor:
        return self.labels[seeds - self.part.node_offset]


def load_local_partition(partition_dir: str | Path, layout: str, comm: Comm) -> LocalPartition:
    """Load this worker's part; if any worker fails (missing or corrupt file, wrong worker count),
    every worker raises with that worker's message instead of waiting forever for it."""
    part, error = None, ""
    try:
        part = load_partition(partition_dir, comm.rank, layout)
        if part.num_parts != comm.world_size:
            raise ValueError(f"partitions: {partition_dir} has {part.num_parts} parts but {comm.world_size} "
                             f"workers were launched; use --nproc-per-node {part.num_parts}")
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)
    return part


def build_worker(part: LocalPartition, layout: str, cfg: TrainConfig, comm: Comm) -> Worker:
    def sampler(fanouts):
        if layout == "hybrid":
            return HybridSampler(part.topology, part.book, comm.rank, fanouts, replace=cfg.replace, method=cfg.sampler)
        rows = part.topology
        return VanillaSampler(part.book, comm.rank, rows.local_indptr, rows.local_indices, fanouts, comm,
                             replace=cfg.replace)

    return Worker(comm=comm, part=part, sampler=sampler(cfg.fanouts), eval_sampler=sampler(cfg.inference_fanouts),
                  store=PartitionedFeatureStore(part.book, comm.rank, part.features, comm),
                  labels=torch.from_numpy(part.labels.copy()), train_idx=torch.from_numpy(part.train_idx.copy()))


def all_reduce_gradients(model: torch.nn.Module, comm: Comm) -> None:
    """Average gradients over workers in one all-reduce of one flat buffer."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    comm.all_reduce_(flat, dist.ReduceOp.SUM, "grad")  # collective: every worker's gradient
    flat /= comm.world_size
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad = g.view_as(p)


def train_epoch(model, optimizer, worker: Worker, cfg: TrainConfig, epoch: int, num_batches: int,
                timer: PhaseTimer, progress: bool) -> dict:
    """One epoch of ``num_batches`` iterations (the same on every worker). Returns this worker's sums
    and the communication counted per iteration."""
    comm, rank = worker.comm, worker.comm.rank
    model.train()
    torch.manual_seed(derive_key(cfg.seed, epoch, 0, rank, STREAM_DROPOUT))
    batches = epoch_batches(worker.train_idx, num_batches, cfg.seed, epoch, rank)
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.long)
    edges, per_iteration = 0, []
    for step, seeds in enumerate(tqdm(batches, desc=f"epoch {epoch}", leave=False, disable=not progress)):
        comm.stats.snapshot_and_reset()
        with timer.phase("sample"):
            blocks = worker.sampler.sample(seeds, derive_key(cfg.seed, epoch, step, rank))
        with timer.phase("fetch"):
            x = worker.store.gather(blocks[0].src_ids)
            y = worker.labels_of(seeds)
        with timer.phase("forward_backward"):
            logits = model(blocks, x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with timer.phase("grad_sync"):
            all_reduce_gradients(model, comm)
        optimizer.step()
        per_iteration.append(comm.stats.snapshot_and_reset())
        edges += sum(b.num_edges for b in blocks)
        # Accumulate as tensors: no .item() (a sync point on GPU) inside the loop.
        loss_sum += loss.detach().double() * seeds.numel()
        correct += (logits.detach().argmax(1) == y).sum()
    return {"loss_sum": loss_sum, "correct": correct, "count": sum(b.numel() for b in batches), "edges": edges,
            "comm": per_iteration}


@torch.no_grad()
def evaluate(model, worker: Worker, node_ids, batch_size: int, seed: int) -> float:
    """Global accuracy over every worker's ``node_ids``. Sampling and fetching are collective, so all
    workers run the same number of steps; a worker out of nodes samples a stand-in seed (its first
    node) and ignores the result."""
    comm, rank = worker.comm, worker.comm.rank
    model.eval()
    ids = torch.from_numpy(node_ids.copy())
    steps = comm.all_reduce_max_int(math.ceil(ids.numel() / batch_size), "eval")
    chunks = list(ids.split(batch_size))
    correct = 0
    for step in range(steps):
        real = step < len(chunks)
        seeds = chunks[step] if real else torch.tensor([worker.part.node_offset])
        blocks = worker.eval_sampler.sample(seeds, derive_key(seed, EVAL_EPOCH, step, rank))
        logits = model(blocks, worker.store.gather(blocks[0].src_ids))
        if real:
            correct += int((logits.argmax(1) == worker.labels_of(seeds)).sum())
    totals = torch.tensor([correct, ids.numel()], dtype=torch.float64)
    comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: global counts
    return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")


def epoch_metrics(epoch: int, sums: dict, timer: PhaseTimer, val_acc: float, test_acc: float, comm: Comm) -> dict:
    """Global loss/accuracy (one all-reduce of this worker's sums) and this worker's time split and
    communication per iteration."""
    totals = torch.stack([sums["loss_sum"], sums["correct"].double(), torch.tensor(float(sums["count"]))])
    comm.all_reduce_(totals, dist.ReduceOp.SUM, "eval")  # collective: epoch totals over workers
    per_iter = sums["comm"]
    comm_mean = {c: {k: sum(it[c][k] for it in per_iter) / len(per_iter) for k in per_iter[0][c]}
                 for c in per_iter[0]}
    seconds = timer.seconds
    return {
        "epoch": epoch, "sample_s": seconds.get("sample", 0.0), "fetch_s": seconds.get("fetch", 0.0),
        "forward_backward_s": seconds.get("forward_backward", 0.0), "grad_sync_s": seconds.get("grad_sync", 0.0),
        "epoch_s": seconds["epoch"], "loss": float(totals[0] / totals[2]), "train_acc": float(totals[1] / totals[2]),
        "val_acc": val_acc, "test_acc": test_acc, "num_batches": len(per_iter), "sampled_edges": sums["edges"],
        "sampled_edges_per_s": sums["edges"] / seconds["sample"] if seconds.get("sample") else 0.0,
        "rounds_per_iteration": {c: v["rounds"] for c, v in comm_mean.items()},
        "bytes_per_iteration": {c: v["bytes_sent"] + v["bytes_received"] for c, v in comm_mean.items()},
        "comm_per_iteration": comm_mean,
    }


def agreed_num_batches(part: LocalPartition, cfg: TrainConfig, comm: Comm) -> int:
    """Iterations per epoch, the same on every worker: enough for the worker with most training nodes."""
    local = part.train_idx.shape[0]
    num_batches = comm.all_reduce_max_int(num_batches_for(local, cfg.batch_size), "setup")
    ok = local >= num_batches
    comm.agree(ok, f"part {comm.rank} has {local} training nodes, fewer than the {num_batches} iterations per "
                   "epoch the largest part needs; repartition with --method metis (it balances training nodes) "
                   "or raise --batch-size")
    return num_batches


def run_distributed_training(partition_dir: str | Path, layout: str, model_options: dict, cfg: TrainConfig, *,
                             metrics_out: str | Path | None = None, progress: bool = True,
                             timeout_s: float = 120.0) -> TrainReport:
    """Join the torchrun job, train, and return the report (the same on every worker).

    Args:
        partition_dir: written by ``gnnscale partition``; one part per worker.
        layout: ``"hybrid"`` or ``"vanilla"``.
        model_options: ModelConfig fields other than in_dim, num_classes and num_layers.
        cfg: training settings; ``batch_size`` is per worker.
        metrics_out: rank 0 writes the metrics JSON here.
        timeout_s: a collective waiting longer than this for a peer fails (no hang).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if cfg.sampler in ("matrix", "ladies"):
        raise ValueError(f"sampler: --sampler {cfg.sampler} is single-process for now (its distributed layouts, "
                         "1d and 1.5d, are planned; see docs/matrix_sampling.md)")
    if layout == "vanilla" and cfg.sampler != "fused":
        raise ValueError(f"sampler: --sampler {cfg.sampler} is only available with --layout hybrid (the vanilla "
                         "layout samples remote hops through their owners)")
    ctx = init_from_env(timeout_s=timeout_s)
    try:
        torch.set_num_threads(cfg.threads)
        set_sampler_threads(cfg.threads)
        comm = Comm(ctx)
        part = load_local_partition(partition_dir, layout, comm)
        worker = build_worker(part, layout, cfg, comm)
        model_cfg = ModelConfig(in_dim=part.feature_dim, num_classes=part.num_classes, num_layers=cfg.num_layers,
                                **model_options)
        torch.manual_seed(derive_key(cfg.seed, stream=STREAM_INIT))  # same initial weights on every worker
        model = build_model(model_cfg)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        num_batches = agreed_num_batches(part, cfg, comm)
        lead = progress and ctx.rank == 0
        history = []
        for epoch in range(cfg.epochs):
            timer = PhaseTimer()
            with timer.phase("epoch"):
                sums = train_epoch(model, optimizer, worker, cfg, epoch, num_batches, timer, lead)
            val_acc = test_acc = float("nan")
            if cfg.evaluate:
                val_acc = evaluate(model, worker, part.val_idx, cfg.eval_batch_size, cfg.seed)
                test_acc = evaluate(model, worker, part.test_idx, cfg.eval_batch_size, cfg.seed)
            history.append(epoch_metrics(epoch, sums, timer, val_acc, test_acc, comm))
            if lead:
                print_epoch(history[-1])
        report = summarize(history)
        if metrics_out is not None and ctx.rank == 0:
            write_json_atomic(metrics_out, {"partitions": str(partition_dir), "layout": layout,
                                            "world_size": ctx.world_size, "model": asdict(model_cfg),
                                            "train": asdict(cfg), **report.to_json()})
        # Collective: nobody tears the group down while a peer is still in its last collective.
        comm.barrier("setup")
        return report
    finally:
        shutdown()


def print_epoch(m: dict) -> None:
    rounds = m["rounds_per_iteration"]
    print(f"epoch {m['epoch']:3d}  loss {m['loss']:.4f}  train {m['train_acc']:.4f}  val {m['val_acc']:.4f}  "
          f"test {m['test_acc']:.4f}  {m['epoch_s']:.1f}s (sample {m['sample_s']:.1f}, fetch {m['fetch_s']:.1f}, "
          f"fwd+bwd {m['forward_backward_s']:.1f}, grad sync {m['grad_sync_s']:.1f})  rounds/iter "
          f"sample {rounds['sample']:g} + feature {rounds['feature']:g}", flush=True)
