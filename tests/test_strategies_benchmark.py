"""benchmarks/strategies.py: which strategies the installed CLI offers, the command lines it launches
(torchrun --standalone: no port chosen in advance), and the hybrid ratios of its rows."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import strategies  # noqa: E402  (benchmarks/ is not a package)
from distributed import torchrun_command  # noqa: E402

HELP = """
  --sampler {fused,two_step,matrix,ladies}
                        fused kernel ...
  --bulk BULK           matrix/ladies: ...
  --layout {hybrid,vanilla,split}
                        distributed: ...
"""


def by_name(name: str) -> strategies.Strategy:
    return next(s for s in strategies.STRATEGIES if s.name == name)


def test_missing_support_reads_flags_and_choices() -> None:
    assert strategies.missing_support(by_name("split"), HELP) == []
    assert strategies.missing_support(by_name("vanilla"), HELP) == []
    assert strategies.missing_support(by_name("matrix-1d"), HELP) == ["--layout 1d"]
    assert strategies.missing_support(by_name("matrix-1.5d"), HELP) == ["--layout 1.5d", "--replication"]
    assert strategies.missing_support(by_name("dgs-hybrid"), HELP) == ["--dgs", "--dgs-period"]
    with_dgs = (HELP.replace("{hybrid,vanilla,split}", "{hybrid,vanilla,split,1d,1.5d}")
                + "  --dgs  ...\n  --dgs-period DGS_PERIOD  ...\n")
    assert strategies.missing_support(by_name("dgs-hybrid"), with_dgs) == []
    assert strategies.missing_support(by_name("matrix-1d"), with_dgs) == []


def test_half_precision_strategies_name_a_stored_feature_type_and_a_float32_twin() -> None:
    from gnnscale.graph.feature_dtype import FEATURE_DTYPES
    names = {s.name: s for s in strategies.STRATEGIES}
    half = [s for s in strategies.STRATEGIES if s.feature_dtype != "float32"]
    assert half and all(s.feature_dtype in FEATURE_DTYPES for s in half)
    for s in half:  # the float32 strategy's training arguments, plus at most the half-precision wire
        twin = names[s.name[:-len(s.feature_dtype) - 1]]
        extra = ("--shuffle-dtype", s.feature_dtype) if s.args[:len(twin.args)] == twin.args != s.args else ()
        assert s.name.endswith("-" + s.feature_dtype) and s.args == twin.args + extra, s.name
    assert names["split-bfloat16"].args == ("--layout", "split", "--shuffle-dtype", "bfloat16")


@pytest.mark.slow
def test_the_installed_cli_offers_the_data_and_split_parallel_layouts() -> None:
    help_text = strategies.train_help()
    for name in ("vanilla", "hybrid", "split"):
        assert strategies.missing_support(by_name(name), help_text) == [], name


def test_train_command_fills_placeholders_and_lets_torchrun_pick_the_port(tmp_path: Path) -> None:
    a = argparse.Namespace(workers=4, bulk=8, replication=2, dgs_period=3, fanouts="15,10,5", batch_size=250,
                           hidden=256, epochs=3, seed=0)
    cmd = strategies.train_command(by_name("matrix-1.5d"), tmp_path / "parts", a, tmp_path / "m.json")
    assert cmd[:len(torchrun_command(4))] == torchrun_command(4)
    assert "--standalone" in cmd and "--master-port" not in cmd
    i = cmd.index("--bulk")
    assert cmd[i + 1] == "8" and cmd[cmd.index("--replication") + 1] == "2"
    assert not any("{" in arg for arg in cmd)
    dgs = strategies.train_command(by_name("dgs-vanilla"), tmp_path / "parts", a, tmp_path / "m.json")
    assert dgs[dgs.index("--dgs-period") + 1] == "3"


def test_ratios_are_against_hybrid_at_the_same_rate() -> None:
    rows = [{"link_gbit": "inf", "strategy": "vanilla", "epoch_s": 4.0},
            {"link_gbit": "inf", "strategy": "hybrid", "epoch_s": 2.0},
            {"link_gbit": "1", "strategy": "hybrid", "epoch_s": 5.0},
            {"link_gbit": "1", "strategy": "split", "epoch_s": 4.0},
            {"link_gbit": "10", "strategy": "split", "epoch_s": 1.0}]
    strategies.add_ratios(rows)
    assert [r["x_hybrid"] for r in rows] == [2.0, 1.0, 1.0, 0.8, None]
