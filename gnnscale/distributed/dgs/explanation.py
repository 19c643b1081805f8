"""The explanation graph of DGS (Wan et al., section III-B): what a worker's model is explained on,
small enough that one optimisation step costs milliseconds.

Super-nodes come from clustering, once, at start-up (:func:`build_cluster_map`):

* every worker splits its own part into ``clusters_per_part`` clusters with METIS on the part's own
  subgraph (the partitioner's community structure one level down; the paper pools by the partition
  result for the same reason: no extra clustering model);
* one exchange makes the cluster of every node (``ClusterMap.node_cluster``) and every cluster's mean
  feature vector known to every worker. Cluster ids are global (``part * C + c``), so a remote node's
  super-node is a lookup on any worker: the vanilla layout's owners can apply a requester's node mask,
  and the feature store can fill dropped dimensions with the cluster mean.

The explanation graph of worker ``p`` (:class:`ExplanationGraph`) is the sampled computation graph of
a fixed set of ``p``'s training nodes (the *probes*), drawn and fetched once, with real features. Its
remote nodes are pooled into super-nodes: the remote boundary partitioned by the owners' clusters, one
node-mask entry per super-node shared by its members. Departure from the paper, measured: the paper
pools node *features* too (one node per community, mean features, pooled edges). We built that graph
first; a GraphSAGE trained on individual nodes predicted the pooled nodes almost uniformly (mean top
probability 0.08 over 20 classes, against 0.24 on real nodes of the same model), because mean features
lose the per-node variance the model's ReLUs were trained on, and the explanation of a near-uniform
prediction ranked informative and noise dimensions alike. Pooling only the mask keeps the model's
inputs in distribution at the same number of explanation variables; 64 probes cost about 8 ms of CPU
per optimisation step (a quarter of a training iteration of batch 512 on the same graph).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.graph.csc import CSCGraph, csc_from_coo
from gnnscale.graph.feature_dtype import decode
from gnnscale.keys import STREAM_EXPLAIN, derive_key
from gnnscale.partition.assign import assign_parts
from gnnscale.partition.book import PartitionBook
from gnnscale.partition.directory import LocalPartition
from gnnscale.sampling.block import Block
from gnnscale.sampling.choose import ALL_NEIGHBORS

DEFAULT_CLUSTERS_PER_PART = 32
DEFAULT_PROBES = 64
# An optimisation step's cost grows with the explanation graph's input rows (the masking and the first
# layer dominate it). 64 probes with fanouts 15,10,5 on the products-shaped graph gave 51,449 rows, a
# 1.0 s explanation and 8-13% of the CPU of 4 workers sharing 2 cores (docs/dgs.md); 17 probes under
# this bound, 3-5%.
MAX_EXPLANATION_ROWS = 16384
MIN_PROBES = 8
_FEATURE_CHUNK_ROWS = 1 << 16  # rows per step when summing (possibly memory-mapped) features


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMap:
    """The super-nodes, the same on every worker.

    Args:
        book: the partition's node ranges.
        clusters_per_part: ``C``; cluster ``c`` of part ``p`` has the global id ``p * C + c``.
        node_cluster: int32 [num_nodes], global cluster id of every node.
        cluster_mean: float32 [num_parts * C, feature_dim], mean features of each cluster (0 when empty).
        cluster_size: int64 [num_parts * C], nodes per cluster.
        fingerprint: hex digest of the offsets, ``C`` and ``node_cluster``: masks carry it, so masks
            computed on other super-nodes (another partition, another C) are recognised and refused.
    """

    book: PartitionBook
    clusters_per_part: int
    node_cluster: np.ndarray
    cluster_mean: np.ndarray
    cluster_size: np.ndarray
    fingerprint: str

    def __post_init__(self) -> None:
        k = self.book.num_parts * self.clusters_per_part
        if self.node_cluster.dtype != np.int32 or self.node_cluster.shape != (self.book.num_nodes,):
            raise ValueError(f"node_cluster: expected int32 [{self.book.num_nodes}], got {self.node_cluster.dtype} "
                             f"{self.node_cluster.shape}")
        if self.cluster_mean.ndim != 2 or self.cluster_mean.shape[0] != k or self.cluster_size.shape != (k,):
            raise ValueError(f"cluster_mean, cluster_size: expected {k} clusters, got {self.cluster_mean.shape} "
                             f"and {self.cluster_size.shape}")

    @property
    def num_clusters(self) -> int:
        return int(self.cluster_size.shape[0])

    @property
    def feature_dim(self) -> int:
        return int(self.cluster_mean.shape[1])

    def graph_fingerprint(self, part: int) -> str:
        """The fingerprint of part ``part``'s explanation graph (and of masks computed on it)."""
        return f"{self.fingerprint}/part{part}"


