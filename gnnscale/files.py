"""Writing a file so that a reader never sees half of it: one function every output goes through."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None], *, keep_previous: Path | None = None) -> Path:
    """Call ``write`` on a temporary file beside ``path``, fsync it, then rename it over ``path``.

    A failed write (a full disk, a bad payload) leaves ``path`` as it was and no temporary file behind.
    Only a regular file is ever replaced: a directory, a device (``/dev/full``) or a socket at ``path``
    is a ValueError before anything is written. An OSError names ``path``. With ``keep_previous``, the
    file ``path`` held is moved there once the new one is complete, just before it takes its place.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"{path}: exists and is not a regular file; give a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per writer: two processes (or threads) writing the same path never share a temporary file.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous is not None and path.is_file():
            keep(path, keep_previous)
        os.replace(tmp, path)
    except OSError as err:
        raise OSError(err.errno, f"{path}: could not write it ({err.strerror or err})") from err
    finally:
        tmp.unlink(missing_ok=True)
    return path


def keep(path: Path, previous: Path) -> None:
    """Make ``previous`` hold what ``path`` holds while ``path`` stays in place: a reader polling ``path``
    (a resuming run, a test waiting for a checkpoint) never finds it missing between two renames. Where
    the file system has no hard links, fall back to renaming ``path`` away."""
    link = previous.with_name(f".{previous.name}.link-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.link(path, link)
    except OSError:
        os.replace(path, previous)  # path is missing only until the caller's rename
        return
    try:
        os.replace(link, previous)
    finally:
        link.unlink(missing_ok=True)

