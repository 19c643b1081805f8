"""``python -m gnnscale.launch``: torchrun without its own noise, one line per cause. Ctrl-C on a
2-worker run is the one line of the workers (no launcher traceback, exit 130); a killed worker is the
survivor's line and one of the launcher's naming the dead worker (exit 1); a bad flag is one line before
any worker starts, and a usage error the workers find one line, never restarted (exit 2); a machine of
``--nnodes`` that never joins is one line once the rendezvous times out."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.launch import unexplained_failures
from gnnscale.partition import write_partition_dir
from gnnscale.train.checkpoints.files import newest_complete
from launch import ENV, LAUNCH_TIMEOUT_S, rendezvous_port

ARGS = ["--fanouts", "4,3", "--hidden", "16", "--batch-size", "32", "--epochs", "100000", "--threads", "1",
        "--no-eval", "--timeout", "60"]


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    path = tmp_path_factory.mktemp("launch") / "p2"
    write_partition_dir(make_synthetic(SyntheticConfig(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=8,
                                                       seed=5)), 2, "metis", path)
    return path


def start(*args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gnnscale.launch", "--standalone", "--nproc-per-node", "2", "-m", "gnnscale",
           "train", *args]

    def as_from_a_terminal() -> None:
        # Its own process group, which a terminal's Ctrl-C signals as a whole, and SIGINT's default
        # disposition (a shell's background job, which CI may be, starts with SIGINT ignored).
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=as_from_a_terminal)


def wait_for_epochs(proc: subprocess.Popen, epochs: int) -> None:
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("epoch")
        if seen == epochs:
            return
    raise AssertionError(f"the run ended before {epochs} epochs: {proc.communicate()[1][-3000:]}")


@pytest.mark.slow
def test_ctrl_c_under_the_launcher_is_the_workers_one_line(partition, tmp_path):
    ckpt = tmp_path / "c.ckpt"
    proc = start("--partitions", str(partition), *ARGS, "--checkpoint", str(ckpt))
    try:
        wait_for_epochs(proc, 2)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: every process of the foreground group
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = [line for line in (out + err).splitlines() if not line.startswith("epoch")]
    assert lines == [f"gnnscale train: interrupted (Ctrl-C); {ckpt} holds the last checkpoint (continue with "
                     "--resume)"], out + err
    assert proc.returncode == 130
    assert newest_complete(ckpt).payload["epoch"] >= 1


@pytest.mark.slow
def test_a_killed_worker_is_one_line_beside_the_survivors_line(partition):
    # torchrun's summary (20 lines) and its log line are gone: the survivor says why it stopped, the
    # launcher says which worker died and how, since that worker could not.
    proc = start("--partitions", str(partition), *ARGS)
    try:
        wait_for_epochs(proc, 1)
        workers = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
        os.kill(int(workers[-1]), signal.SIGKILL)
        _, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert re.fullmatch(r"gnnscale train: stopped: rank 0 of 2: collective .+ \(category '\w+'\) failed: .+; another "
                        r"worker died or did not answer within --timeout\. Stopping the run\.", lines[0]), err
    assert lines[1] == f"torchrun: worker rank 1 (pid {workers[-1]}) was killed by SIGKILL", err


def test_a_bad_flag_is_one_line_before_any_worker_starts(partition, monkeypatch, capsys):
    import gnnscale.launch as launch_module
    started = []
    monkeypatch.setattr(launch_module, "run", started.append)
    code = launch_module.main(["--standalone", "--nproc-per-node", "2", "--max-restarts", "2", "-m", "gnnscale",
                               "train", "--partitions", str(partition), "--batch-size", "0"])
    assert (code, capsys.readouterr().err, started) == (
        2, "gnnscale train: error: --batch-size: expected an int >= 1, got 0\n", [])


@pytest.mark.slow
def test_a_workers_usage_error_is_one_line_and_not_restarted(tmp_path):
    # Found by the workers (the flags are fine): every worker finds it, the first of the machine says it,
    # and --max-restarts does not run it twice more (plain torchrun: 3 times, 48 lines).
    cmd = [sys.executable, "-m", "gnnscale.launch", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
           "-m", "gnnscale", "train", "--partitions", str(tmp_path / "none"), *ARGS]
    run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=LAUNCH_TIMEOUT_S)
    assert (run.returncode, run.stdout, run.stderr) == (
        2, "", f"gnnscale train: error: --partitions: expected a partition directory (`gnnscale partition --out DIR` "
               f"writes one), got {tmp_path / 'none'}, which is missing\n")


def failure(tmp_path, rank: int, exitcode: int, line: str | None) -> ProcessFailure:
    """What torchrun's agent makes of a stopped worker: its exit code and, if it wrote one, gnnscale's line."""
    error_file = tmp_path / f"error-{rank}.json"
    if line is not None:
        error_file.write_text(json.dumps({"message": {"message": line, "extraInfo": {"py_callstack": line,
                                                                                      "timestamp": "100"}}}))
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file))


@pytest.mark.parametrize("workers, expected", [
    # Every worker found the bad input: rank 0 said it, rank 1 wrote it and was stopped by torchrun.
    ([(0, 2, "gnnscale train: error: x"), (1, -15, "gnnscale train: error: x")], []),
    # A killed worker cannot speak: the launcher says it; its peer said its own line.
    ([(0, 1, "gnnscale train: stopped: rank 0 of 2: ..."), (1, -9, None)],
     ["torchrun: worker rank 1 (pid 1001) was killed by SIGKILL"]),
    # A crash (a traceback above, no gnnscale line); the other worker was stopped by torchrun: no cause.
    ([(0, 1, None), (1, -15, None)], ["torchrun: worker rank 0 (pid 1000) exited with status 1"]),
])
def test_one_line_per_worker_that_has_not_said_why(tmp_path, workers, expected):
    failures = {rank: failure(tmp_path, rank, code, line) for rank, code, line in workers}
    for rank, worker in failures.items():  # the first failure is rank 0's
        worker.timestamp = 100 + rank
    assert unexplained_failures(ChildFailedError("gnnscale", failures)) == expected


@pytest.mark.slow
def test_a_machine_that_never_joins_is_one_line_after_the_rendezvous_timeout(partition):
    cmd = [sys.executable, "-m", "gnnscale.launch", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(rendezvous_port()), "--rdzv-conf", "timeout=5",
           "-m", "gnnscale", "train", "--partitions", str(partition), *ARGS]
    run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=LAUNCH_TIMEOUT_S)
    assert run.returncode == 1
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchrun: rendezvous failed: ") and "1/2 clients joined" in lines[0], \
        run.stdout + run.stderr


@pytest.mark.parametrize("argv, env, expected", [
    ([], {}, 0.5),  # the launcher's own default: a worker that lost a peer has time to say so
    (["--monitor-interval", "2"], {}, 2.0),
    (["--monitor_interval=0.2"], {}, 0.2),
    ([], {"PET_MONITOR_INTERVAL": "3"}, 3.0),  # torchrun's variable counts as given too
])
def test_the_launcher_looks_at_its_workers_every_half_second_unless_told(monkeypatch, argv, env, expected):
    import gnnscale.launch as launch_module
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    seen = []
    monkeypatch.setattr(launch_module, "run", lambda args: seen.append(args.monitor_interval))
    assert launch_module.main(["--standalone", "--nproc-per-node", "1", *argv, "-m", "gnnscale", "info"]) == 0
    assert seen == [expected]
