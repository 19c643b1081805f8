"""A run in this process (``fit(model, dataset, ...)``, ``gnnscale train`` without ``--partitions``): a
one-worker run through the distributed run's setup path (:mod:`gnnscale.train.setup`), on a process group
of this process alone, with the one-process layout (:mod:`gnnscale.train.layouts.single`) and the same
checkpoints (:mod:`gnnscale.train.checkpoints.runs`), which it writes after every epoch and, with
``checkpoint_every``, mid-epoch too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import DistContext, init_single_process
from gnnscale.graph.dataset import NodeDataset, check_finite_features
from gnnscale.inference.evaluate import evaluate_full
from gnnscale.inference.metrics import check_metric
from gnnscale.partition.directory import SPLITS, LocalPartition
from gnnscale.train.checks import check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.checkpoints.runs import check_checkpoint_at_launch, one_process_identity
from gnnscale.train.inputs import model_signature, training_device
from gnnscale.train.layouts import Layout, LayoutContext, LayoutOptions
from gnnscale.train.layouts.single import SINGLE, whole_partition
from gnnscale.train.rules import RunSettings, check_run, checked_model
from gnnscale.train.run import RunOutputs
from gnnscale.train.setup import CheckedLaunch
from gnnscale.train.tasks.base import TaskSpec
from gnnscale.train.tasks.node import NODE
from gnnscale.train.tasks.registry import task_signature


@dataclass(frozen=True, slots=True)
class InProcess:
    """The :class:`~gnnscale.train.setup.RunSource` of a dataset trained in this process.

    Args:
        dataset: the dataset.
        task: the task's spec; ``task_settings`` its own settings (None where it has none).
    """

    dataset: NodeDataset
    task: TaskSpec = NODE
    task_settings: object | None = None

    @property
    def partition_dir(self) -> Path | None:
        return None  # the whole dataset is this worker's part

    def check(self, model: nn.Module, inputs: str, cfg: TrainConfig, outputs: RunOutputs) -> CheckedLaunch:
        """Every check before training; an existing ``checkpoint`` is continued (``resume``) or replaced
        (``overwrite``), an existing ``metrics_out`` replaced only with ``overwrite``; else ValueError."""
        dataset = self.dataset
        model_cfg, adapter = checked_model(model, inputs, self.task)
        device = training_device(model, cfg.device)
        spec = check_run(RunSettings(train=cfg, task=self.task, task_settings=self.task_settings, layout=None,
                                     outputs=outputs, model=None if model_cfg is None else model_cfg.name,
                                     inputs=inputs))
        if outputs.full_eval is not None:
            check_metric(outputs.full_eval, dataset.num_classes)
        if model_cfg is not None and model_cfg.num_layers != cfg.num_layers:
            raise ValueError(f"fanouts: {cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
        check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=outputs.checkpoint, resume=outputs.resume,
                          overwrite=outputs.overwrite, model_out=outputs.model_out)
        if np.asarray(dataset.train_idx).size == 0:
            raise ValueError("train_idx: the training set is empty; nothing to train on")
        check_finite_features(dataset.features)
        signature = task_signature(model_signature(model, adapter), self.task, self.task_settings)
        identity = one_process_identity(dataset_facts(dataset), signature, cfg)
        resume_path = check_checkpoint_at_launch(outputs.checkpoint, resume=outputs.resume,
                                                 overwrite=outputs.overwrite, every=outputs.checkpoint_every,
                                                 rank=0, run=identity, epochs=cfg.epochs)
        return CheckedLaunch(inputs=adapter, spec=spec, options=LayoutOptions(layout=spec.name), model_cfg=model_cfg,
                             identity=identity, device=device, task=self.task, task_settings=self.task_settings,
                             resume_path=resume_path)

    def join(self) -> DistContext:
        return init_single_process()

    def load(self, launch: CheckedLaunch, comm: Comm) -> LocalPartition:
        return whole_partition(self.dataset)

    def build(self, ctx: LayoutContext) -> Layout:
        return SINGLE.build(ctx)

    def header(self, launch: CheckedLaunch, cfg: TrainConfig, world_size: int) -> dict:
        return {"dataset": self.dataset.summary(), **launch.header(cfg)}

    def full_eval(self, model: nn.Module, part: LocalPartition, comm: Comm, metric: str) -> dict:
        return evaluate_full(model, self.dataset, metric)


def dataset_facts(dataset: NodeDataset) -> dict:
    """What a checkpoint records of the dataset: the facts a partition's manifest gives
    (:func:`gnnscale.train.checkpoints.runs.dataset_facts`), so that both describe a dataset alike."""
    # Python ints: a checkpoint is read back with weights_only, which refuses numpy scalars.
    facts = {"dataset": dataset.name, "num_nodes": int(dataset.graph.num_nodes),
             "num_edges": int(dataset.graph.num_edges), "feature_dim": int(dataset.feature_dim),
             "num_classes": int(dataset.num_classes)}
    facts.update({name: int(np.asarray(getattr(dataset, name)).size) for name in SPLITS})
    return facts
