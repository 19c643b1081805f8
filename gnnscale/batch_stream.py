"""One batch stream for the trainer and both PyG-compatible loaders: batches prepared a group at a time in
the background stage (:mod:`gnnscale.prefetch`) and sent to the device there (the copy stage,
:class:`gnnscale.devices.StreamCopy`), so that the consumer only receives them.

What a batch is, and how it is prepared, is the caller's: the trainer's stages (sample, exclude, fetch)
or a loader's. The stream owns the order of the last two steps, which every caller needs alike: work on
the device while preparing (device sampling, a GPU cache's gathers) runs on the copy's side stream, and
each batch is sent right after it is prepared, in the producer's thread.

A base module (below every stage, see tests/test_layering.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from gnnscale.devices import StreamCopy, TensorMap
from gnnscale.prefetch import stream_in_groups

T = TypeVar("T")


def batch_stream(prepare: Callable[[range], Sequence[T]], count: int, *, copy: StreamCopy, map_tensors: TensorMap,
                 group_size: int = 1, depth: int = 1, wait_seconds: Callable[[float], None] | None = None,
                 copy_phase: Callable[[], AbstractContextManager] | None = None) -> Iterator[T]:
    """Items ``0 .. count - 1`` on ``copy.device``, prepared ``group_size`` at a time
    (``prepare(range_of_items)`` returns the group's values), ``depth`` groups ahead of the consumer.

    Args:
        prepare: builds a group's values on the host (or on the device, inside ``copy.producing()``).
        count: items in all.
        copy: the copy stage; on the CPU it sends nothing (the values come back as they are).
        map_tensors: ``map_tensors(value, fn)``: ``value`` with ``fn`` applied to each tensor the consumer reads.
        group_size: items prepared by one call (a bulk sampler's bulk).
        depth: groups prepared ahead (0: on the consumer's thread).
        wait_seconds: receives the seconds the consumer waited for each item.
        copy_phase: a context the sends are timed in (the trainer's ``copy`` phase); none by default.
    """

    def produce(items: range) -> list:
        with copy.producing():
            values = prepare(items)
            with copy_phase() if copy_phase is not None else nullcontext():
                return [copy.send(value, map_tensors) for value in values]

    for sent in stream_in_groups(produce, count, group_size, depth, wait_seconds=wait_seconds):
        yield copy.receive(sent)
