"""Typed training configuration, validated where it is built."""

from __future__ import annotations

from dataclasses import dataclass

from gnnscale.sampling import check_fanouts

# fused and two_step sample one batch at a time; matrix (GraphSAGE) and ladies stack `bulk` batches
# into one set of sparse products (gnnscale.sampling.matrix).
SAMPLERS = ("fused", "two_step", "matrix", "ladies")
BULK_SAMPLERS = ("matrix", "ladies")
DEFAULT_LAYER_SIZE = 512  # LADIES nodes per layer (Tripathy et al., Table 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """How to train (the model's shape lives in ``gnnscale.nn.ModelConfig``).

    Args:
        fanouts: neighbors per hop from the seeds outwards; one hop per GNN layer. -1 takes every neighbor,
            0 none (PyG's rule, :func:`gnnscale.sampling.check_fanouts`).
        eval_fanouts: fanouts for validation/test inference; ``None`` uses ``fanouts``.
        batch_size: seed nodes per training mini-batch.
        eval_batch_size: seed nodes per inference mini-batch.
        epochs: passes over the training nodes.
        lr, weight_decay: Adam's step size and L2 penalty.
        seed: the root of every random choice (batch order, sampling keys, dropout, initialisation).
        threads: CPU threads for the sampling kernel and for torch.
        sampler: ``"fused"``, ``"two_step"`` (the reference, for comparisons), ``"matrix"`` (GraphSAGE
            sampling by sparse products over ``bulk`` batches; the same blocks as fused) or ``"ladies"``
            (layer-wise LADIES sampling by sparse products; weighted blocks for GCN and GraphSAGE).
        bulk: consecutive batches sampled by one set of products (``matrix`` and ``ladies`` only).
        layer_size: LADIES nodes drawn per batch per layer (``ladies`` only; None: 512).
        replace: sample neighbors with replacement.
        evaluate: measure validation and test accuracy after every epoch (False: reported as NaN;
            for timing runs on graphs whose test split is large).
        prefetch: batches sampled and gathered ahead by a background thread while the current one
            trains (0: none, everything on the training thread). Does not change the results.
    """

    fanouts: tuple[int, ...] = (10, 5)
    eval_fanouts: tuple[int, ...] | None = None
    batch_size: int = 512
    eval_batch_size: int = 4096
    epochs: int = 5
    lr: float = 0.003
    weight_decay: float = 0.0
    seed: int = 0
    threads: int = 2
    sampler: str = "fused"
    bulk: int = 1
    layer_size: int | None = None
    replace: bool = False
    evaluate: bool = True
    prefetch: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "fanouts", check_fanouts(self.fanouts))
        if self.eval_fanouts is not None:
            eval_fanouts = check_fanouts(self.eval_fanouts)
            if len(eval_fanouts) != len(self.fanouts):
                raise ValueError(f"eval_fanouts: expected {len(self.fanouts)} hops like fanouts, got {len(eval_fanouts)}")
            object.__setattr__(self, "eval_fanouts", eval_fanouts)
        for name in ("batch_size", "eval_batch_size", "epochs", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.prefetch, int) or isinstance(self.prefetch, bool) or self.prefetch < 0:
            raise ValueError(f"prefetch: expected an int >= 0 (0 = no background loading), got {self.prefetch!r}")
        if not self.lr > 0:
            raise ValueError(f"lr: expected > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay: expected >= 0, got {self.weight_decay}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler: expected one of {SAMPLERS}, got {self.sampler!r}")
        self._check_bulk_options()

    def _check_bulk_options(self) -> None:
        """--bulk and --layer-size: positive ints, and only where they mean something."""
        for name, flag in (("bulk", "--bulk"), ("layer_size", "--layer-size")):
            value = getattr(self, name)
            if name == "layer_size" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1 ({flag}), got {value!r}")
        if self.bulk != 1 and self.sampler not in BULK_SAMPLERS:
            raise ValueError(f"bulk: --bulk {self.bulk} needs --sampler matrix or ladies (sampler {self.sampler!r} "
                             "samples one batch at a time)")
        if self.layer_size is not None and self.sampler != "ladies":
            raise ValueError(f"layer_size: --layer-size applies to --sampler ladies, got sampler {self.sampler!r}")
        if self.sampler == "ladies" and self.replace:
            raise ValueError("replace: --replace applies to neighbor sampling, not to --sampler ladies")

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    @property
    def ladies_layer_size(self) -> int:
        return self.layer_size if self.layer_size is not None else DEFAULT_LAYER_SIZE

    @property
    def inference_fanouts(self) -> tuple[int, ...]:
        return self.eval_fanouts if self.eval_fanouts is not None else self.fanouts


def check_sampler_fits_model(sampler: str, model_name: str) -> None:
    """LADIES' blocks are weighted (importance sampling), which attention cannot use."""
    if sampler == "ladies" and model_name == "gat":
        raise ValueError("sampler: --sampler ladies gives weighted blocks that --model gat (attention) cannot use; "
                         "use --model gcn or sage")
