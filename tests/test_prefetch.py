"""The bounded background stage: order, bound, errors, early close."""

from __future__ import annotations

import threading
import time

import pytest

from gnnscale.prefetch import Prefetcher


@pytest.mark.parametrize("depth", [0, 1, 4])
def test_items_arrive_in_order_whatever_the_depth(depth):
    assert list(Prefetcher(lambda i: i * i, 10, depth)) == [i * i for i in range(10)]


def test_depth_zero_produces_on_the_consumer_thread():
    threads = []
    list(Prefetcher(lambda i: threads.append(threading.current_thread()), 3, 0))
    assert threads == [threading.current_thread()] * 3


def test_producer_runs_at_most_depth_items_ahead():
    produced = []
    release = threading.Event()

    def produce(i):
        produced.append(i)
        if i == 0:
            release.wait(timeout=30)
        return i

    with Prefetcher(produce, 100, depth=2) as items:
        release.set()
        first = next(items)
        # Item 0 was taken; at most 2 finished items may wait in the queue, plus one being produced.
        assert first == 0
        time.sleep(0.3)  # room for the producer to run ahead; the check below is an upper bound
        assert len(produced) <= 1 + 2 + 1


def test_an_error_in_the_producer_is_raised_at_its_item():
    def produce(i):
        if i == 3:
            raise ValueError("seeds: item 3 is bad")
        return i

    items = Prefetcher(produce, 10, depth=2)
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="item 3 is bad"):
        next(items)


def test_closing_early_stops_the_thread():
    items = Prefetcher(lambda i: i, 10_000, depth=1)
    next(items)
    items.close()
    assert not any(t.name == "gnnscale-prefetch" and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("kwargs, field", [(dict(count=-1), "count"), (dict(depth=-1), "depth"),
                                           (dict(depth=True), "depth")])
def test_bad_arguments_name_the_field(kwargs, field):
    args = dict(produce=lambda i: i, count=3, depth=1) | kwargs
    with pytest.raises(ValueError, match=field):
        Prefetcher(**args)
