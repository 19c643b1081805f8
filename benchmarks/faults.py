"""Fault injection: a failure anywhere in a distributed run must stop every worker, with a message
naming its cause, within --timeout + 35 s.

    python benchmarks/faults.py [--runs vanilla,hybrid,split,1d,1.5d,hybrid-dgs] [--trials 20]
                                [--kinds kill,freeze,truncate,flip]
                                [--workers 2] [--timeout 20] [--epochs 10] [--seed 0] [--cache-dir DIR]
                                [--json FILE]

For each run (a layout and its flags, see RUNS), ``--trials`` launches of ``torchrun -m gnnscale train
--partitions DIR --layout L ...`` (the kinds taken in turn, in a shuffled order), each with one fault:

- kill: SIGKILL a random worker when rank 0's progress bar reaches a random iteration;
- freeze: SIGSTOP a random worker at a random iteration (alive but silent: only --timeout catches it);
- truncate / flip: cut a random file that the layout reads from a random part to a random length, or
  flip one random byte of it, before the launch.

A trial passes when torchrun has exited and no worker is left (torchrun SIGKILLs a frozen worker 30 s
after asking it to stop: a stopped process cannot act on SIGTERM), the output names the cause (the
killed worker in torchrun's summary or gnnscale's lost-peer line; gnnscale's timeout line; the damaged
file and its rank), and the time from the fault (the launch, for a file fault) to the end is within
--timeout + 35 s. Partitions of a small products-shaped graph are cached in --cache-dir.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import math
import os
import pty
import queue
import re
import select
import shutil
import signal
import subprocess
import struct
import sys
import tempfile
import termios
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gnnscale.train.layouts.base import LayoutSpec
from gnnscale.train.layouts.registry import layout_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# What is tried: a name for the table -> the layout and the flags it trains with. Every registered
# layout, and DGS on top of hybrid (its explainer thread and masks are one more thing that can hang).
RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vanilla": ("vanilla", ()),
    "hybrid": ("hybrid", ()),
    "split": ("split", ()),
    "1d": ("1d", ("--sampler", "matrix")),
    "1.5d": ("1.5d", ("--sampler", "matrix", "--replication", "2")),
    "hybrid-dgs": ("hybrid", ("--dgs",)),
}
KINDS = ("kill", "freeze", "truncate", "flip")
BOUND_EXTRA_S = 35.0  # the bound: --timeout + 35 s (torchrun waits 30 s before SIGKILLing a frozen worker)
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
OVERRUN_S = 90.0  # how long past the bound a trial may run before it is called a hang and killed
STOPPED = "gnnscale train: stopped:"  # how gnnscale reports a failed distributed run
PROGRESS = re.compile(r"epoch (\d+):.*?\|\s*(\d+)/(\d+) \[")  # rank 0's tqdm bar: "epoch 3:  40%|...| 8/20 ["
# What each worker reads from its part, and the topology of each partition view (see
# gnnscale.partition.directory.load_partition; a layout's spec names its view).
PART_FILES = ("features", "labels", "train_idx", "val_idx", "test_idx")
VIEW_FILES = {"whole": ("topology/indptr.npy", "topology/indices.npy"),
              "own": ("part{r}/indptr.npy", "part{r}/indices.npy")}


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One fault. rank: the worker that is signalled, or whose part holds the damaged file.
    iteration: the global training iteration (epoch * iterations per epoch + step) of a kill or freeze.
    file: the damaged file, relative to the partition directory; cut_to: its new length (truncate);
    flip_at: the offset of the flipped byte (flip)."""

    run: str
    kind: str
    rank: int
    iteration: int | None = None
    file: str | None = None
    cut_to: int | None = None
    flip_at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """detected: the output names the cause; stopped: every worker exited and torchrun too, nothing
    left; seconds: from the fault (a file fault: the launch) until the last worker exited;
    launcher_s: until torchrun itself exited (its own teardown comes on top); message: the line that
    names the cause."""

    trial: Trial
    detected: bool
    stopped: bool
    seconds: float
    launcher_s: float
    message: str

    def passed(self, bound_s: float) -> bool:
        return self.detected and self.stopped and self.seconds <= bound_s


