"""Command line: ``gnnscale train | partition | info`` (also ``python -m gnnscale``)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from gnnscale.graph.datasets import DATASETS, load_dataset
from gnnscale.nn import MODELS, ModelConfig
from gnnscale.distributed.comm import AgreementFailure, PeerFailure
from gnnscale.partition import METHODS, write_partition_dir
from gnnscale.train.config import TrainConfig
from gnnscale.train.distributed import LAYOUTS, run_distributed_training
from gnnscale.train.run import run_training


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints such as 10,5, got {text!r}") from None


def key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value


def add_dataset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="synthetic", help=f"one of {', '.join(DATASETS)} (default synthetic)")
    p.add_argument("--data-dir", default=None, help="folder (or .npz file) holding the dataset's files")
    p.add_argument("--option", "-o", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="dataset option, e.g. -o num_nodes=100000 for synthetic (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gnnscale", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a GNN by mini-batch neighbor sampling")
    add_dataset_args(t)
    t.add_argument("--model", default="sage", help=f"one of {', '.join(MODELS)} (default sage)")
    t.add_argument("--fanouts", type=int_list, default=(10, 5), help="per hop from the seeds outwards (10,5)")
    t.add_argument("--eval-fanouts", type=int_list, default=None, help="inference fanouts (default: --fanouts)")
    t.add_argument("--layers", type=int, default=None, help="GNN layers (default: number of fanouts)")
    t.add_argument("--batch-size", type=int, default=512)
    t.add_argument("--hidden", type=int, default=128, help="hidden size (per head for GAT)")
    t.add_argument("--heads", type=int, default=8, help="GAT attention heads in hidden layers")
    t.add_argument("--dropout", type=float, default=0.5)
    t.add_argument("--input-dropout", type=float, default=0.0)
    t.add_argument("--attn-dropout", type=float, default=0.0)
    t.add_argument("--lr", type=float, default=0.003)
    t.add_argument("--weight-decay", type=float, default=0.0)
    t.add_argument("--epochs", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--sampler", default="fused", choices=("fused", "two_step"))
    t.add_argument("--replace", action="store_true", help="sample neighbors with replacement")
    t.add_argument("--metrics-out", default=None, help="write per-epoch metrics as JSON here")
    t.add_argument("--checkpoint", default=None, help="save a checkpoint here after every epoch")
    t.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    t.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    t.add_argument("--no-eval", action="store_true", help="skip validation/test accuracy (timing runs)")
    t.add_argument("--prefetch", type=int, default=1,
                   help="batches sampled and gathered ahead in a background thread while one trains (0: none)")
    t.add_argument("--partitions", default=None,
                   help="distributed: a directory from `gnnscale partition`; launch one worker per part with torchrun")
    t.add_argument("--layout", default="hybrid", choices=LAYOUTS,
                   help="distributed: hybrid (topology replicated, 2 rounds/iteration), vanilla (2L rounds), or split "
                        "(one mini-batch of P x --batch-size seeds split across workers, no feature fetch)")
    t.add_argument("--cache-fraction", type=float, default=0.0,
                   help="distributed hybrid/vanilla: each worker caches the features of the highest in-degree remote "
                        "nodes, this fraction of all nodes (0: no cache)")
    t.add_argument("--save-model", default=None, help="write the trained model's state_dict here (torch.load reads it)")
    t.add_argument("--timeout", type=float, default=120.0,
                   help="distributed: seconds a worker waits for its peers before stopping with an error")

    i = sub.add_parser("info", help="node/edge counts, degrees, topology vs feature bytes")
    add_dataset_args(i)

    add_partition_parser(sub)
    return parser


def add_partition_parser(sub) -> None:
    p = sub.add_parser("partition", help="split a dataset into parts and write a partition directory")
    add_dataset_args(p)
    p.add_argument("--parts", type=int, required=True, help="number of parts (workers)")
    p.add_argument("--method", default="metis", help=f"one of {', '.join(METHODS)} (default metis)")
    p.add_argument("--out", required=True, help="the partition directory to write")
    p.add_argument("--seed", type=int, default=0, help="seed of METIS / the random assignment")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")


def fanouts_for(args) -> tuple[int, ...]:
    """``--layers`` with a single fanout repeats it; otherwise the two must agree."""
    if args.layers is None or args.layers == len(args.fanouts):
        return args.fanouts
    if len(args.fanouts) == 1:
        return args.fanouts * args.layers
    raise ValueError(f"layers: {args.layers} layers but {len(args.fanouts)} fanouts ({args.fanouts})")


def cmd_train(args) -> None:
    fanouts = fanouts_for(args)
    train_cfg = TrainConfig(fanouts=fanouts, eval_fanouts=args.eval_fanouts, batch_size=args.batch_size,
                            epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed,
                            threads=args.threads, sampler=args.sampler, replace=args.replace,
                            evaluate=not args.no_eval, prefetch=args.prefetch)
    model_options = dict(name=args.model, hidden_dim=args.hidden, dropout=args.dropout,
                         input_dropout=args.input_dropout, heads=args.heads, attn_dropout=args.attn_dropout)
    if args.partitions is not None:
        if args.checkpoint is not None:
            raise ValueError("checkpoint: not supported with --partitions yet")
        report = run_distributed_training(args.partitions, args.layout, model_options, train_cfg,
                                          metrics_out=args.metrics_out, progress=not args.quiet,
                                          timeout_s=args.timeout, cache_fraction=args.cache_fraction,
                                          model_out=args.save_model)
    else:
        if args.cache_fraction:
            raise ValueError("cache_fraction: --cache-fraction caches remote features, which only distributed runs "
                             "(--partitions) have")
        dataset = load_dataset(args.dataset, args.data_dir, **dict(args.option))
        model_cfg = ModelConfig(in_dim=dataset.feature_dim, num_classes=dataset.num_classes, num_layers=len(fanouts),
                                **model_options)
        report = run_training(dataset, model_cfg, train_cfg, metrics_out=args.metrics_out,
                              checkpoint=args.checkpoint, resume=args.resume, progress=not args.quiet,
                              model_out=args.save_model)
    if args.partitions is not None and os.environ.get("RANK", "0") != "0":
        return  # every worker has the same report: rank 0 prints it
    last = report.history[-1]
    if not train_cfg.evaluate:
        print(f"final: {len(report.history)} epochs trained, no evaluation (--no-eval)")
        return
    print(f"final: test accuracy {report.final_test_acc:.4f} (epoch {last['epoch']}); "
          f"best validation {report.best_val_acc:.4f} at epoch {report.best_epoch} "
          f"-> test accuracy {report.test_acc_at_best_val:.4f}")


def cmd_info(args) -> None:
    dataset = load_dataset(args.dataset, args.data_dir, **dict(args.option))
    print(json.dumps(dataset.summary(), indent=2))


def cmd_partition(args) -> None:
    dataset = load_dataset(args.dataset, args.data_dir, **dict(args.option))
    summary = write_partition_dir(dataset, args.parts, args.method, args.out, args.seed, overwrite=args.overwrite)
    print(summary.describe())
    print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        {"train": cmd_train, "info": cmd_info, "partition": cmd_partition}[args.command](args)
    except (ValueError, TypeError) as err:
        # Bad input: one clear line, no traceback, non-zero exit.
        sys.stderr.write(f"gnnscale {args.command}: error: {err}\n")  # one write: workers share a terminal
        return 2
    except (PeerFailure, AgreementFailure) as err:
        # A distributed peer failed: say which and why, and stop this worker too.
        sys.stderr.write(f"gnnscale {args.command}: stopped: {err}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
