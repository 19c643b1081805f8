"""The trainer keeps freed memory for reuse: large tensors are not page-faulted in anew every iteration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gnnscale.train.memory import keep_freed_memory

# Like a training step: allocates three large tensors (64, 36 and 33 MB, above glibc's default mmap
# threshold), touches every page and frees them, on the main thread and on a second thread (the data
# loader's); prints the minor page faults per iteration of each, averaged over ITERATIONS: a heap
# that settles once in the measured window (seen now and then: one 64 MB block faulted in once)
# must not read as faulting every iteration, which is what untuned malloc does.
PROBE = r"""
import json, resource, sys, threading, torch
from gnnscale.train.memory import keep_freed_memory
settings = keep_freed_memory() if sys.argv[1] == "tuned" else None
ITERATIONS = 20
def work(iterations=5):
    for _ in range(iterations):
        a = torch.empty(16 << 20); a.fill_(1.0)
        b = torch.empty(9 << 20); b.fill_(1.0)
        c = torch.empty(33 << 20, dtype=torch.uint8); c.fill_(1)
        del a, b, c
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
work()
start = faults(); work(ITERATIONS); main = (faults() - start) / ITERATIONS
thread = threading.Thread(target=work); thread.start(); thread.join()  # the thread's first arena use
thread = threading.Thread(target=work, args=(ITERATIONS,)); start = faults(); thread.start(); thread.join()
print(json.dumps({"main": main, "thread": (faults() - start) / ITERATIONS, "applied": settings and settings.applied}))
"""


def _faults(mode: str) -> dict:
    env_free = {"PATH": "/usr/bin:/bin"}  # no MALLOC_* variables from the caller's environment
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True,
                         timeout=120, env=env_free).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or not keep_freed_memory().applied,
                    reason="glibc's malloc only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    default, tuned = _faults("default"), _faults("tuned")
    pages = (133 << 20) // 4096
    # Untuned, every iteration faults in (about) every page of the three tensors, on both threads.
    assert default["main"] > 0.5 * pages and default["thread"] > 0.5 * pages, default
    # Tuned, the blocks freed by the previous iteration are reused: (almost) no faults.
    assert tuned["applied"]
    assert tuned["main"] < 0.1 * pages and tuned["thread"] < 0.1 * pages, tuned


def test_keep_freed_memory_says_what_it_did():
    settings = keep_freed_memory()
    assert settings == keep_freed_memory()  # calling it again changes nothing
    if settings.applied:
        assert settings.mmap_threshold in (0, 1 << 30) and "glibc" in settings.detail
    else:
        assert "not glibc" in settings.detail
