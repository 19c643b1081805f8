"""The process group: from torchrun's environment in real runs, from a local port in tests.

Backend gloo: the default group's exchanges (sampling requests, feature rows, set-up) are host tensors,
also when the model trains on a GPU. NCCL (one GPU per worker, ``cuda:LOCAL_RANK``) is there only when
asked for by name; the trainer adds a second group on it for the training step's collectives on GPUs
(gradients, split parallelism's shuffles: :func:`gnnscale.distributed.device_policy.step_comm`). Every
worker of a run calls :func:`init_from_env` once at start-up and :func:`shutdown` once at the end
(in a ``finally``, so that a failing worker still releases its sockets).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")
# Process groups this process has joined through torchrun's store (see _init).
_GROUPS_JOINED = itertools.count()
# torchrun sets these for every worker; LOCAL_RANK is needed only to pick the GPU.
REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True, slots=True, kw_only=True)
class DistContext:
    """Where this worker stands in the run.

    Args:
        rank: this worker's id in [0, world_size).
        world_size: number of workers (>= 1).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU).
        device: where collectives exchange tensors: ``cpu`` for gloo, ``cuda:LOCAL_RANK`` for NCCL.
        timeout_s: how long a collective waits for its peers before it fails (also for later groups).
    """

    rank: int
    world_size: int
    backend: str
    device: torch.device
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("rank", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if self.world_size < 1:
            raise ValueError(f"world_size: expected >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank: expected a value in [0, {self.world_size}), got {self.rank}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {self.backend!r}")
        if not isinstance(self.device, torch.device):
            raise TypeError(f"device: expected a torch.device, got {type(self.device).__name__}")


def init_from_env(
    backend: str | None = None,
    timeout_s: float = 120.0,
    *,
    environ: Mapping[str, str] | None = None,
) -> DistContext:
    """Join the run described by torchrun's environment variables and return this worker's context.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; default gloo (host-side exchanges, whatever the training device).
        timeout_s: how long a collective may wait for its peers before it fails (seconds).
        environ: the environment to read (default ``os.environ``); tests pass a dict.

    Raises:
        ValueError: a variable is missing or malformed (launch with ``torchrun``), or the backend
            cannot run here.
    """
    env = _launch_env(environ)
    rank = _env_int(env, "RANK")
    world_size = _env_int(env, "WORLD_SIZE")
    port = _env_int(env, "MASTER_PORT")
    backend = _pick_backend(backend)
    if backend == "nccl":
        if "LOCAL_RANK" not in env:
            raise ValueError("environment: missing LOCAL_RANK (needed to pick this worker's GPU); launch with torchrun")
        # This worker's GPU, as resolve_device picks it: LOCAL_RANK modulo the GPUs visible.
        device = torch.device("cuda", _env_int(env, "LOCAL_RANK") % max(torch.cuda.device_count(), 1))
    else:
        device = torch.device("cpu")
    return _init(rank, world_size, _tcp_address(env["MASTER_ADDR"], port), backend, device, timeout_s,
                 attempt=env.get("TORCHELASTIC_RESTART_COUNT", "0"))


def world_size_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The number of workers torchrun launched (``WORLD_SIZE``), for checks made before joining the run.

    Raises ValueError like :func:`init_from_env` when not launched by torchrun.
    """
    return _env_int(_launch_env(environ), "WORLD_SIZE")


def rank_from_env(environ: Mapping[str, str] | None = None) -> int:
    """This worker's rank (``RANK``), for checks made before joining the run."""
    return _env_int(_launch_env(environ), "RANK")


def _launch_env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    env = os.environ if environ is None else environ
    missing = [name for name in REQUIRED_ENV if name not in env]
    if missing:
        raise ValueError(
            f"environment: missing {', '.join(missing)}; launch the workers with torchrun "
            f"(e.g. `torchrun --nproc-per-node 2 -m gnnscale train ...`), which sets {', '.join(REQUIRED_ENV)}"
        )
    return env


def init_for_test(rank: int, world_size: int, port: int, *, timeout_s: float = 20.0,
                  backend: str = "gloo") -> DistContext:
    """Join a run rendezvousing on ``tcp://127.0.0.1:port`` (tests spawn the workers themselves)."""
    if backend == "nccl":
        raise ValueError("backend: init_for_test starts CPU workers; expected 'gloo', got 'nccl'")
    return _init(rank, world_size, _tcp_address("127.0.0.1", port), _pick_backend(backend), torch.device("cpu"),
                 timeout_s)


