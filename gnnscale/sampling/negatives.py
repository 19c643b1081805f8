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
"""

from __future__ import annotations

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
