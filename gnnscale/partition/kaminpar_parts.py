"""Edge-cut partitioning by KaMinPar (shared-memory, multilevel), read from a ParHIP file.

KaMinPar's Python bindings read a graph only from a file; :mod:`gnnscale.partition.parhip` writes it
by streaming, so nothing here holds a second copy of the edges in Python. KaMinPar then holds its
own copy: plain CSR (~8 bytes per directed edge in the 64-bit build), or, above
``COMPRESS_ABOVE_EDGES``, a compressed one (gap-encoded neighbor lists, loaded with ``compress=True``)
partitioned with the memory-efficient ``terapart`` context.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Directed edges above which the graph is compressed on load. On the products-shaped graph (scale
# 0.25 and 1.0) compression saved 16-22% of the peak memory at 2.3-2.7x the time
# (benchmarks/README.md, partitioners.py): worth it only where KaMinPar's own copy (8 bytes per
# directed edge) is what does not fit.
COMPRESS_ABOVE_EDGES = 1 << 28
# Allowed imbalance of node counts; the balancing pass that follows makes them exact.
EPSILON = 0.03


class MissingDependency(ImportError):
    """The kaminpar package is not installed (the message says how to install it)."""


def require_kaminpar():
    """The kaminpar module, or :class:`MissingDependency` (checked before minutes of file writing)."""
    try:
        import kaminpar
    except ImportError:
        raise MissingDependency("method: kaminpar needs the kaminpar package: pip install 'kaminpar>=3.7'") from None
    return kaminpar


def kaminpar_parts(path: str | Path, num_nodes: int, num_edges: int, num_parts: int, *, seed: int,
                   threads: int, compress: bool | None = None) -> np.ndarray:
    """int64 [num_nodes]: KaMinPar's edge-cut partition of the ParHIP graph at ``path``, unit weights.

    Args:
        path: a ParHIP file (:func:`gnnscale.partition.parhip.write_parhip`).
        num_nodes, num_edges: its node count and directed edge count.
        num_parts: number of parts, in [1, num_nodes].
        seed: KaMinPar's random seed. With ``threads == 1`` the result depends on nothing else; with
            more threads its parallel label propagation makes it vary from run to run.
        threads: KaMinPar's worker threads, >= 1.
        compress: compress the graph on load and use the ``terapart`` context (default: when
            ``num_edges > COMPRESS_ABOVE_EDGES``).
    """
    kaminpar = require_kaminpar()
    if num_parts == 1 or num_edges == 0:
        return np.zeros(num_nodes, dtype=np.int64)  # any assignment cuts nothing; balancing spreads it
    if compress is None:
        compress = num_edges > COMPRESS_ABOVE_EDGES
    kaminpar.reseed(int(seed))
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP, compress=bool(compress))
    context = kaminpar.terapart_context() if compress else kaminpar.default_context()
    blocks = kaminpar.KaMinPar(int(threads), context).compute_partition(graph, int(num_parts), EPSILON)
    return np.asarray(blocks, dtype=np.int64)
