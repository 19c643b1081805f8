"""Which part owns each node: METIS or KaMinPar (min edge cut) or balanced random, then exact balancing.

All methods end with every part holding the same number of training nodes and the same number of
nodes (each within one): training seeds are drawn from a worker's own training nodes, so equal counts
give every worker the same number of mini-batches per epoch (FastSample, section 4), and equal node
counts give every worker the same share of the features (the partitioned bytes of hybrid
partitioning). In-edges per part are not balanced exactly; :class:`PartitionSummary` reports them.

Why METIS is followed by a balancing pass: METIS balances several vertex weights at once
(``ncon > 1``), but pymetis (checked on 2025.2.2, ``src/wrapper/wrapper.cpp``) hard-codes ``ncon = 1``
and reads only the first ``num_nodes`` entries of ``vweights``, so a nodes/edges/training-nodes
weight matrix is silently misread. We therefore call METIS with unit vertex weights (it balances
nodes to within ~0.1% with recursive bisection) and then move the fewest boundary nodes needed to
balance training nodes and the remaining nodes exactly, preferring the moves that cut fewest edges.
KaMinPar (one vertex weight too) goes through the same pass, reading the adjacency it was given from
its ParHIP file, memory-mapped.
"""

from __future__ import annotations

import errno
import tempfile
from typing import Literal

import numba
import numpy as np

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.pages import read_entries, unmapped_reads
from gnnscale.partition.coarsen import (CHUNK_ENTRIES, HELD_NODE_BYTES, CoarseningReport, budget_bytes,
                                       coarsen, coarsening_bytes, refine_parts, whole_graph_bytes)
from gnnscale.partition.kaminpar_parts import MissingDependency, kaminpar_parts, require_kaminpar
from gnnscale.partition.parhip import CHUNK_ENTRIES as PARHIP_CHUNK_ENTRIES
from gnnscale.partition.parhip import id_bytes_for, temporary_parhip
from gnnscale.partition.rows import compact_rows, dedupe_rows

Method = Literal["metis", "kaminpar", "random"]
METHODS: tuple[str, ...] = ("metis", "kaminpar", "random")
# METIS' manual recommends recursive bisection for few parts (tighter balance at similar cut), k-way
# beyond; pymetis uses the same threshold.
RECURSIVE_MAX_PARTS = 8


def assign_parts(graph: CSCGraph, num_parts: int, method: str = "metis", *,
                 train_idx: np.ndarray | None = None, seed: int = 0, threads: int = 1,
                 memory_gb: float | None = None) -> np.ndarray:
    """Part of every node.

    Args:
        graph: the topology; edge directions are ignored (METIS sees the symmetrised graph).
        num_parts: number of parts, in [1, num_nodes].
        method: ``"metis"`` (minimise the edge cut), ``"kaminpar"`` (the same, by KaMinPar: parallel,
            and fed from a file written by streaming, see :mod:`gnnscale.partition.parhip`) or
            ``"random"`` (a seeded random permutation dealt round-robin: the baseline partitioning).
        train_idx: int [num_train] ids of the training nodes, spread evenly over the parts (default:
            none).
        seed: int >= 0; seeds METIS', KaMinPar's and the permutation's random choices. Same inputs,
            same output (for kaminpar only with ``threads == 1``).
        threads: int >= 1, KaMinPar's threads (default 1); the other methods ignore it.
        memory_gb: GB (10**9 bytes) > 0 that kaminpar may use (default None: MemAvailable of
            /proc/meminfo); the other methods ignore it. Where KaMinPar's estimated footprint on the whole
            graph exceeds it, the graph is first coarsened by streaming (:mod:`gnnscale.partition.coarsen`).

    Returns:
        int64 [num_nodes], values in [0, num_parts). Every part holds ``num_train // num_parts`` or one
        more training nodes, and ``num_nodes // num_parts`` or one more nodes.
    """
    return assign_parts_reported(graph, num_parts, method, train_idx=train_idx, seed=seed, threads=threads,
                                 memory_gb=memory_gb)[0]


