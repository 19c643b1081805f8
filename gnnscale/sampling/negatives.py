"""Keyed negative sampling for link prediction: node pairs drawn uniformly, the same for the same key on
any device and in any worker.

Two laws, PyG's two (``LinkNeighborLoader(neg_sampling=...)``):

- ``"uniform"`` (PyG's ``binary``): ``ratio`` pairs per positive edge, both endpoints uniform over
  ``[0, num_nodes)``; scored against label 0 (binary cross-entropy, ROC-AUC, average precision).
- ``"per_source"`` (PyG's ``triplet``, ogbl-citation2's protocol): ``ratio`` destinations per positive
  edge, uniform over ``[0, num_nodes)``, each paired with that edge's source; ranked against the positive
  (softmax loss, MRR, Hits@K).

Negatives are not filtered against the graph's edges (neither are PyG's by default): on a sparse graph a
uniform pair is an edge with probability about ``num_edges / num_nodes**2``. Pair ``i``'s draws come from
the stream ``node_stream(key, stream, i)`` (:mod:`gnnscale.torch_keys`, the numba kernels' hash), so a
batch's negatives depend on its key and its position in the batch only.

A link batch's seeds are the endpoints of its pairs (:func:`batch_pairs`): one sampler pass draws every
embedding its positives and negatives need.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnscale.torch_keys import node_stream, uniform_below

NEGATIVE_LAWS = ("uniform", "per_source")
_STREAM = 0x4E4547  # the hop slot of node_stream: negatives never share draws with neighbor sampling's hops


def check_negative_args(num_nodes: int, ratio: int, law: str) -> None:
    if law not in NEGATIVE_LAWS:
        raise ValueError(f"neg_sampling: expected one of {NEGATIVE_LAWS}, got {law!r}")
    if not isinstance(ratio, int) or isinstance(ratio, bool) or ratio < 1:
        raise ValueError(f"neg_ratio: expected an int >= 1 negatives per positive edge, got {ratio!r}")
    if not 1 <= num_nodes < 2**32:
        raise ValueError(f"num_nodes: negatives are drawn over [0, num_nodes) with 1 <= num_nodes < 2**32, got "
                         f"{num_nodes}")


def draw_node_ids(num_pairs: int, draws_per_pair: int, num_nodes: int, key: int, device: torch.device | str = "cpu"
                  ) -> Tensor:
    """int64 [num_pairs, draws_per_pair]: uniform node ids in ``[0, num_nodes)``, row ``i`` from pair
    ``i``'s stream under ``key``."""
    states = node_stream(key, _STREAM, torch.arange(num_pairs, dtype=torch.int64, device=device))
    draws = torch.arange(draws_per_pair, dtype=torch.int64, device=device)
    return uniform_below(states.unsqueeze(1), draws.unsqueeze(0), num_nodes)


def negative_pairs(sources: Tensor, num_nodes: int, ratio: int, key: int, law: str = "uniform"
                   ) -> tuple[Tensor, Tensor]:
    """``(src, dst)`` int64 [len(sources) * ratio] each: the negatives of the positive edges whose
    sources are ``sources`` (on their device), ``ratio`` per edge, edge ``i``'s at ``i * ratio ..``.

    ``"uniform"`` draws both endpoints; ``"per_source"`` keeps ``sources[i]`` and draws the destination.
    """
    check_negative_args(num_nodes, ratio, law)
    n = int(sources.shape[0])
    if law == "per_source":
        dst = draw_node_ids(n, ratio, num_nodes, key, sources.device).reshape(-1)
        return sources.to(torch.int64).repeat_interleave(ratio), dst
    ids = draw_node_ids(n, 2 * ratio, num_nodes, key, sources.device).view(n, ratio, 2)
    return ids[..., 0].reshape(-1), ids[..., 1].reshape(-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPairs:
    """A link batch's pairs and the seed set that is sampled for them.

    Args:
        pairs: int64 [2, num_pairs]: global ids, sources in row 0; the ``num_pos`` positives first, then
            their negatives (positive ``i``'s from column ``num_pos + i * ceil(ratio)`` on).
        num_pos: the positives.
        seeds: int64 [num_seeds]: every endpoint of ``pairs`` once, ascending (PyG's seed order): the nodes
            sampled for the batch.
        local: int64 [2, num_pairs]: ``pairs`` as positions in ``seeds`` (``seeds[local] == pairs``).
    """

    pairs: Tensor
    num_pos: int
    seeds: Tensor
    local: Tensor


def batch_pairs(src: Tensor, dst: Tensor, num_nodes: int, key: int, *, ratio: float = 0, law: str = "uniform"
                ) -> BatchPairs:
    """The positive pairs ``(src[i], dst[i])``, their keyed negatives (:func:`negative_pairs` under ``key``),
    then the pairs' unique endpoints and each pair's position among them, on the device of ``src``.

    Args:
        src, dst: int [num_pos]: the positive pairs' endpoints (global ids).
        num_nodes: negatives are drawn over ``[0, num_nodes)``.
        key: the batch's key.
        ratio: negatives per positive; 0 (default): none. ``"uniform"`` takes a fraction too (PyG's binary
            ``amount``): ``ceil(num_pos * ratio)`` negatives, the first ones of ``ceil(ratio)`` per positive.
            ``"per_source"`` takes whole numbers only.
        law: ``"uniform"`` or ``"per_source"`` (module docstring).
    """
    if law not in NEGATIVE_LAWS:
        raise ValueError(f"neg_sampling: expected one of {NEGATIVE_LAWS}, got {law!r}")
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0 <= ratio < math.inf \
            or (law == "per_source" and ratio != int(ratio)):
        kind = "a whole number" if law == "per_source" else "a number"
        raise ValueError(f"neg_ratio: expected {kind} >= 0 of negatives per positive edge ({law!r} negatives), "
                         f"got {ratio!r}")
    if src.dim() != 1 or src.shape != dst.shape:
        raise ValueError(f"src, dst: expected two 1-D tensors of the same length, got shapes {tuple(src.shape)} and "
                         f"{tuple(dst.shape)}")
    num_pos = int(src.shape[0])
    if ratio > 0:
        num_neg = math.ceil(num_pos * ratio)
        neg_src, neg_dst = negative_pairs(src, num_nodes, math.ceil(ratio), key, law)
        src, dst = torch.cat([src, neg_src[:num_neg]]), torch.cat([dst, neg_dst[:num_neg]])
    ends = torch.cat([src, dst])
    nodes, local = ends.unique(return_inverse=True)
    return BatchPairs(pairs=ends.view(2, -1), num_pos=num_pos, seeds=nodes, local=local.view(2, -1))