# --- data -----------------------------------------------------------------------------------------


def cached_partition(cache: Path, workers: int, scale: float) -> Path:
    """A METIS partition of the products-shaped synthetic graph at ``scale``, written once."""
    path = cache / f"faults_products_scale{scale:g}_metis{workers}"
    if (path / "manifest.json").is_file():  # the manifest is the last file written
        return path
    # Imported here: only a cold cache needs the generator and METIS.
    from gnnscale.graph.synthetic import make_synthetic, products_like_config
    from gnnscale.partition import write_partition_dir

    cache.mkdir(parents=True, exist_ok=True)
    dataset = make_synthetic(products_like_config(scale))
    write_partition_dir(dataset, workers, "metis", path, overwrite=path.exists())
    print(f"partitioned {dataset.graph.num_nodes:,} nodes, {dataset.graph.num_edges:,} edges into {workers} parts "
          f"-> {path}", flush=True)
    return path


def iterations_per_epoch(partition_dir: Path, batch_size: int, spec: LayoutSpec) -> int:
    """As the trainer counts them: each worker's own training nodes in batches of ``batch_size`` (the
    most of any worker) or, where one mini-batch is split across the workers, all training nodes in
    mini-batches of ``workers x batch_size``."""
    train = json.loads((partition_dir / "manifest.json").read_text())["split_sizes"]["train_idx"]
    if spec.per_worker_batches:
        return max(math.ceil(t / batch_size) for t in train)
    return math.ceil(sum(train) / (len(train) * batch_size))


# --- planning -------------------------------------------------------------------------------------


def plan(run: str, kinds: list[str], trials: int, workers: int, per_epoch: int, epochs: int, partition_dir: Path,
         rng: np.random.Generator) -> list[Trial]:
    """``trials`` faults for ``run``: the kinds in turn, shuffled; ranks, iterations, files at random."""
    view = layout_spec(RUNS[run][0]).view
    order = [kinds[i % len(kinds)] for i in range(trials)]
    rng.shuffle(order)
    planned = []
    for kind in order:
        rank = int(rng.integers(workers))
        if kind in ("kill", "freeze"):
            # Not the first two iterations (start-up), nor the last two epochs: the progress bar is read
            # through a pipe, a little behind the run, and a worker stopped after the run's last
            # collective has no peer left to notice (torchrun would wait for it forever).
            planned.append(Trial(run=run, kind=kind, rank=rank,
                                 iteration=int(rng.integers(2, per_epoch * (epochs - 2)))))
            continue
        files = [f"part{rank}/{name}.npy" for name in PART_FILES] + [f.format(r=rank) for f in VIEW_FILES[view]]
        file = files[int(rng.integers(len(files)))]
        size = (partition_dir / file).stat().st_size
        planned.append(Trial(run=run, kind=kind, rank=rank, file=file,
                             cut_to=int(rng.integers(size)) if kind == "truncate" else None,
                             flip_at=int(rng.integers(size)) if kind == "flip" else None))
    return planned


def damage(partition_dir: Path, trial: Trial, scratch: Path) -> Path:
    """A copy of the partition directory with ``trial.file`` truncated or one byte flipped."""
    copy = scratch / "damaged"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(partition_dir, copy)
    target = copy / trial.file
    data = bytearray(target.read_bytes())
    if trial.kind == "truncate":
        del data[trial.cut_to:]
    else:
        data[trial.flip_at] ^= 0xFF
    target.write_bytes(bytes(data))
    return copy


# --- running one trial ----------------------------------------------------------------------------


