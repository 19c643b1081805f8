"""Split parallelism (GSplit, Polisetty et al.; design in docs/split_parallelism.md): the ``split`` layout.

Every iteration trains ONE mini-batch of ``P x batch_size`` seeds drawn from all training nodes: exactly
the mini-batch the single-process trainer draws with batch size ``P x b`` on the same relabelled graph
(the same permutation of the training nodes, the same key per step). Every vertex of every layer is
computed by its owner only. By default (``sampling="owner"``) each worker samples only the destinations
it owns, hop by hop, and learns the cross edges from their destinations' owners (one ``"sample"`` round
per hop on the loading stage's Comm: :func:`~gnnscale.distributed.split.owner.owner_split_blocks`);
with ``sampling="replicated"`` each worker samples the whole mini-batch itself from the replicated
topology (no communication) and cuts out its own split (:func:`~gnnscale.distributed.split.split_blocks`).
Both give the same splits up to row order (tested), hence the same training. Each worker reads its
layer-0 rows from its own feature part: no feature fetch (``--gpu-cache-fraction``: the hottest of them
held on its GPU, :mod:`gnnscale.features.own_rows`). The model runs on
:class:`~gnnscale.distributed.split.shuffle.CooperativeBlock` s whose shuffles (partial sums for SAGE/GCN,
source rows for GAT) run on the training step's process group: they are part of the training step.
Sampling, splitting and reading the rows run in the background loading stage (``prepare``), whose
collectives run on the loader's group: owner sampling's rounds and
layer 0's exchange of input features, which do not depend on the parameters
(:func:`~gnnscale.distributed.split.shuffle.exchange_input_ahead`, one ``"feature"`` round; see
:func:`exchanges_input_ahead` for when): the training step then shuffles hidden features only.

On a GPU (``--device cuda``) the model, the cooperative layers' sums and the step run there: the copy stage
sends each step's splits (every tensor of every layer's split and of layer 0's exchange done ahead) and its
input rows to the GPU, and the shuffles run on the training step's group
(:func:`~gnnscale.distributed.device_policy.step_comm`): NCCL, rows staying on the GPUs, where every worker has
a GPU of its own; gloo through host memory where workers share one. Sampling and splitting stay on the host
(owner sampling's rounds are host exchanges on the loader's gloo group); layer 0's exchange runs where its
rows are: on the host, or on the GPU for rows the device cache returned.

Each worker's loss is the cross-entropy summed over the seeds it owns divided by the mini-batch's seed
count, and gradients are summed (divisor 1): one step equals the single-process step on the whole
mini-batch. Dropout masks are drawn per worker, so with dropout the run is statistically, not
bitwise, the single-process one.

Evaluation reuses the data-parallel hybrid inference (each worker classifies its own nodes, features
fetched from their owners): inference has no gradients to share and no redundancy worth removing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.split.owner import OwnerSplitWorkspace, owner_split_blocks
from gnnscale.distributed.split.shuffle import WIRE_DTYPES, CooperativeBlock, exchange_input_ahead
from gnnscale.distributed.split.plan import SHUFFLE_FOR_MODEL, ShuffleKind, split_blocks
from gnnscale.distributed.edge_metrics import epoch_edge_metrics, split_edge_counts
from gnnscale.features.device_cache import DeviceFeatureCache, RowStore
from gnnscale.features.own_rows import own_rows_store
from gnnscale.nn import ModelConfig
from gnnscale.partition.directory import LocalPartition
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.sampling import NeighborSampler
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts.base import EdgeLedger, LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.layouts.data_parallel import DataParallel, build_data_parallel
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.steps import Batch, Sampled, Step
from gnnscale.settings import setting

# owner: each worker samples its own destinations and exchanges cross edges (default, measured faster:
# benchmarks/README.md); replicated: every worker samples the whole mini-batch and splits it.
SPLIT_SAMPLINGS = ("owner", "replicated")


class SplitParallel:
    """The ``split`` layout of one worker (the interface of :class:`~gnnscale.train.layouts.base.Layout`).

    Args:
        sampler: samples the whole mini-batch from the replicated topology (every worker, same key).
        kind: what the cooperative layers shuffle (``SHUFFLE_FOR_MODEL[model]``).
        part: this worker's partition (the partition book; its feature rows are read through ``rows``).
        cfg: training settings; ``batch_size`` is per worker, a mini-batch has ``P x batch_size`` seeds.
        comm: the training step's Comm (:func:`~gnnscale.distributed.device_policy.step_comm`): the cooperative
            layers' shuffles run on it.
        loader: the loading stage's Comm: owner sampling's cross-edge rounds (replicated sampling: none).
        inference: the data-parallel hybrid layout that evaluation runs on.
        rows: where this worker reads its own feature rows, by local row id
            (:func:`~gnnscale.features.own_rows.own_rows_store`: host memory, the hottest on the device).
        sampling: ``"owner"`` (each worker samples its own destinations; collective on ``loader``) or
            ``"replicated"`` (each worker samples the whole mini-batch), see :data:`SPLIT_SAMPLINGS`.
        input_ahead: complete layer 0's exchange of input features in the loading stage
            (:func:`exchanges_input_ahead`); False: the training step shuffles.
        shuffle_dtype: the dtype every exchange travels in (:data:`WIRE_DTYPES`; ``"bfloat16"``: half the
            bytes, summed in float32 on arrival).
        kernels: the model's kernels (``ModelConfig.kernels``): layer 0's sums done ahead are the ones its
            layer would do in the step.
    """

    def __init__(self, sampler: NeighborSampler, kind: ShuffleKind, part: LocalPartition, cfg: TrainConfig,
                 comm: Comm, loader: Comm, inference: DataParallel, rows: RowStore, *, sampling: str = "owner",
                 input_ahead: bool = False, shuffle_dtype: str = "float32", kernels: str = "auto") -> None:
        if sampling not in SPLIT_SAMPLINGS:
            raise ValueError(f"sampling: expected one of {SPLIT_SAMPLINGS} (--split-sampling), got {sampling!r}")
        if shuffle_dtype not in WIRE_DTYPES:
            raise ValueError(f"shuffle_dtype: expected one of {tuple(WIRE_DTYPES)}, got {shuffle_dtype!r}")
        # float32 rows on a float32 wire are sent as they are (bit for bit the single-process training).
        self.wire_dtype = None if shuffle_dtype == "float32" else WIRE_DTYPES[shuffle_dtype]
        self.input_ahead, self.kernels = input_ahead, kernels
        self.sampler, self.kind, self.part, self.rows = sampler, kind, part, rows
        self.cfg, self.comm, self.loader, self.inference = cfg, comm, loader, inference
        self.data_comm = loader
        self.sampling = sampling
        self._workspace = OwnerSplitWorkspace(part.book, comm.rank) if sampling == "owner" else None
        self.rank, self.world_size = comm.rank, comm.world_size
        self._ledger = EdgeLedger(self.rank, self.world_size)

    @property
    def bulk(self) -> int:
        return self.sampler.bulk

    def start_epoch(self) -> None:
        self._ledger = EdgeLedger(self.rank, self.world_size)
        if isinstance(self.rows, DeviceFeatureCache):
            self.rows.reset_counts()

    def sample(self, steps: list[Step], seeds: list[Tensor], timer: PhaseTimer, *,
               training: bool = True) -> list[Sampled]:
        """Sample the mini-batches of ``steps`` and split them (owner sampling: collective on the loader's
        Comm, one round per hop); each worker's outputs are the seeds it owns. Inference is the data-parallel
        hybrid layout's."""
        if not training:
            return self.inference.sample(steps, seeds, timer, training=False)
        out = []
        for step, (splits, sampled, minibatch_edges) in zip(steps, self._split_many(steps, seeds, timer)):
            computed, local = split_edge_counts(splits)
            self._ledger.record(computed, local, minibatch_edges)
            out.append(Sampled(step=step, blocks=splits, out_ids=splits[-1].dst_ids, sampled_edges=sampled))
        return out

    def fetch(self, sampled: Sampled, timer: PhaseTimer, *, training: bool = True) -> tuple[list, Tensor]:
        """This worker's layer-0 rows (a local read; the hottest from the device cache) as cooperative blocks
        and, with ``input_ahead``, layer 0's exchange of them done here (collective on the loader's Comm)."""
        if not training:
            return self.inference.fetch(sampled, timer, training=False)
        splits = sampled.blocks
        with timer.phase("fetch"):  # this worker's own rows: a local read, no communication
            x = self.rows.gather(splits[0].src_ids - self.part.node_offset)
        blocks = [CooperativeBlock(split=s, comm=self.comm, wire_dtype=self.wire_dtype) for s in splits]
        if self.input_ahead:
            with timer.phase("fetch"):  # layer 0's cross-split exchange: the split layout's only input traffic
                blocks[0] = exchange_input_ahead(blocks[0], x, self.loader, kernels=self.kernels)
        return blocks, x

    def _split_many(self, steps: list[Step], seeds: list[Tensor], timer: PhaseTimer):
        """Per step: this worker's splits, the edges it sampled, and its share of the mini-batch's edge
        count for the ledger (summed over workers: the mini-batch's edges)."""
        if self.sampling == "owner":
            for step, step_seeds in zip(steps, seeds):
                with timer.phase("sample"):  # sampling, the cross-edge exchange and building the splits
                    splits, sampled = owner_split_blocks(self.part.topology, self.part.book, step_seeds,
                                                         self.cfg.fanouts, step.key, self.loader, kind=self.kind,
                                                         replace=self.cfg.replace, workspace=self._workspace)
                yield splits, sampled, sampled  # each worker sampled its owned destinations' in-edges
            return
        with timer.phase("sample"):
            sampled = self.sampler.sample_many(seeds, [s.key for s in steps])
        for blocks in sampled:
            with timer.phase("split"):
                splits = split_blocks(blocks, self.part.book, self.rank, kind=self.kind)
            edges = sum(b.num_edges for b in blocks)
            yield splits, edges, edges if self.rank == 0 else 0

    def loss_total(self, batch: Batch) -> int:
        """The whole mini-batch's seed count: this worker's loss is its share of the mini-batch's mean."""
        return batch.step.items.numel()

    @property
    def gradient_divisor(self) -> int:
        return 1  # each worker's loss is already its share of the mini-batch mean: sum the gradients

    def after_step(self, model: nn.Module, iterations_done: int) -> None:
        """Nothing to do after an optimizer step."""

    def close(self) -> None:
        """Nothing to release."""

    def checkpoint_state(self, iterations_done: int) -> dict:
        """What a checkpoint must hold of this layout beyond the model (nothing: its state is the model's)."""
        return {}

    def load_checkpoint_state(self, state: dict, iterations_done: int, timer: PhaseTimer) -> None:
        """Nothing to restore (see :meth:`checkpoint_state`)."""

    def finish_epoch(self, comm: Comm) -> dict:
        """Edge metrics of every iteration of the epoch, counted by the workers that computed the edges, and
        with a device cache its rows and hit rate over all workers (collective: one all-reduce each)."""
        out = {"edge_metrics": epoch_edge_metrics(self._ledger.reduce(comm))}
        if isinstance(self.rows, DeviceFeatureCache):
            counts = torch.tensor([self.rows.num_cached, self.rows.hits, self.rows.requests], dtype=torch.int64)
            comm.all_reduce_(counts, torch.distributed.ReduceOp.SUM, "eval")  # collective: the distributed cache
            rows, hits, requests = counts.tolist()
            out["gpu_cache"] = {"fraction": self.cfg.gpu_cache_fraction, "rows": rows, "hits": hits,
                                "requests": requests, "hit_rate": hits / requests if requests else 0.0}
        return out


