"""Typed training configuration, validated where it is built."""

from __future__ import annotations

from dataclasses import dataclass

from gnnscale.devices import check_device_settings, device_setting, threads_setting
from gnnscale.distributed.device_policy import SAMPLE_ON
from gnnscale.features.hot_set import check_fraction
from gnnscale.sampling import check_fanouts
from gnnscale.sampling.registry import (DEFAULT_LAYER_SIZE, SAMPLERS, check_sampler_fits_model, sampler_spec,
                                        samplers_with)
from gnnscale.settings import setting
from gnnscale.train.precision import PRECISIONS, check_precision

__all__ = ["TrainConfig", "check_sampler_fits_model"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """How to train (the model's shape lives in ``gnnscale.nn.ModelConfig``). Each field with a flag is
    also a ``gnnscale train`` option (:mod:`gnnscale.settings`); its help is written beside it.

    Args:
        fanouts: neighbors per hop from the seeds outwards; one hop per GNN layer. -1 takes every neighbor,
            0 none (PyG's rule, :func:`gnnscale.sampling.check_fanouts`).
        eval_fanouts: fanouts for validation/test inference; ``None`` uses ``fanouts``.
        relation_fanouts: a typed graph's relations with fanouts of their own, ``"REL=N,N"`` words (``REL``:
            ``src__name__dst`` or a relation's unique name; one number: every hop); the other relations take
            ``fanouts``. Inference takes them too, unless ``eval_fanouts`` is set.
        batch_size: seeds per training mini-batch and worker: nodes, or a link task's positive training edges.
        eval_batch_size: seeds per inference mini-batch: nodes, or a link task's pairs.
        epochs: passes over the training nodes (a link task: its training edges).
        lr, weight_decay: Adam's step size and L2 penalty.
        seed: the root of every random choice (batch order, sampling keys, dropout, initialisation).
        threads: CPU threads for the sampling kernel and for torch.
        sampler: a registered sampler (:mod:`gnnscale.sampling.registry`): ``"fused"``, ``"two_step"``
            (the reference, for comparisons), ``"matrix"`` or ``"ladies"``.
        bulk: consecutive batches sampled by one set of products (bulk samplers only).
        layer_size: nodes drawn per batch per layer (layer-wise samplers only; None: 512).
        replace: sample neighbors with replacement.
        evaluate: measure validation and test accuracy after every epoch (False: reported as NaN;
            for timing runs on graphs whose test split is large).
        prefetch: batches sampled and gathered ahead by a background thread while the current one
            trains (0: none, everything on the training thread). Does not change the results.
        device: where the model, the optimizer and the training step run: ``"cpu"`` (the default),
            ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (:func:`gnnscale.devices.resolve_device`, resolved when the
            run starts; under torchrun ``"cuda"`` is each worker's ``cuda:LOCAL_RANK``). Each batch is
            copied to the device in the background stage.
        sample_on: ``"host"`` (the numba kernels), ``"device"`` (the sampler's device build: the same law and
            keys drawn by torch ops on ``device``; :mod:`gnnscale.sampling.device` for the fused sampler,
            :mod:`gnnscale.sampling.matrix.device_sage` and ``device_ladies`` for matrix and LADIES) or
            ``"auto"`` (device when ``device`` is a GPU whose free memory holds what that sampler keeps there
            twice over, with a layout that samples on the device: one process, hybrid, 1d or 1.5d; else host).
        gpu_cache_fraction: share of all nodes whose feature rows ``device`` holds, the highest in-degree
            ones (:class:`~gnnscale.features.device_cache.DeviceFeatureCache`); the rest are gathered on
            the host and copied. Split parallelism: each worker's own highest in-degree rows, as many
            (:mod:`gnnscale.features.own_rows`). On the CPU the "cache" is a host copy that saves nothing.
        precision: the training step's precision, Lightning's names (:mod:`gnnscale.train.precision`): ``"32"``
            (float32), ``"bf16-mixed"`` (autocast to bfloat16, CPU or GPU) or ``"16-mixed"`` (autocast to float16
            with a gradient scaler; meant for GPUs). A resumed run keeps it: it changes every number the run
            computes (a checkpoint of one precision resumes only with the same).
    """

    fanouts: tuple[int, ...] = setting((10, 5), "neighbors per hop, from the seeds outwards (-1: every neighbor, "
                                                "0: none)")
    eval_fanouts: tuple[int, ...] | None = setting(None, "inference fanouts", default_text="--fanouts")
    relation_fanouts: tuple[str, ...] = setting((), "typed graphs: a relation's own fanouts, one word per relation "
                                                    "(REL: src__name__dst or its unique name; one number: every hop); "
                                                    "the other relations take --fanouts; inference uses them too "
                                                    "unless --eval-fanouts is given",
                                                metavar="REL=N,N", default_text="none")
    batch_size: int = setting(512, "seeds per mini-batch and worker: nodes, or training edges with --task link")
    eval_batch_size: int = 4096
    epochs: int = setting(5, "passes over the training nodes (--task link: edges)", resumable=True)
    lr: float = setting(0.003, "Adam learning rate")
    weight_decay: float = setting(0.0, "Adam L2 penalty")
    seed: int = setting(0, "root of every random choice")
    threads: int = threads_setting(resumable=True)
    sampler: str = setting("fused", "how blocks are drawn: " + "; ".join(f"{name} ({spec.summary})"
                                                                         for name, spec in SAMPLERS.items()),
                           choices=tuple(SAMPLERS))
    bulk: int = setting(1, f"{' and '.join(samplers_with('bulk'))}: consecutive batches sampled by one set of "
                           "sparse products")
    layer_size: int | None = setting(None, f"{' and '.join(samplers_with('layerwise'))}: nodes drawn per batch per "
                                           "layer", default_text=str(DEFAULT_LAYER_SIZE))
    replace: bool = setting(False, "sample neighbors with replacement")
    evaluate: bool = setting(True, "skip validation/test accuracy (timing runs)", negate="--no-eval")
    prefetch: int = setting(1, "batches sampled and gathered ahead in a background thread while one trains (0: none)",
                            resumable=True)
    device: str = device_setting(resumable=True)
    sample_on: str = setting("auto", "where training batches are sampled: host (numba kernels on the CPU), device "
                                     "(the sampler's law and keys in torch ops on --device: fused, matrix, ladies), "
                                     "or auto (device when training on a GPU that holds what the sampler keeps there "
                                     "in half its free memory, else host)", choices=SAMPLE_ON, resumable=True)
    gpu_cache_fraction: float = setting(0.0, "feature rows held in --device memory: the highest in-degree nodes', "
                                             "this fraction of all nodes (1: every row; 0: only what --sample-on "
                                             "device gathers)", resumable=True)
    precision: str = setting("32", "the training step's precision: 32 (float32), bf16-mixed (autocast to bfloat16 "
                                   "on the CPU or a GPU) or 16-mixed (autocast to float16 with a gradient scaler, "
                                   "for GPUs); parameters and optimizer state stay float32", choices=PRECISIONS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fanouts", check_fanouts(self.fanouts))
        if self.eval_fanouts is not None:
            eval_fanouts = check_fanouts(self.eval_fanouts)
            if len(eval_fanouts) != len(self.fanouts):
                raise ValueError(f"eval_fanouts: expected {len(self.fanouts)} hops like fanouts, got {len(eval_fanouts)}")
            object.__setattr__(self, "eval_fanouts", eval_fanouts)
        words = self.relation_fanouts
        object.__setattr__(self, "relation_fanouts", (words,) if isinstance(words, str) else tuple(words))
        self.relation_fanout_table  # parses every word, or says which one it cannot read
        for name in ("batch_size", "eval_batch_size", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.prefetch, int) or isinstance(self.prefetch, bool) or self.prefetch < 0:
            raise ValueError(f"prefetch: expected an int >= 0 (0 = no background loading), got {self.prefetch!r}")
        check_device_settings(self.device, self.threads)
        self._check_device_data()
        if not self.lr > 0:
            raise ValueError(f"lr: expected > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay: expected >= 0, got {self.weight_decay}")
        sampler_spec(self.sampler)
        self._check_bulk_options()
        check_precision(self.precision)

    def _check_device_data(self) -> None:
        """--sample-on and --gpu-cache-fraction: known values, and device sampling only with a sampler that runs
        there (its spec says so)."""
        if self.sample_on not in SAMPLE_ON:
            raise ValueError(f"sample_on: expected one of {SAMPLE_ON}, got {self.sample_on!r}")
        if self.sample_on == "device" and not sampler_spec(self.sampler).runs_on_device:
            raise ValueError(f"sample_on: --sample-on device draws the {' or '.join(samplers_with('runs_on_device'))} "
                             f"sampler's blocks; --sampler {self.sampler} samples on the host (use --sample-on host or "
                             "auto)")
        check_fraction(self.gpu_cache_fraction, "gpu_cache_fraction")

    def _check_bulk_options(self) -> None:
        """--bulk and --layer-size: positive ints, and only where they mean something."""
        for name, flag in (("bulk", "--bulk"), ("layer_size", "--layer-size")):
            value = getattr(self, name)
            if name == "layer_size" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1 ({flag}), got {value!r}")
        spec = sampler_spec(self.sampler)
        if self.bulk != 1 and not spec.bulk:
            raise ValueError(f"bulk: --bulk {self.bulk} needs --sampler {' or '.join(samplers_with('bulk'))} (sampler "
                             f"{self.sampler!r} samples one batch at a time)")
        if self.layer_size is not None and not spec.layerwise:
            raise ValueError(f"layer_size: --layer-size applies to --sampler {' or '.join(samplers_with('layerwise'))}, "
                             f"got sampler {self.sampler!r}")
        if self.replace and not spec.replace:
            raise ValueError(f"replace: --replace applies to neighbor sampling, not to --sampler {self.sampler}")

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    @property
    def ladies_layer_size(self) -> int:
        return self.layer_size if self.layer_size is not None else DEFAULT_LAYER_SIZE

    @property
    def inference_fanouts(self) -> tuple[int, ...]:
        return self.eval_fanouts if self.eval_fanouts is not None else self.fanouts

    @property
    def relation_fanout_table(self) -> dict[str, tuple[int, ...]]:
        """``relation_fanouts`` read: ``{relation as written: its fanouts per hop}`` (the graph resolves the names:
        :func:`~gnnscale.sampling.typed.with_relation_fanouts`)."""
        table = {}
        for word in self.relation_fanouts:
            rel, _, hops = word.partition("=") if isinstance(word, str) else ("", "", "")
            try:
                per_hop = tuple(int(h) for h in hops.split(","))
            except ValueError:
                per_hop = ()
            if not rel or not per_hop:
                raise ValueError(f"relation_fanouts: expected REL=N,N (a relation and its fanouts per hop), got "
                                 f"{word!r}")
            if rel in table:
                raise ValueError(f"relation_fanouts: {rel} is named twice")
            table[rel] = check_fanouts(per_hop, f"relation_fanouts: {rel}")
            if len(per_hop) not in (1, len(self.fanouts)):
                raise ValueError(f"relation_fanouts: {rel} has {len(per_hop)} fanouts, expected 1 (every hop) or "
                                 f"{len(self.fanouts)} (one per hop, as fanouts {list(self.fanouts)})")
        return table

    @property
    def inference_relation_fanouts(self) -> dict[str, tuple[int, ...]]:
        """The relations' own fanouts at inference: none when ``eval_fanouts`` is set (every relation takes it)."""
        return {} if self.eval_fanouts is not None else self.relation_fanout_table
