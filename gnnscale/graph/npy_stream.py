""".npy arrays read piece by piece: from a file (memory-mapped) or from a member of an ``.npz`` archive
(streamed), so that a converter's memory is one piece, never the array.

``np.load(path, mmap_mode="r")`` cannot map an array inside an ``.npz`` (a compressed member has no
byte range to map), and indexing an ``NpzFile`` reads the whole member. :class:`ZipNpy` therefore
reads the member's ``.npy`` header itself (``numpy.lib.format``) and then its data in pieces through
``zipfile``, which decompresses as it goes. Both readers raise ValueError naming the file (and the
member) for a truncated or corrupt array, and refuse object arrays (they would need pickle).
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gnnscale.graph.pages import release_pages

# What a damaged archive member raises while it is read: a bad zip structure or CRC (BadZipFile), a
# corrupt deflate stream (zlib.error), a member cut short (EOFError).
DAMAGED_MEMBER = (zipfile.BadZipFile, zlib.error, EOFError, OSError)


class MappedNpy:
    """A ``.npy`` file, memory-mapped read-only; pieces are copies and their pages are released.

    Args:
        path: the file.
        where: how errors name it (default: the path).
    """

    def __init__(self, path: str | Path, where: str | None = None) -> None:
        self.where = where or str(path)
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{self.where}: no such file")
        try:
            self._array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            # numpy's messages for a short file ("mmap length is greater than file size") or a bad header.
            raise ValueError(f"{self.where}: not a readable .npy file (truncated or corrupt: {exc})") from exc
        self.dtype: np.dtype = self._array.dtype
        self.shape: tuple[int, ...] = tuple(self._array.shape)

    def rows(self, chunk: int) -> Iterator[np.ndarray]:
        """Copies of ``array[i:i + chunk]`` for i = 0, chunk, ..."""
        for start in range(0, self.shape[0], chunk):
            piece = np.array(self._array[start:start + chunk])
            release_pages(self._array)  # a pass, not a load: the mapped pages must not stay resident
            yield piece

    def columns(self, chunk: int) -> Iterator[np.ndarray]:
        """Copies of ``array[:, i:i + chunk]`` (a 2-D array) for i = 0, chunk, ..."""
        for start in range(0, self.shape[1], chunk):
            piece = np.array(self._array[:, start:start + chunk])
            release_pages(self._array)
            yield piece


class ZipNpy:
    """An array stored as a ``.npy`` member (``<key>.npy``) of a zip archive, compressed or not.

    Args:
        path: the ``.npz`` archive.
        key: the array's name (``np.savez(path, key=...)``).
    """

    def __init__(self, path: str | Path, key: str) -> None:
        self.path = Path(path)
        self.key = key
        self.where = f"{self.path} (member {key})"
        try:
            with zipfile.ZipFile(self.path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            raise ValueError(f"{self.path}: not a readable .npz archive (truncated or corrupt: {exc})") from exc
        self.member = f"{key}.npy"
        if self.member not in names:
            keys = sorted(n[:-4] for n in names if n.endswith(".npy"))
            raise ValueError(f"{self.path}: no array {key!r} in the archive (arrays present: {keys})")
        with self._opened(1) as (f,):
            self.dtype, self.shape, self.fortran_order, self._offset = _read_header(f, self.where)

    def read(self) -> np.ndarray:
        """The whole array (for small members, such as a count)."""
        if not self.shape:  # a scalar
            with self._opened(1) as (f,):
                f.seek(self._offset)
                return _exact(f, 1, self.dtype, self.where).reshape(())
        pieces = list(self.rows(max(1, self.shape[0])))
        return pieces[0] if pieces else np.empty(self.shape, self.dtype)

    def rows(self, chunk: int) -> Iterator[np.ndarray]:
        """``array[i:i + chunk]`` for i = 0, chunk, ... (a C-ordered array, or a 1-D one)."""
        if self.fortran_order and len(self.shape) > 1:
            raise ValueError(f"{self.where}: stored in Fortran order; rows cannot be streamed (save it C-ordered)")
        row_shape = self.shape[1:]
        row_items = int(np.prod(row_shape, dtype=np.int64))
        with self._opened(1) as (f,):
            f.seek(self._offset)
            for start in range(0, self.shape[0], chunk):
                count = min(chunk, self.shape[0] - start)
                yield _exact(f, count * row_items, self.dtype, self.where).reshape((count, *row_shape))
            _expect_end(f, self.where)

    def columns(self, chunk: int) -> Iterator[np.ndarray]:
        """``array[:, i:i + chunk]`` of a 2-D array [r, c], for i = 0, chunk, ...: C order reads the r rows
        side by side through r handles on the member (each seeks to its row: a compressed member is
        decompressed once per row), Fortran order reads [chunk, r] pieces and transposes them."""
        if len(self.shape) != 2:
            raise ValueError(f"{self.where}: expected a 2-D array, got shape {list(self.shape)}")
        r, c = self.shape
        if self.fortran_order:
            with self._opened(1) as (f,):
                f.seek(self._offset)
                for start in range(0, c, chunk):
                    count = min(chunk, c - start)
                    yield _exact(f, count * r, self.dtype, self.where).reshape(count, r).T
                _expect_end(f, self.where)
            return
        with self._opened(r) as handles:
            for row, f in enumerate(handles):
                _skip(f, self._offset + row * c * self.dtype.itemsize, self.where)
            for start in range(0, c, chunk):
                count = min(chunk, c - start)
                yield np.stack([_exact(f, count, self.dtype, self.where) for f in handles])
            if r:
                _expect_end(handles[-1], self.where)

    def _opened(self, count: int):
        """A context giving ``count`` handles on the member; zip errors become ValueErrors naming it."""
        return _MemberHandles(self.path, self.member, count, self.where)


class _MemberHandles:
    def __init__(self, path: Path, member: str, count: int, where: str) -> None:
        self._args = (path, member, count)
        self._where = where
        self._stack = ExitStack()

    def __enter__(self) -> list[BinaryIO]:
        path, member, count = self._args
        try:
            archive = self._stack.enter_context(zipfile.ZipFile(path))
            return [self._stack.enter_context(archive.open(member)) for _ in range(count)]
        except DAMAGED_MEMBER as exc:
            self._stack.close()
            raise ValueError(f"{self._where}: damaged archive (truncated or corrupt: {exc})") from exc

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._stack.close()
        if isinstance(exc, DAMAGED_MEMBER):
            raise ValueError(f"{self._where}: damaged archive member (truncated or corrupt: {exc})") from exc
        return False


def _read_header(f: BinaryIO, where: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) of the ``.npy`` stream ``f``."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, EOFError) as exc:
        raise ValueError(f"{where}: not a .npy array (corrupt header: {exc})") from exc
    if dtype.hasobject:
        raise ValueError(f"{where}: an object array (would need pickle); expected numbers")
    return dtype, tuple(shape), bool(fortran_order), f.tell()


def _exact(f: BinaryIO, items: int, dtype: np.dtype, where: str) -> np.ndarray:
    """The next ``items`` values of ``f``; a ValueError naming ``where`` if the stream ends first."""
    want = items * dtype.itemsize
    buf = bytearray(want)
    view = memoryview(buf)
    got = 0
    while got < want:
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    if got < want:
        raise ValueError(f"{where}: truncated array (the data ends {want - got} bytes early)")
    return np.frombuffer(buf, dtype=dtype)


def _skip(f: BinaryIO, nbytes: int, where: str, piece: int = 1 << 16) -> None:
    """Read past the first ``nbytes`` of ``f`` a piece at a time (``ZipExtFile.seek`` reads 16 MB at once)."""
    buf = bytearray(min(piece, max(nbytes, 1)))
    left = nbytes
    while left:
        n = f.readinto(memoryview(buf)[:min(left, len(buf))])
        if not n:
            raise ValueError(f"{where}: truncated array (the data ends {left} bytes early)")
        left -= n


def _expect_end(f: BinaryIO, where: str) -> None:
    # Reading past the data makes zipfile check the member's CRC; bytes left over mean a corrupt header.
    if f.read(1):
        raise ValueError(f"{where}: corrupt array (data continues past the shape its header gives)")
