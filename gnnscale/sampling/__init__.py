"""Mini-batch neighbor sampling into Blocks: the fused kernel and its two-step reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numba
import numpy as np
import torch

from gnnscale.graph.csc import CSCGraph
from gnnscale.keys import derive_key
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.sampling.fused import SamplerWorkspace, fused_hops
from gnnscale.sampling.reference import two_step_hops
from gnnscale.threading_layer import THREADSAFE_LAYERS, check_threadsafe_layer, choose_threading_layer

Method = Literal["fused", "two_step"]

__all__ = ["ALL_NEIGHBORS", "BatchSampler", "Block", "NeighborSampler", "SamplerWorkspace", "THREADSAFE_LAYERS",
           "blocks_from_hops", "check_fanouts", "check_key", "check_seeds", "check_threadsafe_layer",
           "choose_threading_layer", "derive_key", "sample_blocks", "set_sampler_threads"]


def check_fanouts(fanouts: Sequence[int], name: str = "fanouts") -> tuple[int, ...]:
    """Validate fanouts (seeds outwards): a non-empty sequence of ints, by PyG's rule, the one rule of
    every gnnscale sampler, the trainer's config and the PyG-compatible loader: ``k >= 1`` samples up
    to ``k`` in-neighbors per node, -1 takes every in-neighbor, 0 takes none (the hop adds no edges),
    anything below -1 is an error. ``name`` is what the error calls them (``num_neighbors`` in the loader)."""
    if isinstance(fanouts, (int, np.integer, str, bytes)) or not isinstance(fanouts, Sequence) or len(fanouts) == 0:
        raise ValueError(f"{name}: expected a non-empty list of ints (-1 = every neighbor), got {fanouts!r}")
    for i, f in enumerate(fanouts):
        if not isinstance(f, (int, np.integer)) or isinstance(f, bool):
            raise TypeError(f"{name}: expected ints, got {type(f).__name__} at position {i}")
        if f < ALL_NEIGHBORS:
            raise ValueError(f"{name}: expected every entry >= 0, or -1 for every neighbor, got {f} at position {i}")
    return tuple(int(f) for f in fanouts)


def check_seeds(seeds, num_nodes: int) -> np.ndarray:
    """Validate seed node ids (dtype, shape, range) and return them as an int64 numpy array."""
    if isinstance(seeds, torch.Tensor):
        if seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
            raise TypeError(f"seeds: expected an integer tensor, got {seeds.dtype}")
        seeds = seeds.detach().cpu().numpy()
    elif isinstance(seeds, np.ndarray):
        if not np.issubdtype(seeds.dtype, np.integer):
            raise TypeError(f"seeds: expected an integer array, got {seeds.dtype}")
    else:
        raise TypeError(f"seeds: expected a torch.Tensor or numpy array, got {type(seeds).__name__}")
    if seeds.ndim != 1:
        raise ValueError(f"seeds: expected a 1-D array, got shape {seeds.shape}")
    if seeds.size == 0:
        raise ValueError("seeds: expected at least one seed node, got none")
    lo, hi = int(seeds.min()), int(seeds.max())
    if lo < 0 or hi >= num_nodes:
        raise ValueError(f"seeds: node ids must lie in [0, {num_nodes}), found {lo if lo < 0 else hi}")
    return np.ascontiguousarray(seeds, dtype=np.int64)


def sample_blocks(
    graph: CSCGraph,
    seeds,
    fanouts: Sequence[int],
    *,
    key: int,
    replace: bool = False,
    method: Method = "fused",
    workspace: SamplerWorkspace | None = None,
) -> list[Block]:
    """Sample a multi-hop neighborhood of ``seeds`` and return its blocks in model order (input layer first).

    Args:
        graph: the topology.
        seeds: int tensor/array [batch], unique node ids in [0, num_nodes).
        fanouts: neighbors per node per hop, listed from the seeds outwards (``fanouts[0]`` for the seeds);
            -1 takes every neighbor, 0 none (:func:`check_fanouts`).
        key: the batch's random key (:func:`derive_key`); same key, same blocks, whatever the thread count.
        replace: sample with replacement (every node with in-edges gets exactly ``fanout`` edges; a hop
            of fanout -1 still takes each in-edge once).
        method: ``"fused"`` (the fast kernel) or ``"two_step"`` (the reference: COO, relabel, CSC).
        workspace: the fused kernel's reusable mapping array; without one, an O(num_nodes) array is
            allocated for this call (use :class:`NeighborSampler` to avoid that per batch).
    """
    if not isinstance(graph, CSCGraph):
        raise TypeError(f"graph: expected a CSCGraph, got {type(graph).__name__}")
    fanouts = check_fanouts(fanouts)
    seeds = check_seeds(seeds, graph.num_nodes)
    key = check_key(key)
    if method not in HOP_KERNELS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    nodes, hops = HOP_KERNELS[method](graph, seeds, fanouts, key, bool(replace), workspace)
    return blocks_from_hops(nodes, hops)


def _fused(graph: CSCGraph, seeds: np.ndarray, fanouts: tuple[int, ...], key: int, replace: bool,
           workspace: SamplerWorkspace | None):
    if workspace is None:
        workspace = SamplerWorkspace(graph.num_nodes)
    elif workspace.num_nodes != graph.num_nodes:
        raise ValueError(f"workspace: built for {workspace.num_nodes} nodes, graph has {graph.num_nodes}")
    return fused_hops(graph.indptr, graph.indices, seeds, fanouts, key, replace, workspace)


def _two_step(graph: CSCGraph, seeds: np.ndarray, fanouts: tuple[int, ...], key: int, replace: bool,
              workspace: SamplerWorkspace | None):
    return two_step_hops(graph.indptr, graph.indices, seeds, fanouts, key, replace)


# The neighbor-sampling kernels by method: (nodes, hops) from (graph, seeds, fanouts, key, replace,
# workspace). The samplers that use them, and what each serves, are in gnnscale.sampling.registry.
HOP_KERNELS = {"fused": _fused, "two_step": _two_step}
METHODS = tuple(HOP_KERNELS)
WORKSPACE_METHODS = ("fused",)  # the methods whose mapping array a NeighborSampler keeps across batches


def check_key(key) -> int:
    """Validate a sampling key: an int in [0, 2**63) (see :func:`derive_key`)."""
    if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
        raise TypeError(f"key: expected an int, got {type(key).__name__}")
    if not 0 <= key < 2**63:
        raise ValueError(f"key: expected an int in [0, 2**63), got {key!r}")
    return int(key)


def blocks_from_hops(nodes: np.ndarray, hops: list[tuple[np.ndarray, np.ndarray, int, int]]) -> list[Block]:
    """Blocks in model order (input layer first) from a node list and per-hop CSCs (seeds outwards);
    every block's sources are a prefix of the one node list (no copies)."""
    all_nodes = torch.from_numpy(nodes)
    blocks = [Block(indptr=torch.from_numpy(indptr), indices=torch.from_numpy(indices),
                    src_ids=all_nodes[:num_src], num_dst=int(num_dst))
              for indptr, indices, num_dst, num_src in hops]
    return blocks[::-1]


