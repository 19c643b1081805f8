"""A bounded background stage: prepare the next items while the consumer works on the current one.

SALIENT (Kaler et al., MLSys 2022) hides sampling and feature gathering behind the training step by
running them one or more batches ahead. :class:`Prefetcher` is that stage for any ``produce(i)``: one
background thread calls ``produce(0), produce(1), ...`` in order and keeps at most ``depth`` finished
items waiting; the consumer iterates. ``depth=0`` runs ``produce`` inline on the consumer's thread
(no overlap), which is the baseline the overlap is measured against and gives the same items.

Items are produced strictly in order by one thread, so anything ``produce`` does in sequence
(collectives on a process group of its own, a sampler's reusable workspace) stays in the same order
on every worker. The thread's numba kernels use as many threads as the consumer's. An exception in
``produce`` is raised in the consumer at the item it would have produced; closing the prefetcher
early (``close()``, or leaving a ``with`` block) stops the thread.

A base module (below every stage, see tests/test_layering.py): the PyG-compatible loader
(:mod:`gnnscale.loader`) and the trainer (:mod:`gnnscale.train`) both run it, and neither should
import the other for it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

import numba

from gnnscale.threading_layer import check_threadsafe_layer

T = TypeVar("T")

_POLL_S = 0.1  # how often a blocked producer checks whether the consumer has gone away


class _Failure:
    """Carries an exception from the producer thread to the consumer."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[T]):
    """Iterate over ``produce(0) .. produce(count - 1)``, produced up to ``depth`` items ahead.

    Args:
        produce: builds item ``i``; called in order, from one background thread when ``depth >= 1``.
        count: number of items (>= 0).
        depth: items produced ahead of the consumer (0: no thread, ``produce`` runs on ``next()``).
        wait_seconds: optional callback receiving, per item, the seconds the consumer waited for it
            (the part of producing it that the overlap did not hide).
    """

    def __init__(self, produce: Callable[[int], T], count: int, depth: int = 1, *,
                 wait_seconds: Callable[[float], None] | None = None) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"count: expected an int >= 0, got {count!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise ValueError(f"depth: expected an int >= 0 (0 = no background stage), got {depth!r}")
        self._produce, self._count, self._depth = produce, count, depth
        self._wait_seconds = wait_seconds
        self._next = 0
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._thread: threading.Thread | None = None
        if depth > 0 and count > 0:
            # produce() runs numba kernels while the consumer runs its own: numba must allow that.
            check_threadsafe_layer("prefetch")
            # numba's thread count is per thread: a new thread would use every core, whatever --threads says.
            self._numba_threads = numba.get_num_threads()
            self._thread = threading.Thread(target=self._run, name="gnnscale-prefetch", daemon=True)
            self._thread.start()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._next >= self._count:
            self.close()
            raise StopIteration
        start = time.perf_counter()
        if self._thread is None:
            item = self._produce(self._next)
        else:
            item = self._queue.get()
            if isinstance(item, _Failure):
                self.close()
                raise item.error
        if self._wait_seconds is not None:
            self._wait_seconds(time.perf_counter() - start)
        self._next += 1
        return item

    def close(self) -> None:
        """Stop the background thread (it finishes the item it is producing) and drop what it made."""
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=_POLL_S)  # unblock a producer waiting on a full queue
                except queue.Empty:
                    pass
            self._thread = None

    def __enter__(self) -> "Prefetcher[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self) -> None:
        numba.set_num_threads(self._numba_threads)
        for i in range(self._count):
            if self._stop.is_set():
                return
            try:
                item = self._produce(i)
            except BaseException as err:  # handed to the consumer, raised there
                self._put(_Failure(err))
                return
            if not self._put(item):
                return

    def _put(self, item) -> bool:
        """Queue ``item``, waiting while the queue is full; False if the consumer closed meanwhile."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False


def stream_in_groups(produce: Callable[[range], Sequence[T]], count: int, group_size: int, depth: int, *,
                     wait_seconds: Callable[[float], None] | None = None) -> Iterator[T]:
    """Items ``0 .. count - 1``, produced a group at a time (``produce(range_of_items)`` returns the
    group's items, e.g. a bulk sampler drawing ``group_size`` batches in one call), with up to
    ``depth`` groups prepared ahead (see :class:`Prefetcher`). Leaving the loop early stops the stage."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size: expected an int >= 1, got {group_size!r}")
    starts = range(0, count, group_size)

    def produce_group(g: int) -> Sequence[T]:
        return produce(range(starts[g], min(starts[g] + group_size, count)))

    with Prefetcher(produce_group, len(starts), depth, wait_seconds=wait_seconds) as groups:
        for items in groups:
            yield from items
