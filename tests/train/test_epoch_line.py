"""What a run says about itself: the epoch line's rate and bulk, and the phase a failed save names."""

from __future__ import annotations

import pytest
import torch

import dist_workers
from test_distributed import spawn_ok

from gnnscale.distributed import Comm, shutdown
from gnnscale.distributed.context import init_single_process
from gnnscale.train.checkpoints.runs import Checkpointer, RunIdentity
from gnnscale.train.loop import print_epoch

NO_ROUNDS = {"sample": 0, "feature": 0, "shuffle": 0, "grad": 0}


def epoch(**overrides) -> dict:
    m = {"epoch": 0, "loss": 1.5, "train_acc": 0.5, "val_acc": 0.25, "test_acc": 0.25, "epoch_s": 1.5,
         "sample_s": 0.7, "split_s": 0.0, "fetch_s": 0.0, "forward_backward_s": 0.5, "shuffle_s": 0.0,
         "grad_sync_s": 0.0, "wait_s": 0.7, "rounds_per_iteration": NO_ROUNDS, "sampled_edges_per_s": 4472 / 0.7,
         "bulk": 1, "num_batches": 1, "seconds_per_bulk": 0.7}
    return {**m, **overrides}


@pytest.mark.parametrize("per_s, shown", [(4472 / 0.7, "6.4k"), (6.8e6, "6.8M"), (120.0, "120")])
def test_the_rate_is_shown_in_a_unit_that_shows_it(capsys, per_s, shown):
    # Cora's first epoch: one batch of 4,472 edges in 0.7 s (loading the kernels) printed "0.0M edges/s".
    print_epoch(epoch(sampled_edges_per_s=per_s))
    assert capsys.readouterr().out.rstrip("\n").endswith(f"wait 0.7)  {shown} edges/s")


@pytest.mark.parametrize("bulk, batches, shown", [(48, 18, ", 700.0 ms per bulk of 18"),
                                                  (48, 96, ", 700.0 ms per bulk of 48"),
                                                  (48, 50, ", 700.0 ms per bulk of up to 48"),
                                                  (48, 1, ""), (1, 18, "")])
def test_the_bulk_shown_is_the_one_sampled(capsys, bulk, batches, shown):
    # --bulk 48 over an epoch of 18 batches samples one bulk of 18.
    print_epoch(epoch(bulk=bulk, num_batches=batches))
    assert capsys.readouterr().out.rstrip("\n").endswith(f"6.4k edges/s{shown}")


@pytest.mark.slow
def test_a_save_during_training_names_the_checkpoint_phase():
    # A peer that dies while the others save is reported by the collective's category: "checkpoint",
    # not "setup" (which reads as if the run had never started). The gather to rank 0 (sizes, then bytes)
    # and the agreement that rank 0 saved, on each of two workers.
    assert spawn_ok(dist_workers.checkpoint_save_categories, 2) == [["checkpoint"] * 3] * 2


def test_one_worker_saves_without_collectives(tmp_path):
    # One worker has no copy to compare and nobody to tell: its save is a plain write.
    ctx = init_single_process()
    try:
        comm = Comm(ctx)
        categories = []
        run = comm._run
        comm._run = lambda op, category, fn: categories.append(category) or run(op, category, fn)
        model = torch.nn.Linear(2, 2)
        identity = RunIdentity(signature={}, layout="hybrid", world_size=1, data={}, partition={})
        Checkpointer(tmp_path / "run.ckpt", None, identity, comm, 4).save(
            model, torch.optim.Adam(model.parameters()), epoch=1, step=0, history=[], worker_state={},
            layout_state={})
        assert categories == []
        assert (tmp_path / "run.ckpt").is_file()
    finally:
        shutdown()
