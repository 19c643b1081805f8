"""benchmarks/dgs.py: the ratios of its rows against plain, seed by seed, and the verdict on the targets
(the epoch targets on ``hard-full`` only, at the loopback and 1 Gbit/s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import dgs  # noqa: E402  (benchmarks/ is not a package)


def row(graph: str, link: str, mode: str, epochs: list[float], *, feature_mb: float = 100.0, acc: float = 0.7,
        explain_cpu_s: float = 0.0) -> dict:
    """A row as mean_rows makes it from one summary per seed."""
    return {"graph": graph, "link": link, "dtype": "float32", "mode": mode, "epoch_s": sum(epochs) / len(epochs),
            "epoch_s_per_seed": epochs, "feature_mb": feature_mb, "run_feature_mb": feature_mb, "cpu_s": 1.0,
            "sample_s": 1.0, "test_acc": acc, "explain_cpu_s": explain_cpu_s}


def test_ratios_are_against_plain_of_the_same_link_and_seed() -> None:
    rows = [row("hard-full", "inf", "plain", [0.50, 0.60]), row("hard-full", "inf", "both", [0.52, 0.60]),
            row("hard-full", "1", "plain", [2.0, 2.0]), row("hard-full", "1", "both", [1.5, 1.7])]
    dgs.add_ratios(rows)
    assert rows[1]["time_ratio_per_seed"] == pytest.approx([1.04, 1.0])
    assert rows[1]["time_ratio"] == pytest.approx(0.56 / 0.55)
    assert rows[3]["time_ratio_per_seed"] == pytest.approx([0.75, 0.85])


def test_verdict_checks_the_epoch_targets_on_hard_full_only(capsys) -> None:
    rows = [row("hard-full", "inf", "plain", [0.50]), row("hard-full", "inf", "both", [0.53], feature_mb=70.0),
            row("hard-full", "1", "plain", [2.0]), row("hard-full", "1", "both", [1.7], feature_mb=70.0),
            row("hard-full", "10", "plain", [1.0]), row("hard-full", "10", "both", [1.0], feature_mb=70.0),
            row("cora", "inf", "plain", [0.10]), row("cora", "inf", "both", [0.20], feature_mb=70.0)]
    dgs.add_ratios(rows)
    dgs.print_seed_ratios(rows)
    dgs.print_verdict(rows)
    lines = capsys.readouterr().out.splitlines()
    assert "epoch x plain seed by seed, hard-full float32 both link inf: 1.060 (median 1.060)" in lines
    verdicts = dict(line.split(": ", 1) for line in lines if "(link" in line)  # "graph dtype (link L)": checks
    assert "epoch MISSED: 1.060x plain (target <= 1.05)" in verdicts["hard-full float32 (link inf)"]
    assert "epoch MET: 0.850x plain (target <= 0.9)" in verdicts["hard-full float32 (link 1)"]
    assert "epoch M" not in verdicts["hard-full float32 (link 10)"]  # no target is set at 10 Gbit/s
    assert "feature bytes MET" in verdicts["cora float32 (link inf)"]
    assert "epoch M" not in verdicts["cora float32 (link inf)"]  # 2x plain, but Cora's epochs are too short to judge