def part_rows(part: LocalPartition) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of the part's own nodes in either layout: ``(indptr int64 [n_p + 1] from 0,
    indices [e_p] global source ids)``; node ``lo + i``'s in-edges are ``indices[indptr[i]:indptr[i + 1]]``."""
    if isinstance(part.topology, CSCGraph):
        lo, hi = part.book.node_range(part.part)
        indptr = part.topology.indptr
        return indptr[lo:hi + 1] - indptr[lo], part.topology.indices[indptr[lo]:indptr[hi]]
    return part.topology.local_indptr, part.topology.local_indices


def cluster_part(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int, num_clusters: int,
                 seed: int = 0) -> np.ndarray:
    """int64 [hi - lo] in [0, num_clusters): METIS clusters of the part's own subgraph (edges between
    its nodes, directions ignored), equal sizes to within one node. Fewer nodes than clusters: one
    node per cluster, the rest empty."""
    n = hi - lo
    k = min(num_clusters, n)
    if k <= 1:
        return np.zeros(n, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    keep = (indices >= lo) & (indices < hi)
    own = csc_from_coo(np.asarray(indices[keep], dtype=np.int64) - lo, dst[keep], n)
    return assign_parts(own, k, "metis", seed=seed)


def cluster_sums(features: np.ndarray, clusters: np.ndarray, num_clusters: int) -> np.ndarray:
    """float64 [num_clusters, d + 1]: per cluster the feature sum and (last column) the node count."""
    d = features.shape[1]
    out = torch.zeros(num_clusters, d + 1, dtype=torch.float64)
    for start in range(0, features.shape[0], _FEATURE_CHUNK_ROWS):
        rows = decode(features[start:start + _FEATURE_CHUNK_ROWS]).to(torch.float64)
        idx = torch.from_numpy(np.asarray(clusters[start:start + _FEATURE_CHUNK_ROWS], dtype=np.int64))
        out[:, :d].index_add_(0, idx, rows)
        out[:, d].index_add_(0, idx, torch.ones(idx.shape[0], dtype=torch.float64))
    return out.numpy()


def fingerprint_of(offsets: np.ndarray, clusters_per_part: int, node_cluster: np.ndarray) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(offsets, dtype=np.int64).tobytes())
    digest.update(int(clusters_per_part).to_bytes(8, "little"))
    digest.update(np.ascontiguousarray(node_cluster).tobytes())
    return digest.hexdigest()[:16]


def build_cluster_map(part: LocalPartition, comm: Comm, clusters_per_part: int = DEFAULT_CLUSTERS_PER_PART,
                      seed: int = 0) -> ClusterMap:
    """Cluster this worker's part and learn every other part's clusters. Collective, once at start-up:
    2 "setup" rounds (the cluster of every node, then every cluster's feature sum and size).

    Args:
        part: this worker's partition (``part.part == comm.rank``), either layout.
        comm: the collectives; every worker must pass the same ``clusters_per_part``.
        clusters_per_part: ``C`` >= 1, super-nodes per part (default 32).
        seed: METIS' seed.
    """
    if isinstance(clusters_per_part, bool) or not isinstance(clusters_per_part, int) or clusters_per_part < 1:
        raise ValueError(f"clusters_per_part: expected an int >= 1, got {clusters_per_part!r}")
    if part.part != comm.rank or part.num_parts != comm.world_size:
        raise ValueError(f"part: expected part {comm.rank} of {comm.world_size} (this worker), got part "
                         f"{part.part} of {part.num_parts}")
    rank, world, c = comm.rank, comm.world_size, clusters_per_part
    lo, hi = part.book.node_range(rank)
    local = cluster_part(*part_rows(part), lo, hi, c, seed)
    mine = torch.from_numpy((local + rank * c).astype(np.int32))
    nobody = mine[:0]
    # Collective: every worker sends its nodes' clusters to every other worker.
    got = comm.all_to_allv([mine if j != rank else nobody for j in range(world)], "setup")
    node_cluster = np.concatenate([(mine if j == rank else got[j]).numpy() for j in range(world)]).astype(np.int32)
    sums = torch.from_numpy(cluster_sums(part.features, local, c))
    # Collective: every worker sends its clusters' feature sums and sizes to every other worker.
    got = comm.all_to_allv([sums if j != rank else sums[:0] for j in range(world)], "setup")
    for j in range(world):
        if j != rank and got[j].shape[0] != c:
            raise ValueError(f"clusters_per_part: rank {j} uses {got[j].shape[0]}, this worker {c}; pass the same "
                             "value on every worker")
    stats = torch.cat([sums if j == rank else got[j] for j in range(world)]).numpy()
    return _cluster_map(part.book, c, node_cluster, stats)


