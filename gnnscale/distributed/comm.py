"""Every collective of a run goes through :class:`Comm`, which counts rounds and bytes per category.

A *round* is one logical exchange in which every worker may hear from every other (FastSample's
unit: vanilla sampling costs 2 rounds per hop after the first, a feature fetch 2 rounds). A round may
take several collective *calls*: :meth:`Comm.all_to_allv` exchanges the message sizes, then the
payload. Bytes are the logical payload this worker addresses to, or receives from, the *other*
workers (what reaches itself never touches the network), so that over all workers the bytes sent
equal the bytes received. For all-reduce and all-gather they are the bytes this worker contributes
and gets back, not what the backend's algorithm moves (a ring all-reduce moves ~2x).

Only collectives (``all_to_all_single``, ``all_reduce``, ``all_gather``, ``barrier``): never
point-to-point or RPC. A collective that fails because a peer died or timed out is re-raised as
:class:`PeerFailure`; :meth:`Comm.agree` turns a local failure on one worker (a corrupt partition
file) into the same clear error on every worker instead of a hang.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from gnnscale.distributed.context import DistContext
from gnnscale.keys import mix64_py
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.typed import TypedPartitionBook

# What each round is for; a failed collective names its category, so a category is also the phase a
# worker was in when a peer died: "checkpoint" (the saves during training), not "setup" (before it).
CATEGORIES = ("sample", "feature", "shuffle", "grad", "setup", "eval", "checkpoint")
AGREE_BYTES = 1024  # fixed size of one worker's encoded agree() message (status byte + utf-8 text)
_SIZE_BYTES = 8  # one int64 message size in the size exchange of all_to_allv

T = TypeVar("T")


class PeerFailure(RuntimeError):
    """A collective failed because another worker died, hung past the timeout, or closed its socket."""


class AgreementFailure(RuntimeError):
    """At least one worker reported a failed step to :meth:`Comm.agree`; every worker raises this.

    Attributes:
        failures: the failing ranks and their messages.
    """

    def __init__(self, message: str, failures: dict[int, str]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(slots=True)
class _Counts:
    rounds: int = 0
    calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0


class CommStats:
    """Rounds, collective calls, bytes and seconds per category since the last :meth:`snapshot_and_reset`.

    Seconds are the wall-clock time spent inside the category's collective calls (waiting for slower
    peers included): e.g. the ``"shuffle"`` share of a split-parallel forward+backward pass.
    """

    def __init__(self) -> None:
        self._counts = {c: _Counts() for c in CATEGORIES}

    def record(self, category: str, *, rounds: int, calls: int, bytes_sent: int, bytes_received: int) -> None:
        c = self._counts[category]
        c.rounds += rounds
        c.calls += calls
        c.bytes_sent += bytes_sent
        c.bytes_received += bytes_received

    def add_seconds(self, category: str, seconds: float) -> None:
        self._counts[category].seconds += seconds

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{category: {"rounds", "calls", "bytes_sent", "bytes_received", "seconds"}}`` for every
        category (seconds a float, the others ints)."""
        return {name: {"rounds": c.rounds, "calls": c.calls, "bytes_sent": c.bytes_sent,
                       "bytes_received": c.bytes_received, "seconds": c.seconds} for name, c in self._counts.items()}

    def snapshot_and_reset(self) -> dict[str, dict[str, float]]:
        """The counts so far (see :meth:`snapshot`), then zero them: call once per iteration."""
        out = self.snapshot()
        self._counts = {c: _Counts() for c in CATEGORIES}
        return out


