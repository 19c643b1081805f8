"""The stages between a task's steps and the training step: sample -> exclude -> fetch -> copy.

Each stage is a small object that says on which device its output lies:

- :class:`SampleStage`: the task names each step's seed nodes (a link task: the endpoints of its pairs and
  their negatives), the layout samples them, a group of steps per call (a bulk sampler's bulk). Its blocks
  lie where the sampler runs (the device policy's choice).
- :class:`ExcludeStage`: the task removes from the blocks what must not carry messages (a link task's
  target edges; nothing for node classification), where the blocks lie.
- :class:`FetchStage`: the layout gathers the input rows of the first block's sources (on the device when a
  device cache stands in front of the store, else on the host) and the task adds its targets.
- :class:`CopyStage`: the batch goes to the training device on a side stream, one batch ahead
  (:class:`gnnscale.devices.StreamCopy`; on the CPU nothing moves): sampled blocks, or split parallelism's
  cooperative blocks (this worker's split of each layer and layer 0's exchange done ahead), the input
  rows and the targets.

The first three run in the background loading stage (:mod:`gnnscale.batch_stream`), whose collectives use the
loader's own process group; :class:`Pipeline` chains them for the training loop and for a task's evaluation.
The PyG-compatible loaders (:mod:`gnnscale.loader`) run the same stream with stages of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from gnnscale.batch_stream import batch_stream
from gnnscale.devices import StreamCopy
from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.distributed.split.shuffle import CooperativeBlock
from gnnscale.nn.typed_models import TypedInput
from gnnscale.sampling import Block
from gnnscale.sampling.typed import TypedBlock
from gnnscale.train.inputs import ModelInputs, model_device
from gnnscale.train.layouts.base import Layout, add_counts
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.steps import Batch, Sampled, Step
from gnnscale.train.tasks.base import SeedPlan, Task


@dataclass(frozen=True, slots=True)
class SampleStage:
    """Seeds from the task, blocks from the layout. ``device``: where the blocks lie."""

    task: Task
    layout: Layout
    device: torch.device

    def __call__(self, steps: list[Step], timer: PhaseTimer, training: bool) -> list[tuple[Sampled, SeedPlan]]:
        with timer.phase("sample"):
            plans = [self.task.plan_seeds(step, training) for step in steps]
        sampled = self.layout.sample(steps, [plan.seeds for plan in plans], timer, training=training)
        return list(zip(sampled, plans))


@dataclass(frozen=True, slots=True)
class ExcludeStage:
    """The task's exclusion rule on a step's blocks, on their ``device``; timed with sampling."""

    task: Task
    device: torch.device

    def __call__(self, sampled: Sampled, plan: SeedPlan, timer: PhaseTimer, training: bool) -> Sampled:
        with timer.phase("sample"):
            return self.task.exclude(sampled, plan, training)


@dataclass(frozen=True, slots=True)
class FetchStage:
    """The layout's input rows and the task's targets: a step's :class:`Batch`, its rows on ``device``, with the
    rounds its layout's Comm counted since ``pending`` (a group's sampling rounds go with its first batch)."""

    task: Task
    layout: Layout
    device: torch.device

    def __call__(self, sampled: Sampled, plan: SeedPlan, pending: dict | None, timer: PhaseTimer,
                 training: bool) -> Batch:
        blocks, x = self.layout.fetch(sampled, timer, training=training)
        comm = add_counts(pending, self.layout.data_comm.stats.snapshot_and_reset())
        return Batch(step=sampled.step, blocks=blocks, x=x, targets=self.task.targets(sampled, plan, training),
                     sampled_edges=sampled.sampled_edges, comm=comm)


class CopyStage:
    """Sends ``(batch, model input)`` pairs to ``device`` from the loading thread (see the module docstring).

    What is copied: a batch the model reads directly (gnnscale blocks) moves its blocks (``indptr``,
    ``indices``, ``src_ids``, ``edge_weight``; a cooperative block its split's tensors and its exchange done
    ahead), ``x`` and its targets; a batch converted for the model (a PyG ``Data``) moves the converted input
    and the targets, which the loss reads. ``step`` (the items, the key) and the communication counts stay on
    the host: only the task and layout read them. A tensor the batch holds twice (split's layer-0 input, in
    ``x`` and in the exchange done ahead) is copied once and stays one tensor.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        # One side stream per pass over the batches (an epoch, an evaluation): its copies queue behind each
        # other in batch order, and overlap the step's kernels on the training thread's stream.
        self.stream_copy = StreamCopy(device)

    @staticmethod
    def map_tensors(value: tuple[Batch, object], move) -> tuple[Batch, object]:
        """``(batch, model_input)`` with ``move`` applied to what the step reads."""
        batch, model_input = value
        move = once_per_tensor(move)
        if model_input is batch:
            batch = replace(batch, blocks=[block_to(b, move) for b in batch.blocks], x=input_to(batch.x, move),
                            targets=batch.targets.moved(move))
            return batch, batch
        return replace(batch, targets=batch.targets.moved(move)), converted_to(model_input, move)


