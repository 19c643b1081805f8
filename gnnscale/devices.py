"""Which device a run computes on (``--device cpu|cuda|cuda:N|auto``, resolved once, with one clear error),
and how batches get there without the step waiting (:class:`StreamCopy`).

A base module: training, inference and the loader resolve their ``device`` argument here, so that every
command reads the same values the same way. ``auto`` is CUDA where a GPU is visible, else the CPU.
Under torchrun, ``cuda`` (and ``auto`` on a GPU machine) means this worker's GPU, ``cuda:LOCAL_RANK``
modulo the GPUs visible (several workers may share one GPU).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from gnnscale.settings import setting

T = TypeVar("T")
DEVICE_HELP = "where the model computes: cpu, cuda, cuda:N, or auto (cuda when a GPU is visible, else cpu)"
# What --device accepts; whether the machine has that device is checked when the run starts
# (resolve_device), so that a config can be written on a machine without a GPU.
DEVICE_NAME = re.compile(r"cpu|auto|cuda(:[0-9]+)?")


# The device and thread settings of every command that computes (TrainConfig, predict's config): declared
# here once, so that --device and --threads mean the same, with the same defaults, everywhere.
def device_setting(detail: str = "", **flag: Any) -> Any:
    """The ``device`` field: ``"cpu"`` by default, flag ``--device``; ``detail`` ends its help (what the
    command puts there); ``flag``: further :class:`~gnnscale.settings.Flag` properties."""
    return setting("cpu", DEVICE_HELP + detail, **flag)


def threads_setting(**flag: Any) -> Any:
    """The ``threads`` field: 2 by default, flag ``--threads``."""
    return setting(2, "CPU threads for the sampler, the kernels and torch", **flag)


def check_device_settings(device: object, threads: object) -> None:
    """ValueError naming the field unless ``device`` is a device name and ``threads`` an int >= 1."""
    if not isinstance(device, str) or not DEVICE_NAME.fullmatch(device):
        raise ValueError(f"device: expected cpu, cuda, cuda:N or auto, got {device!r}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads: expected an int >= 1, got {threads!r}")


def resolve_device(spec: str | torch.device | None, *, local_rank: int | None = None) -> torch.device:
    """The ``torch.device`` that ``spec`` names (None: ``"cpu"``).

    Args:
        spec: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or a ``torch.device`` of those types.
        local_rank: this worker's rank on its machine (torchrun's ``LOCAL_RANK``); None reads it from the
            environment when set. ``"cuda"`` and ``"auto"`` then pick GPU ``local_rank % device_count``.

    Raises:
        ValueError: ``spec`` is not a device name, or names a GPU this machine does not have (one line that
            says what is visible and what to pass instead).
    """
    if spec is None:
        return torch.device("cpu")
    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str):
        raise TypeError(f"device: expected a device name such as 'cpu' or 'cuda', got {type(spec).__name__}")
    if spec == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        spec = "cuda"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ValueError(f"device: expected cpu, cuda, cuda:N or auto, got {spec!r}") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ValueError(f"device: expected cpu, cuda, cuda:N or auto, got {spec!r}")
    if not torch.cuda.is_available():
        build = "" if torch.version.cuda else f" (this torch, {torch.__version__}, is a CPU build)"
        raise ValueError(f"device: {spec} asks for a GPU and none is available here{build}; use --device cpu "
                         "(or auto)")
    count = torch.cuda.device_count()
    if device.index is None:
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local_rank % count)
    if device.index >= count:
        raise ValueError(f"device: {spec} asks for GPU {device.index}, and {count} GPU"
                         f"{'s are' if count != 1 else ' is'} visible (cuda:0 .. cuda:{count - 1})")
    return device


@dataclass(frozen=True, slots=True)
class Sent(Generic[T]):
    """A value on its way to the device: its tensors there (or still being copied), the event recorded after
    the last copy was queued (None where nothing is copied), and every device tensor the copy stream made."""

    value: T
    ready: torch.cuda.Event | None = None
    tensors: tuple[Tensor, ...] = ()


# map_tensors(value, fn) -> value with fn applied to every tensor it holds (a PyG Data's apply, a batch's fields).
TensorMap = Callable[[T, Callable[[Tensor], Tensor]], T]


class CudaStreams:
    """What :class:`StreamCopy` asks of CUDA: torch.cuda's streams and events, and the copy of one host tensor.

    A seam for tests on a machine without a GPU: a stand-in (a subclass) passed as ``StreamCopy(...,
    cuda=...)`` records what the copy stage does (which tensors it sends, which streams it records on them).
    """

    def new_stream(self, device: torch.device) -> torch.cuda.Stream:
        return torch.cuda.Stream(device)

    def use(self, stream: torch.cuda.Stream):
        """The context that makes ``stream`` current on this thread."""
        return torch.cuda.stream(stream)

    def new_event(self) -> torch.cuda.Event:
        return torch.cuda.Event()

    def current_stream(self, device: torch.device) -> torch.cuda.Stream:
        return torch.cuda.current_stream(device)

    def copy(self, t: Tensor, device: torch.device) -> Tensor:
        """``t`` on ``device``, its copy queued on the current stream."""
        # From pinned memory the copy is a DMA queued on the stream (pageable memory would block).
        # pin_memory() is itself a host copy, made here in the producer's thread, off the step.
        return _pinned(t).to(device, non_blocking=True)


class StreamCopy:
    """Moves values (batches) to ``device`` in a producer thread, one ahead of the consumer, the copy hidden.

    On CUDA, :meth:`send` (producer) pins each host tensor, copies it with ``non_blocking=True`` on a side
    stream of its own and records an event after the copies; :meth:`receive` (consumer) makes the consumer's
    current stream wait on that event, a wait queued on the GPU, not a host sync, so the step that reads the
    value runs after its copy while the host goes on. ``receive`` also records the consumer's stream on
    every device tensor: they were allocated on the side stream, and the caching allocator must not hand
    their memory to a later copy before the step that reads them is done. Work the producer computes on
    the device itself (device sampling, a GPU cache's gathers) belongs on the side stream too
    (:meth:`producing`), so that its host syncs never wait for the consumer's kernels.

    On the CPU nothing is copied; with ``pin`` (where CUDA exists) host tensors are pinned, as torch's
    DataLoader's ``pin_memory`` does, for a consumer that copies them on.

    Args:
        device: where the values go.
        pin: pin host tensors on the CPU too (where CUDA exists). Default False.
        cuda: the CUDA machinery (:class:`CudaStreams`, the default); a test's stand-in on a CPU.
    """

    def __init__(self, device: torch.device, *, pin: bool = False, cuda: CudaStreams | None = None) -> None:
        self.device = device
        self.cuda = CudaStreams() if cuda is None else cuda
        self.stream = self.cuda.new_stream(device) if device.type == "cuda" else None
        self.pin = self.stream is not None or (pin and torch.cuda.is_available())

    def producing(self):
        """The context the producer computes in: the side stream on CUDA, nothing on the CPU."""
        return self.cuda.use(self.stream) if self.stream is not None else nullcontext()

    def send(self, value: T, map_tensors: TensorMap) -> Sent[T]:
        """Producer: ``value`` with its tensors on the device (their copies queued; returns at once on CUDA)."""
        if self.stream is None:
            return Sent(map_tensors(value, _pinned) if self.pin else value)
        made: list[Tensor] = []

        def move(t: Tensor) -> Tensor:
            if not isinstance(t, Tensor):
                return t  # a number a map hands over with the tensors (PyG's apply may)
            if t.device != self.device:
                t = self.cuda.copy(t, self.device)
            made.append(t)
            return t

        with self.producing():
            value = map_tensors(value, move)
            ready = self.cuda.new_event()
            ready.record(self.stream)
        return Sent(value, ready, tuple(made))

    def receive(self, sent: Sent[T]) -> T:
        """Consumer: the value, usable by the work queued next on this thread's current stream."""
        if sent.ready is not None:
            current = self.cuda.current_stream(self.device)
            current.wait_event(sent.ready)
            for t in sent.tensors:
                t.record_stream(current)
        return sent.value


def host_copies(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` on the host, with one wait for all of them: each device tensor's copy is queued without
    blocking (into pinned memory) on its device's current stream, then that stream is synchronised once; host
    tensors come back as they are."""
    out = [t.to("cpu", non_blocking=True) for t in tensors]
    for device in {t.device for t in tensors if t.device.type == "cuda"}:
        torch.cuda.current_stream(device).synchronize()  # host sync: one per call, the copies are done
    return out


class StagedUpload:
    """Copies host tensors to ``device`` through one pinned buffer, reused from call to call: a copy from pageable
    memory would make the host wait for the stream, and pinning each tensor afresh would be a pinned allocation
    and a host copy per call. A tensor already pinned (a store's gather into pinned rows) is sent as it is.

    The buffer grows to the largest tensor sent (a batch's misses, never a table). Before it is overwritten, the
    previous copy from it must be done: the host waits on the event recorded after that copy, queued a call (a
    batch) ago. On the CPU (``device``) tensors come back as they are. One instance per kind of tensor sent in
    a batch: two sends through one buffer in a row would wait for each other.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffer: Tensor | None = None  # uint8, pinned
        self._sent: torch.cuda.Event | None = None

    def __call__(self, t: Tensor) -> Tensor:
        """``t`` (on the host or already on ``device``) on ``device``, its copy queued on the current stream."""
        if self.device.type != "cuda" or t.device.type == "cuda":
            return t
        if t.is_pinned() or t.numel() == 0:
            return t.to(self.device, non_blocking=True)
        t = t.contiguous()
        size = t.numel() * t.element_size()
        if self._sent is not None:
            self._sent.synchronize()  # host sync: the previous copy from the buffer, queued a batch ago, is done
        if self._buffer is None or self._buffer.numel() < size:
            grown = size if self._buffer is None else max(size, 2 * self._buffer.numel())
            self._buffer = torch.empty(grown, dtype=torch.uint8, pin_memory=True)
        staged = self._buffer[:size].view(t.dtype).view(t.shape)
        staged.copy_(t)
        out = staged.to(self.device, non_blocking=True)
        self._sent = torch.cuda.Event()
        self._sent.record()
        return out


def _pinned(t: Tensor) -> Tensor:
    """``t`` in pinned memory: as it is when it was made there (a gather straight into pinned rows)."""
    if isinstance(t, Tensor) and t.device.type == "cpu" and not t.is_pinned():
        return t.pin_memory()
    return t
