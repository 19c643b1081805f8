"""Distributed training over a partition directory, one worker per part (torchrun): the
:class:`Partitioned` source of the one setup path (:mod:`gnnscale.train.setup`), which ``gnnscale.train.fit``
runs for a partition directory.

Every worker checks the launch, starts from rank 0's model (a built-in one or the caller's own,
:mod:`gnnscale.train.inputs`), loads its part in its layout's view, builds the layout
(:mod:`gnnscale.train.layouts`: what each worker samples, fetches and computes) and runs the training
loop that a run in one process runs too (:mod:`gnnscale.train.loop`).

``hybrid`` and ``vanilla`` give identical blocks for the same key (counter-based randomness), so they
train identically: only the communication differs. With one worker this is exactly the
single-machine trainer. ``split`` trains, on P workers, the single-machine trainer's mini-batches of
``P x batch_size`` seeds, each vertex computed by one worker.

With ``checkpoint``, rank 0 saves the run after every epoch (and every ``checkpoint_every``
iterations); a resumed run continues at the saved epoch and step (:mod:`gnnscale.train.checkpoints.runs`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import DistContext, init_from_env, rank_from_env, world_size_from_env
from gnnscale.inference.distributed import evaluate_full_distributed
from gnnscale.inference.typed_distributed import evaluate_full_typed_distributed
from gnnscale.nn import ModelConfig
from gnnscale.nn.models import MODELS, TYPED_MODELS
from gnnscale.nn.typed_models import TypedModelConfig
from gnnscale.partition.directory import LocalPartition, is_typed_manifest, load_partition, read_manifest
from gnnscale.partition.typed import TypedPartition, manifest_schema
from gnnscale.partition.typed_directory import load_typed_partition
from gnnscale.train.checks import LaunchError, check_distinct, check_partition_launch, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.checkpoints.runs import check_checkpoint_at_launch, run_identity
from gnnscale.train.inputs import model_signature, training_device
from gnnscale.train.layouts import Layout, LayoutContext, LayoutOptions, LayoutSpec, build_layout, resolved
from gnnscale.train.rules import RunSettings, check_run, checked_model
from gnnscale.train.run import RunOutputs
from gnnscale.train.setup import CheckedLaunch
from gnnscale.train.tasks.base import TaskSpec
from gnnscale.train.tasks.node import NODE
from gnnscale.train.tasks.registry import task_signature


def load_local_partition(partition_dir: str | Path, view: str, comm: Comm) -> LocalPartition | TypedPartition:
    """Load this worker's part (its consecutive parts, where fewer workers than parts were launched) in
    the layout's ``view`` (the whole topology, or its part's in-edges; a typed graph's typed rows); if any worker
    fails (missing or corrupt file, a worker count that does not divide the part count), every worker raises with
    that worker's message instead of waiting forever for it."""
    part, error = None, ""
    try:
        load = load_typed_partition if is_typed_manifest(read_manifest(partition_dir)) else load_partition
        part = load(partition_dir, comm.rank, view, workers=comm.world_size)
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)
    return part


