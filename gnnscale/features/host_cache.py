"""A cache of remote feature rows in front of the partitioned store (GSplit section 3.2, Quiver, PaGraph).

Every worker keeps, beside its own part, the rows of the remote nodes most likely to be sampled: the
highest in-degree nodes it does not own (a node's chance of being drawn as a neighbor grows with its
degree; the graphs here are symmetric, so in- and out-degree agree), up to ``fraction`` of ALL nodes'
rows (GSplit's and Quiver's definition: the fraction of the input features each worker caches). A
fetch then asks the owners only for the rows that are neither owned nor cached: still exactly the two
"feature" rounds, fewer bytes.

What "one distributed cache" means here. In Quiver every GPU caches a disjoint set of rows and a miss
that a peer caches is served over NVLink, much faster than from the host. On a CPU cluster the
partitioned feature store already is that disjoint cache: every row lives in exactly one worker's
memory and a miss is served by that worker. What a second, disjoint layer would add is load balance
(a miss served by a peer instead of the owner), but it would not save a byte: every remote row crosses
the network once whoever sends it, and a disjoint cache gives each worker only 1/P of the hits. So the
caches here are chosen by one global ranking (in-degree, ties by id) and overlap (every worker holds
the same hot rows, less those it owns): each worker's hit rate is as high as its budget allows. The
workers build the caches together at set-up: every owner knows, from the shared ranking, which of its
rows each worker will cache, and sends them in one round (category ``"setup"``, sizes known on both
sides). The serving load that disjoint caches would balance is measured, not assumed: the bytes each
worker sends in the feature category are in the metrics (benchmarks/split.py prints their spread).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.features.hot_set import check_fraction, hot_set, in_degree_order
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.graph.feature_dtype import to_float32
from gnnscale.partition.book import PartitionBook

SETUP = "setup"


def cached_nodes(degrees: np.ndarray, book: PartitionBook, num_rows: int) -> list[np.ndarray]:
    """What every worker caches: ``out[q]`` (int64, sorted) holds the ``num_rows`` highest ``degrees`` among
    the nodes worker ``q`` does not own (ties by lower id; fewer when fewer nodes are remote). Every
    worker computes the same lists.

    Args:
        degrees: int [num_nodes], in-degree of every node (the whole graph's).
        book: node ownership.
        num_rows: a cache's capacity in rows.
    """
    order = in_degree_order(degrees)  # once, cut for every worker
    return [hot_set(order, num_rows, skip=book.node_range(q)) for q in range(book.num_parts)]


def global_in_degrees(local_degrees: np.ndarray, book: PartitionBook, comm: Comm) -> np.ndarray:
    """int64 [num_nodes]: every node's in-degree, from each worker's degrees of its own nodes. Collective:
    one ``"setup"`` round (every worker sends its part's degrees to every other). For layouts whose
    workers hold only their part's in-edges (vanilla); the hybrid layout reads them off its topology."""
    mine = torch.from_numpy(np.ascontiguousarray(local_degrees, dtype=np.int64))
    # Collective: every worker's degrees to every worker; parts are in rank order, so are the replies.
    parts = comm.all_to_allv([mine] * comm.world_size, SETUP)
    out = torch.cat([p.cpu() for p in parts]).numpy()
    if out.shape[0] != book.num_nodes:
        raise ValueError(f"local_degrees: expected the workers' degrees to cover {book.num_nodes} nodes, got "
                         f"{out.shape[0]}")
    return out


class CachedFeatureStore(PartitionedFeatureStore):
    """A :class:`PartitionedFeatureStore` that serves the hottest remote rows from a local cache.

    Args:
        book, rank, local_features, comm: as for :class:`PartitionedFeatureStore`.
        degrees: int [num_nodes], every node's in-degree, the same on every worker (see
            :func:`global_in_degrees`).
        fraction: the cache's capacity as a fraction of ALL nodes' rows, in [0, 1]; capped at the remote
            nodes (``fraction >= 1 - 1/P`` caches every remote row on a balanced partition).

    Construction is collective: the base's "setup" round, then one more that fills every cache.
    ``hits`` and ``remote_requests`` count, since :meth:`reset_counts`, the requested rows owned by other
    workers and how many of them the cache served.
    """

    def __init__(self, book: PartitionBook, rank: int, local_features: np.ndarray | Tensor, comm: Comm, *,
                 degrees: np.ndarray, fraction: float) -> None:
        # Checked before any collective: every worker gets the same arguments, so all raise together.
        fraction = check_fraction(fraction, "cache_fraction")
        degrees = np.asarray(degrees)
        if not isinstance(book, PartitionBook) or degrees.shape != (book.num_nodes,):
            raise ValueError(f"degrees: expected one in-degree per node of the book's graph, got shape "
                             f"{list(degrees.shape)}")
        super().__init__(book, rank, local_features, comm)
        self.fraction = fraction
        self.capacity = int(self.fraction * book.num_nodes)
        lists = cached_nodes(degrees, book, self.capacity)
        self.cached_ids = torch.from_numpy(lists[rank])
        self.cached_rows = self._fill(lists)
        # Dense position map: one random read per requested id (int32: 4 bytes per node of the graph).
        self._position = np.full(book.num_nodes, -1, dtype=np.int32 if self.cached_ids.numel() < 2**31 else np.int64)
        self._position[lists[rank]] = np.arange(lists[rank].shape[0])
        self.reset_counts()

    @property
    def num_cached(self) -> int:
        return int(self.cached_ids.numel())

    def reset_counts(self) -> None:
        self.hits = 0
        self.remote_requests = 0

    def gather(self, node_ids: Tensor) -> Tensor:
        """As :meth:`PartitionedFeatureStore.gather` (exactly 2 "feature" rounds, rows in the order asked),
        with the cached rows read locally and only the others requested from their owners."""
        ids = self._check_ids(node_ids)
        ids_np = ids.numpy()
        hit = self._position[ids_np] >= 0  # own rows are never cached
        lo, hi = self.book.node_range(self.rank)
        self.hits += int(np.count_nonzero(hit))
        self.remote_requests += int(np.count_nonzero((ids_np < lo) | (ids_np >= hi)))
        hit_t = torch.from_numpy(hit)
        fetched = super().gather(ids[~hit_t])  # collective: the 2 feature rounds, even when all hit
        out = torch.empty((ids.shape[0], self.feature_dim), dtype=torch.float32, device=self.comm.device)
        out[~hit_t.to(self.comm.device)] = fetched
        positions = torch.from_numpy(self._position[ids_np[hit]].astype(np.int64))
        out[hit_t.to(self.comm.device)] = to_float32(self.cached_rows.index_select(0, positions)).to(self.comm.device)
        return out

    def _fill(self, lists: list[np.ndarray]) -> Tensor:
        """[num_cached, d] CPU, as stored (half precision stays half): this worker's cached rows, sent by
        their owners in one round.

        Every worker derived every worker's list from the same ranking, so each owner knows what to send
        and each worker what it receives (no request round, no size exchange). Lists are sorted and parts
        own ascending ranges, so the rows arrive in the order of ``cached_ids``.
        """
        lo, hi = self.book.node_range(self.rank)
        send = []
        for q, ids in enumerate(lists):
            mine = ids[(ids >= lo) & (ids < hi)] if q != self.rank else ids[:0]
            send.append(self._read_rows(torch.from_numpy(mine)))
        mine_list = lists[self.rank]
        recv_rows = np.bincount(self.book.owner(mine_list), minlength=self.comm.world_size).tolist()
        # Collective: owners send every worker the rows it caches (the "one distributed cache" filled once).
        received = self.receive_rows(self.comm.all_to_allv(self.send_rows(send), SETUP, recv_rows=recv_rows))
        return torch.cat([r.cpu() for r in received]) if received else torch.zeros(0, self.feature_dim,
                                                                                   dtype=self.row_dtype)