class Launch:
    """torchrun and its output, read in a thread and split on both \\r and \\n (tqdm redraws its bar
    with \\r), so that the main loop can wait for a line or for the end with a deadline. The output goes
    to a pseudo-terminal: gnnscale draws its progress bar only on a terminal, and the bar is how this
    script knows which iteration the run is at."""

    def __init__(self, cmd: list[str]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.terminal, worker_side = pty.openpty()
        # A new pseudo-terminal is 0 columns wide, and tqdm fits its bar (the counts too) into that.
        fcntl.ioctl(worker_side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=worker_side,
                                     stderr=worker_side, start_new_session=True)
        os.close(worker_side)  # the launch holds the only copies now: reading ends when they all close
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.exits = ExitTimes()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        pending = b""
        while chunk := read_terminal(self.terminal):
            pending += chunk
            *complete, pending = re.split(rb"[\r\n]", pending)
            for line in complete:
                if line:  # a terminal ends lines with \r\n: no empty line in between
                    self.lines.put(line.decode("utf-8", errors="replace"))
        self.lines.put(pending.decode("utf-8", errors="replace"))
        self.lines.put(None)
        os.close(self.terminal)

    def next_line(self, deadline: float) -> str | None:
        """The next line; None at the end of the output; TimeoutError at the deadline."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        if line is not None:
            self.output.append(line)
        return line

    def watch_workers(self) -> None:
        """Start watching every worker torchrun has started so far (their exits are timed)."""
        pid = self.proc.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            return
        for child in children:
            self.exits.add(int(child))

    def worker(self, local_rank: int) -> int:
        """The pid of torchrun's child with LOCAL_RANK ``local_rank``."""
        pid = self.proc.pid
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            if f"LOCAL_RANK={local_rank}".encode() in Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
                return int(child)
        raise RuntimeError(f"torchrun has no worker with LOCAL_RANK={local_rank}")

    def leftover(self) -> list[int]:
        """Processes of this launch still running, torchrun included (zombies have stopped)."""
        return [pid for pid, state in descendants() if state != "Z"]

    def kill_all(self) -> None:
        """SIGKILL whatever is left (a stopped process too), then reap the adopted workers."""
        for pid in self.leftover():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        for pid, _ in descendants():
            try:
                os.waitpid(pid, 0)  # an adopted worker: this process is its parent now
            except ChildProcessError:
                pass  # a grandchild: its own parent reaps it


def read_terminal(fd: int) -> bytes:
    """The next output of a pseudo-terminal; b"" once every process has closed its side (Linux then
    raises EIO rather than returning end of file)."""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


class ExitTimes:
    """When watched processes exit, seen through pidfds (Linux >= 5.3; a pidfd becomes readable when
    its process terminates, whoever its parent is) by a thread that stamps each exit as it happens.
    No polling, no sleeping: the thread blocks in select() on the pidfds and a wake-up pipe."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}  # pid -> pidfd, still running
        self.exited: dict[int, float] = {}
        self.changed = threading.Condition()
        self.wake_r, self.wake_w = os.pipe()
        threading.Thread(target=self._watch, daemon=True).start()

    def add(self, pid: int) -> None:
        with self.changed:
            if pid in self.fds or pid in self.exited:
                return
            try:
                self.fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                self.exited[pid] = time.monotonic()  # already gone (and reaped)
                return
        os.write(self.wake_w, b"x")  # the watcher selects on the new pidfd too

    def _watch(self) -> None:
        while True:
            with self.changed:
                fds = dict(self.fds)
            ready, _, _ = select.select([*fds.values(), self.wake_r], [], [])
            now = time.monotonic()
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            with self.changed:
                for pid, fd in fds.items():
                    if fd in ready:
                        self.exited[pid] = now
                        os.close(self.fds.pop(pid))
                self.changed.notify_all()

    def wait(self, deadline: float) -> bool:
        """Wait until every watched process has exited or the deadline passes; True if all have."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.fds, timeout=max(0.0, deadline - time.monotonic()))

    def watching(self) -> bool:
        """Whether a watched process is still running."""
        with self.changed:
            return bool(self.fds)

    def last(self) -> float | None:
        """When the last watched process exited (None while one runs, or if none was watched)."""
        with self.changed:
            return max(self.exited.values()) if self.exited and not self.fds else None


def adopt_orphans() -> None:
    """Make this process the subreaper of everything it launches (Linux PR_SET_CHILD_SUBREAPER): a
    worker that outlives torchrun becomes its child instead of init's, so it can be found and stopped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def descendants() -> list[tuple[int, str]]:
    """(pid, state) of every process below this one (state "Z": exited, not yet reaped)."""
    found, todo = [], [os.getpid()]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except FileNotFoundError:
                continue
            for child in children:
                try:
                    state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except FileNotFoundError:
                    continue
                found.append((child, state))
                todo.append(child)
    return found


def train_command(partition_dir: Path, run: str, a: argparse.Namespace) -> list[str]:
    # No --quiet: rank 0's progress bar says which iteration the run is at.
    layout, flags = RUNS[run]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.workers),
            "-m", "gnnscale", "train", "--partitions", str(partition_dir), "--layout", layout, *flags,
            "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--hidden", "64", "--epochs", str(a.epochs),
            "--threads", "1", "--no-eval", "--timeout", str(a.timeout)]


def run_trial(trial: Trial, partition_dir: Path, per_epoch: int, a: argparse.Namespace, scratch: Path) -> Outcome:
    """Launch, inject the fault, follow the output to the end (or past the bound: a hang), check."""
    bound = a.timeout + BOUND_EXTRA_S
    directory = damage(partition_dir, trial, scratch) if trial.file else partition_dir
    launch = Launch(train_command(directory, trial.run, a))
    fault_at = time.monotonic() if trial.file else None
    deadline = fault_at + bound + OVERRUN_S if trial.file else time.monotonic() + a.startup_timeout
    victim = None
    try:
        while (line := launch.next_line(deadline)) is not None:
            launch.watch_workers()
            progress = PROGRESS.search(line)
            if fault_at is None and progress and int(progress[1]) * per_epoch + int(progress[2]) >= trial.iteration:
                victim = launch.worker(trial.rank)
                os.kill(victim, signal.SIGKILL if trial.kind == "kill" else signal.SIGSTOP)
                fault_at = time.monotonic()
                deadline = fault_at + bound + OVERRUN_S
        launch.exits.wait(deadline)
        launch.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (TimeoutError, subprocess.TimeoutExpired):
        pass  # a hang: what is left is reported, then killed
    launcher_end = time.monotonic() if launch.proc.poll() is not None else float("nan")
    workers_end = launch.exits.last()
    if workers_end is None and not launch.exits.watching() and launch.proc.poll() is not None \
            and not launch.leftover():
        # Workers that started and died between two output lines were never watched (seen under load
        # with a damaged file: they fail in set-up). torchrun waits for its workers before it exits and
        # nothing of the launch is left, so they ended no later than torchrun: an upper bound.
        workers_end = launcher_end
    stopped = launch.proc.poll() is not None and workers_end is not None and not launch.leftover()
    launch.kill_all()
    if fault_at is None:
        return Outcome(trial=trial, detected=False, stopped=stopped, seconds=float("nan"), launcher_s=float("nan"),
                       message="the fault was never injected (the run ended before its iteration)")
    detected, message = names_cause(trial, launch.output, victim)
    seconds = workers_end - fault_at if workers_end is not None else float("inf")
    return Outcome(trial=trial, detected=detected, stopped=stopped, seconds=seconds,
                   launcher_s=launcher_end - fault_at, message=message)


def names_cause(trial: Trial, output: list[str], victim: int | None) -> tuple[bool, str]:
    """Whether the output names the fault's cause, and the line that does (or the last lines)."""
    # From where the message starts: a line may begin with the progress bar of a rank 0 that froze
    # mid-redraw (the bar ends in no newline, so the next worker's message continues its line).
    stopped = [line[line.index(STOPPED):] for line in output if STOPPED in line]
    if trial.kind == "kill":
        # torchrun's summary: "exitcode  : -9 (pid: 1234)  (SIGKILL)", or a survivor's lost-peer line.
        named = [line for line in output if f"(pid: {victim})" in line and "SIGKILL" in line]
        named += [line for line in stopped if "another worker died" in line]
    elif trial.kind == "freeze":
        named = [line for line in stopped if "Timed out" in line]
    else:
        named = [line for line in stopped if trial.file in line and f"rank {trial.rank}" in line]
    if named:
        return True, named[0].strip()
    return False, " | ".join(line.strip() for line in output[-5:])


# --- main -----------------------------------------------------------------------------------------


def summarize(outcomes: list[Outcome], bound: float) -> list[dict]:
    rows = []
    for run in dict.fromkeys(o.trial.run for o in outcomes):
        for kind in [*KINDS, "all"]:
            group = [o for o in outcomes if o.trial.run == run and kind in (o.trial.kind, "all")]
            if not group:
                continue
            rows.append({"run": run, "fault": kind, "trials": len(group),
                         "detected": sum(o.detected for o in group), "stopped": sum(o.stopped for o in group),
                         "within_bound": sum(o.passed(bound) for o in group),
                         "worst_s": max(o.seconds for o in group),
                         "worst_launcher_s": max(o.launcher_s for o in group)})
    return rows


def print_table(rows: list[dict], bound: float) -> None:
    print(f"\n{'run':10} {'fault':9} {'trials':>6} {'detected':>8} {'stopped':>7} {'in bound':>8} {'worst s':>8} "
          f"{'torchrun s':>10}   (bound on the workers: --timeout + {BOUND_EXTRA_S:g} = {bound:g} s)")
    for r in rows:
        print(f"{r['run']:10} {r['fault']:9} {r['trials']:6d} {r['detected']:8d} {r['stopped']:7d} "
              f"{r['within_bound']:8d} {r['worst_s']:8.1f} {r['worst_launcher_s']:10.1f}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {','.join(RUNS)}")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds, comma-separated, of {','.join(KINDS)}")
    p.add_argument("--trials", type=int, default=20, help="trials per run (the kinds in turn)")
    p.add_argument("--workers", type=int, default=2, help="workers per launch (one machine)")
    p.add_argument("--timeout", type=float, default=20.0, help="gnnscale train --timeout of every launch (s)")
    p.add_argument("--epochs", type=int, default=10, help="epochs of every launch (faults land in between)")
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--scale", type=float, default=0.01, help="products-shaped graph, fraction of 2.45M nodes")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault plan")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds a launch may take to reach its fault")
    p.add_argument("--cache-dir", default=str(HERE / ".cache"), help="where the partitions are cached")
    p.add_argument("--json", default=None, help="write every trial and the table here")
    a = p.parse_args()
    a.run_list, a.kind_list = a.runs.split(","), a.kinds.split(",")
    if not set(a.run_list) <= set(RUNS):
        p.error(f"--runs: expected a subset of {','.join(RUNS)}, got {a.runs}")
    if not set(a.kind_list) <= set(KINDS):
        p.error(f"--kinds: expected a subset of {','.join(KINDS)}, got {a.kinds}")
    if a.trials < 1 or a.workers < 2 or a.epochs < 4:
        p.error("--trials >= 1, --workers >= 2 and --epochs >= 4 expected")
    return a