def init_single_process(timeout_s: float = 120.0) -> DistContext:
    """A process group of this process alone, on an in-memory store (no port, no peers): the
    single-process trainer runs the same loop and the same collectives as a distributed worker, which
    with one member move nothing."""
    return _init(0, 1, None, "gloo", torch.device("cpu"), timeout_s)


def shutdown() -> None:
    """Destroy the process group, if one is open (safe to call in every ``finally``)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _init(rank: int, world_size: int, init_method: str | None, backend: str, device: torch.device,
          timeout_s: float, attempt: str = "0") -> DistContext:
    """Join the process group at ``init_method`` (a tcp:// address), or (None) form one of this process
    alone on an in-memory store."""
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or timeout_s <= 0:
        raise ValueError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
    ctx = DistContext(rank=rank, world_size=world_size, backend=backend, device=device, timeout_s=float(timeout_s))
    if dist.is_initialized():
        raise RuntimeError("process group: already initialised in this process; call shutdown() first (a "
                           "single-process run cannot start inside a distributed one)")
    if backend == "nccl":
        torch.cuda.set_device(device)
    if init_method is None:
        where = {"store": dist.HashStore()}
    elif _launched_with_agent_store():
        # torchrun hosts the store and keeps it across the restarts of --max-restarts: every attempt's
        # group keys its addresses under an attempt prefix, or a restarted worker would read a dead
        # worker's address and fail to connect.
        host, port = init_method.removeprefix("tcp://").rsplit(":", 1)
        store = dist.TCPStore(host.strip("[]"), int(port), world_size, is_master=False,
                              timeout=timedelta(seconds=timeout_s))
        # And every group this process joins (a script may train several times, each fit its own group)
        # keys its own: every worker joins the same groups in the same order, so the counts agree.
        where = {"store": dist.PrefixStore(f"gnnscale/attempt_{attempt}/group_{next(_GROUPS_JOINED)}", store)}
    else:
        where = {"init_method": init_method}
    # Collective: blocks until all world_size workers have joined (or timeout_s passes).
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s), **where)
    return ctx


def _launched_with_agent_store() -> bool:
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _report_key() -> str:
    # One key per attempt and machine: the first worker of each machine reports for that machine.
    return (f"gnnscale/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/reported/"
            f"{os.environ.get('GROUP_RANK', '0')}")


def _agent_store(timeout_s: float) -> dist.Store | None:
    """A client of the store torchrun hosts (it outlives every worker), or None outside torchrun."""
    if not _launched_with_agent_store():
        return None
    try:
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                             timeout=timedelta(seconds=timeout_s))
    except (KeyError, ValueError, RuntimeError, OSError):
        return None  # no store to reach: reporting must not fail because of it


def announce_report(timeout_s: float = 5.0) -> None:
    """Tell this machine's other workers that the message they all share has been written."""
    store = _agent_store(timeout_s)
    if store is not None:
        try:
            store.set(_report_key(), "1")
        except (RuntimeError, OSError):
            pass


def wait_for_report(timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) until this machine's first worker has written the message that every
    worker has alike: torchrun stops every worker as soon as one exits, so a worker that exited at once
    could stop the first before it writes. Returns at once outside torchrun."""
    store = _agent_store(timeout_s)
    if store is not None:
        try:
            store.wait([_report_key()], timedelta(seconds=timeout_s))
        except (RuntimeError, OSError):
            pass  # the first worker died before it could write: nothing more to wait for


def _pick_backend(backend: str | None) -> str:
    if backend is None:
        # gloo even where CUDA is visible: the layers and samplers run CPU (numba) kernels, so tensors live
        # on the CPU, which NCCL cannot exchange. A GPU path would have to be built and tested first.
        return "gloo"
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS} or None, got {backend!r}")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend: 'nccl' needs CUDA, which is not available here; use 'gloo'")
    return backend


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment: {name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"environment: {name} must be >= 0, got {value}")
    return value


def _tcp_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"tcp://{host}:{port}"
