"""``gnnscale predict``: the subcommand's flags and what it runs (single-process, or one torchrun worker)."""

from __future__ import annotations

from pathlib import Path

import torch

from gnnscale.cli.common import DEFAULT_TIMEOUT_S, add_dataset_args, dataset_flags, load_cli_dataset
from gnnscale.cli.flags import whole_number
from gnnscale.devices import DEVICE_HELP, resolve_device
from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_from_env, shutdown
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE
from gnnscale.inference.link_predict import predict_links, read_pairs
from gnnscale.inference.metrics import METRICS
from gnnscale.inference.partitioned import predict_partitioned
from gnnscale.inference.predict import check_out_dir, predict, read_nodes
from gnnscale.nn import MODELS, ModelConfig
from gnnscale.nn.model_file import read_model_file
from gnnscale.partition.directory import read_manifest
from gnnscale.sampling import set_sampler_threads
from gnnscale.train.checks import LaunchError
from gnnscale.train.layouts.registry import DEFAULT_LAYOUT, LAYOUTS, layout_spec


def add_predict_parser(sub) -> None:
    p = sub.add_parser("predict", help="layer-wise inference of a trained model over every node; writes predictions, "
                                       "probabilities and embeddings by node id")
    p.add_argument("--model", required=True, metavar="FILE", help="a model file from gnnscale train --save-model")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for predictions.npy, probabilities.npy (or logits.npy), embeddings.npy and meta.json")
    add_dataset_args(p)
    p.add_argument("--nodes", default=None, metavar="FILE",
                   help="predict only these node ids (.npy int array, or text with one id per line); row i of every "
                        "output is then the i-th id, and nodes.npy is written beside them")
    p.add_argument("--embeddings", type=whole_number, default=None, metavar="LAYER",
                   help="also write hidden layer LAYER's output (1 .. layers - 1, after its activation)")
    p.add_argument("--logits", action="store_true", help="write logits.npy instead of probabilities.npy")
    p.add_argument("--metric", default="accuracy", choices=METRICS,
                   help="reported per split on the full predictions (roc_auc: two classes only)")
    p.add_argument("--chunk-size", type=whole_number, default=DEFAULT_CHUNK_SIZE,
                   help="destination nodes per block (memory is bounded by one chunk's neighborhood)")
    p.add_argument("--threads", type=whole_number, default=2, help="CPU threads for the kernels and torch")
    p.add_argument("--device", default="cpu",
                   help=f"{DEVICE_HELP}; on a GPU each chunk's block and rows are copied there and its output rows "
                        "back, so the GPU holds the weights and one chunk (distributed: each worker its own GPU)")
    link = p.add_argument_group("link prediction (a model from gnnscale train --task link --save-model)")
    link.add_argument("--task", default="node", choices=("node", "link"),
                      help="link: write every node's embedding (embeddings.npy), and the scores of --pairs and the "
                           "--topk best candidates per node; one process")
    link.add_argument("--pairs", default=None, metavar="FILE.npy",
                      help="--task link: candidate pairs, an int .npy array [n, 2] of node ids; their scores go to "
                           "pair_scores.npy (logits)")
    link.add_argument("--topk", type=whole_number, default=None, metavar="K",
                      help="--task link: each node's K best-scored other nodes (topk_nodes.npy, topk_scores.npy), "
                           "computed in chunks of nodes")
    p.add_argument("--overwrite", action="store_true", help="replace the outputs of an earlier run in --out")
    p.add_argument("--partitions", default=None,
                   help="distributed: a directory from `gnnscale partition` (no --dataset); launch one worker per part "
                        "(or a divisor of the part count) with torchrun; every worker computes its part's nodes and "
                        "writes them by original id into --out, which all workers must see (one machine or a shared "
                        "file system)")
    p.add_argument("--layout", default=None,
                   choices=tuple(name for name, spec in LAYOUTS.items() if spec.layerwise_inference),
                   help=f"distributed (default: {DEFAULT_LAYOUT}): the layout whose partition view each worker loads "
                        f"({'; '.join(f'{name}: {spec.summary}' for name, spec in LAYOUTS.items() if spec.layerwise_inference)});"
                        " a layer's remote rows are fetched from their owners either way")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"distributed: seconds a worker waits for its peers (default {DEFAULT_TIMEOUT_S:g})")
    old = p.add_argument_group("weight-only model files (written before files described themselves)")
    old.add_argument("--arch", default=None, choices=MODELS, help="the model the weights belong to")
    old.add_argument("--hidden", type=whole_number, default=128, help="hidden size it was trained with (per head for GAT)")
    old.add_argument("--layers", type=whole_number, default=2, help="its number of layers")
    old.add_argument("--heads", type=whole_number, default=8, help="GAT: its attention heads in hidden layers")


