"""torchrun, quieter: ``python -m gnnscale.launch [torchrun's options] -m gnnscale train ...``.

The same launcher (torch's ``torch.distributed.run``, every option of it), with its own noise taken out
so that a stopped run ends in one line per cause:

- The flags of ``-m gnnscale train`` are checked before the rendezvous: a bad one is one line and exit
  status 2, with no worker started (and so nothing for ``--max-restarts`` to retry).
- A worker that exits with status 2 (bad input its flags alone do not show: a finished checkpoint, a
  partition that does not fit) is not restarted by ``--max-restarts``: it would fail the same way.
- Ctrl-C (or SIGTERM) ends torchrun with no traceback and no line of its own, exit status 128 + the
  signal's number: gnnscale's workers have said where they stopped and what they saved.
- A failed worker ends torchrun with no summary and no traceback of the launcher: gnnscale's workers
  print their own line (one per machine for a cause every worker shares), and the launcher adds one
  line only for a worker that could not say why it stopped (killed by a signal, or exited without
  gnnscale's line). Exit status: the first failed worker's, or 1 for a signal. The launcher looks at
  its workers every 0.5 s unless ``--monitor-interval`` says otherwise (torchrun: 0.1 s): it stops the
  others as soon as it sees one dead, and a worker that lost a peer needs that moment to say so
  ("another worker died") before the launcher's SIGTERM ends it.
- A rendezvous that times out (a machine of ``--nnodes`` never started) is one line saying so.
- torchrun's own log lines (its start-up banner, a failed worker's exit code, "closing signal" as it
  stops the workers) are hidden; set ``LOGLEVEL=WARNING`` (torchrun's variable) to see them.

Plain ``torchrun`` adds its log lines, its failure summary (the cause again, from each worker's error
file) and its own traceback to each failure, retries a usage error ``--max-restarts`` times, and shows a
traceback on Ctrl-C: 35 to 62 lines.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from torch.distributed import DistStoreError
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.run import parse_args, run

# Every log line of torchrun's is about a worker's failure, which the workers and the lines below say once.
QUIET_LOGLEVEL = "CRITICAL"
MONITOR_INTERVAL_S = 0.5  # torchrun's default 0.1 s could stop a worker before it said why it stopped
EXIT_BAD_INPUT = 2  # gnnscale's (and argparse's) exit status for bad input: a restart cannot fix it
STOPPED_BY_LAUNCHER = (-signal.SIGTERM, -signal.SIGINT)  # how torchrun ends the workers left after a failure


def main(argv: list[str] | None = None) -> int:
    quiet_launcher_logs()

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not monitor_interval_given(argv):
        args.monitor_interval = MONITOR_INTERVAL_S
    try:
        check_worker_flags(args)
    except SystemExit as bad:  # the check printed its one line
        return bad.code if isinstance(bad.code, int) else EXIT_BAD_INPUT
    no_restart_after_bad_input()
    try:
        run(args)
    except SignalException as stop:
        return 128 + int(stop.sigval)  # the workers have said it (gnnscale: one line each machine)
    except ChildFailedError as failure:
        for line in unexplained_failures(failure):
            sys.stderr.write(line + "\n")
        _, first = failure.get_first_failure()
        return first.exitcode if first.exitcode > 0 else 1
    except DistStoreError as err:
        # The rendezvous: another machine never joined (or this one cannot reach the first one's store).
        sys.stderr.write(f"torchrun: rendezvous failed: {err} (a machine of --nnodes never joined; "
                         "--rdzv-conf timeout=SECONDS bounds the wait, 600 by default)\n")
        return 1
    return 0


def check_worker_flags(args) -> None:
    """For ``-m gnnscale train ...``: the checks of its flags alone, here, before any worker starts, so
    that a usage error is one line and exit status 2 (SystemExit) instead of one line per worker, a
    failure summary and ``--max-restarts`` retries. Other commands are left to their workers."""
    if not (args.module and args.training_script in ("gnnscale", "gnnscale.__main__")
            and args.training_script_args[:1] == ["train"]):
        return
    # Imported here: gnnscale's command line costs seconds to import, which only a train launch needs.
    from gnnscale.cli import check_train_flags

    check_train_flags(args.training_script_args[1:])


def no_restart_after_bad_input() -> None:
    """torchrun's agent restarts the workers (``--max-restarts``) whatever made one fail; a worker that
    exits with :data:`EXIT_BAD_INPUT` would fail the same way again, so its failure ends the run."""
    if getattr(LocalElasticAgent._monitor_workers, "stops_on_bad_input", False):
        return
    monitor = LocalElasticAgent._monitor_workers

    def monitor_workers(agent, worker_group):
        result = monitor(agent, worker_group)
        if any(f.exitcode == EXIT_BAD_INPUT for f in result.failures.values()):
            agent._remaining_restarts = 0  # read by the agent's loop right after this returns
        return result

    monitor_workers.stops_on_bad_input = True
    LocalElasticAgent._monitor_workers = monitor_workers


def unexplained_failures(failure: ChildFailedError) -> list[str]:
    """One line per failed worker that has not said why it stopped: gnnscale's workers print their own
    line (and write it to their error file, where torchrun finds it), and a worker torchrun stopped
    after the first failure is no cause. What is left: a worker killed by a signal, or one that exited
    without gnnscale's line (a crash, whose traceback is above; another program)."""
    first_rank, _ = failure.get_first_failure()
    lines = []
    for rank, worker in sorted(failure.failures.items()):
        if worker_line(worker) is not None or (rank != first_rank and worker.exitcode in STOPPED_BY_LAUNCHER):
            continue
        how = (f"was killed by {worker.signal_name()}" if worker.exitcode < 0
               else f"exited with status {worker.exitcode}")
        lines.append(f"torchrun: worker rank {rank} (pid {worker.pid}) {how}")
    return lines


def worker_line(worker: ProcessFailure) -> str | None:
    """The line a gnnscale worker reported (``gnnscale.cli.report`` writes it to torchrun's error file),
    or None."""
    message = worker.message
    return message.get("message") if isinstance(message, dict) else None


def monitor_interval_given(argv: list[str]) -> bool:
    """Whether the command line (``--monitor-interval``, ``--monitor_interval``) or torchrun's variable
    (``PET_MONITOR_INTERVAL``) sets how often the launcher looks at its workers."""
    flags = ("--monitor-interval", "--monitor_interval")
    return "PET_MONITOR_INTERVAL" in os.environ or any(a.split("=", 1)[0] in flags for a in argv)


def quiet_launcher_logs() -> None:
    """torch's elastic loggers from ERROR up, unless LOGLEVEL says otherwise. Each of them set its own
    level from LOGLEVEL when it was created (on import), so each is set again here."""
    level = os.environ.get("LOGLEVEL", QUIET_LOGLEVEL)
    os.environ["LOGLEVEL"] = level  # for the loggers created later, in torchrun's agent
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
