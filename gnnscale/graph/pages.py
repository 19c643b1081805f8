"""Handing the pages of a memory-mapped array back after reading it.

Pages read through a mapping count in the reader's resident size (RSS) until the kernel reclaims
them, which it does only under memory pressure: one pass over a mapped 14 GB feature matrix looks,
in RSS, like holding it. Streaming passes call :func:`release_pages` after each chunk; the page
cache keeps the pages, so a later read is not a disk read.
"""

from __future__ import annotations

import mmap

import numpy as np


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped ``array`` (``np.memmap``, e.g. from ``np.load(mmap_mode="r")``)
    from this process's resident set; a no-op for an array in memory or where ``madvise`` is missing."""
    mapping = getattr(array, "_mmap", None)
    if mapping is not None and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)