def check_task_flags(args) -> None:
    """Flags of the other task are errors, not silently ignored."""
    if args.task == "node":
        given = [flag for flag, value in (("--pairs", args.pairs), ("--topk", args.topk)) if value is not None]
        if given:
            raise ValueError(f"{given[0].lstrip('-')}: applies to --task link; add it or drop {given[0]}")
        return
    given = [flag for flag, value in (("--nodes", args.nodes), ("--embeddings", args.embeddings),
                                      ("--logits", args.logits or None), ("--partitions", args.partitions),
                                      ("--arch", args.arch)) if value is not None]
    if given:
        raise ValueError(f"task: {given[0]} applies to node predictions; --task link writes every node's embedding "
                         "in one process")


def cmd_predict(args) -> None:
    if args.threads < 1:
        raise ValueError(f"threads: expected a positive int, got {args.threads}")
    check_task_flags(args)
    if args.partitions is not None:
        return predict_distributed(args)
    if args.layout is not None or args.timeout is not None:
        raise ValueError(f"{'layout' if args.layout is not None else 'timeout'}: applies to a distributed predict "
                         "(--partitions DIR under torchrun); drop it to predict in this process")
    check_out_dir(args.out, overwrite=args.overwrite)  # before loading the dataset (minutes for a large one)
    device = resolve_device(args.device)
    if not Path(args.model).is_file():
        raise ValueError(f"model: no model file at {args.model}")
    torch.set_num_threads(args.threads)
    set_sampler_threads(args.threads)
    dataset = load_cli_dataset(args)
    config = None if args.arch is None else ModelConfig(
        name=args.arch, in_dim=dataset.feature_dim, hidden_dim=args.hidden, num_classes=dataset.num_classes,
        num_layers=args.layers, heads=args.heads, dropout=0.0)
    model_file = read_model_file(args.model, config)
    if args.task == "link":
        pairs = None if args.pairs is None else read_pairs(args.pairs, dataset.graph.num_nodes)
        meta = predict_links(model_file, dataset, args.out, pairs=pairs, topk=args.topk, chunk_size=args.chunk_size,
                             overwrite=args.overwrite, device=device)
        print(f"wrote {', '.join(meta['files'])} to {args.out} ({meta['seconds']:.2f} s)")
        return
    if model_file.decoder is not None:
        raise ValueError(f"model: {args.model} is a link model (an embedding and a pair decoder); add --task link")
    nodes = None if args.nodes is None else read_nodes(args.nodes, dataset.graph.num_nodes)
    meta = predict(model_file, dataset, args.out, nodes=nodes, embeddings=args.embeddings, logits=args.logits,
                   metric=args.metric, chunk_size=args.chunk_size, overwrite=args.overwrite, device=device)
    print_predicted(meta, args)


def predict_distributed(args) -> None:
    """``gnnscale predict --partitions DIR`` in one torchrun worker (see :mod:`gnnscale.inference.partitioned`)."""
    try:
        flags = dataset_flags(args)
        given = [flag for flag, value in (("--dataset", flags.dataset), ("--data-dir", flags.data_dir),
                                          ("-o", args.option), ("--nodes", args.nodes)) if value]
        if given:
            raise ValueError(f"partitions: {' and '.join(given)} cannot be used with --partitions (the partition "
                             "directory holds the dataset; every node is predicted); drop them")
        manifest = read_manifest(args.partitions)
        config = None if args.arch is None else ModelConfig(
            name=args.arch, in_dim=manifest["feature_dim"], hidden_dim=args.hidden,
            num_classes=manifest["num_classes"], num_layers=args.layers, heads=args.heads, dropout=0.0)
        model_file = read_model_file(args.model, config)
        device = resolve_device(args.device)  # cuda: this worker's GPU, cuda:LOCAL_RANK
    except (ValueError, TypeError) as err:
        raise LaunchError(str(err)) from None  # every worker finds the same: one line per machine
    torch.set_num_threads(args.threads)
    set_sampler_threads(args.threads)
    ctx = init_from_env(timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout)
    try:
        spec = layout_spec(args.layout or DEFAULT_LAYOUT)
        meta = predict_partitioned(model_file, args.partitions, spec.view, Comm(ctx), args.out, layout=spec.name,
                                   embeddings=args.embeddings, logits=args.logits, metric=args.metric,
                                   chunk_size=args.chunk_size, overwrite=args.overwrite, device=device)
    finally:
        shutdown()
    if meta is not None:
        print_predicted(meta, args)


def print_predicted(meta: dict, args) -> None:
    scores = ", ".join(f"{split} {m[args.metric]:.4f}" for split, m in meta["metrics"].items() if m["nodes"])
    seconds = meta["inference_seconds"]
    print(f"wrote {meta['rows']} rows ({', '.join(meta['files'])}) to {args.out}")
    print(f"{args.metric}: {scores or 'no labeled nodes'}; inference {seconds:.2f} s "
          f"({1e6 * seconds / meta['rows']:.1f} us per node)")
