"""Command line: ``gnnscale train | predict | partition | generate | convert | info`` (also ``python -m gnnscale``).

Each command is one module of this package (its flags, and a ``cmd_*`` that builds and runs); this one
builds the parser from them, runs the command and turns every failure into one line and an exit code.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from gnnscale import __version__
from gnnscale.cli.common import EXIT_BAD_INPUT, Parser, UsageError, name_the_flag, subcommand_parser, typed_flags
from gnnscale.cli.convert import ConvertConfig, add_convert_parser, cmd_convert
from gnnscale.cli.generate import GenerateConfig, add_generate_parser, cmd_generate
from gnnscale.cli.info import add_info_parser, cmd_info
from gnnscale.cli.partition import PartitionSettings, add_partition_parser, cmd_partition
from gnnscale.cli.predict import PredictConfig, add_predict_parser, cmd_predict
from gnnscale.cli.flags import given
from gnnscale.cli.train import add_train_parser, cmd_train, read_train_settings, settings_classes
from gnnscale.files import atomic_write
from gnnscale.distributed.comm import AgreementFailure, PeerFailure
from gnnscale.distributed.context import announce_report, wait_for_report
from gnnscale.partition.kaminpar_parts import MissingDependency
from gnnscale.train.checks import LaunchError
from gnnscale.train.loop import TrainingDiverged
from gnnscale.train.run import InterruptedRun, RunOutputs

EXIT_INTERRUPTED = 130  # the shell's code for a run ended by SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a Unix tool whose reader went away (| head)
EXIT_STOPPED = 1  # a distributed run stopped by a failure (a dead or silent peer, a broken part)
LEAD_REPORT_WAIT_S = 5.0  # see report()

COMMANDS = {"train": cmd_train, "info": cmd_info, "partition": cmd_partition, "predict": cmd_predict,
            "generate": cmd_generate, "convert": cmd_convert}


def build_parser() -> Parser:
    parser = Parser(prog="gnnscale", description="Mini-batch GNN training by neighbor sampling, on one process or "
                                                 "on workers launched with torchrun.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print gnnscale's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_train_parser(sub)
    add_info_parser(sub)
    add_partition_parser(sub)
    add_predict_parser(sub)
    add_generate_parser(sub)
    add_convert_parser(sub)
    return parser


def command_settings(command: str) -> tuple[type, ...]:
    """The config classes whose fields are ``gnnscale COMMAND``'s flags (none for ``info``)."""
    return {"train": settings_classes(), "partition": (PartitionSettings,), "predict": (PredictConfig,),
            "generate": (GenerateConfig,), "convert": (ConvertConfig,)}.get(command, ())


def command_flags(parser: Parser, args) -> dict[str, str]:
    """``{library name: the flag the user typed}`` for ``args.command``: its settings classes' fields and
    their aliases (the names its library calls give them), and its own options by dest. A name the user
    gave as a dataset option (``-o seed=...``) is theirs, not a flag's."""
    settings = command_settings(args.command)
    flags = typed_flags(subcommand_parser(parser, args.command), settings)
    if any(given(cls, args).get("partitions") is not None for cls in settings) or \
            getattr(args, "partitions", None) is not None:
        flags["directory"] = "--partitions"  # what the loaders call their folder
    for key, _ in getattr(args, "option", []):
        flags.pop(key, None)
    return flags


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as err:  # already reported in one line
        return err.code
    if args.command in SIGTERM_CLEANS:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        COMMANDS[args.command](args)
    except KeyboardInterrupt as err:
        # torchrun, interrupted too, already waits for every worker: none need wait for the first one's
        # line (which may be stuck in a collective with a peer until that peer exits).
        how = "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C"
        report(f"gnnscale {args.command}: interrupted ({how}); {what_was_saved(args, err)}",
               same_on_every_worker=True, wait_for_first=False)
        return EXIT_INTERRUPTED
    except TrainingDiverged as err:
        # Every worker found the same NaN loss (all-reduced) at the same point: one report per machine.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=True)
        return EXIT_STOPPED
    except (ValueError, TypeError) as err:
        # Bad input: one clear line, no traceback, non-zero exit, naming the flag the user typed.
        message = name_the_flag(str(err), command_flags(parser, args))
        report(f"gnnscale {args.command}: error: {message}", same_on_every_worker=isinstance(err, LaunchError))
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader of our output went away (gnnscale info | head): stop quietly, as Unix tools do.
        return quiet_broken_pipe()
    except MissingDependency as err:
        # A method whose package is not installed: one line saying what to install.
        report(f"gnnscale {args.command}: error: {err}", same_on_every_worker=False)
        return EXIT_BAD_INPUT
    except OSError as err:
        # The machine, not the input: a full disk, a file that cannot be written (the message names it).
        report(f"gnnscale {args.command}: error: {err}", same_on_every_worker=False)
        return EXIT_BAD_INPUT
    except AgreementFailure as err:
        # A worker failed a step (its partition file): every worker raised the same message.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=True)
        return EXIT_STOPPED
    except PeerFailure as err:
        # This worker lost a peer (dead, or silent past --timeout): say so, and stop this worker too.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=False)
        return EXIT_STOPPED
    return 0


