"""A worker's share of a link task: the message-passing topology of its view and the supervision edges it
owns, each positive edge belonging to the owner of its destination.

The random split is a keyed hash of each edge's unordered pair of *original* node ids
(:mod:`gnnscale.graph.link_split`), so every worker decides its own in-edges alone and all of them (and a
run in one process) agree on the split without drawing, gathering or writing a global edge list:
``gnnscale partition`` needs no link option. Evaluation negatives are drawn once per worker from the
seed (:func:`eval_negatives`), the same in every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.link_split import (LinkSplit, csc_edge_codes, edge_destinations, keep_edges, random_link_split,
                                      read_link_split)
from gnnscale.keys import derive_key
from gnnscale.partition.directory import LocalPartition, PartRows
from gnnscale.sampling.negatives import negative_pairs
from gnnscale.train.batches import EVAL_EPOCH
from gnnscale.train.tasks.link_config import LinkConfig

STREAM_LINK_SPLIT = 0x4C494E4B  # "LINK": the random split's key
STREAM_EVAL_NEGATIVES = 0x4C4E4547  # "LNEG": evaluation negatives, per split and worker
EVAL_SPLITS = ("val", "test")


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalPairs:
    """One evaluation split's pairs on this worker.

    Args:
        pos: int64 [2, n], the positives this worker owns.
        neg: int64 [2, n * k], their negatives; positive ``i``'s are ``neg[:, i * k:(i + 1) * k]``.
    """

    pos: Tensor
    neg: Tensor


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkEdges:
    """This worker's supervision edges.

    Args:
        train: int64 [2, n_train], (source, destination) global ids, destinations owned by this worker.
        val, test: the evaluation splits (:class:`EvalPairs`).
        num_nodes: nodes of the whole graph (the range negatives are drawn from).
    """

    train: Tensor
    val: EvalPairs
    test: EvalPairs
    num_nodes: int

    def split(self, name: str) -> EvalPairs:
        return self.val if name == "val" else self.test


def split_key(seed: int) -> int:
    return derive_key(seed, stream=STREAM_LINK_SPLIT)


def owned(edges: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The columns of ``edges`` [2, n] whose destination is in ``[lo, hi)``."""
    return edges[:, (edges[1] >= lo) & (edges[1] < hi)]


def eval_negatives(pos: np.ndarray, given: np.ndarray | None, link: LinkConfig, num_nodes: int, key: int) -> Tensor:
    """int64 [2, n * k]: the split file's negatives of ``pos`` where given (``target_node_neg``, [n, k]),
    else ``link.eval_ratio`` per positive drawn under ``key`` by the metric's law."""
    if given is not None:
        k = given.shape[1]
        return torch.from_numpy(np.stack([np.repeat(pos[0], k), given.reshape(-1)]))
    if pos.shape[1] == 0:
        return torch.zeros((2, 0), dtype=torch.int64)
    src, dst = negative_pairs(torch.from_numpy(pos[0]), num_nodes, link.eval_ratio, key, link.eval_law)
    return torch.stack([src, dst])


def whole_view_split(part: LocalPartition, link: LinkConfig, seed: int, original_ids: np.ndarray | None) -> LinkSplit:
    """The split of the replicated topology (one process, or a hybrid worker: the pairs of its own nodes)."""
    if link.link_split is not None:
        return read_link_split(part.topology, link.link_split)
    return random_link_split(part.topology, link.edge_split, split_key(seed), original_ids,
                             rows=part.book.node_range(part.part))


def own_view_split(part: LocalPartition, link: LinkConfig, seed: int, original_ids: np.ndarray) -> tuple[PartRows, LinkSplit]:
    """A vanilla worker's rows without its validation and test in-edges, and its own supervision edges."""
    rows: PartRows = part.topology
    codes = csc_edge_codes(rows.local_indptr, rows.local_indices, link.edge_split, split_key(seed), original_ids,
                           first_row=rows.node_offset)
    src = np.asarray(rows.local_indices, dtype=np.int64)
    dst = edge_destinations(rows.local_indptr) + rows.node_offset
    indptr, indices = keep_edges(rows.local_indptr, rows.local_indices, codes == 0)
    kept = PartRows(local_indptr=indptr, local_indices=indices, node_offset=rows.node_offset, num_nodes=rows.num_nodes)
    # A stand-in graph: only the edges matter here (the worker samples through its rows).
    split = LinkSplit(graph=CSCGraph(indptr=np.zeros(1, np.int64), indices=np.zeros(0, np.int32), num_nodes=0),
                      train=np.stack([src[codes == 0], dst[codes == 0]]),
                      val=np.stack([src[codes == 1], dst[codes == 1]]), test=np.stack([src[codes == 2], dst[codes == 2]]))
    return kept, split


def link_partition(part: LocalPartition, link: LinkConfig, seed: int, partition_dir: Path | None,
                   rank: int) -> tuple[LocalPartition, LinkEdges]:
    """This worker's partition over the message-passing topology, and the supervision edges it owns."""
    original_ids = None if partition_dir is None else np.load(Path(partition_dir) / "new_to_old.npy", mmap_mode="r")
    if part.view == "whole":
        split = whole_view_split(part, link, seed, original_ids)
        part = replace(part, topology=split.graph)
    else:
        if link.link_split is not None:
            raise ValueError("link_split: a dataset's own split trains in one process; a partition directory uses "
                             "--edge-split")
        rows, split = own_view_split(part, link, seed, original_ids)
        part = replace(part, topology=rows)
    lo, hi = part.book.node_range(part.part)
    num_nodes = int(part.book.num_nodes)
    train = owned(split.train, lo, hi)
    if train.shape[1] == 0:
        raise ValueError(f"edge_split: the split leaves part {part.part} no training edge (its nodes have no "
                         "training in-edges); raise the train fraction or use fewer parts")
    evals = {}
    for i, (name, pos, given) in enumerate((("val", split.val, split.val_neg), ("test", split.test, split.test_neg))):
        keep = (pos[1] >= lo) & (pos[1] < hi)
        mine = pos[:, keep]
        key = derive_key(seed, EVAL_EPOCH, i, rank, STREAM_EVAL_NEGATIVES)
        neg = eval_negatives(mine, None if given is None else given[keep], link, num_nodes, key)
        evals[name] = EvalPairs(pos=torch.from_numpy(np.ascontiguousarray(mine)), neg=neg)
    return part, LinkEdges(train=torch.from_numpy(np.ascontiguousarray(train)), val=evals["val"], test=evals["test"],
                           num_nodes=num_nodes)