def build_cluster_map_local(graph: CSCGraph, book: PartitionBook, features: np.ndarray,
                            clusters_per_part: int = DEFAULT_CLUSTERS_PER_PART, seed: int = 0) -> ClusterMap:
    """The :func:`build_cluster_map` of every worker, computed in one process from the whole relabelled
    graph and feature matrix (for tests, and for tools that study one part's explanation)."""
    if isinstance(clusters_per_part, bool) or not isinstance(clusters_per_part, int) or clusters_per_part < 1:
        raise ValueError(f"clusters_per_part: expected an int >= 1, got {clusters_per_part!r}")
    c = clusters_per_part
    node_cluster, stats = [], []
    for p in range(book.num_parts):
        lo, hi = book.node_range(p)
        rows = graph.indptr[lo:hi + 1] - graph.indptr[lo], graph.indices[graph.indptr[lo]:graph.indptr[hi]]
        local = cluster_part(*rows, lo, hi, c, seed)
        node_cluster.append((local + p * c).astype(np.int32))
        stats.append(cluster_sums(features[lo:hi], local, c))
    return _cluster_map(book, c, np.concatenate(node_cluster), np.concatenate(stats))


def _cluster_map(book: PartitionBook, c: int, node_cluster: np.ndarray, stats: np.ndarray) -> ClusterMap:
    """The map from every node's cluster and every cluster's [feature sum, size] rows."""
    size = stats[:, -1].round().astype(np.int64)
    mean = (stats[:, :-1] / np.maximum(size, 1)[:, None]).astype(np.float32)
    return ClusterMap(book=book, clusters_per_part=c, node_cluster=node_cluster, cluster_mean=mean,
                      cluster_size=size, fingerprint=fingerprint_of(book.offsets, c, node_cluster))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplanationGraph:
    """One worker's explanation graph: the sampled computation graph of a fixed set of its own training
    nodes (the probes), with real features, whose remote nodes are pooled into super-nodes for the
    node mask.

    Args:
        part: the worker (part) it explains.
        blocks: the probes' blocks in model order, as the training sampler draws them.
        x: float32 [blocks[0].num_src, d], the input features (remote rows fetched once).
        baseline: float32 [d], the mean feature vector of all nodes: what masked values move to.
        super_of_row: int64 [blocks[0].num_src], the super-node of each input row (index into
            ``super_cluster``), -1 for the part's own nodes.
        super_cluster: int64 [num_super], the global cluster of each super-node, increasing.
        num_clusters: global cluster count (the length of a node mask over all clusters).
        fingerprint: ``ClusterMap.graph_fingerprint(part)``.
    """

    part: int
    blocks: list[Block]
    x: Tensor
    baseline: Tensor
    super_of_row: Tensor
    super_cluster: np.ndarray
    num_clusters: int
    fingerprint: str

    @property
    def num_probes(self) -> int:
        return self.blocks[-1].num_dst

    @property
    def num_super(self) -> int:
        return int(self.super_cluster.shape[0])

    @property
    def feature_dim(self) -> int:
        return int(self.x.shape[1])


