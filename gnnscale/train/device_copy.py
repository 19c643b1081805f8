"""The copy stage: each prepared batch goes to the training device in the background, one batch ahead.

Sampling and the feature fetch run on the CPU (:func:`gnnscale.train.loop.prepared_batches`, in the
loading stage's thread). On a GPU the step must not wait for the batch's copy, so the loading thread
also sends it: :meth:`DeviceCopy.send` copies the batch's tensors from pinned host memory on a side
CUDA stream and records an event; the training thread's :meth:`DeviceCopy.receive` makes its own stream
wait for that event (a wait queued on the GPU, not a host sync) before the step uses the batch. This
is PyG's ``PrefetchLoader`` and SALIENT's transfer stage, with the copy in the thread that already runs
ahead.

On the CPU both calls are the identity: no copy, no stream, the same objects.

What is copied: a batch the model reads directly (gnnscale blocks) moves its blocks (``indptr``,
``indices``, ``src_ids``, ``edge_weight``), ``x`` and ``y``; a batch converted for the model (a PyG
``Data``) moves the converted input and only the batch's labels, which the loss reads. ``step`` (the
seeds, the key) and the communication counts stay on the host: only the layouts read them.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from gnnscale.sampling import Block
from gnnscale.train.layouts.base import DistBatch


@dataclass(frozen=True, slots=True)
class Sent:
    """A batch and its model input on their way to the device.

    Args:
        batch: the prepared batch, its tensors on the device (or still being copied there).
        model_input: what the model is called on (``batch`` itself for gnnscale blocks).
        ready: recorded on the copy stream after the last copy was queued; None on the CPU.
        copies: the batch's device tensors, allocated on the copy stream (empty on the CPU).
    """

    batch: DistBatch
    model_input: object
    ready: torch.cuda.Event | None = None
    copies: tuple[Tensor, ...] = ()


class DeviceCopy:
    """Sends prepared batches to ``device`` (see the module docstring).

    Args:
        device: the training device. CUDA: copies run on a side stream of that device; CPU: none.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        # One side stream per pass over the batches (an epoch, an evaluation): its copies queue behind each
        # other in batch order, and overlap the step's kernels on the training thread's stream.
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def producing(self):
        """The context the loading thread prepares batches in: on CUDA the side stream, so that what it
        computes on the device (device sampling, the GPU feature cache's gathers) and the host syncs that
        sizes its blocks wait only for the loading work, never for the step's kernels on the training
        stream; :meth:`send`'s event then covers it all. On the CPU: nothing."""
        return torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()

    def send(self, batch: DistBatch, model_input) -> Sent:
        """Loading thread: queue the copy of ``batch`` and ``model_input`` (returns at once on CUDA)."""
        if self.stream is None:
            return Sent(batch, model_input)
        copies: list[Tensor] = []

        def move(t):
            if not isinstance(t, Tensor):
                return t  # a number of a PyG batch (its apply() passes them too)
            if t.device == self.device:
                copies.append(t)  # made on the device in this thread (device sampling, the GPU cache): on the side stream too
                return t
            # A copy from pageable memory is synchronous; from pinned memory it is a DMA queued on the
            # stream. pin_memory() is itself a host copy, made here in the loading thread, off the step.
            copies.append(t.pin_memory().to(self.device, non_blocking=True))
            return copies[-1]

        with torch.cuda.stream(self.stream):
            if model_input is batch:
                batch = model_input = replace(batch, blocks=[block_to(b, move) for b in batch.blocks],
                                              x=move(batch.x), y=move(batch.y))
            else:
                batch = replace(batch, y=move(batch.y))
                model_input = converted_to(model_input, move)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return Sent(batch, model_input, ready, tuple(copies))

    def receive(self, sent: Sent) -> tuple[DistBatch, object]:
        """Training thread: ``(batch, model_input)``, usable by the work queued next on this thread's
        stream."""
        if sent.ready is None:
            return sent.batch, sent.model_input
        current = torch.cuda.current_stream(self.device)
        current.wait_event(sent.ready)  # the GPU waits for the copy; the host goes on queueing the step
        # The copies were allocated on the copy stream: without this, the caching allocator could hand
        # their memory to the copy stream's next batch as soon as the step drops them, while the step's
        # kernels queued on this stream still read them.
        for t in sent.copies:
            t.record_stream(current)
        return sent.batch, sent.model_input


def block_to(block, move) -> Block:
    """``block`` with ``move`` applied to each of its tensors."""
    if not isinstance(block, Block):
        raise TypeError(f"device: the copy stage moves gnnscale Blocks, got {type(block).__name__} (split "
                        "parallelism's blocks train on the CPU only)")
    weight = None if block.edge_weight is None else move(block.edge_weight)
    return Block(indptr=move(block.indptr), indices=move(block.indices), src_ids=move(block.src_ids),
                 num_dst=block.num_dst, edge_weight=weight)


def converted_to(model_input, move):
    """A converted model input with ``move`` applied to its tensors: a PyG ``Data`` (whose ``apply`` maps
    every tensor attribute) or a tensor."""
    if isinstance(model_input, Tensor):
        return move(model_input)
    if hasattr(model_input, "apply"):
        return model_input.apply(move)
    raise TypeError(f"device: the copy stage cannot move a model input of type {type(model_input).__name__}")


def on_host(value):
    """``value`` (a state dict, an optimizer's state: tensors in dicts, lists and tuples) with every tensor
    on the CPU: what checkpoints, model files and saved weights hold, so that a run written on one device
    loads on another. CPU tensors are returned as they are (no copy)."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: on_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_host(item) for item in value)
    return value
