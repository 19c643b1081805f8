"""DGS on real processes (gloo on 127.0.0.1, spawned workers; checks in tests/dgs_workers.py): the
cluster map exchange, hybrid and vanilla samplers with masks (the same blocks as single-process DGS
sampling), the feature fetch on the top dimensions (rounds, bytes, which dimensions arrive, the fill),
and an online explanation feeding both samplers."""

from __future__ import annotations

import dgs_workers
from test_distributed import spawn_run

# Three workers start, import torch and compile the DGS kernel each: ~30 s alone on 2 cores, measured
# past 120 s with other test suites running beside it.
TIMEOUT_S = 400.0


def test_dgs_on_three_workers():
    outcomes = spawn_run(dgs_workers.check_dgs, 3, timeout_s=TIMEOUT_S)
    failed = {r: o for r, o in enumerate(outcomes) if o.status != "ok" or o.exitcode != 0}
    assert not failed, "\n".join(f"rank {r}: {o.status}, exit code {o.exitcode}\n{o.payload or ''}"
                                 for r, o in failed.items())
    assert [o.payload["iteration"] for o in outcomes] == [dgs_workers.ITERATION] * 3
    assert all(o.payload["epochs"] == 5 for o in outcomes)
