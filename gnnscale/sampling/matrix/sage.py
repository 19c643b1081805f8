"""GraphSAGE as sparse products over a stack of mini-batches (Tripathy et al., section 4.1).

Per hop, for the whole stack at once: ``Q`` has a row per destination of every batch; ``P = Q A``
holds each destination's in-neighbors, row-normalised to the uniform distribution over them; each
row draws min(fanout, degree) distinct columns; removing the empty columns of the sampled matrix,
batch by batch, gives each batch's block.

A row is drawn with the fused sampler's per-node stream and Floyd's algorithm over the row's
positions (uniform rows need no prefix sum: inverse transform sampling of a uniform row is a uniform
position). ``P``'s rows are ``A``'s rows in ``A``'s order, so for the same key a batch gets exactly
the fused kernel's blocks: ``--sampler matrix`` trains exactly like ``--sampler fused``, and the
tests compare the two bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numba
import numpy as np
import scipy.sparse as sp

from gnnscale.graph.csc import CSCGraph, index_dtype
from gnnscale.sampling import BatchSampler, blocks_from_hops, check_fanouts, check_key, check_seeds
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import count_and_offsets
from gnnscale.sampling.matrix.products import adjacency_pattern, gather_rows, stack_rows
from gnnscale.sampling.matrix.kernels import choose_rows, relabel_batches


PHASES = ("factor", "product", "draw", "extract")


class _PhaseClock:
    """Adds the time since the previous lap to ``seconds[name]``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.last = seconds, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] += now - self.last
        self.last = now


def check_bulk(bulk) -> int:
    """Validate a bulk size: an int >= 1 (batches sampled by one product)."""
    if not isinstance(bulk, (int, np.integer)) or isinstance(bulk, bool):
        raise TypeError(f"bulk: expected an int >= 1 (--bulk), got {type(bulk).__name__}")
    if bulk < 1:
        raise ValueError(f"bulk: expected an int >= 1 (--bulk), got {bulk}")
    return int(bulk)


def check_stack(num_nodes: int, seeds_list, keys) -> tuple[list[np.ndarray], np.ndarray]:
    """Validate a stack of batches: as many keys as seed tensors, each seed tensor valid and unique."""
    if not isinstance(seeds_list, (list, tuple)) or len(seeds_list) == 0:
        raise ValueError(f"seeds_list: expected a non-empty list of seed tensors, got {type(seeds_list).__name__}"
                         + (" of length 0" if isinstance(seeds_list, (list, tuple)) else ""))
    if not isinstance(keys, (list, tuple)) or len(keys) != len(seeds_list):
        got = len(keys) if isinstance(keys, (list, tuple)) else type(keys).__name__
        raise ValueError(f"keys: expected a list of {len(seeds_list)} keys (one per batch), got {got}")
    batches = []
    for b, seeds in enumerate(seeds_list):
        seeds = check_seeds(seeds, num_nodes)
        if np.unique(seeds).shape[0] != seeds.shape[0]:
            raise ValueError(f"seeds: expected unique node ids, batch {b} repeats a node")
        batches.append(seeds)
    return batches, np.array([check_key(k) for k in keys], dtype=np.int64)


class MatrixSampler(BatchSampler):
    """GraphSAGE sampling of ``bulk`` batches at a time by sparse products.

    Args:
        graph: the topology.
        fanouts: neighbors per node per hop, from the seeds outwards (as the fused sampler).
        bulk: how many consecutive batches the training loop stacks into one ``sample_many``. Default 1.
        replace: sample with replacement. Default False.

    Memory: per hop, the rows of ``A`` the stack touches (at most ``A`` itself, whatever ``bulk``),
    the stack's sampled edges, and one int32 node map per sampler thread.
    """

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int], *, bulk: int = 1, replace: bool = False) -> None:
        if not isinstance(graph, CSCGraph):
            raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
        self.graph = graph
        self.num_nodes = graph.num_nodes
        self.fanouts = check_fanouts(fanouts)
        self.bulk = check_bulk(bulk)
        self.replace = bool(replace)
        self.adjacency = adjacency_pattern(graph)
        # Reused across calls, all -1 between them: the factoring's node positions, and one node map
        # per relabelling thread.
        self._position = np.full(graph.num_nodes, -1, dtype=index_dtype(graph.num_nodes))
        self._maps = np.empty((0, graph.num_nodes), dtype=index_dtype(graph.num_nodes))
        # Seconds spent per step of Algorithm 1 since construction: factoring Q, the product, the
        # draws, the extraction (what a bulk amortises shows here; benchmarks/bulk.py prints it).
        self.phase_seconds = dict.fromkeys(PHASES, 0.0)

    def sample(self, seeds, key: int) -> list[Block]:
        """One batch's blocks in model order; the same as ``sample_many([seeds], [key])[0]``."""
        return self.sample_many([seeds], [key])[0]

    def sample_many(self, seeds_list, keys) -> list[list[Block]]:
        """Blocks of every batch of the stack (model order), one product per hop for the whole stack.

        Args:
            seeds_list: k int tensors/arrays of unique seed ids.
            keys: k sampling keys; batch ``b``'s blocks depend only on ``(seeds_list[b], keys[b])``.
        """
        batches, keys = check_stack(self.num_nodes, seeds_list, keys)
        batch_ptr = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum([b.shape[0] for b in batches], out=batch_ptr[1:])
        nodes, node_ptr = np.concatenate(batches), batch_ptr
        maps = self._node_maps(len(batches))
        hops = [[] for _ in batches]
        clock = _PhaseClock(self.phase_seconds)
        for hop, fanout in enumerate(self.fanouts):
            stacked = stack_rows(nodes, node_ptr, self._position)
            clock.lap("factor")
            p = self._gather(stacked)  # P = Q A, stored as S A plus the index R
            clock.lap("product")
            # The stacked rows' counts, prefix-summed: every batch's block indptr is a slice of it.
            offsets = count_and_offsets(p.indptr, stacked.inverse, 0, fanout, self.replace)
            chosen = choose_rows(p.indptr, p.indices, stacked.nodes, stacked.inverse, stacked.row_batch(), keys,
                                 offsets, fanout, self.replace, hop)
            clock.lap("draw")
            edge_ptr = offsets[node_ptr]
            new_nodes, new_ptr = relabel_batches(chosen, edge_ptr, nodes, node_ptr, maps)
            clock.lap("extract")
            for b, batch_hops in enumerate(hops):
                rows = slice(node_ptr[b], node_ptr[b + 1] + 1)
                batch_hops.append((offsets[rows] - edge_ptr[b], chosen[edge_ptr[b]:edge_ptr[b + 1]],
                                   int(node_ptr[b + 1] - node_ptr[b]), int(new_ptr[b + 1] - new_ptr[b])))
            nodes, node_ptr = new_nodes, new_ptr
        return [blocks_from_hops(nodes[node_ptr[b]:node_ptr[b + 1]], hops[b]) for b in range(len(batches))]

    def _gather(self, stacked) -> "sp.csr_matrix":
        """``S A``, the rows of ``A`` the stack needs (a distributed layout fetches them instead)."""
        return gather_rows(self.adjacency, stacked)

    def _node_maps(self, num_batches: int) -> np.ndarray:
        """One all -1 node map per worker thread (at most one per batch), grown on first need."""
        workers = max(1, min(numba.get_num_threads(), num_batches))
        if self._maps.shape[0] < workers:
            self._maps = np.full((workers, self.num_nodes), -1, dtype=self._maps.dtype)
        return self._maps[:workers]