def assign_parts_reported(graph: CSCGraph, num_parts: int, method: str = "metis", *,
                          train_idx: np.ndarray | None = None, seed: int = 0, threads: int = 1,
                          memory_gb: float | None = None) -> tuple[np.ndarray, CoarseningReport | None]:
    """:func:`assign_parts`, and what the coarsening did (None where it did not run)."""
    _check_arguments(graph, num_parts, method, seed, threads)
    # Checked for every method (a bad value is a mistake whatever the method); read from /proc only for kaminpar.
    budget = budget_bytes(memory_gb) if method == "kaminpar" or memory_gb is not None else 0
    is_train = _train_mask(train_idx, graph.num_nodes)
    if method == "random":
        return _random_parts(is_train, num_parts, seed), None
    if method == "kaminpar":
        require_kaminpar()
        try:
            return _kaminpar_parts_of(graph, num_parts, is_train, budget, seed, threads)
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise
            # A full disk under $TMPDIR: the temporary folder is gone; say where and how much it needs.
            need = 8 * (graph.num_nodes + 1) + id_bytes_for(graph.num_nodes) * 2 * graph.num_edges
            raise OSError(err.errno, f"{tempfile.gettempdir()}: could not write KaMinPar's temporary graph files "
                                     f"({err.strerror or err}); the symmetric graph takes up to {need / 1e9:.1f} GB "
                                     "there and a coarsened graph's level files (ids and weights) up to twice that "
                                     "again (set TMPDIR to a folder with room); nothing was left there") from err
    xadj, adjncy = symmetric_adjacency(graph)
    part = _metis_parts(xadj, adjncy, num_parts, seed)
    balance_counts(part, xadj, adjncy, is_train, num_parts)
    return part, None


