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
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.inference.evaluate import evaluate_full
from gnnscale.inference.metrics import check_metric
from gnnscale.nn.models import MODELS, ModelConfig
from gnnscale.nn.typed_models import TYPED_MODELS, TypedModelConfig
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

    dataset: NodeDataset | TypedDataset
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
        check_model_fits_dataset(model_cfg, dataset)
        check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=outputs.checkpoint, resume=outputs.resume,
                          overwrite=outputs.overwrite, model_out=outputs.model_out)
        if np.asarray(dataset.train_idx).size == 0:
            raise ValueError("train_idx: the training set is empty; nothing to train on")
        for features in feature_arrays(dataset):
            check_finite_features(features)
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


def check_model_fits_dataset(model_cfg: ModelConfig | TypedModelConfig | None,
                             dataset: NodeDataset | TypedDataset) -> None:
    """A typed model trains a typed dataset (of the node types, relations and feature widths it was built for),
    a plain model a plain one."""
    typed = isinstance(dataset, TypedDataset)
    if model_cfg is None:
        if typed:
            raise ValueError("model: a typed dataset trains a typed built-in model (--model rgcn, rsage or rgat: "
                             "gnnscale.nn.TypedModel)")
        return
    if typed != isinstance(model_cfg, TypedModelConfig):
        kind = "a typed dataset (several node types)" if typed else "a dataset of one node type"
        raise ValueError(f"model: --model {model_cfg.name} does not train {kind}; use --model "
                         f"{' or '.join(TYPED_MODELS if typed else MODELS)}")
    if typed:
        graph = dataset.graph
        built = (model_cfg.node_types, model_cfg.relations, model_cfg.feature_dims)
        has = (graph.node_types, tuple((r.src, r.name, r.dst) for r in graph.relations),
               {t: d for t, d in dataset.feature_dims.items() if d is not None})
        if built != has:
            raise ValueError("model: built for other node types, relations or feature widths than the dataset's; "
                             "build it with TypedModelConfig.for_graph(dataset.graph, feature_dims=...)")


def feature_arrays(dataset: NodeDataset | TypedDataset) -> list:
    """The dataset's feature matrices: one, or one per node type with features."""
    if isinstance(dataset, TypedDataset):
        return [x for x in dataset.features.values() if x is not None]
    return [dataset.features]


def dataset_facts(dataset: NodeDataset | TypedDataset) -> dict:
    """What a checkpoint records of the dataset: the facts a partition's manifest gives
    (:func:`gnnscale.train.checkpoints.runs.dataset_facts`), so that both describe a dataset alike (a typed
    dataset: its feature width per node type)."""
    # Python ints: a checkpoint is read back with weights_only, which refuses numpy scalars.
    width = ({t: None if d is None else int(d) for t, d in dataset.feature_dims.items()}
             if isinstance(dataset, TypedDataset) else int(dataset.feature_dim))
    facts = {"dataset": dataset.name, "num_nodes": int(dataset.graph.num_nodes),
             "num_edges": int(dataset.graph.num_edges), "feature_dim": width,
             "num_classes": int(dataset.num_classes)}
    facts.update({name: int(np.asarray(getattr(dataset, name)).size) for name in SPLITS})
    return facts