def main() -> None:
    a = parse_args()
    adopt_orphans()
    bound = a.timeout + BOUND_EXTRA_S
    partition_dir = cached_partition(Path(a.cache_dir), a.workers, a.scale)
    rng = np.random.default_rng(a.seed)
    print(f"{a.workers} workers, {a.epochs} epochs, --timeout {a.timeout:g}; bound {bound:g} s", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-faults-") as scratch:
        for run in a.run_list:
            per_epoch = iterations_per_epoch(partition_dir, a.batch_size, layout_spec(RUNS[run][0]))
            for i, trial in enumerate(plan(run, a.kind_list, a.trials, a.workers, per_epoch, a.epochs,
                                           partition_dir, rng)):
                outcome = run_trial(trial, partition_dir, per_epoch, a, Path(scratch))
                outcomes.append(outcome)
                where = f"iteration {trial.iteration}" if trial.iteration is not None else trial.file
                verdict = "ok" if outcome.passed(bound) else "FAILED"
                print(f"{run} {i + 1:2d}/{a.trials} {trial.kind:8} rank {trial.rank} {where}: {verdict}, workers "
                      f"stopped in {outcome.seconds:.1f} s (torchrun {outcome.launcher_s:.1f} s); "
                      f"{outcome.message[:150]}", flush=True)
    rows = summarize(outcomes, bound)
    print_table(rows, bound)
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": {k: v for k, v in vars(a).items()}, "bound_s": bound,
                                            "rows": rows, "trials": [asdict(o) for o in outcomes]}, indent=2))
    sys.exit(0 if all(o.passed(bound) for o in outcomes) else 1)


if __name__ == "__main__":
    main()
