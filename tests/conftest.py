"""Small graphs shared by the graph and sampling tests, parametrised over the ``indices`` dtype."""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from gnnscale.graph.csc import CSCGraph, csc_from_coo

# The test folders mirror the package, and a test module may take helpers from one in another folder
# (test_distributed's spawn_run, test_inference's PyG reference): every folder is importable, whichever
# of them a run collects first (or alone).
for _folder in sorted(Path(__file__).parent.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith((".", "_")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))

_TESTS = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """pytest-timeout's settings where the plugin is absent (a GPU machine's image may lack it, and its check
    passes ``--timeout``; pyproject.toml sets ``timeout``): the same option and ini key, enforced by
    :func:`pytest_runtest_protocol` below."""
    if pluginmanager.hasplugin("timeout"):
        return
    parser.addoption("--timeout", type=float, default=None,
                     help="seconds a test may run: past them every thread's stack is printed and the run exits "
                          "(pytest-timeout's option, enforced by faulthandler where that plugin is absent)")
    parser.addini("timeout", "seconds a test may run (see --timeout)", default=None)


# Where a test past its limit prints the stacks: a copy of the terminal's stderr, made while pytest does not capture
# it (during a test, file descriptor 2 is pytest's capture file, lost when the run exits).
_TIMEOUT_STDERR = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    # cuBLAS's deterministic workspace, before any test's first product on a GPU (cuBLAS reads it once per
    # process): a run on a GPU asks for deterministic kernels, and a gpu test may make products before one.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): this test's own limit (pytest-timeout's marker)")
        config.stash[_TIMEOUT_STDERR] = os.dup(sys.stderr.fileno())


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TIMEOUT_STDERR in config.stash:
        os.close(config.stash[_TIMEOUT_STDERR])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """Without pytest-timeout: a test past its limit (its ``timeout`` marker, else ``--timeout``, else the ini's)
    prints every thread's stack and ends the run with a failure, as pytest-timeout's thread method does; a hung
    GPU check then fails instead of using up the machine's time."""
    seconds = None if item.config.pluginmanager.hasplugin("timeout") else _timeout_seconds(item)
    if seconds:
        faulthandler.dump_traceback_later(seconds, exit=True, file=item.config.stash[_TIMEOUT_STDERR])
    try:
        return (yield)
    finally:
        if seconds:
            faulthandler.cancel_dump_traceback_later()


def _timeout_seconds(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    value = item.config.getoption("timeout")
    if value is None:
        value = item.config.getini("timeout")
    return float(value) if value else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Compile every numba kernel once, in one process, before the tests that spawn workers.

    numba keeps compiled kernels in an on-disk cache (``__pycache__``), empty in a fresh clone until
    ``python -m gnnscale.compile`` (the install step of ``make test``) fills it. Run cold in pytest's
    alphabetical order, tests/distributed came first, and each of its spawned workers compiled the
    kernels it met, all at once: the three-worker DGS test compiled the DGS kernel (45 s alone) three
    times over on 2 cores (116 s under load; 6 s with the cache filled), and the four-worker 1.5D
    test took 52-90 s (5 s filled). So, order only (what a test asserts does not depend on it):
    test_compile.py first, whose install step fills the cache for every later test and worker;
    tests/distributed last, so that even where test_compile.py is not selected its workers find the
    kernels that the in-process sampling, nn and graph tests compiled. The sort is stable: the rest
    keeps pytest's order.
    """
    def stage(item: pytest.Item) -> int:
        path = Path(str(item.path))
        if path == _TESTS / "test_compile.py":
            return 0
        return 2 if path.is_relative_to(_TESTS / "distributed") else 1

    items.sort(key=stage)
    skip_gpu = pytest.mark.skip(reason="needs CUDA (a `gpu` test: `pytest -m gpu` on a GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None and not _cuda_available():
            item.add_marker(skip_gpu)


def _cuda_available() -> bool:
    import torch  # here: collecting the graph tests needs no torch import of its own

    return torch.cuda.is_available()


# The tiny graph (edges point the way messages flow, src -> dst):
#
#     +------------+
#     v            |
#     0 --> 1 --> 2 --> 4
#     |     ^ ^         |
#     v     | +---------+
#     3 ----+                5   (isolated)
#
# In-edges per node (CSC rows, sorted by source id):
#   0: [2]   1: [0, 3, 4]   2: [1]   3: [0]   4: [2]   5: []
TINY_NUM_NODES = 6
TINY_SRC = np.array([2, 0, 1, 2, 4, 0, 3], dtype=np.int64)
TINY_DST = np.array([0, 1, 2, 4, 1, 3, 1], dtype=np.int64)


@pytest.fixture(params=[np.int32, np.int64], ids=["int32", "int64"])
def idx_dtype(request) -> np.dtype:
    return np.dtype(request.param)


@pytest.fixture
def restore_threads():
    """For a test that sets numba's thread count: the count it found is set back afterwards."""
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


@pytest.fixture(params=["fused", "two_step"])
def method(request) -> str:
    return request.param


def _with_index_dtype(graph: CSCGraph, dtype: np.dtype) -> CSCGraph:
    """The same graph with ``indices`` stored as ``dtype`` (csc_from_coo picks int32 for small graphs)."""
    return CSCGraph(indptr=graph.indptr, indices=graph.indices.astype(dtype), num_nodes=graph.num_nodes)


@pytest.fixture
def tiny_coo() -> tuple[np.ndarray, np.ndarray, int]:
    """(src, dst, num_nodes) of the tiny graph."""
    return TINY_SRC.copy(), TINY_DST.copy(), TINY_NUM_NODES


@pytest.fixture
def tiny_graph(idx_dtype) -> CSCGraph:
    return _with_index_dtype(csc_from_coo(TINY_SRC, TINY_DST, TINY_NUM_NODES), idx_dtype)


def _random_graph() -> CSCGraph:
    """400 nodes, in-degrees spread over 0..60 (mean ~20), nodes 0..9 isolated (no in-edges)."""
    rng = np.random.default_rng(12345)
    n = 400
    degrees = rng.integers(0, 61, size=n)
    degrees[:10] = 0
    dst = np.repeat(np.arange(n), degrees)
    src = rng.integers(0, n, size=dst.shape[0])
    return csc_from_coo(src, dst, n)


_RANDOM_GRAPH = _random_graph()


@pytest.fixture
def random_graph(idx_dtype) -> CSCGraph:
    return _with_index_dtype(_RANDOM_GRAPH, idx_dtype)


@pytest.fixture
def make_graph(idx_dtype):
    """Factory: ``make_graph(indptr, indices, num_nodes)`` -> CSCGraph with ``indices`` in the test's dtype."""

    def make(indptr, indices, num_nodes: int) -> CSCGraph:
        return CSCGraph(indptr=np.asarray(indptr, dtype=np.int64), indices=np.asarray(indices, dtype=idx_dtype),
                        num_nodes=num_nodes)

    return make


@pytest.fixture
def solo_comm():
    """The Comm of a process group of this process alone: a real all_to_all, which moves the bytes to itself."""
    from gnnscale.distributed import Comm
    from gnnscale.distributed.context import init_single_process, shutdown

    ctx = init_single_process()
    try:
        yield Comm(ctx)
    finally:
        shutdown()
