"""torchrun, quieter: ``python -m gnnscale.launch [torchrun's options] -m gnnscale train ...``.

The same launcher (torch's ``torch.distributed.run``, every option of it), with its own noise taken out
so that a stopped run ends in the workers' one line:

- Ctrl-C (or SIGTERM) ends torchrun with no traceback and no line of its own, exit status 128 + the
  signal's number: gnnscale's workers have said where they stopped and what they saved.
- A failed worker ends torchrun with its failure summary (which worker, its exit code or signal, and
  gnnscale's line naming the cause) and no traceback of the launcher around it: exit status 1. The
  launcher looks at its workers every 0.5 s unless ``--monitor-interval`` says otherwise (torchrun: 0.1
  s): it stops the others as soon as it sees one dead, and a worker that lost a peer needs that moment
  to say so ("another worker died") before the launcher's SIGTERM ends it.
- A rendezvous that times out (a machine of ``--nnodes`` never started) is one line saying so.
- torchrun's own log lines (its start-up banner, "closing signal" as it stops the workers) are shown
  from ERROR up; set ``LOGLEVEL=WARNING`` (torchrun's variable) to see them.
"""

from __future__ import annotations

import logging
import os
import sys

from torch.distributed import DistStoreError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

QUIET_LOGLEVEL = "ERROR"
MONITOR_INTERVAL_S = 0.5  # torchrun's default 0.1 s could stop a worker before it said why it stopped


def main(argv: list[str] | None = None) -> int:
    quiet_launcher_logs()

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not monitor_interval_given(argv):
        args.monitor_interval = MONITOR_INTERVAL_S
    try:
        run(args)
    except SignalException as stop:
        return 128 + int(stop.sigval)  # the workers have said it (gnnscale: one line each machine)
    except ChildFailedError as failure:
        sys.stderr.write(failure.format_msg() + "\n")
        return 1
    except DistStoreError as err:
        # The rendezvous: another machine never joined (or this one cannot reach the first one's store).
        sys.stderr.write(f"torchrun: rendezvous failed: {err} (a machine of --nnodes never joined; "
                         "--rdzv-conf timeout=SECONDS bounds the wait, 600 by default)\n")
        return 1
    return 0


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
