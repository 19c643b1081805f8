"""torchrun launches of ``gnnscale train`` for the end-to-end tests: command lines, a port for
two-"machine" launches, and a launched run whose output a test can wait on with a deadline.

Ports. A single-machine launch uses ``torchrun --standalone``: torchrun binds a free port itself
and hands it to its workers. The launch tests used to pick a port by binding port 0 and pass it as
``--master-port``; between that check and torchrun's own bind (seconds, more on a busy machine) the
kernel can give the same port to any other socket of the machine, and then torchrun fails with
EADDRINUSE. That made the launch tests fail now and then under load, and only under load: the window
grows with the load, and so does the number of sockets other tests open. A two-machine launch needs
a port both launchers know in advance; :func:`rendezvous_port` takes one below the kernel's ephemeral
range, which the kernel never assigns on its own.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

LAUNCH_TIMEOUT_S = 240  # one whole launch on a busy 2-core machine (about 15 s alone)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def torchrun(nproc: int, *args: str) -> list[str]:
    """One machine, ``nproc`` workers; torchrun picks its own free port (``--standalone``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", "gnnscale", "train", *args]


def torchrun_machine(node_rank: int, nnodes: int, port: int, *args: str) -> list[str]:
    """Machine ``node_rank`` of ``nnodes`` (one worker each), all on 127.0.0.1, rendezvous on ``port``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--node-rank", str(node_rank),
            "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "gnnscale", "train", *args]


def rendezvous_port() -> int:
    """A port free now and below the kernel's ephemeral range, so that no socket the kernel numbers
    itself (a bind to port 0, an outgoing connection) can take it before torchrun binds it."""
    low = int(EPHEMERAL_RANGE.read_text().split()[0]) if EPHEMERAL_RANGE.is_file() else 32768
    candidates = list(range(max(1024, low - 8000), low))
    random.shuffle(candidates)  # several test runs on one machine should not all try the same port first
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below the ephemeral range (which starts at {low})")


def run_launch(cmd: list[str], timeout_s: float = LAUNCH_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a launch to its end (bounded) and return its output."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=ENV)


class Launch:
    """A running launcher (torchrun) whose combined output is read line by line in a thread, so that a
    test can wait for a line with a deadline (never a blind sleep). :meth:`stop` kills torchrun and
    every worker it started, frozen ones included (torchrun starts each worker in its own session)."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                                     start_new_session=True)
        self.output: list[str] = []
        self._workers: set[int] = set()
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str, timeout_s: float) -> str:
        """The first new line containing ``text``; AssertionError (with the output) after ``timeout_s`` or at EOF."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {timeout_s:.0f} s:\n{self.tail()}") from None
            if line is None:
                self._lines.put(None)
                raise AssertionError(f"the launch ended without a line with {text!r}:\n{self.tail()}")
            self.output.append(line)
            if text in line:
                return line

    def finish(self, timeout_s: float) -> int:
        """Wait for the launcher to exit (AssertionError after ``timeout_s``); return its exit status."""
        try:
            self.wait_for("\0 never printed", timeout_s)
        except AssertionError as err:
            if "ended without" not in str(err):
                raise AssertionError(f"the launch did not end within {timeout_s:.0f} s:\n{self.tail()}") from None
        return self.proc.wait(timeout=30)

    def text(self) -> str:
        return "".join(self.output)

    def tail(self, chars: int = 4000) -> str:
        return self.text()[-chars:]

    def worker_pids(self) -> list[int]:
        """PIDs of the workers torchrun started (its children), in start order (local rank)."""
        pid = self.proc.pid
        try:
            found = sorted(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
        except FileNotFoundError:  # torchrun has exited
            found = []
        self._workers.update(found)
        return found

    def stop(self) -> None:
        """Kill whatever is left of the launch: the workers, then torchrun (SIGKILL also ends stopped
        processes). A recorded PID is killed only while it is still a gnnscale process."""
        self.worker_pids()
        for pid in self._workers:
            try:
                if b"gnnscale" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
