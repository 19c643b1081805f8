"""The counter-based keys of :mod:`gnnscale.keys` in torch int64 ops, on any device (CUDA included).

torch has no uint64 arithmetic on every device, so the hash runs on int64: two's-complement addition and
multiplication wrap modulo 2**64 exactly as uint64's do (the bits are the same), and a logical right shift
is an arithmetic one with the sign-extended high bits masked off. Every function returns the numba
kernels' values bit for bit (tests/test_torch_keys.py): keyed dropout (:mod:`gnnscale.nn.torch_ops`), the
device sampler and negative sampling draw from here what the CPU kernels draw from :mod:`gnnscale.keys`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnscale.keys import GOLDEN, MASK64, mix64_py

_U64 = 1 << 64
NODE_SALT = 0x632BE59BD9B4E019  # node_stream's offset of the node id (gnnscale.keys.node_stream)
LOW32 = 0xFFFFFFFF


def as_int64(value: int) -> int:
    """The int64 whose two's-complement bits are the uint64 ``value`` (torch multiplies by it, wrapping)."""
    value &= _U64 - 1
    return value - _U64 if value >= 1 << 63 else value


GOLDEN64 = as_int64(GOLDEN)
_MIX1 = as_int64(0xBF58476D1CE4E5B9)
_MIX2 = as_int64(0x94D049BB133111EB)


def _xor_shifted(z: Tensor, shift: int) -> Tensor:
    """``z ^= z >>> shift`` in place (uint64's logical shift: the arithmetic one, high bits masked)."""
    return z.bitwise_xor_((z >> shift).bitwise_and_((1 << (64 - shift)) - 1))


def mix64(z: Tensor) -> Tensor:
    """SplitMix64's finaliser (:func:`gnnscale.keys.mix64`) on int64 ``z`` seen as uint64 bits, in place."""
    _xor_shifted(z, 30).mul_(_MIX1)
    _xor_shifted(z, 27).mul_(_MIX2)
    return _xor_shifted(z, 31)


def node_stream(key: int, hop: int, nodes: Tensor) -> Tensor:
    """int64 [n] (uint64 bits): :func:`gnnscale.keys.node_stream` of every node id in ``nodes``."""
    # The hop's stream key is a Python int: a device tensor made of it would be an upload per call.
    z = as_int64(mix64_py((key ^ (hop * GOLDEN)) & MASK64))
    return mix64((nodes.to(torch.int64) + as_int64(NODE_SALT)).bitwise_xor_(z))


def uniform_below(state: Tensor, draw: Tensor | int, bound: Tensor | int) -> Tensor:
    """int64: :func:`gnnscale.keys.uniform_below` elementwise (the ``draw``-th uniform integer in
    ``[0, bound)`` of each stream ``state``; ``bound`` < 2**32). Broadcasts like torch's arithmetic.

    A ``draw`` or ``bound`` given as a Python int stays one (torch takes it as a scalar operand, on any
    device): no tensor is made of it, so a loop over draws sends nothing to a GPU."""
    if isinstance(draw, Tensor):
        offset = (draw.to(state.device, torch.int64) + 1) * GOLDEN64
    else:
        offset = as_int64((draw + 1) * GOLDEN)  # the product wrapped as the tensor's would be
    if isinstance(bound, Tensor):
        bound = bound.to(state.device, torch.int64)
    x = mix64(state + offset)
    high = (x >> 32) & LOW32
    # (high * bound) < 2**64 but may exceed 2**63: its top 32 bits are taken logically.
    product = high * bound
    return (product >> 32) & LOW32


def node_streams(keys: Tensor, hop: int, nodes: Tensor) -> Tensor:
    """int64 [n] (uint64 bits): :func:`gnnscale.keys.node_stream` of ``(keys[i], hop, nodes[i])`` for every
    ``i``: each node under a key of its own (the rows of a stack of batches, each batch with its key).
    ``keys``: int64 keys in [0, 2**63), broadcast against ``nodes``."""
    z = mix64(keys.to(torch.int64).bitwise_xor(as_int64((hop * GOLDEN) & (_U64 - 1))))
    return mix64((nodes.to(torch.int64) + as_int64(NODE_SALT)).bitwise_xor_(z))