def once_per_tensor(move):
    """``move``, applied once to each tensor: a tensor given again gets the first result back, so that what was
    one tensor before the copy is one tensor after it (a layer recognises split's exchanged input by identity)."""
    done: dict[int, tuple[Tensor, Tensor]] = {}

    def moved(t):
        if not isinstance(t, Tensor):
            return move(t)
        if id(t) not in done:
            done[id(t)] = (t, move(t))  # keeps t alive: its id is not reused while the map runs
        return done[id(t)][1]

    return moved


def block_to(block, move) -> Block | CooperativeBlock | TypedBlock:
    """``block`` with ``move`` applied to each of its tensors: a :class:`Block`, split parallelism's
    :class:`CooperativeBlock` or a typed graph's :class:`TypedBlock`."""
    if isinstance(block, (CooperativeBlock, TypedBlock)):
        return block.moved(move)
    if not isinstance(block, Block):
        raise TypeError(f"device: the copy stage moves gnnscale Blocks, got {type(block).__name__}; expected a "
                        "Block, split parallelism's CooperativeBlock or a TypedBlock")
    weight = None if block.edge_weight is None else move(block.edge_weight)
    return Block(indptr=move(block.indptr), indices=move(block.indices), src_ids=move(block.src_ids),
                 num_dst=block.num_dst, edge_weight=weight)


def input_to(x, move):
    """A batch's input rows with ``move`` applied: a tensor, or a typed model's rows by node type."""
    return x.moved(move) if isinstance(x, TypedInput) else move(x)


def converted_to(model_input, move):
    """A converted model input with ``move`` applied to its tensors: a PyG ``Data`` (whose ``apply`` maps
    every tensor attribute) or a tensor."""
    if isinstance(model_input, Tensor):
        return move(model_input)
    if hasattr(model_input, "apply"):
        return model_input.apply(move)
    raise TypeError(f"device: the copy stage cannot move a model input of type {type(model_input).__name__}")


class Pipeline:
    """The stages of one worker's run, chained: what the training loop and a task's evaluation iterate.

    Args:
        task, layout: this worker's task and layout.
        inputs: how the model takes a batch (:mod:`gnnscale.train.inputs`): its form is made in the loading
            stage too.
        policy: where this worker trains, samples and holds rows.
        prefetch: groups of batches prepared ahead (``TrainConfig.prefetch``).
    """

    def __init__(self, task: Task, layout: Layout, inputs: ModelInputs, policy: DevicePolicy, prefetch: int) -> None:
        sample_device = policy.device if policy.sample_on_device else torch.device("cpu")
        self.sample = SampleStage(task, layout, sample_device)
        self.exclude = ExcludeStage(task, sample_device)
        self.fetch = FetchStage(task, layout, policy.device if policy.rows_on_device else torch.device("cpu"))
        self.task, self.layout, self.inputs = task, layout, inputs
        self.device, self.prefetch = policy.device, prefetch

    def prepare(self, steps: list[Step], timer: PhaseTimer, training: bool) -> list[tuple[Batch, object]]:
        """``(batch, model input)`` of a group of steps, where the stages put them."""
        sampled = self.sample(steps, timer, training)
        pending = self.layout.data_comm.stats.snapshot_and_reset()  # the group's sampling rounds
        out = []
        for step_sampled, plan in sampled:
            batch = self.fetch(self.exclude(step_sampled, plan, timer, training), plan, pending, timer, training)
            pending = None
            with timer.phase("sample"):  # the model's form of the batch (a PyG Data), beside the step
                out.append((batch, self.inputs.convert(batch)))
        return out

    def batches(self, steps: list[Step], timer: PhaseTimer, *, training: bool,
                device: torch.device | None = None) -> Iterator[tuple[Batch, object]]:
        """``(batch, model input)`` of ``steps`` on ``device`` (default: the training device), prepared
        ``prefetch`` groups ahead in the background stage. ``timer`` gets the stage's busy time (``sample``,
        the model's form included; ``split``; ``fetch``; ``metrics``; ``copy``) and the training thread's
        ``wait``."""
        loader = PhaseTimer()  # the stage's thread writes only this one; merged at the end
        copy = CopyStage(self.device if device is None else device)
        # The sends are timed as "copy": queueing the copies (pinning included), not the transfers; CPU: nothing.
        yield from batch_stream(lambda items: self.prepare(steps[items.start:items.stop], loader, training),
                                len(steps), copy=copy.stream_copy, map_tensors=copy.map_tensors,
                                group_size=self.layout.bulk, depth=self.prefetch,
                                wait_seconds=lambda s: timer.add("wait", s), copy_phase=lambda: loader.phase("copy"))
        timer.merge(loader)

    def outputs(self, model: nn.Module, steps: list[Step]) -> Iterator[tuple[Batch, Tensor]]:
        """Evaluation (the :class:`~gnnscale.train.steps.Evaluation` protocol): the model's outputs on every
        real step's batch, on the model's device, without gradients."""
        model.eval()
        with torch.no_grad():
            for batch, model_input in self.batches(steps, PhaseTimer(), training=False, device=model_device(model)):
                if batch.step.real:
                    yield batch, self.inputs.logits(model, model_input, dropout_key=None)
