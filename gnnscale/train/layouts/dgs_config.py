"""The DGS settings of a run (``--dgs``), below the layout protocol that carries them in its options
and the DGS layout that acts on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gnnscale.distributed.dgs.explainer import ExplainConfig
from gnnscale.distributed.dgs.sampling import check_epsilon
from gnnscale.settings import setting

DGS_MODES = ("both", "node", "feature")
# Iterations before the first explanation: the earliest model whose explanation picks the dimensions a
# trained one picks (benchmarks/dgs_explanation.py --quality-at, docs/dgs.md "The schedule").
DEFAULT_WARMUP = 5
# Iterations between an explanation's model and the first batch sampled with its masks, unless the
# period is shorter: room for the explanation to finish before the loading stage needs it.
DEFAULT_LAG = 5


def _check_int(name: str, value, low: int, flag: str | None = None) -> None:
    """ValueError naming ``name`` (and its flag) unless ``value`` is an int (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        where = f" ({flag})" if flag else ""
        raise ValueError(f"{name}: expected an int >= {low}{where}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DGSConfig:
    """DGS settings of a run.

    Args:
        period: T_ex, training iterations between explanations (``--dgs-period``, >= 1; 30).
        warmup: training iterations before the first explanation (``--dgs-warmup``, >= 0; 5).
        lag: iterations between an explained model and the first batch sampled with its masks
            (``--dgs-lag``, in [1, period]; None: ``min(5, period)``).
        epsilon: share of each destination's samples moved from remote to local neighbors
            (``--dgs-epsilon``, in [0, 1]; 0.1).
        feature_rate: N_f, share of the dimensions that travel for remote rows (``--dgs-feature-rate``,
            in (0, 1]; 0.85).
        mode: ``"both"``, ``"node"`` (node sampling only: whole rows travel) or ``"feature"`` (feature
            sampling only: plain node sampling) (``--dgs-mode``; the ablation of DGS Table III).
        probes: training nodes of the explanation graph (``--dgs-probes``, >= 1), or None: 64, fewer where
            the fanouts make each probe's sampled graph large
            (:func:`~gnnscale.distributed.dgs.explanation.default_probes`).
        explain_steps, explain_lr: Adam steps and step size of each explanation (``--dgs-explain-steps``,
            >= 1; ``--dgs-explain-lr``, > 0; :class:`~gnnscale.distributed.dgs.explainer.ExplainConfig`'s 5
            and 0.6).
        clusters_per_part: super-node clusters per part (``--dgs-clusters-per-part``, >= 2; 32).
        wait_timeout_s: longest the loading stage waits for an explanation before it fails.
    """

    FLAG_PREFIX: ClassVar[str] = "dgs-"  # every flag of DGS reads --dgs-FIELD

    period: int = setting(30, "iterations between explanations (T_ex)")
    warmup: int = setting(DEFAULT_WARMUP, "training iterations before the first explanation")
    lag: int | None = setting(None, "iterations between an explained model and the first batch sampled with its "
                                    "masks, at most --dgs-period", default_text=f"the smaller of {DEFAULT_LAG} and "
                                                                                "--dgs-period")
    epsilon: float = setting(0.1, "share of each destination's samples moved from remote to local neighbors")
    feature_rate: float = setting(0.85, "share of the feature dimensions that travel for remote nodes (N_f)")
    mode: str = setting("both", "both samplings, node sampling only, or feature sampling only (ablation)",
                        choices=DGS_MODES)
    probes: int | None = setting(None, "training nodes each worker's explanation graph holds",
                                 default_text="64, fewer when the fanouts make each one's sampled graph large: at "
                                              "most 16,384 input rows")
    explain_steps: int = setting(ExplainConfig().epochs, "Adam steps of each explanation")
    explain_lr: float = setting(ExplainConfig().lr, "Adam's step size in each explanation")
    clusters_per_part: int = setting(32, "super-node clusters of each part in the explanation graph (>= 2)")
    wait_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        _check_int("period", self.period, 1, "--dgs-period")
        _check_int("warmup", self.warmup, 0, "--dgs-warmup")
        lag = self.lag
        if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or not 1 <= lag <= self.period):
            raise ValueError(f"lag: expected an int in [1, --dgs-period = {self.period}] (--dgs-lag), got {lag!r}")
        check_epsilon(self.epsilon)
        rate = self.feature_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise ValueError(f"feature_rate: expected a number in (0, 1] (--dgs-feature-rate), got {rate!r}")
        if self.mode not in DGS_MODES:
            raise ValueError(f"mode: expected one of {DGS_MODES} (--dgs-mode), got {self.mode!r}")
        if self.probes is not None:
            _check_int("probes", self.probes, 1, "--dgs-probes")
        _check_int("explain_steps", self.explain_steps, 1, "--dgs-explain-steps")
        lr = self.explain_lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0.0 < lr < float("inf"):
            raise ValueError(f"explain_lr: expected a finite number > 0 (--dgs-explain-lr), got {lr!r}")
        _check_int("clusters_per_part", self.clusters_per_part, 2)

    def explain_config(self, seed: int) -> ExplainConfig:
        """The optimisation of each explanation of a run with root ``seed``."""
        return ExplainConfig(epochs=self.explain_steps, lr=self.explain_lr, seed=seed)

    @property
    def node_sampling(self) -> bool:
        return self.mode in ("both", "node")

    @property
    def feature_sampling(self) -> bool:
        return self.mode in ("both", "feature")

    @property
    def schedule(self) -> "DGSSchedule":
        lag = min(DEFAULT_LAG, self.period) if self.lag is None else self.lag
        return DGSSchedule(warmup=self.warmup, period=self.period, lag=lag)


@dataclass(frozen=True, slots=True, kw_only=True)
class DGSSchedule:
    """When DGS explains and when it samples with the masks (docs/dgs.md, "The schedule").

    The model after ``s`` iterations is explained for every ``s = warmup + k * period`` (k >= 0), and its
    masks are used from iteration ``s + lag`` until the next ones arrive: iterations before
    ``warmup + lag`` sample plainly, and the masks in use are ``lag`` to ``lag + period - 1``
    iterations old. Iterations count from 0 over the whole run. ``1 <= lag <= period``, so at most one
    explanation is pending at any time.
    """

    warmup: int
    period: int
    lag: int

    def explains(self, iterations_done: int) -> bool:
        """Whether the model after ``iterations_done`` iterations is explained."""
        return iterations_done >= self.warmup and (iterations_done - self.warmup) % self.period == 0

    def refresh_at(self, iteration: int) -> int | None:
        """The explained iteration whose masks iteration ``iteration`` switches to, or None."""
        source = iteration - self.lag
        return source if self.explains(source) else None

    def in_use(self, iteration: int) -> int | None:
        """The explained iteration whose masks iteration ``iteration`` samples with (None: plain)."""
        newest = iteration - self.lag
        if newest < self.warmup:
            return None
        return self.warmup + (newest - self.warmup) // self.period * self.period

    def needed(self, iterations_done: int) -> list[int]:
        """The explained iterations a run continuing after ``iterations_done`` iterations still samples
        with: the masks in use now and the explanation submitted but not yet used (ascending)."""
        out = {self.in_use(iterations_done)}
        if iterations_done >= self.warmup:
            last = self.warmup + (iterations_done - self.warmup) // self.period * self.period
            if last + self.lag > iterations_done:
                out.add(last)
        return sorted(s for s in out if s is not None)
