"""The copy stage: each prepared batch goes to the training device in the background, one batch ahead.

Batches are prepared in the loading stage's thread (:func:`gnnscale.train.loop.prepared_batches`). On a
GPU the step must not wait for the batch's copy, so the loading thread also sends it
(:class:`gnnscale.devices.StreamCopy`, the loader's too): the batch's host tensors are copied from pinned
memory on a side CUDA stream and an event is recorded; the training thread's stream waits for that event
(a wait queued on the GPU, not a host sync) before the step uses the batch. This is PyG's
``PrefetchLoader`` and SALIENT's transfer stage, with the copy in the thread that already runs ahead.

On the CPU both calls are the identity: no copy, no stream, the same objects.

What is copied: a batch the model reads directly (gnnscale blocks) moves its blocks (``indptr``,
``indices``, ``src_ids``, ``edge_weight``), ``x`` and ``y``; a batch converted for the model (a PyG
``Data``) moves the converted input and only the batch's labels, which the loss reads. ``step`` (the
seeds, the key) and the communication counts stay on the host: only the layouts read them.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from gnnscale.devices import Sent, StreamCopy
from gnnscale.sampling import Block
from gnnscale.train.layouts.base import DistBatch


class DeviceCopy:
    """Sends prepared batches, with their model inputs, to ``device`` (see the module docstring).

    Args:
        device: the training device. CUDA: copies run on a side stream of that device; CPU: none.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        # One side stream per pass over the batches (an epoch, an evaluation): its copies queue behind each
        # other in batch order, and overlap the step's kernels on the training thread's stream.
        self._copy = StreamCopy(device)

    @property
    def stream(self) -> torch.cuda.Stream | None:
        return self._copy.stream

    def producing(self):
        """The context the loading thread prepares batches in: on CUDA the side stream, so that what it
        computes on the device (device sampling, the GPU feature cache's gathers) and the host syncs that
        size its blocks wait only for the loading work, never for the step's kernels on the training
        stream; :meth:`send`'s event then covers it all. On the CPU: nothing."""
        return self._copy.producing()

    def send(self, batch: DistBatch, model_input) -> Sent:
        """Loading thread: queue the copy of ``batch`` and ``model_input`` (returns at once on CUDA)."""
        return self._copy.send((batch, model_input), batch_tensors)

    def receive(self, sent: Sent) -> tuple[DistBatch, object]:
        """Training thread: ``(batch, model_input)``, usable by the work queued next on this thread's
        stream."""
        return self._copy.receive(sent)


def batch_tensors(value: tuple[DistBatch, object], move) -> tuple[DistBatch, object]:
    """``(batch, model_input)`` with ``move`` applied to what the step reads: a batch the model reads directly
    moves its blocks, ``x`` and ``y``; a converted one its model input and ``y``."""
    batch, model_input = value
    if model_input is batch:
        batch = replace(batch, blocks=[block_to(b, move) for b in batch.blocks], x=move(batch.x), y=move(batch.y))
        return batch, batch
    return replace(batch, y=move(batch.y)), converted_to(model_input, move)


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
