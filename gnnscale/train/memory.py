"""Keep freed memory in the process for the next iteration instead of returning it to the kernel.

A training step allocates the same large tensors every iteration (a batch's features, activations
of ~130k x 256 floats, their gradients and masks). glibc serves allocations above its mmap threshold
(dynamic, at most 32 MiB) with fresh ``mmap``s and unmaps them on ``free``; allocations of other
threads come from per-thread arenas whose heaps are at most 64 MiB, so theirs are mmapped too. Every
iteration then page-faults (and the kernel zeroes) every large tensor anew: ~400k minor faults and
about a second of system time per step on the products-shaped configuration of benchmarks/README.md.

:func:`keep_freed_memory` raises the mmap threshold to 1 GiB, turns off trimming the heap's top, and
puts every thread on the main arena, through ``mallopt`` (the same knobs as ``MALLOC_MMAP_THRESHOLD_``
etc., set by the trainer itself so that no user has to know them). The cost: the process keeps its
peak heap size instead of shrinking after a large batch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from dataclasses import dataclass

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
M_ARENA_MAX = -8

MMAP_THRESHOLD_BYTES = 1 << 30  # allocations below this come from the heap and are reused
NEVER_TRIM = -1  # mallopt(3): "Setting M_TRIM_THRESHOLD to -1 disables trimming completely"


@dataclass(frozen=True, slots=True, kw_only=True)
class MallocSettings:
    """What :func:`keep_freed_memory` did.

    Args:
        applied: whether glibc's malloc was tuned (False on other C libraries: nothing changed).
        mmap_threshold: bytes from which allocations are still mmapped (0: mmap disabled instead,
            on glibc versions that cap the threshold).
        detail: one line for logs.
    """

    applied: bool
    mmap_threshold: int
    detail: str


def keep_freed_memory() -> MallocSettings:
    """Tune glibc's malloc so that large freed blocks are reused by the next iteration (calling it
    again changes nothing).

    Call it before training starts (before the data-loading thread allocates, so that it shares the
    main arena). On a C library other than glibc it changes nothing and says so in ``detail``.
    """
    libc_name, _ = platform.libc_ver()
    path = ctypes.util.find_library("c")
    if libc_name != "glibc" or path is None:
        return MallocSettings(applied=False, mmap_threshold=0,
                              detail=f"malloc not tuned: the C library is {libc_name or 'unknown'}, not glibc")
    mallopt = ctypes.CDLL(path).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    threshold = MMAP_THRESHOLD_BYTES
    # Older glibc refuses thresholds above 32 MiB (mallopt returns 0): then serve everything from the heap.
    if not mallopt(M_MMAP_THRESHOLD, threshold):
        threshold = 0
        mallopt(M_MMAP_MAX, 0)
    mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    mallopt(M_ARENA_MAX, 1)  # other threads' large blocks would be mmapped by their own arenas
    detail = (f"glibc malloc: mmap threshold {threshold >> 20} MiB" if threshold else "glibc malloc: mmap off")
    return MallocSettings(applied=True, mmap_threshold=threshold, detail=detail + ", no trimming, one arena")
