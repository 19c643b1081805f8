"""DGS's feature-sampled store on the wire, in this process (the other worker played by
:class:`PeerComm`): the rounding of half-precision partial rows; the fetch on real processes (rounds,
bytes, which dimensions arrive, the fill) is checked in tests/dgs_workers.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.distributed.dgs.explanation import ClusterMap
from gnnscale.features.dgs import FeatureSampledStore
from gnnscale.graph.feature_dtype import encode
from test_feature_dtype import CRAFTED, HALF, assert_same_bits, torch_rounded
from test_partitioned import CRAFTED_BOOK, CRAFTED_IDS, PeerComm


# Clusters of the crafted rows (tests/graph/test_feature_dtype.py): part 0 owns rows 0 .. 4 in clusters 0
# and 1, part 1 rows 5 .. 9 in clusters 2 and 3; each cluster's mean is a row of plain numbers.
CRAFTED_CLUSTERS = ClusterMap(book=CRAFTED_BOOK, clusters_per_part=2,
                              node_cluster=np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3], dtype=np.int32),
                              cluster_mean=np.arange(16, dtype=np.float32).reshape(4, 4) + 100,
                              cluster_size=np.array([2, 3, 2, 3]), fingerprint="crafted")


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_dgs_partial_rows_are_torchs_conversion_bit_for_bit(name):
    """A half-precision part fetched on dimensions 0, 2 and 3 (another process played by PeerComm): those
    columns of the other part's rows, and the whole rows of this part, arrive as torch's conversion of the
    float32 values, ties, subnormals, inf and NaN included; dimension 1 of the other part's rows is its
    cluster's mean. dims=None fetches whole rows, the same conversion."""
    stored = encode(CRAFTED, name)
    peer = FeatureSampledStore(CRAFTED_BOOK, 1, stored[5:], PeerComm(1), CRAFTED_CLUSTERS)
    comm = PeerComm(0, answer=lambda request: peer.send_rows([peer._reply(request)])[0])
    store = FeatureSampledStore(CRAFTED_BOOK, 0, stored[:5], comm, CRAFTED_CLUSTERS)
    want = torch_rounded(CRAFTED[CRAFTED_IDS], HALF[name])
    remote = torch.from_numpy(CRAFTED_IDS >= 5)
    partial = want.clone()
    partial[remote, 1] = torch.from_numpy(CRAFTED_CLUSTERS.cluster_mean[
        CRAFTED_CLUSTERS.node_cluster[CRAFTED_IDS[remote.numpy()]], 1])
    assert_same_bits(store.gather(torch.from_numpy(CRAFTED_IDS), np.array([0, 2, 3])), partial)
    comm.answer = lambda request: peer.send_rows([peer._read_rows(request)])[0]
    assert_same_bits(store.gather(torch.from_numpy(CRAFTED_IDS)), want)
    assert comm.answered == 2
