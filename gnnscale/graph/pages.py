"""Handing the pages of a memory-mapped array back after reading it.

Pages read through a mapping count in the reader's resident size (RSS) until the kernel reclaims
them, which it does only under memory pressure: one pass over a mapped 14 GB feature matrix looks,
in RSS, like holding it. Streaming passes call :func:`release_pages` after each chunk; the page
cache keeps the pages, so a later read is not a disk read.

Rows read out of order are another matter: each read fault maps more of the file than the entry read
(fault-around, and the page cache's large folios where the file system has them, e.g. ext4 on Linux
6.18), so reading the 64 scattered rows of one cluster (~10k entries) mapped ~29 MB. Passes that
read rows out of order (contraction, balancing) read them with ``pread`` instead
(:func:`unmapped_reads`, :func:`read_entries`): the bytes land in a buffer of the pass's own, and no
mapped page is held at all.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
from numba import types

# POSIX pread(fd, buffer, bytes, offset), resolved by name when a kernel is linked (so a cached kernel
# stays valid across processes, unlike a ctypes pointer).
_pread = types.ExternalFunction("pread", types.intp(types.intc, types.voidptr, types.uintp, types.int64))


_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 1, 2


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the disk blocks of bytes ``[offset, offset + length)`` of the open file ``fd`` (they read as
    zeros after; the file keeps its size): Linux ``fallocate(PUNCH_HOLE)``. False where the file
    system or platform cannot (nothing changed then); other errors raise OSError."""
    fallocate = getattr(_LIBC, "fallocate", None)
    if fallocate is None or length <= 0:
        return fallocate is not None
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    if fallocate(fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err))


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped ``array`` (``np.memmap``, e.g. from ``np.load(mmap_mode="r")``)
    from this process's resident set; a no-op for an array in memory or where ``madvise`` is missing."""
    mapping = getattr(array, "_mmap", None)
    if mapping is not None and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


@contextmanager
def unmapped_reads(array: np.ndarray) -> Iterator[tuple[int, int]]:
    """(file descriptor, byte offset of ``array[0]`` in its file) for :func:`read_entries`, open while
    the context lasts; (-1, 0) for an array that is not a contiguous memory-mapped file (read from memory)."""
    if not (isinstance(array, np.memmap) and array.filename and array.flags.c_contiguous and array.size):
        yield -1, 0
        return
    mapping = array._mmap
    mapped_at = array.offset - array.offset % mmap.ALLOCATIONGRANULARITY
    offset = mapped_at + array.ctypes.data - np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    fd = os.open(array.filename, os.O_RDONLY)
    try:
        yield fd, offset
    finally:
        os.close(fd)


@numba.njit(cache=True, nogil=True)
def read_entries(fd, offset, array, start, stop, buf):
    """Copy ``array[start:stop]`` into ``buf[:stop - start]``: with ``pread`` from ``fd`` (``array``'s file,
    ``array[0]`` at byte ``offset``: :func:`unmapped_reads`) where ``fd >= 0``, else from memory.
    ``buf`` has ``array``'s dtype. False when the file ends early or cannot be read."""
    count = stop - start
    if fd < 0:
        buf[:count] = array[start:stop]
        return True
    want = count * buf.itemsize
    at = offset + start * buf.itemsize
    done = 0
    while done < want:
        got = _pread(fd, buf.ctypes.data + done, want - done, at + done)
        if got <= 0:
            return False
        done += got
    return True