class BatchSampler:
    """What the training loops ask of a sampler: ``sample_many`` over groups of ``bulk`` consecutive
    batches. Bulk samplers draw a whole group in one call; this base draws them one by one with
    ``sample``, which subclasses implement."""

    bulk = 1

    def sample(self, seeds, key: int) -> list[Block]:
        raise NotImplementedError

    def sample_many(self, seeds_list: Sequence, keys: Sequence[int]) -> list[list[Block]]:
        """The blocks of several batches, each with its own key (same as ``sample`` one by one)."""
        if len(seeds_list) != len(keys):
            raise ValueError(f"keys: expected one key per batch ({len(seeds_list)}), got {len(keys)}")
        return [self.sample(seeds, key) for seeds, key in zip(seeds_list, keys)]


class NeighborSampler(BatchSampler):
    """Samples blocks for a fixed graph and fanouts, reusing one mapping array across batches."""

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int], *, replace: bool = False,
                 method: Method = "fused") -> None:
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        self.graph = graph
        self.fanouts = check_fanouts(fanouts)
        self.replace = replace
        self.method = method
        self.workspace = SamplerWorkspace(graph.num_nodes) if method in WORKSPACE_METHODS else None

    def sample(self, seeds, key: int) -> list[Block]:
        return sample_blocks(self.graph, seeds, self.fanouts, key=key, replace=self.replace,
                             method=self.method, workspace=self.workspace)


def set_sampler_threads(threads: int) -> None:
    """Threads used by the numba kernels (at most numba's configured maximum). The first call launches
    numba's threading layer, a thread-safe one where available (:func:`choose_threading_layer`)."""
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads: expected an int >= 1, got {threads!r}")
    choose_threading_layer()
    numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