def exchanges_input_ahead(model: ModelConfig) -> bool:
    """Whether layer 0's exchange runs in the loading stage for ``model``. Its input must be the
    features themselves (no input dropout, whose masks the step draws). SAGE and GCN: always (the same
    sums, one round off the step). GAT: when the input rows are no wider than the two shuffles of the
    transformed rows (forward and backward) they replace, as on the products-shaped graph (100 features
    against 8 heads x 32); Cora's 1,433 features against 8 x 8 keep the shuffles in the step."""
    if model.input_dropout > 0:
        return False
    if SHUFFLE_FOR_MODEL[model.name] == "partial_sums":
        return True
    layer0_width = model.heads * model.hidden_dim if model.num_layers > 1 else model.out_heads * model.num_classes
    return model.in_dim <= 2 * layer0_width


def build_split_parallel(part: LocalPartition, cfg: TrainConfig, model: ModelConfig, comm: Comm,
                         loader: Comm, policy: DevicePolicy, *, sampling: str = "owner",
                         shuffle_dtype: str = "float32") -> SplitParallel:
    """The ``split`` layout of this worker, from its partition in the ``"whole"`` view (the replicated
    topology), which its inference reads as data-parallel hybrid does. It samples on the host and reads its
    rows where ``policy`` says: pinned for a GPU, the hottest of them held there (collective on ``loader``:
    the inference's set-up)."""
    check_split_model(model.name)
    kind = SHUFFLE_FOR_MODEL[model.name]
    sampler = NeighborSampler(part.topology, cfg.fanouts, replace=cfg.replace, method=cfg.sampler)
    rows = own_rows_store(part.features, _own_degrees(part), part.book.num_nodes, policy.gpu_cache_fraction,
                          policy.device, pinned=policy.pin_rows)
    # Evaluation fetches other workers' rows, which the split's cache (this worker's own rows) does not hold.
    inference = build_data_parallel(part, cfg, loader, replace(policy, gpu_cache_fraction=0.0))
    return SplitParallel(sampler, kind, part, cfg, comm, loader, inference, rows, sampling=sampling,
                         input_ahead=exchanges_input_ahead(model), shuffle_dtype=shuffle_dtype, kernels=model.kernels)