# Commands that write one directory (staged, published when complete) and temporary files: SIGTERM
# (a scheduler's or `timeout`'s stop) raises in them as Ctrl-C does, so that both are removed. Training
# keeps SIGTERM's default: torchrun stops its workers with it, and the workers' own fault handling
# (docs/distributed.md) is built around that.
SIGTERM_CLEANS = ("partition", "predict", "generate", "convert")


class Terminated(KeyboardInterrupt):
    """SIGTERM received by a command of :data:`SIGTERM_CLEANS`."""


def _raise_terminated(signum, frame):
    raise Terminated()


def what_was_saved(args, err: KeyboardInterrupt) -> str:
    """For the line a Ctrl-C leaves: what the run wrote so far, and how to go on."""
    if args.command in SIGTERM_CLEANS:
        out = next(given(cls, args)["out"] for cls in command_settings(args.command) if "out" in given(cls, args))
        return f"{out} is as it was and the temporary files were removed"
    outputs = given(RunOutputs, args) if args.command == "train" else {}
    checkpoint, metrics = outputs.get("checkpoint"), outputs.get("metrics_out")
    saved = []
    if checkpoint is not None:
        saved.append(f"{checkpoint} holds the last checkpoint (continue with --resume)")
    if metrics is not None:
        saved.append(f"{metrics} holds the metrics of the finished epochs")
    if isinstance(err, InterruptedRun) and err.saved:
        saved.append(err.saved)  # the best model so far
    if saved:
        return "; ".join(saved)
    if outputs.get("model_out") is not None:
        return "nothing was saved (no epoch finished yet whose model --save-model would keep)"
    return "nothing was saved (no --checkpoint or --metrics-out)"


def check_train_flags(argv: list[str]) -> None:
    """What ``gnnscale train ARGV`` would refuse in its flags alone, refused before any worker starts (by
    ``python -m gnnscale.launch``, so that torchrun never restarts a usage error): one line on stderr and
    SystemExit(2)."""
    parser = build_parser()
    args = parser.parse_args(["train", *argv])  # a malformed flag: one line, UsageError (SystemExit(2))
    try:
        read_train_settings(args)
    except (ValueError, TypeError) as err:
        sys.stderr.write(f"gnnscale train: error: {name_the_flag(str(err), command_flags(parser, args))}\n")
        raise SystemExit(EXIT_BAD_INPUT) from None


def report(line: str, *, same_on_every_worker: bool, wait_for_first: bool = True) -> None:
    """Write one line to stderr in one write (workers share a terminal). A message that every worker
    of a torchrun launch has alike is written by the first worker of each machine only (LOCAL_RANK 0);
    the others stay until it has (``wait_for_first``), or torchrun could stop it before it writes.

    Under torchrun the line also goes to this worker's error file, which torchrun's failure summary
    shows in place of "To enable traceback see: ...": the summary then names the cause too.
    """
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        # The layout torch.distributed.elastic's own ErrorHandler writes; py_callstack is what it shows.
        # Written whole or not at all: torchrun may stop this worker mid-write (a peer died first), and
        # its agent fails outright, restarts and all, on an error file it cannot parse.
        record = {"message": {"message": line, "extraInfo": {"py_callstack": line,
                                                             "timestamp": str(int(time.time()))}}}
        atomic_write(error_file, lambda f: f.write(json.dumps(record).encode()))
    lead = os.environ.get("LOCAL_RANK", "0") == "0"
    if same_on_every_worker and not lead:
        # torchrun stops every worker as soon as one exits: stay until the first worker, which finds the
        # same error, has written the line (seen under load: its line lost to this worker's exit).
        if wait_for_first:
            wait_for_report(LEAD_REPORT_WAIT_S)
        return
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if same_on_every_worker and "LOCAL_RANK" in os.environ:
        announce_report()


def quiet_broken_pipe() -> int:
    """Stdout's reader has gone: point stdout at /dev/null, so that the interpreter's last flush of what
    is still buffered fails no more (Python would print that failure), and give the status to exit with."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def entry_point() -> None:
    """``gnnscale`` and ``python -m gnnscale``: run :func:`main` and exit with its status."""
    code = main()
    try:
        sys.stdout.flush()  # what is still buffered: a reader that has gone shows here (gnnscale info | head)
    except BrokenPipeError:
        code = quiet_broken_pipe()
    if code == EXIT_STOPPED:
        # The run is over (a peer died, went silent, or failed a step): exit without the interpreter's
        # teardown of torch and numba (seconds on a busy machine), so that torchrun sees this worker
        # stop at once and stops the others. The process group is already closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
