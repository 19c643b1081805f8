"""The partitioned feature store's fetch on the wire, in this process: the other worker played by a
stand-in Comm (:class:`PeerComm`); the fetch on real processes is checked in tests/dist_workers.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.graph.feature_dtype import encode
from gnnscale.partition.book import PartitionBook
from test_feature_dtype import CRAFTED, HALF, assert_same_bits, torch_rounded


class PeerComm:
    """Worker ``rank`` of two, in this process, for a feature fetch. The other worker asks for nothing and
    answers what this one asks with ``answer(request)`` (its own store's reply, as its send_rows puts it
    on the wire), so the other part's rows come through the real wire code, the owner's send_rows and the
    receiver's receive_rows and widening, without a second process."""

    world_size, device = 2, torch.device("cpu")

    def __init__(self, rank: int, answer=None) -> None:
        self.rank, self.answer, self.request, self.answered = rank, answer, None, 0

    def all_reduce_(self, tensor, op, category):  # the width check: both workers have the same width
        return tensor

    def all_to_allv(self, send, category):
        other = 1 - self.rank
        out = [None, None]
        out[self.rank] = send[self.rank]
        if self.request is None:  # round 1: the requests; the other worker's to this one is empty
            self.request, out[other] = send[other], send[other][:0]
        else:  # round 2: the replies
            (request, self.request), self.answered = (self.request, None), self.answered + 1
            out[other] = self.answer(request)
        return out


# Worker 0 owns the crafted rows 0 .. 4, worker 1 the rows 5 .. 9; a fetch of both parts' rows, repeats too.
CRAFTED_BOOK = PartitionBook(offsets=np.array([0, 5, 10], dtype=np.int64))
CRAFTED_IDS = np.array([9, 0, 5, 7, 3, 6, 8, 1, 2, 4, 5])


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_fetched_half_precision_rows_are_torchs_conversion_bit_for_bit(name):
    """A part stored in half precision (as a partition stores it): every row arrives widened to exactly
    torch's conversion of the float32 value, ties, subnormals, inf and NaN included."""
    stored = encode(CRAFTED, name)
    peer = PartitionedFeatureStore(CRAFTED_BOOK, 1, stored[5:], PeerComm(1))
    comm = PeerComm(0, answer=lambda request: peer.send_rows([peer._read_rows(request)])[0])
    store = PartitionedFeatureStore(CRAFTED_BOOK, 0, stored[:5], comm)
    got = store.gather(torch.from_numpy(CRAFTED_IDS))
    assert comm.answered == 1
    assert_same_bits(got, torch_rounded(CRAFTED[CRAFTED_IDS], HALF[name]))