def _own_degrees(part: LocalPartition) -> np.ndarray:
    """int [n_p]: the whole graph's in-degree of each of this worker's nodes (the device cache's order)."""
    lo, hi = part.book.node_range(part.part)
    return np.diff(part.topology.indptr[lo:hi + 1])


def check_split_model(model_name: str | None) -> None:
    """Split parallelism needs cooperative layers: the models that have them (``model_name`` None: a
    model of one's own)."""
    if model_name is None:
        raise ValueError("model: --layout split computes every layer of a mini-batch cooperatively across the "
                         "workers, through split-aware layers that exchange partial aggregates (gnnscale's built-in "
                         f"{', '.join(SHUFFLE_FOR_MODEL)}); a model of your own has layers that would see only this "
                         "worker's share of each layer; train it with layout hybrid, vanilla, 1d or 1.5d")
    if model_name not in SHUFFLE_FOR_MODEL:
        raise ValueError(f"model: expected one of {tuple(SHUFFLE_FOR_MODEL)} for --layout split, got {model_name!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitOptions:
    """The options of split parallelism.

    Args:
        split_sampling: ``"owner"`` (each worker samples the destinations it owns and exchanges cross edges,
            one round per hop) or ``"replicated"`` (each worker samples the whole mini-batch); the same
            training either way.
        shuffle_dtype: the dtype the exchanges travel in: ``"float32"`` (the same training as one process,
            bit for bit) or ``"bfloat16"`` (half the bytes, summed in float32).
    """

    split_sampling: str = setting("owner", "owner: each worker samples the destinations it owns and exchanges "
                                           "cross edges, one round per hop; replicated: each worker samples the whole "
                                           "mini-batch; the same training either way", choices=SPLIT_SAMPLINGS)
    shuffle_dtype: str = setting("float32", "the dtype split's exchanges travel in: float32 (the same training as "
                                            "one process, bit for bit) or bfloat16 (half the bytes, summed in float32)",
                                 choices=tuple(WIRE_DTYPES))

    def __post_init__(self) -> None:
        if self.split_sampling not in SPLIT_SAMPLINGS:
            raise ValueError(f"split_sampling: expected one of {SPLIT_SAMPLINGS}, got {self.split_sampling!r}")
        if self.shuffle_dtype not in WIRE_DTYPES:
            raise ValueError(f"shuffle_dtype: expected one of {tuple(WIRE_DTYPES)}, got {self.shuffle_dtype!r}")


def check_split(options: LayoutOptions, cfg: TrainConfig, model_name: str, world_size: int | None) -> None:
    """Split's own rule: a built-in model. Every device trains it; that it samples on the host (no
    ``--sample-on device``) the spec says (``device_sampling`` False)."""
    check_split_model(model_name)


def _build(ctx: LayoutContext) -> SplitParallel:
    settings = ctx.options.settings
    return build_split_parallel(ctx.part, ctx.cfg, ctx.model, ctx.comm, ctx.loader, ctx.policy,
                                sampling=settings.split_sampling, shuffle_dtype=settings.shuffle_dtype)


# Samples on the host (owner sampling exchanges each hop's cross edges on the loader's gloo group); holds its
# own hottest rows on the device.
SPLIT = LayoutSpec(
    name="split", summary="one mini-batch of P x --batch-size seeds split across workers, no feature fetch",
    view="whole", samplers=("fused", "two_step"), per_worker_batches=False, options=SplitOptions,
    check=check_split, build=_build)
