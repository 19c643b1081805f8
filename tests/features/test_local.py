"""The store of one process: every row local, read in the order asked, half precision widened exactly
(the pinned gather of a GPU run: tests/train/test_train_device.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.features.local import LocalFeatureStore
from gnnscale.graph.feature_dtype import encode
from test_feature_dtype import CRAFTED, HALF, assert_same_bits, torch_rounded

IDS = np.array([9, 0, 5, 7, 3, 6, 8, 1, 2, 4, 5])  # every row, one twice, out of order


def test_gather_reads_the_rows_asked_in_their_order():
    store = LocalFeatureStore(CRAFTED)
    assert store.feature_dim == 4 and not store.pinned  # pinned only where asked (a GPU run)
    assert_same_bits(store.gather(torch.from_numpy(IDS)), torch.from_numpy(CRAFTED[IDS]))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_precision_rows_are_widened_as_torch_converts_them(name):
    got = LocalFeatureStore(encode(CRAFTED, name)).gather(torch.from_numpy(IDS))
    assert_same_bits(got, torch_rounded(CRAFTED[IDS], HALF[name]))
