"""DGS on real processes (gloo on 127.0.0.1, spawned workers; checks in tests/dgs_workers.py): the
cluster map exchange, hybrid and vanilla samplers with masks (the same blocks as single-process DGS
sampling), the feature fetch on the top dimensions (rounds, bytes, which dimensions arrive, the fill),
and an online explanation feeding both samplers. The rounding of half-precision partial rows is checked
in one process, beside the feature stores (tests/features/test_dgs.py)."""

from __future__ import annotations

import pytest

import dgs_workers
from test_distributed import spawn_run

# Each worker starts, imports torch and loads (or, with numba's cache empty, compiles) the DGS kernel:
# ~30 s alone on 2 cores with the cache empty, measured past 120 s with other test suites beside it.
TIMEOUT_S = 400.0


# Two workers in the default tier: every check of dgs_workers.check_dgs, each worker with one peer (the
# worker that passes foreign masks and one told of them). Three, each with two peers, in the slow tier.
@pytest.mark.parametrize("world_size", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_dgs_on_spawned_workers(world_size):
    outcomes = spawn_run(dgs_workers.check_dgs, world_size, timeout_s=TIMEOUT_S)
    failed = {r: o for r, o in enumerate(outcomes) if o.status != "ok" or o.exitcode != 0}
    assert not failed, "\n".join(f"rank {r}: {o.status}, exit code {o.exitcode}\n{o.payload or ''}"
                                 for r, o in failed.items())
    assert [o.payload["iteration"] for o in outcomes] == [dgs_workers.ITERATION] * world_size
    assert all(o.payload["epochs"] == 5 for o in outcomes)
