"""Where a worker samples (gnnscale/distributed/device_policy.py): the flag, and what its layout lets it do."""

from __future__ import annotations

import pytest
import torch

from gnnscale.distributed.device_policy import samples_on_device

CPU = torch.device("cpu")


@pytest.mark.parametrize("sample_on, device_bytes, expected", [
    ("device", 10**6, True),  # the whole topology on the device (1d, hybrid, one process)
    ("device", 0, True),  # a 1.5D worker: nothing held there, its rows fetched per hop
    ("device", None, False),  # a layout or sampler that samples on the host
    ("host", 0, False),
    ("auto", 0, False),  # auto samples on a GPU only
])
def test_the_sampling_place_follows_the_flag_and_what_the_layout_can(sample_on, device_bytes, expected):
    assert samples_on_device(sample_on, CPU, device_bytes) is expected


def test_an_unknown_place_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"sample_on: expected one of \('auto', 'host', 'device'\), got 'gpu'"):
        samples_on_device("gpu", CPU, 0)
