"""The DGS settings of a run (``--dgs``), below the layout protocol that carries them in its options
and the DGS layout that acts on them."""

from __future__ import annotations

from dataclasses import dataclass

from gnnscale.distributed.dgs.sampling import check_epsilon

DGS_MODES = ("both", "node", "feature")


@dataclass(frozen=True, slots=True, kw_only=True)
class DGSConfig:
    """DGS settings of a run.

    Args:
        period: T_ex, training iterations between explanations (``--dgs-period``, >= 1; 30).
        epsilon: share of each destination's samples moved from remote to local neighbors
            (``--dgs-epsilon``, in [0, 1]; 0.1).
        feature_rate: N_f, share of the dimensions that travel for remote rows (``--dgs-feature-rate``,
            in (0, 1]; 0.85).
        mode: ``"both"``, ``"node"`` (node sampling only: whole rows travel) or ``"feature"`` (feature
            sampling only: plain node sampling) (``--dgs-mode``; the ablation of DGS Table III).
        probes: training nodes of the explanation graph (>= 1; 64).
        clusters_per_part: super-node clusters per part (>= 2; 32).
        wait_timeout_s: longest the loading stage waits for an explanation before it fails.
    """

    period: int = 30
    epsilon: float = 0.1
    feature_rate: float = 0.85
    mode: str = "both"
    probes: int = 64
    clusters_per_part: int = 32
    wait_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.period, bool) or not isinstance(self.period, int) or self.period < 1:
            raise ValueError(f"period: expected an int >= 1 (--dgs-period), got {self.period!r}")
        check_epsilon(self.epsilon)
        rate = self.feature_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise ValueError(f"feature_rate: expected a number in (0, 1] (--dgs-feature-rate), got {rate!r}")
        if self.mode not in DGS_MODES:
            raise ValueError(f"mode: expected one of {DGS_MODES} (--dgs-mode), got {self.mode!r}")
        for name, low in (("probes", 1), ("clusters_per_part", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")

    @property
    def node_sampling(self) -> bool:
        return self.mode in ("both", "node")

    @property
    def feature_sampling(self) -> bool:
        return self.mode in ("both", "feature")