def builtin_model_for(partition_dir: str | Path, options: LayoutOptions, model_options: dict, cfg: TrainConfig,
                      outputs: RunOutputs = RunOutputs(), task: TaskSpec = NODE,
                      task_settings: object | None = None) -> nn.Module:
    """The built-in model ``gnnscale train --partitions`` trains: ``model_options`` (ModelConfig fields but
    in_dim, num_classes and num_layers) sized for the partitioned dataset and the task (a link encoder's
    output is ``hidden_dim`` wide), initialised from ``cfg.seed`` (the same weights on every worker). The
    launch checks that need no manifest come first, in :func:`check_launch`'s order."""
    try:
        spec = check_before_manifest(options, cfg, model_options["name"], outputs, task, task_settings, "blocks")
        manifest = check_partition_launch(partition_dir, world_size_from_env(), cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        model_cfg = model_config_of(manifest, model_options, task.output_width(model_options, manifest["num_classes"]),
                                    cfg.num_layers)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return task.build_model(model_cfg, task_settings, cfg.seed)


def model_config_of(manifest: dict, model_options: dict, num_classes: int,
                    num_layers: int) -> ModelConfig | TypedModelConfig:
    """The built-in model ``model_options`` names, sized for the partitioned dataset: a plain model of its feature
    width, or a typed one of a typed graph's schema (its node types, relations and feature widths)."""
    name, typed = model_options["name"], is_typed_manifest(manifest)
    if (name in TYPED_MODELS) != typed:
        wanted = TYPED_MODELS if typed else MODELS
        kind = "a typed graph (several node types)" if typed else "a graph of one node type"
        raise ValueError(f"model: the partitions hold {kind}, which --model {' or '.join(wanted)} trains; got --model "
                         f"{name}")
    if not typed:
        return ModelConfig(in_dim=manifest["feature_dim"], num_classes=num_classes, num_layers=num_layers,
                           **model_options)
    dims = {t: d for t, d in manifest["feature_dim"].items() if d is not None}
    return TypedModelConfig.for_graph(manifest_schema(manifest), feature_dims=dims, num_classes=num_classes,
                                      num_layers=num_layers, **model_options)


def check_before_manifest(options: LayoutOptions, cfg: TrainConfig, model_name: str | None, outputs: RunOutputs,
                          task: TaskSpec, task_settings: object | None, inputs: str) -> LayoutSpec:
    """The settings' rules (:func:`~gnnscale.train.rules.check_run`), the output paths and the launch's worker
    count (ValueError): what needs no partition."""
    run = RunSettings(train=cfg, task=task, task_settings=task_settings, layout=options, outputs=outputs,
                      model=model_name, inputs=inputs)
    # The flags first: a bad combination is named even when the launch itself is wrong too.
    check_run(run)
    # The checkpoint file itself is rank 0's to check (check_checkpoint_at_launch): another machine has none.
    check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=None, resume=False,
                      overwrite=outputs.overwrite or outputs.resume, model_out=outputs.model_out)
    check_distinct({flag: Path(path) for flag, path in (("--metrics-out", outputs.metrics_out),
                                                        ("--checkpoint", outputs.checkpoint),
                                                        ("--save-model", outputs.model_out)) if path is not None})
    return check_run(replace(run, world_size=world_size_from_env()))


