"""Counting, on the CPU, the torch calls that on CUDA tensors make the host wait for the GPU or send it host data,
so that a test bounds them per batch for code written for a GPU, without one.

:class:`HostSyncs` is a torch function mode: while it is active, every torch call (functions, tensor methods,
``int(t)``) passes through it, and it counts three kinds:

- ``read``: a value read back to the host (``item``, ``int``/``float``/``bool`` of a tensor, ``tolist``,
  ``numpy``, ``cpu``);
- ``size``: an output whose size depends on the values, which CUDA must finish computing before the host
  can allocate it (``nonzero``, ``unique``, ``masked_select``, indexing or assigning through a bool mask,
  ``repeat_interleave`` without ``output_size``, ``bincount``);
- ``upload``: a tensor made from host data (``torch.tensor``, ``torch.as_tensor`` of anything but a tensor);
  on a GPU, a copy from pageable memory that waits for the stream.

It sees calls, not devices: on the CPU it counts what the same calls would cost on a GPU.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

READS = {Tensor.item, Tensor.__int__, Tensor.__float__, Tensor.__bool__, Tensor.__index__, Tensor.tolist,
         Tensor.numpy, Tensor.cpu}
DATA_SIZED = {torch.nonzero, Tensor.nonzero, torch.unique, Tensor.unique, torch.unique_consecutive,
              Tensor.unique_consecutive, torch.masked_select, Tensor.masked_select, torch.bincount, Tensor.bincount,
              torch.argwhere, Tensor.argwhere}
MADE_FROM_HOST = {torch.tensor, torch.as_tensor}


class HostSyncs(TorchFunctionMode):
    """``with HostSyncs() as syncs: ...`` then ``syncs.counts`` (``read``, ``size``, ``upload``) and ``syncs.total``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _kind(func, args, kwargs)
        if kind is not None:
            self.counts[kind] += 1
        return func(*args, **kwargs)


def _kind(func, args, kwargs) -> str | None:
    if func in READS:
        return "read"
    if func in DATA_SIZED:
        return "size"
    if func in (Tensor.__getitem__, Tensor.__setitem__) and _has_mask(args[1]):
        return "size"
    if func in (torch.repeat_interleave, Tensor.repeat_interleave) and kwargs.get("output_size") is None \
            and (len(args) == 1 or isinstance(args[1], Tensor)):  # repeats given as a tensor: their sum sizes it
        return "size"
    if func in MADE_FROM_HOST and not isinstance(args[0] if args else kwargs.get("data"), Tensor):
        return "upload"
    return None


def _has_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Tensor) and i.dtype == torch.bool for i in items)
