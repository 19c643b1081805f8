"""``gnnscale train``: flags made from the run's configs, then :func:`gnnscale.train.api.fit`."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, replace

from gnnscale.cli.common import DEFAULT_TIMEOUT_S, add_dataset_args, dataset_flags, load_cli_dataset
from gnnscale.cli.flags import add_settings, given_flags, read_settings, whole_number
from gnnscale.devices import resolve_device
from gnnscale.inference.metrics import METRICS
from gnnscale.nn import ModelConfig
from gnnscale.settings import flag_fields
from gnnscale.train.api import fit
from gnnscale.train.checks import LaunchError, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.distributed import builtin_model_for
from gnnscale.train.inputs import seeded_link_model, seeded_model
from gnnscale.train.layouts import LAYOUTS, LayoutOptions
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.registry import (DEFAULT_LAYOUT, layout_spec, layouts_owning, layouts_with,
                                            option_classes)
from gnnscale.train.link import check_link_layout
from gnnscale.train.link_config import LinkConfig
from gnnscale.train.run import RunOutputs, TrainReport

# Model options come from ModelConfig; the dataset gives the rest (in_dim, num_classes, num_layers).
MODEL_FROM_DATA = ("in_dim", "num_classes", "num_layers")


TASKS = ("node", "link")


def settings_classes() -> tuple[type, ...]:
    """Every config whose flags ``gnnscale train`` takes (for naming a flag in an error)."""
    return (ModelConfig, TrainConfig, LinkConfig, RunOutputs, *option_classes(), DGSConfig)


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a GNN by mini-batch neighbor sampling")
    add_dataset_args(t)
    add_settings(t.add_argument_group("model"), ModelConfig)
    t.add_argument("--layers", type=whole_number, default=None, help="GNN layers (default: number of fanouts)")
    add_settings(t.add_argument_group("training"), TrainConfig)
    link = t.add_argument_group("link prediction (docs/training.md)")
    link.add_argument("--task", default="node", choices=TASKS,
                      help="node classification, or link prediction: the encoder's output (--hidden wide) is a node "
                           "embedding and a decoder scores pairs")
    add_settings(link, LinkConfig)
    out = t.add_argument_group("outputs")
    add_settings(out, RunOutputs)
    out.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    out.add_argument("--eval", default="sampled", choices=("sampled", "full"), dest="eval_mode",
                     help="full: after the last epoch also score validation and test nodes by layer-wise inference "
                          "over every neighbor (as gnnscale predict), beside the sampled per-epoch accuracy "
                          f"(distributed: --layout {layouts_with('layerwise_inference')})")
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
    link: LinkConfig | None = None  # None: node classification


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
    # Checked now, with stand-ins for what the dataset gives; its own fields (all but those) are kept.
    checked = read_settings(ModelConfig, args, in_dim=1, num_classes=2, num_layers=train.num_layers)
    model = {name: value for name, value in asdict(checked).items() if name not in MODEL_FROM_DATA}
    link = read_link(args)
    # A link task's --metric is its LinkConfig's; the node metric (of --eval full) is then unused.
    metric = "accuracy" if link is not None else args.metric or "accuracy"
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {', '.join(METRICS)} for a node task, got {metric!r}")
    full_eval = metric if args.eval_mode == "full" else None
    if metric != "accuracy" and full_eval is None:
        raise ValueError(f"metric: {metric} scores the full predictions of --eval full; the sampled per-epoch "
                         "evaluation counts accuracy only (add --eval full)")
    outputs = read_settings(RunOutputs, args, full_eval=full_eval)
    dgs_given = given_flags(DGSConfig, args)
    if dgs_given and not args.dgs:
        raise ValueError(f"{', '.join(dgs_given)}: given without --dgs; add --dgs")
    if args.partitions is None:
        check_single_process_flags(args)
        return TrainSettings(train=train, model=model, outputs=outputs, layout=None, link=link)
    data = dataset_flags(args)
    typed = [flag for flag, value in (("--dataset", data.dataset), ("--data-dir", data.data_dir),
                                      ("-o", args.option)) if value]
    if typed:
        raise ValueError(f"partitions: {' and '.join(typed)} cannot be used with --partitions (the partition "
                         "directory holds the dataset); drop them")
    layout = read_layout(args, metric)
    if link is not None:
        check_link_layout(layout.layout, dgs=layout.dgs is not None)
    return TrainSettings(train=train, model=model, outputs=outputs, layout=layout, link=link)


def read_link(args: argparse.Namespace) -> LinkConfig | None:
    """``--task link``'s settings (None for a node task, which takes none of them)."""
    if args.task == "node":
        typed = given_flags(LinkConfig, args)
        if typed:
            raise ValueError(f"{', '.join(typed)}: applies to --task link; add it or drop the flag")
        return None
    if args.eval_mode == "full":
        raise ValueError("eval_mode: --eval full scores nodes; a link task is scored by --metric every epoch")
    # --metric is shared with the node task, so no LinkConfig flag: passed when typed, else LinkConfig's default.
    return read_settings(LinkConfig, args, **({} if args.metric is None else {"metric": args.metric}))


def read_layout(args: argparse.Namespace, metric: str) -> LayoutOptions:
    """``--layout`` and its own options; a layout option of another layout names the layouts it is for."""
    spec = layout_spec(args.layout or DEFAULT_LAYOUT)
    for cls in option_classes():
        if cls is not spec.options and given_flags(cls, args):
            raise ValueError(f"{given_flags(cls, args)[0]}: applies to --layout "
                             f"{' or '.join(layouts_owning(cls))}, got --layout {spec.name}")
    dgs = read_settings(DGSConfig, args) if args.dgs else None
    if args.eval_mode == "full" and not spec.layerwise_inference:
        raise ValueError(f"eval_mode: full evaluation over a partition runs with --layout "
                         f"{layouts_with('layerwise_inference')}, not {spec.name}; run gnnscale predict --partitions "
                         "on the saved model instead")
    if metric == "roc_auc":
        raise ValueError("metric: roc_auc ranks every score together, which a distributed full evaluation does not "
                         "gather; use accuracy or f1_macro, or gnnscale predict --partitions on the saved model")
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
    link = settings.link
    if settings.layout is not None:
        model = builtin_model_for(args.partitions, settings.layout, settings.model, settings.train, settings.outputs,
                                  link)
        report = fit(model, args.partitions, inputs="blocks", config=settings.train, layout=settings.layout,
                     outputs=settings.outputs, progress=progress,
                     timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout, task=link)
        if os.environ.get("RANK", "0") != "0":
            return  # every worker has the same report: rank 0 prints it
    else:
        outputs = settings.outputs
        # Before loading the dataset (minutes for a large one): a bad output path fails at once.
        check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=outputs.checkpoint, resume=outputs.resume,
                          overwrite=outputs.overwrite, model_out=outputs.model_out)
        dataset = load_cli_dataset(args)
        # A link encoder's output is the embedding, --hidden wide.
        width = dataset.num_classes if link is None else settings.model["hidden_dim"]
        model_cfg = ModelConfig(in_dim=dataset.feature_dim, num_classes=width, num_layers=settings.train.num_layers,
                                **settings.model)
        seed = settings.train.seed
        model = seeded_model(model_cfg, seed) if link is None else seeded_link_model(model_cfg, link.decoder, seed)
        report = fit(model, dataset, inputs="blocks", config=settings.train, outputs=outputs, progress=progress,
                     task=link)
    print_report(report, settings.train, settings.outputs)


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