def check_launch(partition_dir: str | Path, options: LayoutOptions, model: nn.Module, inputs: str,
                 cfg: TrainConfig, outputs: RunOutputs, task: TaskSpec = NODE,
                 task_settings: object | None = None) -> CheckedLaunch:
    """Every check that needs no peer, before joining the run: every worker fails at once with the same
    line (a :class:`LaunchError`) instead of after loading its part (or, for a metrics path, after the
    whole run)."""
    try:
        model_cfg, adapter = checked_model(model, inputs, task)
        spec = check_before_manifest(options, cfg, None if model_cfg is None else model_cfg.name, outputs, task,
                                     task_settings, inputs)
        device = training_device(model, cfg.device)  # this worker's: under torchrun, cuda:LOCAL_RANK
        world_size = world_size_from_env()
        manifest = check_partition_launch(partition_dir, world_size, cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        if model_cfg is not None:
            check_builtin_fits(model_cfg, manifest, cfg, partition_dir, task)
        elif is_typed_manifest(manifest):
            raise ValueError(f"model: {partition_dir} holds a typed graph, which a typed built-in model trains "
                             f"(--model {' or '.join(TYPED_MODELS)}: gnnscale.nn.TypedModel)")
        signature = task_signature(model_signature(model, adapter), task, task_settings)
        identity = run_identity(partition_dir, manifest, signature, cfg, options, world_size)
        resume_path = check_checkpoint_at_launch(outputs.checkpoint, resume=outputs.resume,
                                                 overwrite=outputs.overwrite, every=outputs.checkpoint_every,
                                                 rank=rank_from_env(), run=identity, epochs=cfg.epochs)
    except (ValueError, TypeError) as err:
        raise LaunchError(str(err)) from err
    return CheckedLaunch(inputs=adapter, spec=spec, options=options, model_cfg=model_cfg, identity=identity,
                         device=device, task=task, task_settings=task_settings, resume_path=resume_path)


def check_builtin_fits(model_cfg: ModelConfig | TypedModelConfig, manifest: dict, cfg: TrainConfig,
                       partition_dir: str | Path, task: TaskSpec) -> None:
    """A built-in model's input and output widths are the dataset's (a task whose outputs are not the classes,
    a link encoder's embedding: its input width only; a typed model: the typed graph's schema), and its layers the
    fanouts' hops."""
    if model_cfg.num_layers != cfg.num_layers:
        raise ValueError(f"fanouts: {cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    if isinstance(model_cfg, TypedModelConfig) or is_typed_manifest(manifest):
        # A typed model classifies nodes of the target type (the node task): its outputs are the classes.
        fitting = model_config_of(manifest, {"name": model_cfg.name}, manifest["num_classes"], model_cfg.num_layers)
        schema = ("node_types", "feature_dims", "embedding_rows", "relations", "num_classes")
        if any(getattr(fitting, f) != getattr(model_cfg, f) for f in schema):
            raise ValueError(f"model: built for other node types, relations, feature widths or classes than those of "
                             f"{partition_dir}; build it with TypedModelConfig.for_graph of the partitioned dataset's "
                             "graph")
        return
    if not task.full_eval:
        if model_cfg.in_dim != manifest["feature_dim"]:
            raise ValueError(f"model: built for {model_cfg.in_dim} features, but {partition_dir} holds "
                             f"{manifest['feature_dim']}")
        return
    if (model_cfg.in_dim, model_cfg.num_classes) != (manifest["feature_dim"], manifest["num_classes"]):
        raise ValueError(f"model: built for {model_cfg.in_dim} features and {model_cfg.num_classes} classes, but "
                         f"{partition_dir} holds {manifest['feature_dim']} features and {manifest['num_classes']} "
                         "classes")


@dataclass(frozen=True, slots=True)
class Partitioned:
    """The :class:`~gnnscale.train.setup.RunSource` of a partition directory, one worker per part (or per
    group of consecutive parts) under torchrun.

    Args:
        partition_dir: written by ``gnnscale partition``.
        options: the layout and its options.
        timeout_s: a collective waiting longer than this for a peer fails (no hang).
        task: the task's spec; ``task_settings`` its own settings (None where it has none).
    """

    partition_dir: Path
    options: LayoutOptions
    timeout_s: float
    task: TaskSpec = NODE
    task_settings: object | None = None

    def __post_init__(self) -> None:
        # The layout's own options filled in (its defaults where not given): recorded whole.
        object.__setattr__(self, "options", resolved(self.options))

    def check(self, model: nn.Module, inputs: str, cfg: TrainConfig, outputs: RunOutputs) -> CheckedLaunch:
        return check_launch(self.partition_dir, self.options, model, inputs, cfg, outputs, self.task,
                            self.task_settings)

    def join(self) -> DistContext:
        return init_from_env(timeout_s=self.timeout_s)

    def load(self, launch: CheckedLaunch, comm: Comm) -> LocalPartition:
        return load_local_partition(self.partition_dir, launch.spec.view, comm)

    def build(self, ctx: LayoutContext) -> Layout:
        return build_layout(ctx)

    def header(self, launch: CheckedLaunch, cfg: TrainConfig, world_size: int) -> dict:
        options = self.options
        return {"partitions": str(self.partition_dir), "layout": options.layout, "world_size": world_size,
                "layout_options": asdict(options.settings),
                "dgs": None if options.dgs is None else asdict(options.dgs), **launch.header(cfg)}

    def full_eval(self, model: nn.Module, part: LocalPartition | TypedPartition, comm: Comm, metric: str) -> dict:
        if isinstance(part, TypedPartition):
            return evaluate_full_typed_distributed(model, part, comm, metric)
        return evaluate_full_distributed(model, part, comm, metric)
