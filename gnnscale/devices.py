"""Which device a run computes on: ``--device cpu|cuda|cuda:N|auto``, resolved once, with one clear error.

A base module: training, inference and the loader resolve their ``device`` argument here, so that every
command reads the same values the same way. ``auto`` is CUDA where a GPU is visible, else the CPU.
Under torchrun, ``cuda`` (and ``auto`` on a GPU machine) means this worker's GPU, ``cuda:LOCAL_RANK``
modulo the GPUs visible (several workers may share one GPU).
"""

from __future__ import annotations

import os

import torch

DEVICE_HELP = "where the model computes: cpu, cuda, cuda:N, or auto (cuda when a GPU is visible, else cpu)"


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
