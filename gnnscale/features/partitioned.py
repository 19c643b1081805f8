"""Node features partitioned by owner: every worker holds its part's rows and fetches the rest.

A fetch is FastSample's two feature rounds: (1) every worker sends each owner the ids it needs from
it, (2) every owner replies with those rows. Rows this worker owns are read locally. Both the hybrid
and the vanilla layouts partition features this way.

Rows travel as they are stored: half-precision parts (float16, bfloat16) send half the bytes, and the
receiver widens them to float32 as they arrive (:mod:`gnnscale.graph.feature_dtype`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gnnscale.distributed.comm import Comm, check_placement
from gnnscale.graph.feature_dtype import as_tensor, stored_name, to_float32, torch_dtype
from gnnscale.partition.book import PartitionBook

CATEGORY = "feature"


class PartitionedFeatureStore:
    """The rows of one part of the feature matrix, and collective fetches of any rows.

    Args:
        book: node ownership; part ``p`` is worker ``p`` (``book.num_parts == comm.world_size``).
        rank: this worker (``comm.rank``).
        local_features: [n_p, d], the rows of global ids ``book.node_range(rank)`` in order; numpy
            (possibly memory-mapped, read row by row on demand) or a CPU tensor; float32, float16 or
            bfloat16 (uint16 bit patterns in numpy), the same on every worker.
        comm: the collectives; construction costs one "setup" round (checks that every worker has the
            same feature width).
    """

    def __init__(self, book: PartitionBook, rank: int, local_features: np.ndarray | Tensor, comm: Comm) -> None:
        check_placement(book, rank, comm)
        if not isinstance(local_features, (np.ndarray, Tensor)):
            raise TypeError(f"local_features: expected a numpy array or torch.Tensor, got "
                            f"{type(local_features).__name__}")
        try:
            self.feature_dtype = stored_name(local_features)
        except TypeError as err:
            raise TypeError(f"local_features: {err}") from None
        lo, hi = book.node_range(rank)
        if local_features.ndim != 2 or local_features.shape[0] != hi - lo:
            raise ValueError(f"local_features: expected shape [{hi - lo}, d] (part {rank} owns ids [{lo}, {hi})), "
                             f"got {tuple(local_features.shape)}")
        self.book = book
        self.rank = rank
        self.comm = comm
        self.local_features = local_features
        self.feature_dim = int(local_features.shape[1])
        self._offset = lo
        self._check_same_width()

    def gather(self, node_ids: Tensor) -> Tensor:
        """float32 [len(node_ids), d] on ``comm.device``: the feature rows of ``node_ids``, in their order.

        Collective, exactly 2 "feature" rounds, whatever the ids (all local, or none at all): every
        worker must call it the same number of times.

        Args:
            node_ids: int64 [n], global ids in [0, book.num_nodes); repeats allowed.
        """
        ids = self._check_ids(node_ids)
        world, rank = self.comm.world_size, self.rank
        owners = torch.from_numpy(self.book.owner(ids.numpy()))
        order = torch.argsort(owners, stable=True)  # positions of node_ids grouped by owner
        counts = torch.bincount(owners, minlength=world).tolist()
        grouped_ids = ids[order].split(counts)
        grouped_pos = order.split(counts)
        empty_ids = ids.new_empty(0)
        requests = [grouped_ids[j] if j != rank else empty_ids for j in range(world)]
        # Round 1: ask every owner for the rows we need from it (nothing to ourselves).
        asked = self.comm.all_to_allv(requests, CATEGORY)
        replies = [self._read_rows(asked[j].cpu()) for j in range(world)]
        # Round 2: every owner sends back the rows it was asked for, in the order asked.
        received = self.receive_rows(self.comm.all_to_allv(self.send_rows(replies), CATEGORY))
        out = torch.empty((ids.shape[0], self.feature_dim), dtype=torch.float32, device=self.comm.device)
        for j in range(world):
            rows = self._read_rows(grouped_ids[j]).to(self.comm.device) if j == rank else received[j]
            out[grouped_pos[j].to(self.comm.device)] = to_float32(rows)
        return out

    def send_rows(self, rows: list[Tensor]) -> list[Tensor]:
        """Stored rows as they go on the wire: half precision as bytes (gloo has no collectives of 16-bit
        types; a row of d values travels as 2d bytes)."""
        return rows if self.feature_dtype == "float32" else [_reinterpret(r, torch.uint8) for r in rows]

    def receive_rows(self, received: list[Tensor]) -> list[Tensor]:
        """The rows :meth:`send_rows` sent, in their stored dtype again."""
        row_dtype = self.row_dtype
        return received if self.feature_dtype == "float32" else [_reinterpret(r, row_dtype) for r in received]

    @property
    def row_dtype(self) -> torch.dtype:
        """The torch dtype of stored rows (float32, float16 or bfloat16)."""
        return torch_dtype(self.feature_dtype)

    def _read_rows(self, global_ids: Tensor) -> Tensor:
        """[len, d] CPU, as stored: this part's rows of ``global_ids`` (all owned here)."""
        local = global_ids - self._offset
        if isinstance(self.local_features, Tensor):
            return self.local_features.index_select(0, local)
        # Fancy indexing copies just these rows, also out of a memory map.
        return as_tensor(np.ascontiguousarray(self.local_features[local.numpy()]))

    def _check_ids(self, node_ids: Tensor) -> Tensor:
        if not isinstance(node_ids, Tensor):
            raise TypeError(f"node_ids: expected a torch.Tensor, got {type(node_ids).__name__}")
        if node_ids.dtype != torch.int64 or node_ids.dim() != 1:
            raise ValueError(f"node_ids: expected a 1-D int64 tensor, got {node_ids.dtype} of shape "
                             f"{tuple(node_ids.shape)}")
        ids = node_ids.cpu()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.book.num_nodes):  # host sync: range check
            raise ValueError(f"node_ids: expected ids in [0, {self.book.num_nodes}), got range "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        return ids

    def _check_same_width(self) -> None:
        """One "setup" round: every worker must hold rows of the same width, or replies would be garbled."""
        d = self.feature_dim
        widths = torch.tensor([d, -d], dtype=torch.int64, device=self.comm.device)
        # Collective: max of d and of -d gives the largest and the smallest width over all workers.
        self.comm.all_reduce_(widths, dist.ReduceOp.MAX, "setup")
        largest, smallest = widths[0].item(), -widths[1].item()  # host sync: needed for the check
        if largest != smallest:
            raise ValueError(f"local_features: workers hold different feature widths (from {smallest} to "
                             f"{largest}); this worker has {d}")


def _reinterpret(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """The same bytes as ``dtype`` (the last dimension rescaled); an empty tensor, whose strides may be
    anything, as an empty one of the new shape."""
    if tensor.numel():
        return tensor.contiguous().view(dtype)
    width = tensor.shape[-1] * tensor.element_size() // torch.empty(0, dtype=dtype).element_size()
    return torch.empty(*tensor.shape[:-1], width, dtype=dtype, device=tensor.device)