def _kaminpar_parts_of(graph: CSCGraph, num_parts: int, is_train: np.ndarray, budget: int, seed: int,
                       threads: int) -> tuple[np.ndarray, CoarseningReport | None]:
    """KaMinPar on the ParHIP file of ``graph`` (coarsened first where it would not fit ``budget``), balanced."""
    # The file's staging takes at most a quarter of the budget (8 bytes an entry); with the default
    # budget (a machine's free memory) that is parhip's own default chunk.
    parhip_chunk = int(min(PARHIP_CHUNK_ENTRIES, max(1 << 16, budget // 32)))
    with temporary_parhip(graph, chunk_entries=parhip_chunk) as (path, xadj, adjncy):
        estimate = whole_graph_bytes(graph.num_nodes, int(xadj[-1]))
        if estimate <= budget:
            part = kaminpar_parts(path, graph.num_nodes, int(xadj[-1]), num_parts, seed=seed, threads=threads)
            report = None
        else:
            part, report = _coarse_kaminpar_parts(path.parent, xadj, adjncy, num_parts, budget, estimate, seed,
                                                  threads)
        balance_counts(part, xadj, adjncy, is_train, num_parts)
    return part, report


def _coarse_kaminpar_parts(workdir, xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, budget: int,
                           estimate: int, seed: int, threads: int) -> tuple[np.ndarray, CoarseningReport]:
    """KaMinPar on the streamed coarse graph, projected back and refined (see :mod:`~.coarsen`)."""
    n = xadj.shape[0] - 1
    # Staging of at most a quarter of the budget: small budgets (tests) get small chunks.
    chunk_entries = int(min(CHUNK_ENTRIES, max(1 << 12, budget // 64)))
    own = coarsening_bytes(n, chunk_entries)
    if own > budget:
        raise ValueError(f"memory_gb: too small: coarsening {n:,} nodes needs about {own / 1e9:.2f} GB of its own "
                         f"(one entry per node in a few arrays), over the {budget / 1e9:.2f} GB budget")
    kaminpar_budget = budget - HELD_NODE_BYTES * n  # what this process holds while KaMinPar runs
    cluster, coarse_path, coarse_n, coarse_m, levels = coarsen(xadj, adjncy, workdir, num_parts=num_parts,
                                                               kaminpar_budget=kaminpar_budget, seed=seed,
                                                               chunk_entries=chunk_entries)
    coarse_part = kaminpar_parts(coarse_path, coarse_n, coarse_m, num_parts, seed=seed, threads=threads)
    part = coarse_part[cluster]
    del cluster, coarse_part
    refine_parts(part, xadj, adjncy, num_parts, chunk_entries=chunk_entries)
    return part, CoarseningReport(levels=levels, num_nodes=coarse_n, num_edges=coarse_m, estimate_bytes=estimate,
                                  budget_bytes=budget)


def _check_arguments(graph: CSCGraph, num_parts: int, method: str, seed: int, threads: int) -> None:
    if not isinstance(graph, CSCGraph):
        raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
    if not isinstance(num_parts, (int, np.integer)) or isinstance(num_parts, bool):
        raise TypeError(f"num_parts: expected an int, got {type(num_parts).__name__}")
    if not 1 <= num_parts <= graph.num_nodes:
        raise ValueError(f"num_parts: expected an int in [1, num_nodes = {graph.num_nodes}], got {num_parts}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise ValueError(f"seed: expected an int in [0, 2**31), got {seed!r}")
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads: expected an int >= 1, got {threads!r}")


def _train_mask(train_idx: np.ndarray | None, num_nodes: int) -> np.ndarray:
    """bool [num_nodes]: True for training nodes."""
    mask = np.zeros(num_nodes, dtype=bool)
    if train_idx is None:
        return mask
    train_idx = np.asarray(train_idx)
    if train_idx.ndim != 1 or not (np.issubdtype(train_idx.dtype, np.integer) or train_idx.size == 0):
        raise TypeError(f"train_idx: expected a 1-D integer array, got dtype {train_idx.dtype}, "
                        f"shape {train_idx.shape}")
    if train_idx.size and (train_idx.min() < 0 or train_idx.max() >= num_nodes):
        raise ValueError(f"train_idx: expected node ids in [0, {num_nodes}), got range "
                         f"[{train_idx.min()}, {train_idx.max()}]")
    mask[train_idx.astype(np.int64)] = True
    return mask


def _random_parts(is_train: np.ndarray, num_parts: int, seed: int) -> np.ndarray:
    # Deal training nodes first, then the others, round-robin over one shuffled order: both counts
    # (and their sum) come out balanced to within one node.
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(is_train)), rng.permutation(np.flatnonzero(~is_train))])
    part = np.empty(is_train.shape[0], dtype=np.int64)
    part[order] = np.arange(order.shape[0], dtype=np.int64) % num_parts
    return part


# --- METIS ---------------------------------------------------------------------------------------


def symmetric_adjacency(graph: CSCGraph) -> tuple[np.ndarray, np.ndarray]:
    """The undirected graph METIS expects: both directions of every edge, no self loops, no repeats.

    Returns:
        (xadj int64 [num_nodes + 1], adjncy [num_sym_edges]) with each adjacency list sorted. adjncy has
        METIS' index dtype (``pymetis.zero_copy_dtype()``, int64 in 64-bit builds) so that pymetis reads
        the buffers without copying them into C++ vectors.

    Peak extra memory is about ``num_edges * (4 + 2 * itemsize)`` bytes (the transposed graph and a
    staging buffer of twice the edge count); ~3 GB for 123M edges with 64-bit METIS.
    """
    n = graph.num_nodes
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(graph.indices, minlength=n), out=out_ptr[1:])
    out_dst = _transpose(graph.indptr, graph.indices, out_ptr)
    dtype = _metis_index_dtype(graph)
    staged = np.empty(graph.num_edges * 2, dtype=dtype)
    starts = graph.indptr + out_ptr  # row v of the staging buffer: v's in-row then its out-row
    _stage_rows(graph.indptr, graph.indices, out_ptr, out_dst, starts, staged)
    del out_dst
    degree = dedupe_rows(staged, starts, 0)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=xadj[1:])
    compact_rows(staged, starts, degree)
    # Copy the compacted prefix so the 2x staging buffer can be freed before METIS runs.
    adjncy = staged[: xadj[-1]].copy()
    return xadj, adjncy


def require_pymetis():
    """The pymetis module, or :class:`MissingDependency`: imported where METIS runs, so that the rest of gnnscale
    imports without it (a GPU machine's bare image has torch and numba, not pymetis)."""
    try:
        import pymetis
    except ImportError:
        raise MissingDependency("method: metis needs the pymetis package: pip install 'pymetis>=2025.2'") from None
    return pymetis


def _metis_index_dtype(graph: CSCGraph) -> np.dtype:
    dtype = np.dtype(require_pymetis().zero_copy_dtype())
    if 2 * graph.num_edges > np.iinfo(dtype).max:
        raise ValueError(f"graph: {graph.num_edges} edges exceed what this {dtype.itemsize * 8}-bit METIS "
                         "build can index; install a 64-bit (IDXTYPEWIDTH=64) build")
    return dtype


@numba.njit(cache=True)
def _transpose(indptr, indices, out_ptr):
    """Out-neighbors of every node, in the layout ``out_ptr`` describes; each row in increasing order."""
    out = np.empty(indices.shape[0], dtype=indices.dtype)
    cursor = out_ptr[:-1].copy()
    for v in range(indptr.shape[0] - 1):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            out[cursor[u]] = v
            cursor[u] += 1
    return out


@numba.njit(parallel=True, cache=True)
def _stage_rows(indptr, indices, out_ptr, out_dst, starts, staged):
    """Row ``v`` of ``staged`` (from ``starts[v]``) := v's in-neighbors, then its out-neighbors."""
    for v in numba.prange(indptr.shape[0] - 1):
        s = starts[v]
        k = indptr[v + 1] - indptr[v]
        staged[s:s + k] = indices[indptr[v]:indptr[v + 1]]
        staged[s + k:s + k + out_ptr[v + 1] - out_ptr[v]] = out_dst[out_ptr[v]:out_ptr[v + 1]]


def _metis_parts(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, seed: int) -> np.ndarray:
    """int64 [num_nodes]: METIS' edge-cut partition with unit vertex weights (see the module docstring)."""
    n = xadj.shape[0] - 1
    if num_parts == 1 or adjncy.shape[0] == 0:
        # Any assignment cuts nothing; the balancing pass spreads the nodes.
        return np.zeros(n, dtype=np.int64)
    pymetis = require_pymetis()
    options = pymetis.Options(seed=int(seed))
    # Both arrays in METIS' own index dtype: pymetis then reads the buffers in place.
    adjacency = pymetis.CSRAdjacency(xadj.astype(adjncy.dtype, copy=False), adjncy)
    result = pymetis.part_graph(num_parts, adjacency=adjacency, recursive=num_parts <= RECURSIVE_MAX_PARTS,
                                options=options)
    return np.asarray(result.vertex_part, dtype=np.int64)


# --- exact balancing ---------------------------------------------------------------------------


def balance_counts(part: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray, is_train: np.ndarray,
                   num_parts: int) -> None:
    """Move nodes (in place) until training nodes and all nodes are balanced to within one per part.

    Training nodes move first, then non-training nodes; each pass moves only its own kind, so the
    second cannot undo the first. A move from part ``a`` to part ``b`` takes the nodes of ``a`` with the
    most neighbors in ``b`` minus neighbors in ``a`` (the fewest newly cut edges), ties by lower id.

    Args:
        part: int64 [num_nodes], modified in place.
        xadj, adjncy: the symmetric adjacency (:func:`symmetric_adjacency`).
        is_train: bool [num_nodes].
        num_parts: number of parts.
    """
    n = part.shape[0]
    # Parts that already hold the most nodes get the "+1" of an uneven division (fewest moves); one
    # ranking for both counts keeps each part's non-training target non-negative.
    rank = np.empty(num_parts, dtype=np.int64)
    rank[np.lexsort((np.arange(num_parts), -np.bincount(part, minlength=num_parts)))] = np.arange(num_parts)
    train_target = _even_split(int(is_train.sum()), rank)
    node_target = _even_split(n, rank)
    _move_to_targets(part, xadj, adjncy, is_train, train_target)
    _move_to_targets(part, xadj, adjncy, ~is_train, node_target - train_target)


def _even_split(total: int, rank: np.ndarray) -> np.ndarray:
    """int64 [num_parts]: ``total // num_parts`` each, plus one for the ``total % num_parts`` best-ranked."""
    k = rank.shape[0]
    return total // k + (rank < total % k).astype(np.int64)


def _move_to_targets(part: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray, movable: np.ndarray,
                     target: np.ndarray) -> None:
    counts = np.bincount(part[movable], minlength=target.shape[0])
    # Each round empties the largest surplus or fills the largest deficit: at most num_parts rounds.
    for _ in range(2 * target.shape[0]):
        surplus = counts - target
        a, b = int(np.argmax(surplus)), int(np.argmin(surplus))
        amount = int(min(surplus[a], -surplus[b]))
        if amount <= 0:
            return
        candidates = np.flatnonzero(movable & (part == a))
        gain = _gains(xadj, adjncy, part, candidates, a, b)
        chosen = candidates[np.lexsort((candidates, -gain))[:amount]]
        part[chosen] = b
        counts[a] -= amount
        counts[b] += amount
    if not np.array_equal(counts, target):  # an internal invariant, kept under python -O
        raise RuntimeError("partition balancing did not converge (internal error): part sizes "
                           f"{counts.tolist()} != target {target.tolist()}")


def _gains(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray, candidates: np.ndarray, a: int,
           b: int) -> np.ndarray:
    """int64 [len(candidates)]: neighbors in part b minus neighbors in part a (edges saved by a -> b).

    The candidates' rows lie all over ``adjncy`` (KaMinPar's ParHIP file, memory-mapped): they are read
    with ``pread`` (:func:`~gnnscale.graph.pages.read_entries`), so that no mapped page is held."""
    if candidates.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    longest = int(np.max(xadj[candidates + 1] - xadj[candidates]))
    with unmapped_reads(adjncy) as (fd, at):
        gain, unread = _move_gains(xadj, fd, at, adjncy, part, candidates, a, b, max(longest, 1))
    if unread >= 0:
        raise OSError(f"{getattr(adjncy, 'filename', 'adjncy')}: could not read the row of node {unread}: "
                      "the file is shorter than its offsets say, or unreadable")
    return gain


GAIN_PIECE = 4096  # candidates per parallel piece, each with its own row buffer


@numba.njit(parallel=True, cache=True)
def _move_gains(xadj, fd, at, adjncy, part, candidates, a, b, longest):
    gain = np.empty(candidates.shape[0], dtype=np.int64)
    unread = np.full((candidates.shape[0] + GAIN_PIECE - 1) // GAIN_PIECE, -1, dtype=np.int64)
    for piece in numba.prange(unread.shape[0]):
        row = np.empty(longest, dtype=adjncy.dtype)
        for i in range(piece * GAIN_PIECE, min((piece + 1) * GAIN_PIECE, candidates.shape[0])):
            v = candidates[i]
            if not read_entries(fd, at, adjncy, xadj[v], xadj[v + 1], row):
                unread[piece] = v
                break
            g = 0
            for j in range(xadj[v + 1] - xadj[v]):
                q = part[row[j]]
                if q == b:
                    g += 1
                elif q == a:
                    g -= 1
            gain[i] = g
    return gain, (np.max(unread) if unread.shape[0] else -1)
