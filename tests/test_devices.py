"""--device: every name resolves the same way, and a GPU asked for where there is none is one clear error."""

from __future__ import annotations

import pytest
import torch

from gnnscale.devices import resolve_device


def test_cpu_names_resolve_to_the_cpu():
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_auto_is_cuda_exactly_when_a_gpu_is_visible():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "mps", ""])
def test_names_that_are_no_device_are_refused(bad):
    with pytest.raises(ValueError, match="device: expected cpu, cuda, cuda:N or auto"):
        resolve_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error for a machine without a GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_one_line_naming_the_way_out(spec):
    with pytest.raises(ValueError, match="none is available here.*use --device cpu") as info:
        resolve_device(spec)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_cuda_takes_the_workers_gpu_modulo_the_visible_ones():
    count = torch.cuda.device_count()
    assert resolve_device("cuda", local_rank=count + 1) == torch.device("cuda", 1 % count)
    with pytest.raises(ValueError, match="GPU"):
        resolve_device(f"cuda:{count}")
