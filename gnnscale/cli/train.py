"""``gnnscale train``: flags made from the run's configs, then :func:`gnnscale.train.api.fit`."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, fields, replace

from gnnscale.cli.common import DEFAULT_TIMEOUT_S, add_dataset_args, dataset_flags, load_cli_dataset
from gnnscale.cli.flags import add_settings, given, given_flags, read_settings, whole_number
from gnnscale.devices import resolve_device
from gnnscale.inference.metrics import METRICS
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.nn import ModelConfig
from gnnscale.nn.models import MODELS, TYPED_MODELS
from gnnscale.nn.typed_models import TypedModelConfig
from gnnscale.partition.directory import read_manifest
from gnnscale.settings import field_default, flag_fields
from gnnscale.train.api import fit
from gnnscale.train.checks import LaunchError, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.sources.partitioned import builtin_model_for
from gnnscale.train.layouts import LAYOUTS, LayoutOptions
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.registry import (DEFAULT_LAYOUT, layout_spec, layouts_owning, layouts_with,
                                            option_classes)
from gnnscale.train.rules import RunSettings, check_run
from gnnscale.train.run import RunOutputs, TrainReport
from gnnscale.train.tasks.base import TaskSpec
from gnnscale.train.tasks.registry import DEFAULT_TASK, TASKS, task_settings_classes, task_spec

# Model options come from ModelConfig; the dataset gives the rest (in_dim, num_classes, num_layers).
MODEL_FROM_DATA = ("in_dim", "num_classes", "num_layers")


def settings_classes() -> tuple[type, ...]:
    """Every config whose flags ``gnnscale train`` takes (for naming a flag in an error)."""
    return (ModelConfig, TrainConfig, *task_settings_classes(), RunOutputs, *option_classes(), DGSConfig)


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a GNN by mini-batch neighbor sampling")
    add_dataset_args(t)
    add_settings(t.add_argument_group("model"), ModelConfig)
    t.add_argument("--layers", type=whole_number, default=None, help="GNN layers (default: number of fanouts)")
    add_settings(t.add_argument_group("training"), TrainConfig)
    tasks = t.add_argument_group("task (docs/training.md)")
    tasks.add_argument("--task", default=DEFAULT_TASK, choices=tuple(TASKS),
                       help="; ".join(f"{name} ({spec.summary})" for name, spec in TASKS.items()))
    for spec in TASKS.values():
        if spec.config is not None:
            add_settings(t.add_argument_group(f"--task {spec.name}"), spec.config)
    out = t.add_argument_group("outputs")
    add_settings(out, RunOutputs)
    out.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    out.add_argument("--eval", default="sampled", choices=("sampled", "full"), dest="full_eval",
                     help="full: after the last epoch also score validation and test nodes by layer-wise inference "
                          "over every neighbor (as gnnscale predict), beside the sampled per-epoch accuracy "
                          f"(distributed: --layout {layouts_with('layerwise_inference')}; a typed model: one process)")
    out.add_argument("--metric", default=None, metavar="METRIC",
                     help=f"node task: the score --eval full reports, one of {', '.join(METRICS)} (roc_auc: two "
                          "classes, single-process only; default accuracy); --task link: the per-epoch validation and "
                          "test score that picks the best epoch, roc_auc, ap, mrr or hits@K (default roc_auc)")
    dist = t.add_argument_group("distributed (launch one worker per part with torchrun or python -m gnnscale.launch)")
    dist.add_argument("--partitions", default=None, metavar="DIR",
                      help="a directory from `gnnscale partition` (it holds the data: no --dataset); one worker per "
                           "part, or a divisor of the part count (each worker then holds consecutive parts)")
    dist.add_argument("--layout", default=None, choices=tuple(LAYOUTS),
                      help="; ".join(f"{name} ({spec.summary})" for name, spec in LAYOUTS.items())
                           + f" (default: {DEFAULT_LAYOUT})")
    dist.add_argument("--timeout", type=float, default=None,
                      help=f"seconds a worker waits for its peers before stopping with an error (default: "
                           f"{DEFAULT_TIMEOUT_S:g})")
    for cls in option_classes():
        if flag_fields(cls):
            add_settings(t.add_argument_group(f"--layout {' and '.join(layouts_owning(cls))}"), cls)
    dgs = t.add_argument_group("explanation-guided sampling (docs/dgs.md)")
    dgs.add_argument("--dgs", action="store_true",
                     help=f"distributed --layout {layouts_with('dgs')}: fewer remote neighbors and fewer feature "
                          "dimensions on the wire, guided by an online explanation; the --dgs-* flags tune it")
    add_settings(dgs, DGSConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSettings:
    """Everything ``gnnscale train`` was told, checked, before any data is read."""

    train: TrainConfig
    model: dict  # ModelConfig's fields but MODEL_FROM_DATA
    outputs: RunOutputs
    layout: LayoutOptions | None  # None: one process
    task: TaskSpec
    task_settings: object | None  # the task's own settings (None where it has none)


def fanouts_for(cfg: TrainConfig, layers: int | None) -> TrainConfig:
    """``--layers`` with a single fanout repeats it; otherwise the two must agree."""
    if layers is None or layers == len(cfg.fanouts):
        return cfg
    if len(cfg.fanouts) == 1:
        return replace(cfg, fanouts=cfg.fanouts * layers)
    raise ValueError(f"layers: {layers} layers but {len(cfg.fanouts)} fanouts ({cfg.fanouts})")


def read_train_settings(args: argparse.Namespace) -> TrainSettings:
    """The configs from the flags, every combination checked (a bad one: ValueError naming the field)."""
    train = fanouts_for(read_settings(TrainConfig, args), args.layers)
    resolve_device(train.device)  # a GPU that is not there fails now, before any data is read
    model = read_model_settings(args, train.num_layers)
    task, task_settings = read_task(args)
    # --metric is a task's own setting where its settings have one (link); else --eval full's node metric.
    metric = (args.metric or "accuracy") if task.full_eval else "accuracy"
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {', '.join(METRICS)} for a node task, got {metric!r}")
    full_eval = metric if args.full_eval == "full" else None
    if metric != "accuracy" and full_eval is None:
        raise ValueError(f"metric: {metric} scores the full predictions of --eval full; the sampled per-epoch "
                         "evaluation counts accuracy only (add --eval full)")
    outputs = read_settings(RunOutputs, args, full_eval=full_eval)
    dgs_given = given_flags(DGSConfig, args)
    if dgs_given and not args.dgs:
        raise ValueError(f"{', '.join(dgs_given)}: given without --dgs; add --dgs")
    layout = None
    if args.partitions is None:
        check_single_process_flags(args)
    else:
        data = dataset_flags(args)
        typed = [flag for flag, value in (("--dataset", data.dataset), ("--data-dir", data.data_dir),
                                          ("-o", args.option)) if value]
        if typed:
            raise ValueError(f"partitions: {' and '.join(typed)} cannot be used with --partitions (the partition "
                             "directory holds the dataset); drop them")
        layout = read_layout(args)
    check_run(RunSettings(train=train, task=task, task_settings=task_settings, layout=layout, outputs=outputs,
                          model=model["name"]))
    return TrainSettings(train=train, model=model, outputs=outputs, layout=layout, task=task,
                         task_settings=task_settings)


def read_model_settings(args: argparse.Namespace, num_layers: int) -> dict:
    """The model's flags (ModelConfig's fields but what the dataset gives), checked now with stand-ins for what the
    dataset gives. A typed graph's model (rgcn, rsage, rgat) takes the same settings; its schema comes with the
    data, so its settings are checked as a plain model's."""
    typed = given(ModelConfig, args)
    name = typed.get("name", field_default(ModelConfig, "name"))
    checked = ModelConfig(in_dim=1, num_classes=2, num_layers=num_layers,
                          **{**typed, "name": MODELS[0] if name in TYPED_MODELS else name})
    return {field: value for field, value in asdict(checked).items() if field not in MODEL_FROM_DATA} | {"name": name}


