"""numba's threading layer: a thread-safe one, chosen before the first parallel kernel runs.

The trainer calls numba kernels from two threads at once: the background data-loading stage samples
while the training thread runs the dropout and aggregation kernels. numba's ``omp`` and ``tbb``
layers accept that; ``workqueue`` aborts the process on concurrent use. numba picks the first layer
that loads and falls back to ``workqueue`` without a word, and its ``omp`` layer links the system's
``libgomp.so.1.0.0`` by file name (torch's bundled libgomp does not satisfy it): on a machine without
the system OpenMP runtime (slim container images) that fallback happens. So gnnscale depends on the
``tbb`` wheel, loads it from the environment's ``lib`` folder (where pip puts it, outside the
loader's search path), and prefers ``omp`` (what the benchmarks were measured with), then ``tbb``.

A base module (below every stage, see tests/test_layering.py): the samplers launch the layer, and the
prefetching stage (:mod:`gnnscale.prefetch`, also a base module) checks it before starting its thread.
"""

from __future__ import annotations

import ctypes
import os
import site
import sys
from pathlib import Path

import numba

THREADSAFE_LAYERS = ("omp", "tbb")
PREFERRED_ORDER = ["omp", "tbb", "workqueue"]
_TBB_LIBRARY = "libtbb.so.12"


def _tbb_candidates() -> list[Path]:
    """Where pip installs the tbb wheel's library: the environment's (or the user base's) ``lib``."""
    roots = [sys.prefix, getattr(site, "USER_BASE", None) or ""]
    return [Path(root) / "lib" / _TBB_LIBRARY for root in roots if root]


def _load_pip_tbb() -> bool:
    """Load the tbb wheel's library globally, so that numba's ``tbb`` layer finds it by name."""
    for path in _tbb_candidates():
        if path.is_file():
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            return True
    return False


def launched_layer() -> str | None:
    """The threading layer numba runs on, or None before its first parallel kernel."""
    try:
        return numba.threading_layer()
    except ValueError:  # numba raises ValueError while no layer is launched yet
        return None


def choose_threading_layer() -> str:
    """Launch numba's threading layer, preferring the thread-safe ones; returns its name.

    A layer the user chose (``NUMBA_THREADING_LAYER``, ``NUMBA_THREADING_LAYER_PRIORITY``) is kept.
    Once launched, the layer cannot change for the life of the process.
    """
    layer = launched_layer()
    if layer is not None:
        return layer
    if sys.platform.startswith("linux"):
        _load_pip_tbb()
    user_choice = "NUMBA_THREADING_LAYER" in os.environ or "NUMBA_THREADING_LAYER_PRIORITY" in os.environ
    if not user_choice:
        numba.config.THREADING_LAYER_PRIORITY = list(PREFERRED_ORDER)
    numba.get_num_threads()  # launches the layer
    return numba.threading_layer()


def check_threadsafe_layer(what: str) -> str:
    """Raise ``RuntimeError`` unless numba runs on a thread-safe layer; ``what`` names the caller."""
    layer = choose_threading_layer()
    if layer not in THREADSAFE_LAYERS:
        raise RuntimeError(
            f"{what}: numba's threading layer is {layer!r}, which aborts the process when two threads run "
            f"kernels at once; install a thread-safe one (pip install tbb, or the system's libgomp1), "
            f"leave NUMBA_THREADING_LAYER unset, or train with --prefetch 0 (no background loading)")
    return layer
