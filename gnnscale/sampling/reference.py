"""The two-step reference sampler, written the way DGL's ``sample_neighbors`` + ``to_block`` work.

Per hop: (1) sample into a COO edge list (global source, global destination); (2) ``to_block``:
a unique pass over destinations and sources to build the local numbering (destinations first, then
new sources in order of first appearance), then relabel both COO rows; (3) convert COO to CSC by a
stable sort on the destination. Each step writes an intermediate that the next reads back: the
memory traffic that fused sampling removes. It shares the neighbor choice with the fused kernel, so
for the same key both return identical blocks.
"""

from __future__ import annotations

import numpy as np

from gnnscale.sampling.choose import choose_all, count_and_offsets


def sample_neighbors_coo(indptr, indices, seeds, fanout, key, hop, replace) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: COO ``(src, dst)`` global ids of the chosen in-edges of every seed."""
    offsets = count_and_offsets(indptr, seeds, 0, fanout, replace)
    src = choose_all(indptr, indices, seeds, offsets, fanout, replace, key, hop)
    dst = np.repeat(seeds, np.diff(offsets))
    return src, dst


def to_block_coo(src: np.ndarray, dst: np.ndarray, dst_nodes: np.ndarray):
    """Step 2: local numbering (``dst_nodes`` first, then new sources by first appearance) and relabel."""
    both = np.concatenate([dst_nodes, src])
    unique, first_pos = np.unique(both, return_index=True)
    order = np.argsort(first_pos, kind="stable")
    src_nodes = both[first_pos[order]]
    local_of_unique = np.empty_like(order)
    local_of_unique[order] = np.arange(order.shape[0])
    local_src = local_of_unique[np.searchsorted(unique, src)]
    local_dst = local_of_unique[np.searchsorted(unique, dst)]
    return src_nodes, local_src, local_dst


def coo_to_csc(local_src: np.ndarray, local_dst: np.ndarray, num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 3: CSC ``(indptr, indices)`` over destinations; a stable sort keeps each node's edge order."""
    perm = np.argsort(local_dst, kind="stable")
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_dst, minlength=num_dst), out=indptr[1:])
    return indptr, local_src[perm].astype(np.int64, copy=False)


def two_step_hops(indptr, indices, seeds, fanouts, key, replace):
    """Same contract as :func:`gnnscale.sampling.fused.fused_hops`, the two-step way."""
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise ValueError("seeds: expected unique node ids, found duplicates")
    dst_nodes = seeds
    hops = []
    for hop, fanout in enumerate(fanouts):
        src, dst = sample_neighbors_coo(indptr, indices, dst_nodes, fanout, key, hop, replace)
        src_nodes, local_src, local_dst = to_block_coo(src, dst, dst_nodes)
        block_indptr, block_indices = coo_to_csc(local_src, local_dst, dst_nodes.shape[0])
        hops.append((block_indptr, block_indices, dst_nodes.shape[0], src_nodes.shape[0]))
        dst_nodes = src_nodes
    return dst_nodes, hops
