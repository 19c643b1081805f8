"""The torch twins of the keyed streams give the numba kernels' values bit for bit."""

from __future__ import annotations

import numba
import numpy as np
import torch

from gnnscale import torch_keys
from gnnscale.keys import MASK64, mix64, mix64_py, node_stream, node_stream_py, uniform_below


@numba.njit
def _numba_draws(key, hop, nodes, draws, bounds):
    out = np.empty((nodes.shape[0], draws.shape[0]), dtype=np.int64)
    for i in range(nodes.shape[0]):
        state = node_stream(key, hop, nodes[i])
        for j in range(draws.shape[0]):
            out[i, j] = uniform_below(state, draws[j], bounds[i])
    return out


@numba.njit
def _numba_mix(values):
    out = np.empty_like(values)
    for i in range(values.shape[0]):
        out[i] = mix64(values[i])
    return out


def as_uint64(t: torch.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint64)


def test_mix64_equals_the_python_and_numba_finalisers_on_every_bit_pattern():
    rng = np.random.default_rng(0)
    edges = np.array([0, 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15], dtype=np.uint64)
    raw = np.concatenate([edges, rng.integers(0, 2**63, size=1000, dtype=np.int64).view(np.uint64) * np.uint64(3)])
    expected = _numba_mix(raw)
    got = as_uint64(torch_keys.mix64(torch.from_numpy(raw.view(np.int64).copy())))
    np.testing.assert_array_equal(got, expected)
    assert int(got[7]) == mix64_py(int(raw[7]))


def test_node_stream_and_uniform_below_equal_the_kernels_draws():
    key, hop = (1 << 62) + 12345, 2
    nodes = np.array([0, 1, 7, 2**31 + 5, 10**12], dtype=np.int64)
    bounds = np.array([1, 2, 3, 1000, 2**32 - 1], dtype=np.int64)
    draws = np.arange(6, dtype=np.int64)
    states = torch_keys.node_stream(key, hop, torch.from_numpy(nodes))
    assert int(as_uint64(states)[3]) == node_stream_py(key, hop, int(nodes[3])) & MASK64
    got = torch_keys.uniform_below(states.unsqueeze(1), torch.from_numpy(draws).unsqueeze(0),
                                   torch.from_numpy(bounds).unsqueeze(1))
    np.testing.assert_array_equal(got.numpy(), _numba_draws(key, hop, nodes, draws, bounds))
    assert (got >= 0).all() and (got < torch.from_numpy(bounds).unsqueeze(1)).all()
