"""``fit``: train a model (gnnscale's or one of your own) on a dataset in this process, or over a
partition directory with one worker per part (``torchrun my_script.py``).

``gnnscale train`` builds its model and calls :func:`fit` too: one entry, one setup path
(:mod:`gnnscale.train.setup`), one training loop (:mod:`gnnscale.train.loop`) and one checkpoint format
for every model, layout and worker count; one process is a one-worker run.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.train.config import TrainConfig
from gnnscale.train.sources.partitioned import Partitioned
from gnnscale.train.sources.in_process import InProcess
from gnnscale.train.layouts import LayoutOptions, layout_options as options_for
from gnnscale.train.tasks.base import TaskSpec
from gnnscale.train.tasks.registry import task_of
from gnnscale.train.run import RunOutputs, TrainReport
from gnnscale.train.setup import RunSource, train_run

DEFAULT_TIMEOUT_S = 120.0


def fit(model: nn.Module, data: NodeDataset | TypedDataset | str | os.PathLike, *, inputs: str, config: TrainConfig = TrainConfig(),
        layout: str | LayoutOptions | None = None, outputs: RunOutputs = RunOutputs(), progress: bool = True,
        timeout_s: float | None = None, task: str | object | None = None) -> TrainReport:
    """Train ``model`` in place by mini-batch neighbor sampling and return the per-epoch report.

    Args:
        model: a ``torch.nn.Module``: gnnscale's GraphSAGE, GCN or GAT, or a model of your own, on the CPU or
            already on ``config.device``; it is moved there in place (and stays there).
        data: a :class:`~gnnscale.graph.dataset.NodeDataset` (``load_dataset(...)``), trained in this process;
            or a partition directory (``gnnscale partition``), one worker per part (or a divisor of the part
            count), each started by torchrun
            (``torchrun --nproc-per-node P my_script.py``); every worker calls ``fit`` with the same arguments.
        inputs: what the model's forward takes (required, never guessed): ``"blocks"``, gnnscale's layered
            blocks, ``model(blocks, x)`` -> logits of the seeds (``blocks[-1]``'s destinations); or ``"pyg"``,
            PyG's node-wise batch, ``model(x, edge_index)`` -> logits of every node of the batch, the seeds
            first (the conventions of gnnscale's and PyG's ``NeighborLoader``).
        config: fanouts, batch size (per worker), epochs, Adam's ``lr`` and ``weight_decay``, seed, threads,
            sampler, prefetch, device (:class:`~gnnscale.train.config.TrainConfig`; default its defaults;
            ``TrainConfig(device="cuda")`` trains on a GPU, docs/training.md "GPU").
        layout: a partition directory only: the layout's name (``"hybrid"``, ``"vanilla"``, ``"1d"``,
            ``"1.5d"``, ``"split"``) or :class:`~gnnscale.train.layouts.LayoutOptions` with the layout's own
            options and DGS (``gnnscale.train.layouts.layout_options("split", shuffle_dtype="bfloat16")``).
            Default ``"hybrid"``. ``"split"`` and DGS need a built-in model (split-aware layers).
        outputs: metrics file, checkpoint and resume, and for a built-in model its model file (the
            best-validation epoch's weights by default, ``save_model_at``) and full evaluation
            (:class:`~gnnscale.train.run.RunOutputs`; default: nothing written).
        progress: per-epoch lines (rank 0) and a progress bar on a terminal.
        timeout_s: a partition directory only: seconds a worker waits for its peers before it stops with
            an error (default 120).

        task: what is learned (:mod:`gnnscale.train.tasks`): None or ``"node"`` trains node classification;
            ``"link"`` (its default settings) or a :class:`~gnnscale.train.tasks.link_config.LinkConfig` trains
            link prediction (``model`` then a :class:`~gnnscale.nn.link.LinkModel`, ``layout`` hybrid or vanilla;
            :mod:`gnnscale.train.tasks.link`).

    Returns:
        the :class:`~gnnscale.train.run.TrainReport`, the same on every worker: per-epoch loss (and every
        iteration's), accuracy, timings and communication, best validation epoch, and the epoch whose
        weights the model file holds (``saved_epoch``). ``model`` itself holds the last epoch's.

    Every worker starts from rank 0's weights. Adam steps on gradients averaged over the workers (data
    parallelism): one step of P workers with ``batch_size`` seeds each is one step on their P micro-batches.
    A model of your own draws its dropout from torch's generator, which ``fit`` seeds before every step
    from ``(seed, epoch, step, rank)`` and gives back afterwards in the caller's state.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config: expected a gnnscale.train.config.TrainConfig, got {type(config).__name__}")
    if not isinstance(outputs, RunOutputs):
        raise TypeError(f"outputs: expected a gnnscale.train.run.RunOutputs, got {type(outputs).__name__}")
    spec, settings = task_of(task)
    return train_run(model, inputs, config, run_source(data, layout, timeout_s, spec, settings), outputs,
                     progress=progress)


def run_source(data: NodeDataset | TypedDataset | str | os.PathLike, layout: str | LayoutOptions | None, timeout_s: float | None,
               task: TaskSpec, task_settings: object | None) -> RunSource:
    """A dataset trains in this process, a partition directory under torchrun."""
    if isinstance(data, (NodeDataset, TypedDataset)):
        for name, value in (("layout", layout), ("timeout_s", timeout_s)):
            if value is not None:
                raise ValueError(f"{name}: applies to a distributed run over a partition directory; a NodeDataset "
                                 "trains in this process (drop it, or pass the directory gnnscale partition wrote)")
        return InProcess(data, task, task_settings)
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"data: expected a gnnscale NodeDataset or a partition directory, got {type(data).__name__}")
    return Partitioned(Path(data), layout_options(layout), DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s, task,
                       task_settings)


def layout_options(layout: str | LayoutOptions | None) -> LayoutOptions:
    if layout is None:
        return LayoutOptions()
    if isinstance(layout, str):
        return options_for(layout)
    if not isinstance(layout, LayoutOptions):
        raise TypeError(f"layout: expected a layout name or a LayoutOptions, got {type(layout).__name__}")
    return layout
