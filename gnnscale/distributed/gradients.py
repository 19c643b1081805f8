"""Gradient reduction over workers: one all-reduce of one flat buffer per iteration.

Both kinds of parallelism reduce through :func:`all_reduce_gradients`; they differ only in the divisor:

* data parallelism: every worker's loss is the mean over its own seeds, so the summed gradient is
  divided by the number of workers (the average of the workers' steps);
* split parallelism: every worker's loss is already its share of the mini-batch's mean
  (:func:`gnnscale.distributed.split.shuffle.split_loss`), so the gradients are summed, divisor 1.

On a GPU, gradients are reduced where the Comm's tensors live: on the training step's NCCL group when every
worker has a GPU of its own (:func:`gnnscale.distributed.device_policy.step_comm`), else over gloo
through a host copy of the buffer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from gnnscale.distributed.comm import Comm

CATEGORY = "grad"


def all_reduce_gradients(model: torch.nn.Module, comm: Comm, *, divisor: int = 1) -> None:
    """Sum every trainable parameter's gradient over workers, then divide by ``divisor`` (1: no division).

    A parameter without a gradient on this worker (unused in its step) contributes zeros, so every worker
    reduces a buffer of the same size. Collective: one ``"grad"`` round.
    """
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 1:
        raise ValueError(f"divisor: expected an int >= 1 (1: summed gradients), got {divisor!r}")
    if comm.world_size == 1:
        return  # one worker: its gradients are the sum (and, divided by 1, the average); nothing to move
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    # A GPU's gradients on a gloo Comm go through host memory (a blocking copy each way); where the two
    # devices are the same (CPU on gloo, a GPU on NCCL) nothing is copied.
    wire = flat.to(comm.device)
    comm.all_reduce_(wire, dist.ReduceOp.SUM, CATEGORY)  # collective: every worker's gradient
    flat = wire.to(flat.device)
    if divisor != 1:
        flat /= divisor
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad = g.view_as(p)