def model_config_for(dataset: NodeDataset | TypedDataset, model: dict, task: TaskSpec,
                     num_layers: int) -> ModelConfig | TypedModelConfig:
    """The built-in model's config of ``dataset``: the flags' settings, sized by the data (a typed graph's: its
    node types, relations and feature widths)."""
    width = task.output_width(model, dataset.num_classes)
    if model["name"] in TYPED_MODELS:
        if not isinstance(dataset, TypedDataset):
            raise ValueError(f"model: --model {model['name']} trains a typed graph (several node types); use --model "
                             f"{' or '.join(MODELS)} on this dataset")
        dims = {t: d for t, d in dataset.feature_dims.items() if d is not None}
        return TypedModelConfig.for_graph(dataset.graph, feature_dims=dims, num_classes=width, num_layers=num_layers,
                                          **model)
    if isinstance(dataset, TypedDataset):
        raise ValueError(f"model: a typed graph trains --model {' or '.join(TYPED_MODELS)} (one operator per relation), "
                         f"got --model {model['name']}")
    return ModelConfig(in_dim=dataset.feature_dim, num_classes=width, num_layers=num_layers, **model)


def read_task(args: argparse.Namespace) -> tuple[TaskSpec, object | None]:
    """``--task`` and its own settings; a flag of another task's settings names the tasks it is for. ``--metric``
    sets the task's ``metric`` where its settings have one (the dataclass's default where not typed)."""
    spec = task_spec(args.task)
    for cls in task_settings_classes():
        typed = given_flags(cls, args)
        if cls is not spec.config and typed:
            owners = " or ".join(name for name, other in TASKS.items() if other.config is cls)
            raise ValueError(f"{', '.join(typed)}: applies to --task {owners}; add it or drop the flag")
    if spec.config is None:
        return spec, None
    takes_metric = "metric" in {f.name for f in fields(spec.config)}
    return spec, read_settings(spec.config, args, **({"metric": args.metric} if takes_metric and args.metric else {}))


