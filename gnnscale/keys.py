"""Counter-based random keys, below every stage: sampling draws neighbors with them, nn its dropout
masks, partition its tie-breaks, train its epoch orders and initialisation.

Every random choice is a pure function of ``(key, hop, node, draw)``: the neighbors drawn for node
``v`` at hop ``h`` do not depend on thread count, on batch order, or on which worker samples them.
That makes fused and two-step sampling, and the hybrid and vanilla layouts, comparable bit for bit.

The mixing function is SplitMix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014), the same in Python here and in the numba kernels.
"""

from __future__ import annotations

import numba
import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64_py(z: int) -> int:
    """SplitMix64 finaliser on a Python int (wraps at 64 bits)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def node_stream_py(key: int, hop: int, node: int) -> int:
    """:func:`node_stream` on Python ints (the reference samplers and tests)."""
    z = mix64_py((key ^ (hop * GOLDEN)) & MASK64)
    return mix64_py(z ^ ((node + 0x632BE59BD9B4E019) & MASK64))


# Streams: independent uses of one (seed, epoch, step, rank), so that no two consumers share draws.
STREAM_SAMPLE = 0  # neighbor sampling keys
STREAM_ORDER = 1  # the permutation of training nodes in an epoch
STREAM_DROPOUT = 2  # dropout masks of a training step
STREAM_INIT = 3  # model initialisation
STREAM_EXPLAIN = 4  # DGS: the initial masks of the explanation of one iteration


def derive_key(seed: int, epoch: int = 0, step: int = 0, rank: int = 0, stream: int = STREAM_SAMPLE) -> int:
    """A 63-bit key derived from (seed, epoch, step, rank, stream); by default a mini-batch's sampling key."""
    for name, value in (("seed", seed), ("epoch", epoch), ("step", step), ("rank", rank), ("stream", stream)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    z = GOLDEN
    for value in (seed, epoch, step, rank, stream):
        z = mix64_py(z ^ (int(value) & MASK64)) + GOLDEN
    # 63 bits so that the key is also a valid int64 (numba and torch both take it as such).
    return mix64_py(z) >> 1


@numba.njit(inline="always")
def mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always")
def node_stream(key, hop, node):
    """uint64 state of the random stream of ``node`` at ``hop`` under ``key``."""
    z = mix64(np.uint64(key) ^ (np.uint64(hop) * np.uint64(GOLDEN)))
    return mix64(z ^ (np.uint64(node) + np.uint64(0x632BE59BD9B4E019)))


@numba.njit(inline="always")
def uniform_below(state, draw, bound):
    """The ``draw``-th uniform integer in [0, bound) of the stream ``state`` (bound < 2**32).

    Lemire's multiply-shift on the top 32 bits: bias below bound / 2**32, negligible for degrees.
    """
    x = mix64(state + np.uint64(draw + 1) * np.uint64(GOLDEN))
    return np.int64(((x >> np.uint64(32)) * np.uint64(bound)) >> np.uint64(32))