def explanation_graph_from_batch(blocks: list[Block], x: Tensor, clusters: ClusterMap, part: int) -> ExplanationGraph:
    """The explanation graph of part ``part`` from one sampled batch of its nodes and its input features
    (local computation, no collective)."""
    if not blocks or not all(isinstance(b, Block) for b in blocks):
        raise TypeError("blocks: expected a non-empty list of Blocks (model order)")
    ids = blocks[0].src_ids.numpy()
    if x.shape != (ids.shape[0], clusters.feature_dim):
        raise ValueError(f"x: expected shape [{ids.shape[0]}, {clusters.feature_dim}], got {tuple(x.shape)}")
    lo, hi = clusters.book.node_range(part)
    cluster = clusters.node_cluster[ids].astype(np.int64)
    remote = (ids < lo) | (ids >= hi)
    super_cluster, inverse = np.unique(cluster[remote], return_inverse=True)
    super_of_row = np.full(ids.shape[0], -1, dtype=np.int64)
    super_of_row[remote] = inverse
    size = clusters.cluster_size
    baseline = (clusters.cluster_mean.astype(np.float64) * size[:, None]).sum(0) / max(int(size.sum()), 1)
    return ExplanationGraph(part=part, blocks=list(blocks), x=x.to(torch.float32),
                            baseline=torch.from_numpy(baseline.astype(np.float32)),
                            super_of_row=torch.from_numpy(super_of_row), super_cluster=super_cluster,
                            num_clusters=clusters.num_clusters, fingerprint=clusters.graph_fingerprint(part))


def default_probes(fanouts) -> int:
    """``DEFAULT_PROBES``, fewer where the fanouts make a probe's sampled graph large: the most whose
    input rows stay within ``MAX_EXPLANATION_ROWS`` by the bound ``1 + f1 + f1 f2 + ...`` rows per probe
    (at least ``MIN_PROBES``). 64 for fanouts 10,5 or 10,10; 17 for 15,10,5. A fanout of -1 (every
    neighbor) bounds nothing: ``MIN_PROBES``."""
    if any(int(fanout) == ALL_NEIGHBORS for fanout in fanouts):
        return MIN_PROBES
    per_probe, width = 1, 1
    for fanout in fanouts:
        width *= int(fanout)
        per_probe += width
    return max(MIN_PROBES, min(DEFAULT_PROBES, MAX_EXPLANATION_ROWS // per_probe))


def choose_probes(part: LocalPartition, num_probes: int, seed: int = 0) -> np.ndarray:
    """int64, sorted: ``num_probes`` of the part's training nodes (all of them if fewer; the part's nodes
    when it has no training node), a fixed random choice by ``(seed, part)``."""
    if isinstance(num_probes, bool) or not isinstance(num_probes, int) or num_probes < 1:
        raise ValueError(f"num_probes: expected an int >= 1, got {num_probes!r}")
    pool = np.asarray(part.train_idx, dtype=np.int64)
    if pool.shape[0] == 0:
        lo, hi = part.book.node_range(part.part)
        pool = np.arange(lo, hi, dtype=np.int64)
    rng = np.random.default_rng(derive_key(seed, 0, 1, part.part, STREAM_EXPLAIN))
    return np.sort(rng.choice(pool, min(num_probes, pool.shape[0]), replace=False))


def build_explanation_graph(part: LocalPartition, sampler, store, clusters: ClusterMap,
                            num_probes: int = DEFAULT_PROBES, seed: int = 0) -> ExplanationGraph:
    """This worker's explanation graph: its probes sampled with the training sampler and their input
    rows fetched once. Collective (one ``sampler.sample`` and one ``store.gather``, so the layout's
    sample rounds and 2 feature rounds): every worker calls it once, at start-up.

    Args:
        part: this worker's partition.
        sampler: the training sampler (plain), ``sample(seeds, key) -> list[Block]``.
        store: the feature store, ``gather(node_ids) -> Tensor``.
        clusters: the run's cluster map.
        num_probes: probe nodes, >= 1 (default 64): the cost of one optimisation step grows with it.
        seed: the run's seed (the probes and their sampling key derive from it).
    """
    probes = choose_probes(part, num_probes, seed)
    blocks = sampler.sample(torch.from_numpy(probes), derive_key(seed, 0, 2, part.part, STREAM_EXPLAIN))
    x = store.gather(blocks[0].src_ids).cpu()
    return explanation_graph_from_batch(blocks, x, clusters, part.part)