def read_layout(args: argparse.Namespace) -> LayoutOptions:
    """``--layout`` and its own options; a layout option of another layout names the layouts it is for."""
    spec = layout_spec(args.layout or DEFAULT_LAYOUT)
    for cls in option_classes():
        if cls is not spec.options and given_flags(cls, args):
            raise ValueError(f"{given_flags(cls, args)[0]}: applies to --layout "
                             f"{' or '.join(layouts_owning(cls))}, got --layout {spec.name}")
    dgs = read_settings(DGSConfig, args) if args.dgs else None
    return LayoutOptions(layout=spec.name, settings=read_settings(spec.options, args), dgs=dgs)


def check_single_process_flags(args: argparse.Namespace) -> None:
    """A flag that only a distributed run reads is an error without --partitions, not silently ignored."""
    distributed_only = [flag for cls in option_classes() for flag in given_flags(cls, args)]
    if args.layout is not None:
        distributed_only.insert(0, f"--layout {args.layout}")
    for flag, value in (("--timeout", args.timeout), ("--dgs", args.dgs)):
        if value:
            distributed_only.append(flag)
    if distributed_only:
        raise ValueError(f"{', '.join(distributed_only)}: applies to a distributed run; add --partitions "
                         "DIR (from gnnscale partition) and launch with torchrun, or drop it to train in this process")


def cmd_train(args: argparse.Namespace) -> None:
    try:
        settings = read_train_settings(args)
    except (ValueError, TypeError) as err:
        # Under torchrun every worker parses the same flags: the same error everywhere.
        raise (LaunchError(str(err)) if args.partitions is not None else err) from None
    progress = not args.quiet
    task, task_settings = settings.task, settings.task_settings
    as_fit = task_settings if task_settings is not None else task.name  # fit's task argument
    if settings.layout is not None:
        check_launched(args.partitions)
        model = builtin_model_for(args.partitions, settings.layout, settings.model, settings.train, settings.outputs,
                                  task, task_settings)
        report = fit(model, args.partitions, inputs="blocks", config=settings.train, layout=settings.layout,
                     outputs=settings.outputs, progress=progress,
                     timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout, task=as_fit)
        if os.environ.get("RANK", "0") != "0":
            return  # every worker has the same report: rank 0 prints it
    else:
        outputs = settings.outputs
        # Before loading the dataset (minutes for a large one): a bad output path fails at once.
        check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=outputs.checkpoint, resume=outputs.resume,
                          overwrite=outputs.overwrite, model_out=outputs.model_out)
        dataset = load_cli_dataset(args)
        model_cfg = model_config_for(dataset, settings.model, task, settings.train.num_layers)
        model = task.build_model(model_cfg, task_settings, settings.train.seed)
        report = fit(model, dataset, inputs="blocks", config=settings.train, outputs=outputs, progress=progress,
                     task=as_fit)
    print_report(report, settings.train, settings.outputs)


def check_launched(partitions: str) -> None:
    """``--partitions`` trains one worker per part, started by a launcher: without one, say how to launch it
    (with the part count, where the manifest can be read) instead of naming torchrun's variables."""
    if "RANK" in os.environ:
        return
    try:
        parts = read_manifest(partitions)["num_parts"]
    except (ValueError, OSError):
        parts = "P"  # the manifest's own error comes once launched
    raise ValueError(f"partitions: --partitions trains one worker per part (or per group of parts); launch them with "
                     f"python -m gnnscale.launch --standalone --nproc-per-node {parts} -m gnnscale train --partitions "
                     f"{partitions} ...")


def print_report(report: TrainReport, cfg: TrainConfig, outputs: RunOutputs) -> None:
    last = report.history[-1]
    if outputs.model_out is not None:
        best = outputs.save_model_at == "best" and report.saved_epoch == report.best_epoch
        which = "best validation" if best else "last"
        print(f"saved the model of epoch {report.saved_epoch} ({which}) to {outputs.model_out}")
    if report.full_eval is not None:
        full = report.full_eval
        print(f"full-graph evaluation (layer-wise, every neighbor): validation {full['metric']} {full['val']:.4f}, "
              f"test {full['metric']} {full['test']:.4f} ({full['seconds']:.1f} s)")
    if not cfg.evaluate:
        print(f"final: {len(report.history)} epochs trained, no evaluation (--no-eval)")
        return
    name = "accuracy" if report.metric == "accuracy" else report.metric
    print(f"final: test {name} {report.final_test_acc:.4f} (epoch {last['epoch']}); "
          f"best validation {report.best_val_acc:.4f} at epoch {report.best_epoch} "
          f"-> test {name} {report.test_acc_at_best_val:.4f}")
