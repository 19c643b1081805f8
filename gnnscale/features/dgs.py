"""DGS's feature sampling (Wan et al., section IV): a partitioned store whose fetch sends remote rows on
the most important dimensions only.

A fetch stays 2 rounds; each request carries the requester's kept dimensions as a bitmask
(``ceil(d / 64)`` int64 words, 16 bytes for 100 dimensions) and the owner replies with those columns
only. The receiver fills a dropped dimension of a remote row with the mean of that dimension over the
row's cluster (known to every worker from start-up, :mod:`gnnscale.distributed.dgs.explanation`): the
expected value of the dimension given the community the node belongs to, so the layer's expected input
is the cluster's rather than zero (zero-filling with rescaling is unbiased only for dimensions dropped
at random, and DGS drops the same dimensions every time).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.dgs.explanation import ClusterMap
from gnnscale.distributed.dgs.sampling import check_clusters
from gnnscale.features.partitioned import CATEGORY as FEATURE_CATEGORY
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.graph.feature_dtype import as_tensor, stored_array, to_float32
from gnnscale.graph.features import ROWS_PER_PIECE, take_columns
from gnnscale.partition.book import PartitionBook


def pack_dims(keep: np.ndarray) -> Tensor:
    """int64 [ceil(d / 64)]: the bool [d] mask ``keep`` as bits (bit i of word w is dimension 64 w + i)."""
    words = (keep.shape[0] + 63) // 64
    bits = np.zeros(words * 64, dtype=bool)
    bits[:keep.shape[0]] = keep
    return torch.from_numpy(np.packbits(bits, bitorder="little").view(np.int64).copy())


def unpack_dims(words: Tensor, d: int) -> np.ndarray:
    """bool [d]: the inverse of :func:`pack_dims`."""
    return np.unpackbits(words.numpy().view(np.uint8), bitorder="little")[:d].astype(bool)


@numba.njit(parallel=True, cache=True, nogil=True)
def _fill_remote_rows(out, pos, ids, node_cluster, cluster_mean, rows, kept, dropped):
    """``out[pos[i]]``: the kept columns from ``rows[i]``, the dropped ones from the mean of the cluster
    of ``ids[i]``."""
    n = pos.shape[0]
    for piece in numba.prange((n + ROWS_PER_PIECE - 1) // ROWS_PER_PIECE):
        for i in range(piece * ROWS_PER_PIECE, min((piece + 1) * ROWS_PER_PIECE, n)):
            row = out[pos[i]]
            mean = cluster_mean[node_cluster[ids[i]]]
            for j in range(kept.shape[0]):
                row[kept[j]] = rows[i, j]
            for j in range(dropped.shape[0]):
                row[dropped[j]] = mean[dropped[j]]


class FeatureSampledStore(PartitionedFeatureStore):
    """A :class:`PartitionedFeatureStore` whose fetch can send remote rows on chosen dimensions only.

    Args:
        book, rank, local_features, comm: as :class:`PartitionedFeatureStore` (one "setup" round).
        clusters: the run's cluster map; its cluster means fill the dimensions that do not travel.
    """

    def __init__(self, book: PartitionBook, rank: int, local_features: np.ndarray | Tensor, comm: Comm,
                 clusters: ClusterMap) -> None:
        super().__init__(book, rank, local_features, comm)
        check_clusters(clusters, book)
        if clusters.feature_dim != self.feature_dim:
            raise ValueError(f"clusters: cluster means have {clusters.feature_dim} dimensions, the features "
                             f"{self.feature_dim}")
        self.clusters = clusters
        self._stored = stored_array(local_features)
        self._words = (self.feature_dim + 63) // 64

    def gather(self, node_ids: Tensor, dims=None) -> Tensor:
        """float32 [len(node_ids), d]: the feature rows of ``node_ids``. Collective, exactly 2 "feature"
        rounds, as :meth:`PartitionedFeatureStore.gather`.

        Args:
            node_ids: int64 [n], global ids; repeats allowed.
            dims: None (every dimension travels: the plain fetch), or the dimensions that travel for
                remote rows (sorted unique ids in [0, d), e.g. ``Masks.top_dims(0.85)``); the others are
                filled with the row's cluster mean. Rows owned here are always read whole.
        """
        if dims is None:
            return super().gather(node_ids)
        keep = self._check_dims(dims)
        ids = self._check_ids(node_ids)
        world, rank = self.comm.world_size, self.rank
        owners = torch.from_numpy(self.book.owner(ids.numpy()))
        order = torch.argsort(owners, stable=True)
        counts = torch.bincount(owners, minlength=world).tolist()
        grouped_ids, grouped_pos = ids[order].split(counts), order.split(counts)
        words = pack_dims(keep)
        requests = [torch.cat([words, grouped_ids[j]]) if j != rank and counts[j] else ids[:0] for j in range(world)]
        # Round 1: ask every owner for the rows we need from it, and say which dimensions.
        asked = self.comm.all_to_allv(requests, FEATURE_CATEGORY)
        replies = [self._reply(asked[j].cpu()) for j in range(world)]
        # Round 2: every owner sends the asked columns of the asked rows, flattened, in the order asked.
        received = self.receive_rows(self.comm.all_to_allv(self.send_rows(replies), FEATURE_CATEGORY))
        out = torch.empty((ids.shape[0], self.feature_dim), dtype=torch.float32)
        kept, dropped = np.flatnonzero(keep), np.flatnonzero(~keep)
        for j in range(world):
            if j == rank:
                out[grouped_pos[j]] = to_float32(self._read_rows(grouped_ids[j]))
                continue
            # Widened in one vectorised call, then every row written once: its kept columns from the
            # reply, its dropped ones from its cluster's mean.
            rows = to_float32(received[j].cpu().view(-1, kept.shape[0])).numpy()
            _fill_remote_rows(out.numpy(), grouped_pos[j].numpy(), grouped_ids[j].numpy(), self.clusters.node_cluster,
                              self.clusters.cluster_mean, rows, kept, dropped)
        return out.to(self.comm.device)

    def _reply(self, msg: Tensor) -> Tensor:
        """[rows * kept], as stored: the asked columns of the asked rows (empty for an empty request)."""
        if msg.shape[0] == 0:
            return torch.empty(0, dtype=self.row_dtype)
        keep = np.flatnonzero(unpack_dims(msg[:self._words], self.feature_dim))
        local = (msg[self._words:] - self._offset).numpy()
        return as_tensor(take_columns(self._stored, local, keep)).reshape(-1)

    def _check_dims(self, dims) -> np.ndarray:
        """bool [d] from sorted unique dimension ids."""
        d = self.feature_dim
        arr = dims.cpu().numpy() if isinstance(dims, Tensor) else np.asarray(dims)
        if arr.ndim != 1 or arr.shape[0] == 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"dims: expected a non-empty 1-D array of dimension ids (Masks.top_dims), got "
                             f"{arr.dtype} of shape {arr.shape}")
        if arr[0] < 0 or arr[-1] >= d or np.any(np.diff(arr) <= 0):
            raise ValueError(f"dims: expected sorted unique dimension ids in [0, {d}), got {arr[:8].tolist()}"
                             f"{'...' if arr.shape[0] > 8 else ''}")
        keep = np.zeros(d, dtype=bool)
        keep[arr] = True
        return keep
