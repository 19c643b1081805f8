"""An epoch's mini-batches: which seeds each iteration trains on, fixed by the seed and the epoch.

Below the loop and every layout, which all draw their batches here.
"""

from __future__ import annotations

import torch

from gnnscale.keys import STREAM_ORDER, derive_key

# Keys of inference batches live in their own "epoch" so they never collide with training keys.
EVAL_EPOCH = 2**31 - 1


def num_batches_for(num_train: int, batch_size: int) -> int:
    return max(1, -(-num_train // batch_size))


def epoch_batches(train_idx: torch.Tensor, num_batches: int, seed: int, epoch: int, rank: int = 0) -> list[torch.Tensor]:
    """The epoch's mini-batches: a permutation of the training nodes fixed by ``(seed, epoch, rank)``,
    cut into ``num_batches`` near-equal parts. Distributed workers agree on ``num_batches`` so that
    every worker runs the same number of iterations; one worker is exactly the single-machine run."""
    gen = torch.Generator().manual_seed(derive_key(seed, epoch, 0, rank, STREAM_ORDER))
    order = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
    return list(order.tensor_split(num_batches))
