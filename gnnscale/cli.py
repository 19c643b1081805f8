"""Command line: ``gnnscale train | predict | partition | generate | convert | info`` (also ``python -m gnnscale``)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from gnnscale import __version__
from gnnscale.cli_common import (DEFAULT_LAYOUT, DEFAULT_TIMEOUT_S, HelpWithDefaults, add_dataset_args,
                                 load_cli_dataset)
from gnnscale.cli_convert import add_convert_parser, cmd_convert
from gnnscale.cli_generate import add_generate_parser, cmd_generate
from gnnscale.cli_predict import add_predict_parser, cmd_predict
from gnnscale.files import atomic_write
from gnnscale.graph.dataset import describe_summary
from gnnscale.graph.feature_dtype import FEATURE_DTYPES
from gnnscale.inference.metrics import METRICS
from gnnscale.nn import MODELS, ModelConfig
from gnnscale.distributed.comm import AgreementFailure, PeerFailure
from gnnscale.distributed.context import announce_report, wait_for_report
from gnnscale.partition import METHODS, write_partition_dir
from gnnscale.partition.coarsen import budget_bytes
from gnnscale.partition.kaminpar_parts import MissingDependency
from gnnscale.train.checks import LaunchError, check_run_outputs
from gnnscale.train.config import DEFAULT_LAYER_SIZE, SAMPLERS, TrainConfig
from gnnscale.train.api import fit
from gnnscale.train.distributed import builtin_model_for
from gnnscale.train.inputs import seeded_model
from gnnscale.train.layouts import LAYOUTS, LayoutOptions
from gnnscale.train.layouts.dgs_config import DGS_MODES, DGSConfig
from gnnscale.distributed.split.shuffle import WIRE_DTYPES
from gnnscale.train.layouts.split import SPLIT_SAMPLINGS
from gnnscale.train.loop import TrainingDiverged
from gnnscale.train.memory import keep_freed_memory
from gnnscale.train.run import RunOutputs


EXIT_INTERRUPTED = 130  # the shell's code for a run ended by SIGINT
EXIT_STOPPED = 1  # a distributed run stopped by a failure (a dead or silent peer, a broken part)
LEAD_REPORT_WAIT_S = 5.0  # see report()
EXIT_BAD_INPUT = 2  # bad input, reported before any work (argparse's own errors exit with 2 too)


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints such as 10,5, got {text!r}") from None


def resume_mode(text: str) -> str:
    if text != "auto":
        raise argparse.ArgumentTypeError(f"expected nothing or 'auto' (--resume auto), got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gnnscale", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print gnnscale's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a GNN by mini-batch neighbor sampling", formatter_class=HelpWithDefaults)
    add_dataset_args(t)
    t.add_argument("--model", default="sage", help=f"one of {', '.join(MODELS)}")
    t.add_argument("--fanouts", type=int_list, default="10,5", help="neighbors per hop, from the seeds outwards")
    t.add_argument("--eval-fanouts", type=int_list, default=None, help="inference fanouts (default: --fanouts)")
    t.add_argument("--layers", type=int, default=None, help="GNN layers (default: number of fanouts)")
    t.add_argument("--batch-size", type=int, default=512, help="seed nodes per mini-batch (per worker)")
    t.add_argument("--hidden", type=int, default=128, help="hidden size (per head for GAT)")
    t.add_argument("--heads", type=int, default=8, help="GAT attention heads in hidden layers")
    t.add_argument("--dropout", type=float, default=0.5, help="dropout between layers")
    t.add_argument("--input-dropout", type=float, default=0.0, help="dropout on the input features")
    t.add_argument("--attn-dropout", type=float, default=0.0, help="GAT dropout on attention weights")
    t.add_argument("--lr", type=float, default=0.003, help="Adam learning rate")
    t.add_argument("--weight-decay", type=float, default=0.0, help="Adam L2 penalty")
    t.add_argument("--epochs", type=int, default=5, help="passes over the training nodes")
    t.add_argument("--seed", type=int, default=0, help="root of every random choice")
    t.add_argument("--threads", type=int, default=2, help="CPU threads for the sampler and torch")
    t.add_argument("--sampler", default="fused", choices=SAMPLERS,
                   help="fused kernel, two-step reference, matrix (GraphSAGE by sparse products, --bulk batches at "
                        "a time; the fused blocks) or ladies (layer-wise LADIES by sparse products)")
    t.add_argument("--bulk", type=int, default=1,
                   help="matrix/ladies: consecutive batches sampled by one set of sparse products")
    t.add_argument("--layer-size", type=int, default=None,
                   help=f"ladies: nodes drawn per batch per layer (default {DEFAULT_LAYER_SIZE})")
    t.add_argument("--replace", action="store_true", help="sample neighbors with replacement")
    t.add_argument("--metrics-out", default=None, help="write per-epoch metrics as JSON here")
    t.add_argument("--checkpoint", default=None,
                   help="save a checkpoint here after every epoch (distributed: rank 0 writes it)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="distributed: also save --checkpoint after every N iterations (a resume continues mid-epoch)")
    t.add_argument("--resume", nargs="?", const=True, default=False, type=resume_mode, metavar="auto",
                   help="continue the run saved in --checkpoint (the newest complete one: a damaged file falls back "
                        "to the previous save); --resume auto also starts afresh when there is none yet, so that "
                        "torchrun --max-restarts can restart a failed run with the same command")
    t.add_argument("--overwrite", action="store_true",
                   help="replace an existing --checkpoint (without --resume) or --metrics-out file")
    t.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    t.add_argument("--no-eval", action="store_true", help="skip validation/test accuracy (timing runs)")
    t.add_argument("--eval", default="sampled", choices=("sampled", "full"), dest="eval_mode",
                   help="full: after the last epoch also score validation and test nodes by layer-wise inference "
                        "over every neighbor (as gnnscale predict), beside the sampled per-epoch accuracy "
                        "(distributed: --layout hybrid or vanilla)")
    t.add_argument("--metric", default="accuracy", choices=METRICS,
                   help="the score --eval full reports (roc_auc: two classes, single-process only)")
    t.add_argument("--prefetch", type=int, default=1,
                   help="batches sampled and gathered ahead in a background thread while one trains (0: none)")
    t.add_argument("--partitions", default=None,
                   help="distributed: a directory from `gnnscale partition` (it holds the data: no --dataset); "
                        "launch one worker per part with torchrun, or a divisor of the part count (each worker "
                        "then holds consecutive parts)")
    t.add_argument("--layout", default=None, choices=tuple(LAYOUTS),
                   help=f"distributed (default {DEFAULT_LAYOUT}): " + "; ".join(f"{name} ({spec.summary})"
                                                                       for name, spec in LAYOUTS.items()))
    t.add_argument("--split-sampling", default=None, choices=SPLIT_SAMPLINGS,
                   help="distributed --layout split: owner (default: each worker samples the destinations it owns and "
                        "exchanges cross edges, one round per hop) or replicated (each worker samples the whole "
                        "mini-batch); the same training either way")
    t.add_argument("--shuffle-dtype", default=None, choices=tuple(WIRE_DTYPES),
                   help="distributed --layout split: the dtype its exchanges travel in: float32 (default: the same "
                        "training as one process, bit for bit) or bfloat16 (half the bytes, summed in float32)")
    t.add_argument("--replication", type=int, default=1,
                   help="distributed --layout 1.5d: copies C of every block row of the adjacency and features (C "
                        "divides the worker count; 1: fully partitioned, all workers: fully replicated)")
    t.add_argument("--cache-fraction", type=float, default=0.0,
                   help="distributed hybrid/vanilla: each worker caches the features of the highest in-degree remote "
                        "nodes, this fraction of all nodes (0: no cache)")
    t.add_argument("--dgs", action="store_true",
                   help="distributed hybrid/vanilla: explanation-guided sampling (DGS): fewer remote neighbors and "
                        "fewer feature dimensions on the wire, guided by an online explanation (docs/dgs.md)")
    t.add_argument("--dgs-period", type=int, default=DGSConfig().period, help="--dgs: iterations between explanations (T_ex)")
    t.add_argument("--dgs-warmup", type=int, default=DGSConfig().warmup,
                   help="--dgs: training iterations before the first explanation")
    t.add_argument("--dgs-lag", type=int, default=None,
                   help="--dgs: iterations between an explained model and the first batch sampled with its masks, "
                        "at most --dgs-period (default: the smaller of 5 and --dgs-period)")
    t.add_argument("--dgs-epsilon", type=float, default=0.1,
                   help="--dgs: share of each destination's samples moved from remote to local neighbors")
    t.add_argument("--dgs-feature-rate", type=float, default=0.85,
                   help="--dgs: share of the feature dimensions that travel for remote nodes (N_f)")
    t.add_argument("--dgs-mode", default="both", choices=DGS_MODES,
                   help="--dgs: both samplings, node sampling only, or feature sampling only (ablation)")
    t.add_argument("--dgs-probes", type=int, default=None,
                   help="--dgs: training nodes each worker's explanation graph holds (default: 64, fewer when the "
                        "fanouts make each one's sampled graph large: at most 16,384 input rows)")
    t.add_argument("--dgs-explain-steps", type=int, default=DGSConfig().explain_steps,
                   help="--dgs: Adam steps of each explanation")
    t.add_argument("--dgs-explain-lr", type=float, default=DGSConfig().explain_lr,
                   help="--dgs: Adam's step size in each explanation")
    t.add_argument("--save-model", default=None,
                   help="write the trained model here: weights, model config and dataset facts (gnnscale.load_model "
                        "and gnnscale predict --model read it)")
    t.add_argument("--timeout", type=float, default=None,
                   help=f"distributed: seconds a worker waits for its peers before stopping with an error "
                        f"(default {DEFAULT_TIMEOUT_S:g})")

    i = sub.add_parser("info", help="node/edge counts, degrees, topology vs feature bytes",
                       formatter_class=HelpWithDefaults)
    add_dataset_args(i)
    i.add_argument("--json", action="store_true", help="print the summary as JSON (full precision, for scripts)")

    add_partition_parser(sub)
    add_predict_parser(sub)
    add_generate_parser(sub)
    add_convert_parser(sub)
    return parser


def add_partition_parser(sub) -> None:
    p = sub.add_parser("partition", help="split a dataset into parts and write a partition directory",
                       formatter_class=HelpWithDefaults)
    add_dataset_args(p)
    p.add_argument("--parts", type=int, required=True, help="number of parts (workers)")
    p.add_argument("--method", default="metis", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--out", required=True, help="the partition directory to write")
    p.add_argument("--seed", type=int, default=0, help="seed of METIS / KaMinPar / the random assignment")
    p.add_argument("--threads", type=int, default=1,
                   help="KaMinPar's threads (more: faster, but the partition then varies from run to run)")
    p.add_argument("--memory-gb", type=float, default=None,
                   help="memory KaMinPar may use, in GB (default: MemAvailable of /proc/meminfo); a graph whose "
                        "estimated KaMinPar footprint exceeds it is coarsened by streaming first")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    p.add_argument("--feature-dtype", default="float32", choices=FEATURE_DTYPES,
                   help="how the part features are stored and sent: float16 or bfloat16 halve the bytes on disk, "
                        "in memory and on the wire (workers compute in float32)")


def fanouts_for(args) -> tuple[int, ...]:
    """``--layers`` with a single fanout repeats it; otherwise the two must agree."""
    if args.layers is None or args.layers == len(args.fanouts):
        return args.fanouts
    if len(args.fanouts) == 1:
        return args.fanouts * args.layers
    raise ValueError(f"layers: {args.layers} layers but {len(args.fanouts)} fanouts ({args.fanouts})")


def train_settings(args) -> tuple[TrainConfig, dict]:
    """The training config and the model options (all ModelConfig fields but the dataset's) from the flags."""
    train_cfg = TrainConfig(fanouts=fanouts_for(args), eval_fanouts=args.eval_fanouts, batch_size=args.batch_size,
                            epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed,
                            threads=args.threads, sampler=args.sampler, bulk=args.bulk, layer_size=args.layer_size,
                            replace=args.replace, evaluate=not args.no_eval, prefetch=args.prefetch)
    model_options = dict(name=args.model, hidden_dim=args.hidden, dropout=args.dropout,
                         input_dropout=args.input_dropout, heads=args.heads, attn_dropout=args.attn_dropout)
    if args.partitions is not None:
        given = [flag for flag, value in (("--dataset", args.dataset), ("--data-dir", args.data_dir),
                                          ("-o", args.option)) if value]
        if given:
            raise ValueError(f"partitions: {' and '.join(given)} cannot be used with --partitions (the partition "
                             "directory holds the dataset); drop them")
    elif args.checkpoint_every is not None:
        raise ValueError("checkpoint_every: --checkpoint-every is for distributed runs (--partitions); a "
                         "single-process run saves --checkpoint after every epoch")
    return train_cfg, model_options


_DGS_DEFAULT = DGSConfig()
DGS_DEFAULTS = {"--dgs-period": _DGS_DEFAULT.period, "--dgs-warmup": _DGS_DEFAULT.warmup,
                "--dgs-lag": _DGS_DEFAULT.lag, "--dgs-epsilon": _DGS_DEFAULT.epsilon,
                "--dgs-feature-rate": _DGS_DEFAULT.feature_rate, "--dgs-mode": _DGS_DEFAULT.mode,
                "--dgs-probes": _DGS_DEFAULT.probes, "--dgs-explain-steps": _DGS_DEFAULT.explain_steps,
                "--dgs-explain-lr": _DGS_DEFAULT.explain_lr}
DGS_FLAGS = tuple(DGS_DEFAULTS)


def dgs_settings(args) -> DGSConfig | None:
    """The DGS config from the flags (None without --dgs); --dgs-* without --dgs is an error."""
    if not args.dgs:
        changed = [f for f in DGS_FLAGS if getattr(args, f[2:].replace("-", "_")) != DGS_DEFAULTS[f]]
        if changed:
            raise ValueError(f"dgs: {', '.join(changed)} given without --dgs; add --dgs")
        return None
    if args.partitions is None:
        raise ValueError("dgs: --dgs cuts the feature fetch between workers, which only distributed runs have; "
                         "use --partitions DIR with torchrun (--layout hybrid or vanilla)")
    return DGSConfig(period=args.dgs_period, warmup=args.dgs_warmup, lag=args.dgs_lag, epsilon=args.dgs_epsilon,
                     feature_rate=args.dgs_feature_rate, mode=args.dgs_mode, probes=args.dgs_probes,
                     explain_steps=args.dgs_explain_steps, explain_lr=args.dgs_explain_lr)


def cmd_train(args) -> None:
    try:
        train_cfg, model_options = train_settings(args)
        dgs = dgs_settings(args)
        if args.metric != "accuracy" and args.eval_mode != "full":
            raise ValueError(f"metric: {args.metric} scores the full predictions of --eval full; the "
                             "sampled per-epoch evaluation counts accuracy only (add --eval full)")
    except (ValueError, TypeError) as err:
        # Under torchrun every worker parses the same flags: the same error everywhere.
        raise (LaunchError(str(err)) if args.partitions is not None else err) from None
    fanouts = train_cfg.fanouts
    if args.partitions is not None:
        if args.eval_mode == "full" and (args.layout or DEFAULT_LAYOUT) not in ("hybrid", "vanilla"):
            raise LaunchError(f"eval_mode: full evaluation over a partition runs with --layout hybrid or vanilla, "
                              f"not {args.layout}; run gnnscale predict --partitions on the saved model instead")
        if args.metric == "roc_auc":
            raise LaunchError("metric: roc_auc ranks every score together, which a distributed full evaluation "
                              "does not gather; use accuracy or f1_macro, or gnnscale predict --partitions on the "
                              "saved model")
        keep_freed_memory()  # the single-process trainer does this itself (run_training)
        options = LayoutOptions(layout=args.layout or DEFAULT_LAYOUT, cache_fraction=args.cache_fraction,
                                replication=args.replication,
                                split_sampling=args.split_sampling, shuffle_dtype=args.shuffle_dtype, dgs=dgs)
        outputs = RunOutputs(metrics_out=args.metrics_out, model_out=args.save_model, checkpoint=args.checkpoint,
                             resume=args.resume, checkpoint_every=args.checkpoint_every, overwrite=args.overwrite,
                             full_eval=args.metric if args.eval_mode == "full" else None)
        model = builtin_model_for(args.partitions, options, model_options, train_cfg, outputs)
        report = fit(model, args.partitions, inputs="blocks", config=train_cfg, layout=options, outputs=outputs,
                     progress=not args.quiet, timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout)
    else:
        if args.replication != 1:
            raise ValueError("replication: --replication applies to distributed --layout 1.5d (--partitions)")
        for option in ("split_sampling", "shuffle_dtype"):
            if getattr(args, option) is not None:
                raise ValueError(f"{option}: --{option.replace('_', '-')} applies to distributed --layout split "
                                 "(--partitions)")
        if args.cache_fraction:
            raise ValueError("cache_fraction: --cache-fraction caches remote features, which only distributed runs "
                             "(--partitions) have")
        check_single_process_flags(args)
        # Before loading the dataset (minutes for a large one): a bad output path fails at once.
        check_run_outputs(metrics_out=args.metrics_out, checkpoint=args.checkpoint, resume=args.resume,
                          overwrite=args.overwrite, model_out=args.save_model)
        dataset = load_cli_dataset(args)
        model_cfg = ModelConfig(in_dim=dataset.feature_dim, num_classes=dataset.num_classes, num_layers=len(fanouts),
                                **model_options)
        outputs = RunOutputs(metrics_out=args.metrics_out, checkpoint=args.checkpoint, resume=args.resume,
                             overwrite=args.overwrite, model_out=args.save_model,
                             full_eval=args.metric if args.eval_mode == "full" else None)
        report = fit(seeded_model(model_cfg, train_cfg.seed), dataset, inputs="blocks", config=train_cfg,
                     outputs=outputs, progress=not args.quiet)
    if args.partitions is not None and os.environ.get("RANK", "0") != "0":
        return  # every worker has the same report: rank 0 prints it
    last = report.history[-1]
    if report.full_eval is not None:
        full = report.full_eval
        print(f"full-graph evaluation (layer-wise, every neighbor): validation {full['metric']} {full['val']:.4f}, "
              f"test {full['metric']} {full['test']:.4f} ({full['seconds']:.1f} s)")
    if not train_cfg.evaluate:
        print(f"final: {len(report.history)} epochs trained, no evaluation (--no-eval)")
        return
    print(f"final: test accuracy {report.final_test_acc:.4f} (epoch {last['epoch']}); "
          f"best validation {report.best_val_acc:.4f} at epoch {report.best_epoch} "
          f"-> test accuracy {report.test_acc_at_best_val:.4f}")


def check_single_process_flags(args) -> None:
    """A flag that only a distributed run reads is an error without --partitions, not silently ignored."""
    if args.layout is not None:
        raise ValueError(f"layout: --layout {args.layout} lays out a distributed run; add --partitions DIR (from "
                         "gnnscale partition) and launch with torchrun, or drop --layout to train in this process")
    if args.timeout is not None:
        raise ValueError("timeout: --timeout bounds a distributed run's wait for its peers; a single-process run "
                         "has none (add --partitions, or drop --timeout)")


def cmd_info(args) -> None:
    summary = load_cli_dataset(args).summary()
    print(json.dumps(summary, indent=2) if args.json else describe_summary(summary))


def cmd_partition(args) -> None:
    out = Path(args.out)
    if out.exists() and not args.overwrite:  # checked before loading and partitioning (minutes)
        raise ValueError(f"out: {out} already exists; pass --overwrite to replace it, or choose another --out")
    if args.memory_gb is not None:
        budget_bytes(args.memory_gb)  # a bad value fails before loading and partitioning (minutes)
    dataset = load_cli_dataset(args)
    summary = write_partition_dir(dataset, args.parts, args.method, out, args.seed, overwrite=args.overwrite,
                                  feature_dtype=args.feature_dtype, threads=args.threads, memory_gb=args.memory_gb)
    print(summary.describe())
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in SIGTERM_CLEANS:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        {"train": cmd_train, "info": cmd_info, "partition": cmd_partition,
         "predict": cmd_predict, "generate": cmd_generate, "convert": cmd_convert}[args.command](args)
    except KeyboardInterrupt as err:
        # torchrun, interrupted too, already waits for every worker: none need wait for the first one's
        # line (which may be stuck in a collective with a peer until that peer exits).
        how = "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C"
        report(f"gnnscale {args.command}: interrupted ({how}); {what_was_saved(args)}", same_on_every_worker=True,
               wait_for_first=False)
        return EXIT_INTERRUPTED
    except TrainingDiverged as err:
        # Every worker found the same NaN loss (all-reduced) at the same point: one report per machine.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=True)
        return EXIT_STOPPED
    except (ValueError, TypeError) as err:
        # Bad input: one clear line, no traceback, non-zero exit, naming the flag the user typed.
        message = name_the_flag(str(err), field_flags(parser, args))
        report(f"gnnscale {args.command}: error: {message}", same_on_every_worker=isinstance(err, LaunchError))
        return EXIT_BAD_INPUT
    except MissingDependency as err:
        # A method whose package is not installed: one line saying what to install.
        report(f"gnnscale {args.command}: error: {err}", same_on_every_worker=False)
        return EXIT_BAD_INPUT
    except OSError as err:
        # The machine, not the input: a full disk, a file that cannot be written (the message names it).
        report(f"gnnscale {args.command}: error: {err}", same_on_every_worker=False)
        return EXIT_BAD_INPUT
    except AgreementFailure as err:
        # A worker failed a step (its partition file): every worker raised the same message.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=True)
        return EXIT_STOPPED
    except PeerFailure as err:
        # This worker lost a peer (dead, or silent past --timeout): say so, and stop this worker too.
        report(f"gnnscale {args.command}: stopped: {err}", same_on_every_worker=False)
        return EXIT_STOPPED
    return 0


# Commands that write one directory (staged beside it, renamed into place) and temporary files: SIGTERM
# (a scheduler's or `timeout`'s stop) raises in them as Ctrl-C does, so that both are removed. Training
# keeps SIGTERM's default: torchrun stops its workers with it, and the workers' own fault handling
# (docs/distributed.md) is built around that.
SIGTERM_CLEANS = ("partition", "generate", "convert")


class Terminated(KeyboardInterrupt):
    """SIGTERM received by a command of :data:`SIGTERM_CLEANS`."""


def _raise_terminated(signum, frame):
    raise Terminated()


def what_was_saved(args) -> str:
    """For the line a Ctrl-C leaves: what the run wrote so far, and how to go on."""
    if args.command in SIGTERM_CLEANS:
        return f"{args.out} is as it was and the temporary files were removed"
    checkpoint, metrics = getattr(args, "checkpoint", None), getattr(args, "metrics_out", None)
    saved = []
    if checkpoint is not None:
        saved.append(f"{checkpoint} holds the last checkpoint (continue with --resume)")
    if metrics is not None:
        saved.append(f"{metrics} holds the metrics of the finished epochs")
    return "; ".join(saved) if saved else "nothing was saved (no --checkpoint or --metrics-out)"


# Library names of settings that differ from the dest of the flag that sets them, per subcommand: the
# dataset loaders' name, ModelConfig's hidden_dim and num_layers, write_partition_dir's and assign_parts'.
FIELD_FLAGS: dict[str, dict[str, str]] = {
    "train": {"name": "--dataset", "hidden_dim": "--hidden", "num_layers": "--layers", "eval_mode": "--eval"},
    "info": {"name": "--dataset"},
    "partition": {"name": "--dataset", "num_parts": "--parts", "out_dir": "--out"},
    "predict": {"name": "--dataset", "hidden_dim": "--hidden", "num_layers": "--layers"},
    "generate": {"out_dir": "--out"},
    "convert": {"out_dir": "--out", "root": "--ogb-root", "splits": "--train-idx"},
}
LEADING_FIELD = re.compile(r"([a-z][a-z0-9_]*): ")


def subcommand_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``gnnscale COMMAND`` (argparse keeps subparsers in its private ``_SubParsersAction``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise KeyError(command)


def field_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """{library name: the flag that sets it} for ``args.command``: every option's dest -> its first long
    option string (``batch_size`` -> ``--batch-size``), plus :data:`FIELD_FLAGS`.

    ``directory`` is what the loaders call their folder: ``--partitions`` when training on one, else
    ``--data-dir``. A name the user gave as a dataset option (``-o seed=...``) is theirs, not a flag's.
    """
    flags = {}
    for action in subcommand_parser(parser, args.command)._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            longs = [s for s in action.option_strings if s.startswith("--")]
            flags[action.dest] = (longs or action.option_strings)[0]
    flags.update(FIELD_FLAGS.get(args.command, {}))
    flags["directory"] = "--partitions" if getattr(args, "partitions", None) is not None else "--data-dir"
    for key, _ in getattr(args, "option", []):
        flags.pop(key, None)
    return flags


def name_the_flag(message: str, flags: dict[str, str]) -> str:
    """``batch_size: ...`` -> ``--batch-size: ...``: library messages start with the argument's name,
    but the user typed a flag. A message that names its flag already is left as it is (``bulk: expected
    an int >= 1 (--bulk)``): the flag twice helps no one."""
    match = LEADING_FIELD.match(message)
    if match is None or match[1] not in flags:
        return message
    flag = flags[match[1]]
    if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", message):
        return message
    return flag + message[match.end(1):]


def report(line: str, *, same_on_every_worker: bool, wait_for_first: bool = True) -> None:
    """Write one line to stderr in one write (workers share a terminal). A message that every worker
    of a torchrun launch has alike is written by the first worker of each machine only (LOCAL_RANK 0);
    the others stay until it has (``wait_for_first``), or torchrun could stop it before it writes.

    Under torchrun the line also goes to this worker's error file, which torchrun's failure summary
    shows in place of "To enable traceback see: ...": the summary then names the cause too.
    """
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        # The layout torch.distributed.elastic's own ErrorHandler writes; py_callstack is what it shows.
        # Written whole or not at all: torchrun may stop this worker mid-write (a peer died first), and
        # its agent fails outright, restarts and all, on an error file it cannot parse.
        record = {"message": {"message": line, "extraInfo": {"py_callstack": line,
                                                             "timestamp": str(int(time.time()))}}}
        atomic_write(error_file, lambda f: f.write(json.dumps(record).encode()))
    lead = os.environ.get("LOCAL_RANK", "0") == "0"
    if same_on_every_worker and not lead:
        # torchrun stops every worker as soon as one exits: stay until the first worker, which finds the
        # same error, has written the line (seen under load: its line lost to this worker's exit).
        if wait_for_first:
            wait_for_report(LEAD_REPORT_WAIT_S)
        return
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if same_on_every_worker and "LOCAL_RANK" in os.environ:
        announce_report()


def entry_point() -> None:
    """``gnnscale`` and ``python -m gnnscale``: run :func:`main` and exit with its status."""
    code = main()
    if code == EXIT_STOPPED:
        # The run is over (a peer died, went silent, or failed a step): exit without the interpreter's
        # teardown of torch and numba (seconds on a busy machine), so that torchrun sees this worker
        # stop at once and stops the others. The process group is already closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
