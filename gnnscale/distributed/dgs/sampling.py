"""DGS on the workers (Wan et al., sections III-C and IV): sampling that follows a worker's node mask
in both layouts.

How the masks reach the sampling:

* hybrid layout: the worker samples every hop itself (:class:`DGSHybridSampler`), with its own masks;
* vanilla layout: the owners of remote destinations sample them on the requester's behalf, so they
  need the requester's node mask. It travels once per refresh, not per request: :meth:`DGSVanillaSampler.refresh`
  is one collective round in which every worker sends every other its cluster weights (``num_clusters``
  floats: the super-nodes are global, see :mod:`gnnscale.distributed.dgs.explanation`), its epsilon and the
  iteration the masks were computed at. Every request then carries that iteration beside the key, and an
  owner that holds another version of the requester's masks raises instead of sampling with it. Both
  layouts therefore draw the same blocks for the same key and masks, as plain sampling does.

DGS's feature fetch on the most important dimensions is a feature store:
:class:`gnnscale.features.dgs.FeatureSampledStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.dgs.explainer import Masks, check_masks
from gnnscale.distributed.dgs.explanation import ClusterMap
from gnnscale.distributed.sampling import HybridSampler, VanillaSampler, _check_owned
from gnnscale.graph.csc import CSCGraph
from gnnscale.partition.book import PartitionBook
from gnnscale.sampling import Block, check_seeds
from gnnscale.sampling.dgs import DGSPolicy, rows_sorted, sample_blocks_dgs, sample_rows

MASK_CATEGORY = "sample"  # the per-refresh mask exchange of the vanilla layout is sampling traffic
NO_MASKS = -1  # the mask version of a worker that samples plainly
_HAS_MASKS, _REFUSED = 1.0, -1.0  # first word of a worker's entry in the exchange (0: no masks)


def check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon: expected a number in [0, 1] (--dgs-epsilon), got {epsilon!r}")
    return float(epsilon)


def check_clusters(clusters: ClusterMap, book: PartitionBook) -> None:
    """TypeError unless ``clusters`` is a ClusterMap, ValueError unless it was built for ``book``'s parts
    (the samplers here and DGS's feature store check it alike)."""
    if not isinstance(clusters, ClusterMap):
        raise TypeError(f"clusters: expected a ClusterMap, got {type(clusters).__name__}")
    if not np.array_equal(clusters.book.offsets, book.offsets):
        raise ValueError("clusters: built for another partition (its node ranges differ from book's)")


def policy_for(masks: Masks, clusters: ClusterMap, rank: int, epsilon: float) -> DGSPolicy:
    """The sampling policy of worker ``rank`` from its masks (checked to be of its explanation graph)."""
    check_masks(masks, clusters.graph_fingerprint(rank), rank, clusters.num_clusters, clusters.feature_dim)
    lo, hi = clusters.book.node_range(rank)
    return DGSPolicy(local_lo=lo, local_hi=hi, node_cluster=clusters.node_cluster,
                     cluster_weight=masks.cluster_weight, epsilon=epsilon)


class DGSHybridSampler:
    """Hybrid layout with DGS: plain fused sampling until :meth:`refresh` gives masks, then every hop
    sampled here with them (no collective).

    Args:
        graph, book, rank, fanouts, replace: as :class:`gnnscale.distributed.HybridSampler`.
        clusters: the run's cluster map.
        epsilon: share of each destination's samples moved from remote to local neighbors (0.1).
    """

    def __init__(self, graph: CSCGraph, book: PartitionBook, rank: int, fanouts: Sequence[int],
                 clusters: ClusterMap, epsilon: float = 0.1, replace: bool = False) -> None:
        self._plain = HybridSampler(graph, book, rank, fanouts, replace=replace)
        check_clusters(clusters, book)
        self.clusters, self.epsilon = clusters, check_epsilon(epsilon)
        self.rank, self.fanouts, self.replace = rank, self._plain.sampler.fanouts, bool(replace)
        self.masks: Masks | None = None
        self._policy: DGSPolicy | None = None
        graph = self._plain.sampler.graph
        self._sorted_rows = rows_sorted(graph.indptr, graph.indices)  # once: the topology never changes

    def refresh(self, masks: Masks | None) -> None:
        """Sample with ``masks`` from now on (None: plain sampling). Local, no collective; raises
        ValueError for masks of another worker's or another run's explanation graph."""
        self._policy = None if masks is None else policy_for(masks, self.clusters, self.rank, self.epsilon)
        self.masks = masks

    def sample(self, seeds, key: int) -> list[Block]:
        """Blocks in model order for this worker's ``seeds``; no collective."""
        if self._policy is None:
            return self._plain.sample(seeds, key)
        book = self.clusters.book
        lo, hi = book.node_range(self.rank)
        _check_owned(check_seeds(seeds, book.num_nodes), lo, hi, self.rank)
        inner = self._plain.sampler
        return sample_blocks_dgs(inner.graph, seeds, self.fanouts, key=key, policy=self._policy,
                                 replace=self.replace, workspace=inner.workspace, sorted_rows=self._sorted_rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class MaskTable:
    """Every worker's sampling after a refresh.

    Args:
        policies: per rank, its DGS policy, or None when it samples plainly.
        versions: per rank, the iteration its masks were computed at, or ``NO_MASKS``.
    """

    policies: list[DGSPolicy | None]
    versions: list[int]


def exchange_masks(comm: Comm, masks: Masks | None, clusters: ClusterMap, epsilon: float) -> MaskTable:
    """Every worker's sampling policy, from every worker's masks. Collective: one "sample" round of
    ``3 + num_clusters`` float64 per peer; every worker calls it at the same iteration.

    Masks of another worker's or another run's explanation graph make every worker raise ValueError
    after the round (the worker that passed them with the reason), so no worker is left waiting."""
    k, rank = clusters.num_clusters, comm.rank
    mine = torch.zeros(3 + k, dtype=torch.float64)
    refused: ValueError | None = None
    if masks is not None:
        try:
            policy_for(masks, clusters, rank, epsilon)
            mine[0], mine[1], mine[2] = _HAS_MASKS, float(masks.iteration), epsilon
            mine[3:] = torch.from_numpy(masks.cluster_weight)
        except ValueError as err:
            refused, mine[0] = err, _REFUSED
    # Collective: each worker's weights, epsilon and mask iteration, to every other worker.
    got = comm.all_to_allv([mine if j != rank else mine[:0] for j in range(comm.world_size)], MASK_CATEGORY)
    entries = [(mine if j == rank else got[j].cpu()).numpy() for j in range(comm.world_size)]
    if refused is not None:
        raise refused
    for j, entry in enumerate(entries):
        if entry.shape[0] != 3 + k:
            raise ValueError(f"clusters: rank {j} has {entry.shape[0] - 3} clusters, this worker {k}")
        if entry[0] == _REFUSED:
            raise ValueError(f"masks: rank {j} passed masks of another explanation graph to refresh() (its error "
                             "names them); every worker stops")
    policies: list[DGSPolicy | None] = []
    for j, entry in enumerate(entries):
        lo, hi = clusters.book.node_range(j)
        policies.append(None if entry[0] == 0 else DGSPolicy(
            local_lo=lo, local_hi=hi, node_cluster=clusters.node_cluster, cluster_weight=entry[3:].copy(),
            epsilon=float(entry[2])))
    return MaskTable(policies=policies,
                     versions=[int(e[1]) if e[0] == _HAS_MASKS else NO_MASKS for e in entries])


class DGSVanillaSampler(VanillaSampler):
    """Vanilla layout with DGS: owners sample a requester's remote destinations with the requester's
    key and masks. Plain until :meth:`refresh` gives masks.

    Args:
        book, rank, local_indptr, local_indices, fanouts, comm, replace: as :class:`VanillaSampler`.
        clusters: the run's cluster map.
        epsilon: as :class:`DGSHybridSampler`.
    """

    def __init__(self, book: PartitionBook, rank: int, local_indptr: np.ndarray, local_indices: np.ndarray,
                 fanouts: Sequence[int], comm: Comm, clusters: ClusterMap, epsilon: float = 0.1,
                 replace: bool = False) -> None:
        check_clusters(clusters, book)
        self.clusters, self.epsilon = clusters, check_epsilon(epsilon)
        super().__init__(book, rank, local_indptr, local_indices, fanouts, comm, replace=replace)
        self.masks: Masks | None = None
        self._policies: list[DGSPolicy | None] = [None] * comm.world_size
        self._versions = [NO_MASKS] * comm.world_size
        self._sorted_rows = rows_sorted(self.indptr, self.indices)  # once: the rows never change

    def refresh(self, masks: Masks | None) -> None:
        """Sample with ``masks`` from now on (None: plain). Collective: one "sample" round (the masks
        of every worker reach every other); every worker calls it at the same iteration."""
        table = exchange_masks(self.comm, masks, self.clusters, self.epsilon)
        self._policies, self._versions, self.masks = table.policies, table.versions, masks

    def _header(self, key: int) -> list[int]:
        return [key, self._versions[self.rank]]

    def _answer(self, requester: int, msg: np.ndarray, fanout: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        key, version = int(msg[0]), int(msg[1])
        if version != self._versions[requester]:
            raise ValueError(f"masks: rank {requester} samples with its masks of iteration {version}, this worker "
                             f"(rank {self.rank}) holds its masks of iteration {self._versions[requester]}; "
                             "refresh() must be called by every worker at the same iteration")
        return self._sample_with(self._policies[requester], msg[2:], fanout, key, hop)

    def _sample_mine(self, nodes: np.ndarray, fanout: int, key: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
        return self._sample_with(self._policies[self.rank], nodes, fanout, key, hop)

    def _sample_with(self, policy: DGSPolicy | None, nodes: np.ndarray, fanout: int, key: int,
                     hop: int) -> tuple[np.ndarray, np.ndarray]:
        if policy is None:
            return self._sample_owned(nodes, fanout, key, hop)
        return sample_rows(self.indptr, self.indices, self._lo, nodes, fanout, self.replace, key, hop, policy,
                           self._sorted_rows)