class Comm:
    """The collectives of one worker, with accounting. Every method is collective: every worker of
    the group must call the same methods in the same order.

    Args:
        ctx: this worker's context (:func:`gnnscale.distributed.init_from_env`); the process group must be open.
        group: the process group the collectives run on (default: all workers). ``rank`` and
            ``world_size`` are this worker's within it. Build further groups with :meth:`new_group`.
        device: where the group's tensors live (default: the context's, ``cpu`` for gloo); a group on
            NCCL beside a gloo default group takes this worker's GPU.
        stats: the accounting to record into (default: a new one); a group may share another's.
    """

    def __init__(self, ctx: DistContext, group: dist.ProcessGroup | None = None, *,
                 device: torch.device | None = None, stats: CommStats | None = None) -> None:
        if not isinstance(ctx, DistContext):
            raise TypeError(f"ctx: expected a DistContext, got {type(ctx).__name__}")
        if not dist.is_initialized():
            raise RuntimeError("process group: not initialised; call init_from_env() before building a Comm")
        if dist.get_world_size() != ctx.world_size or dist.get_rank() != ctx.rank:
            raise ValueError(f"ctx: rank {ctx.rank} of {ctx.world_size} does not match the process group "
                             f"(rank {dist.get_rank()} of {dist.get_world_size()})")
        self.ctx = ctx
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = ctx.device if device is None else device
        self.stats = CommStats() if stats is None else stats

    def new_group(self, ranks: Sequence[int] | None = None, *, backend: str | None = None,
                  device: torch.device | None = None, stats: CommStats | None = None) -> "Comm | None":
        """A Comm on a new process group of the given global ranks (default: all workers), with its own
        accounting (or ``stats``), on ``backend`` and ``device`` (default: the context's). Collective over
        ALL workers (torch's ``new_group`` rule), even those not in ``ranks``; they get None.

        Two threads may use two groups at once (e.g. a background data-loading stage beside the
        training step), which one group does not allow: its collectives must stay in one order.
        """
        members = list(range(self.ctx.world_size)) if ranks is None else sorted(int(r) for r in ranks)
        # Collective: every worker of the default group takes part in creating any group.
        group = dist.new_group(members, timeout=timedelta(seconds=self.ctx.timeout_s),
                               backend=self.ctx.backend if backend is None else backend)
        return Comm(self.ctx, group, device=device, stats=stats) if self.ctx.rank in members else None

    # -- rounds -------------------------------------------------------------------------------------

    def all_to_allv(self, send: Sequence[Tensor], category: str, *,
                    recv_rows: Sequence[int] | None = None) -> list[Tensor]:
        """One round: ``send[j]`` goes to worker ``j``; returns ``recv`` with ``recv[j]`` from worker ``j``.

        Args:
            send: ``world_size`` tensors of one dtype, all 1-D, or all 2-D with the same row width;
                lengths (rows) may differ, including 0. Every worker must use the same dtype and row width.
            category: one of :data:`CATEGORIES`.
            recv_rows: the rows each worker sends this one, when this worker already knows them (a
                plan every worker derived from the same data, as in split parallelism's shuffles):
                the size exchange is skipped. Default None: exchange the sizes first.

        Returns:
            ``world_size`` tensors on ``self.device`` (views into one buffer), same dtype and row width.

        Two collective calls: the row counts (int64), then the concatenated payload; one call with
        ``recv_rows``.
        """
        self._check_category(category)
        trailing, dtype = self._check_send(send)
        send_rows = [int(t.shape[0]) for t in send]
        if recv_rows is None:
            recv_rows = self._exchange_sizes(send_rows, category)
            size_bytes, calls = _SIZE_BYTES * (self.world_size - 1), 2
        else:
            recv_rows = self._check_recv_rows(recv_rows)
            size_bytes, calls = 0, 1
        payload = torch.cat([t.reshape(-1, *trailing) for t in send]).to(self.device, dtype)
        out = self._payload_round(payload, send_rows, recv_rows, category, calls=calls, size_bytes=size_bytes)
        return list(out.split(recv_rows))

    def exchange_rows(self, rows: Tensor, send_rows: Sequence[int], recv_rows: Sequence[int], category: str) -> Tensor:
        """One round, one collective call, when both sides know the sizes (split parallelism's shuffles):
        ``rows`` holds, one after the other, the ``send_rows[j]`` rows for worker ``j`` (rank order);
        returns one tensor with the ``recv_rows[j]`` rows from worker ``j``, in rank order.

        The same round as :meth:`all_to_allv` with ``recv_rows``, without its per-peer lists: ``rows``
        is sent as it is (no concatenation) and the reply is returned as received (no splitting).

        Args:
            rows: [sum(send_rows)] or [sum(send_rows), d], on ``self.device``; the same dtype and row
                width on every worker.
            send_rows, recv_rows: ``world_size`` non-negative ints each.
            category: one of :data:`CATEGORIES`.
        """
        self._check_category(category)
        if not isinstance(rows, Tensor) or rows.dim() not in (1, 2):
            raise ValueError(f"rows: expected a 1-D or 2-D tensor, got "
                             f"{tuple(rows.shape) if isinstance(rows, Tensor) else type(rows).__name__}")
        send_rows, recv_rows = self._check_recv_rows(send_rows, "send_rows"), self._check_recv_rows(recv_rows)
        if rows.shape[0] != sum(send_rows):
            raise ValueError(f"rows: expected sum(send_rows) = {sum(send_rows)} rows, got {rows.shape[0]}")
        return self._payload_round(rows.contiguous().to(self.device), send_rows, recv_rows, category, calls=1,
                                   size_bytes=0)

    def _payload_round(self, payload: Tensor, send_rows: list[int], recv_rows: list[int], category: str, *,
                       calls: int, size_bytes: int) -> Tensor:
        trailing = tuple(payload.shape[1:])
        out = torch.empty((sum(recv_rows), *trailing), dtype=payload.dtype, device=self.device)
        # Collective: the payload itself, split by the row counts both sides know.
        self._run("all_to_allv (payload)", category,
                  lambda: dist.all_to_all_single(out, payload, output_split_sizes=recv_rows,
                                                 input_split_sizes=send_rows, group=self.group))
        row_bytes = payload.dtype.itemsize * (trailing[0] if trailing else 1)
        others = [j for j in range(self.world_size) if j != self.rank]
        self.stats.record(category, rounds=1, calls=calls,
                          bytes_sent=size_bytes + row_bytes * sum(send_rows[j] for j in others),
                          bytes_received=size_bytes + row_bytes * sum(recv_rows[j] for j in others))
        return out

    def all_reduce_(self, tensor: Tensor, op: dist.ReduceOp, category: str) -> Tensor:
        """One round: reduce ``tensor`` in place over all workers (``op``: ``dist.ReduceOp.SUM``, ...)."""
        self._check_category(category)
        if not isinstance(tensor, Tensor):
            raise TypeError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device != self.device:
            raise ValueError(f"tensor: expected it on {self.device} (the backend's device), got {tensor.device}")
        # Collective: the reduction is the whole point of the call.
        self._run("all_reduce", category, lambda: dist.all_reduce(tensor, op=op, group=self.group))
        nbytes = tensor.numel() * tensor.element_size() if self.world_size > 1 else 0
        self.stats.record(category, rounds=1, calls=1, bytes_sent=nbytes, bytes_received=nbytes)
        return tensor

    def all_reduce_max_int(self, value: int, category: str) -> int:
        """One round: the largest ``value`` over all workers (e.g. the number of batches of an epoch)."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"value: expected an int, got {type(value).__name__}")
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self.all_reduce_(t, dist.ReduceOp.MAX, category)
        return int(t.item())  # host sync: the caller needs the value as a Python int

    def barrier(self, category: str) -> None:
        """One round, no payload: returns once every worker has reached it."""
        self._check_category(category)
        # Collective: the synchronisation itself.
        self._run("barrier", category, lambda: dist.barrier(group=self.group))
        self.stats.record(category, rounds=1, calls=1, bytes_sent=0, bytes_received=0)

    def agree(self, ok: bool, message: str = "", category: str = "setup") -> None:
        """One round: every worker reports whether its last local step succeeded; if any failed, every
        worker raises :class:`AgreementFailure` naming the failing ranks and their messages.

        Call it after a step that can fail on one worker only (loading its partition), with the local
        error's text as ``message`` (kept to the first ~1000 utf-8 bytes).
        """
        if not isinstance(ok, bool):
            raise TypeError(f"ok: expected a bool, got {type(ok).__name__}")
        self._check_category(category)
        mine = torch.zeros(AGREE_BYTES, dtype=torch.uint8)
        mine[0] = 0 if ok else 1
        text = str(message).encode("utf-8")[: AGREE_BYTES - 1]
        if text:
            mine[1 : 1 + len(text)] = torch.tensor(list(text), dtype=torch.uint8)
        mine = mine.to(self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        # Collective: every worker needs every worker's status to stop together.
        self._run("agree (all_gather)", category, lambda: dist.all_gather(gathered, mine, group=self.group))
        nbytes = AGREE_BYTES * (self.world_size - 1)
        self.stats.record(category, rounds=1, calls=1, bytes_sent=nbytes, bytes_received=nbytes)
        failures = {}
        for rank, buf in enumerate(gathered):
            buf = buf.cpu()
            if int(buf[0]) != 0:
                failures[rank] = bytes(buf[1:].numpy()).rstrip(b"\0").decode("utf-8", errors="replace")
        if failures:
            listed = "; ".join(f"rank {r}: {m or '(no message)'}" for r, m in failures.items())
            ranks = ", ".join(str(r) for r in failures)
            raise AgreementFailure(
                f"{'rank' if len(failures) == 1 else 'ranks'} {ranks} of {self.world_size} failed "
                f"({category}): {listed}. Every worker stops (this is rank {self.rank}).", failures)

    # -- helpers ------------------------------------------------------------------------------------

    def _exchange_sizes(self, send_rows: list[int], category: str) -> list[int]:
        sizes = torch.tensor(send_rows, dtype=torch.int64, device=self.device)
        recv_sizes = torch.empty_like(sizes)
        # Collective: every worker learns how many rows each peer sends it, to size its receive buffer.
        self._run("all_to_allv (sizes)", category, lambda: dist.all_to_all_single(recv_sizes, sizes, group=self.group))
        return recv_sizes.tolist()  # host sync: the split sizes must be Python ints

    def _check_recv_rows(self, recv_rows: Sequence[int], name: str = "recv_rows") -> list[int]:
        if not isinstance(recv_rows, Sequence) or len(recv_rows) != self.world_size:
            raise ValueError(f"{name}: expected world_size = {self.world_size} row counts, got {recv_rows!r}")
        if any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in recv_rows):
            raise ValueError(f"{name}: expected non-negative ints, got {list(recv_rows)}")
        return list(recv_rows)

    def _run(self, op: str, category: str, fn: Callable[[], T]) -> T:
        """Run one collective, its seconds counted in ``category``; a backend failure (dead or hung peer)
        becomes a PeerFailure."""
        start = time.perf_counter()
        try:
            out = fn()
        except RuntimeError as err:  # gloo and NCCL raise RuntimeError (DistBackendError) for both
            raise PeerFailure(
                f"rank {self.rank} of {self.world_size}: collective {op} (category {category!r}) failed: "
                f"{backend_reason(err)}; another worker died or did not answer within --timeout. Stopping the run."
            ) from err
        self.stats.add_seconds(category, time.perf_counter() - start)
        return out

    def _check_category(self, category: str) -> None:
        if category not in CATEGORIES:
            raise ValueError(f"category: expected one of {CATEGORIES}, got {category!r}")

    def _check_send(self, send: Sequence[Tensor]) -> tuple[tuple[int, ...], torch.dtype]:
        if not isinstance(send, Sequence) or len(send) != self.world_size:
            got = len(send) if isinstance(send, Sequence) else type(send).__name__
            raise ValueError(f"send: expected a list of world_size = {self.world_size} tensors, got {got}")
        first = send[0]
        for j, t in enumerate(send):
            if not isinstance(t, Tensor):
                raise TypeError(f"send[{j}]: expected a torch.Tensor, got {type(t).__name__}")
            if t.dim() not in (1, 2):
                raise ValueError(f"send[{j}]: expected a 1-D or 2-D tensor, got shape {tuple(t.shape)}")
            if t.dtype != first.dtype or t.shape[1:] != first.shape[1:]:
                raise ValueError(f"send[{j}]: expected dtype {first.dtype} and row shape {tuple(first.shape[1:])} "
                                 f"like send[0], got {t.dtype} and {tuple(t.shape[1:])}")
        return tuple(first.shape[1:]), first.dtype


def backend_reason(err: BaseException) -> str:
    """The first line of a backend error without gloo's source location and advice (which run to
    hundreds of characters): e.g. ``Read error [127.0.0.1]:22959: Connection reset by peer``."""
    lines = str(err).strip().splitlines()
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0]) if lines else type(err).__name__
    return text.split(". This is typically caused")[0].rstrip(".")


def check_placement(book: PartitionBook | TypedPartitionBook, rank: int, comm: Comm) -> None:
    """Raise unless ``book`` has one part per worker of ``comm`` and ``rank`` is this worker's."""
    if not isinstance(book, (PartitionBook, TypedPartitionBook)):
        raise TypeError(f"book: expected a PartitionBook, got {type(book).__name__}")
    if book.num_parts != comm.world_size:
        raise ValueError(f"book: expected {comm.world_size} parts (one per worker), got {book.num_parts}")
    if rank != comm.rank:
        raise ValueError(f"rank: expected this worker's rank {comm.rank}, got {rank}")


def same_everywhere(comm: Comm, values: Sequence[int]) -> bool:
    """Whether every worker passed the same ``values``: one "setup" round (collective), a digest of them."""
    digest = 0
    for v in values:
        digest = mix64_py(digest ^ v) >> 1  # 63 bits: fits in int64
    t = torch.tensor([digest, -digest], dtype=torch.int64, device=comm.device)
    # Collective: max of the digest and of its negation differ unless every worker has the same value.
    comm.all_reduce_(t, dist.ReduceOp.MAX, "setup")
    return t[0].item() == -t[1].item()  # host sync: needed for the check
