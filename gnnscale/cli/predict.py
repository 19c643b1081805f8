"""``gnnscale predict``: the command's settings (:class:`PredictConfig`, one flag per field) and what it
runs: node predictions in this process or in one torchrun worker, or a link model's outputs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnscale.cli.common import DEFAULT_TIMEOUT_S, add_dataset_args, dataset_flags, load_cli_dataset
from gnnscale.cli.flags import add_settings, read_settings
from gnnscale.devices import check_device_settings, device_setting, resolve_device, threads_setting
from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import init_from_env, shutdown
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.typed_dataset import TypedDataset
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE
from gnnscale.inference.link_metrics import check_link_metric
from gnnscale.inference.link_predict import TOPK_EXCLUDE, HeldOutEdges, predict_links, read_pairs
from gnnscale.inference.metrics import METRICS
from gnnscale.inference.partitioned import predict_partitioned
from gnnscale.inference.predict import check_out_dir, predict, read_nodes
from gnnscale.nn import MODELS, ModelConfig
from gnnscale.nn.model_file import ModelFile, read_model_file
from gnnscale.partition.directory import is_typed_manifest, read_manifest
from gnnscale.sampling import set_sampler_threads
from gnnscale.settings import field_default, setting
from gnnscale.train.checks import LaunchError
from gnnscale.train.layouts.registry import DEFAULT_LAYOUT, LAYOUTS, layout_spec
from gnnscale.train.layouts.single import whole_partition
from gnnscale.train.tasks.link import LINK
from gnnscale.train.tasks.link_config import LinkConfig
from gnnscale.train.tasks.link_edges import link_partition
from gnnscale.train.tasks.node import NODE
from gnnscale.train.tasks.registry import DEFAULT_TASK

LINK_GROUP = "link prediction (a model from gnnscale train --task link --save-model)"
WEIGHTS_ONLY = "weight-only model files (written before files described themselves)"


def inference_layouts() -> tuple[str, ...]:
    return tuple(name for name, spec in LAYOUTS.items() if spec.layerwise_inference)


def layout_help() -> str:
    summaries = "; ".join(f"{name}: {spec.summary}" for name, spec in LAYOUTS.items() if spec.layerwise_inference)
    return (f"distributed: the layout whose partition view each worker loads ({summaries}); a layer's remote rows "
            "are fetched from their owners either way")


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictConfig:
    """What ``gnnscale predict`` reads, computes and writes; each field is a flag. The fields a library call
    takes have its keyword's name (:func:`~gnnscale.inference.predict.predict`,
    :func:`~gnnscale.inference.link_predict.predict_links`).

    Args:
        model: the model file (``gnnscale train --save-model``); required.
        out: the output folder; required.
        nodes: a file of node ids to predict (node task; None: every node).
        embeddings: a hidden layer whose output to write (node task; None: none).
        logits: write logits instead of probabilities (node task).
        metric: node task: accuracy (None), roc_auc or f1_macro per split; link task: roc_auc, ap, mrr or
            hits@K of the model's validation and test edges (None: no scoring).
        chunk_size: destination nodes per block of layer-wise inference.
        threads, device: as :class:`~gnnscale.train.config.TrainConfig`'s (:mod:`gnnscale.devices`).
        task: ``"node"`` (a node classifier) or ``"link"`` (a link model).
        pairs: link task: a file of candidate pairs to score.
        topk: link task: each node's K best-scored other nodes.
        topk_exclude: link task: the known edges left out of the top-K candidates: none, train (the
            model's training edges) or all (every edge of the dataset).
        link_split: link task: the folder of the dataset's own split the model trained with, where the one
            the model file records has moved.
        overwrite: replace earlier outputs in ``out``.
        partitions: a partition directory: predict in torchrun workers, one per part.
        layout: distributed: whose partition view each worker loads (None: the default layout).
        timeout: distributed: seconds a worker waits for its peers (None: the library's default).
        arch, hidden, layers, heads: the model a weight-only file (a bare state_dict) belongs to.
    """

    model: str | None = setting(None, "a model file from gnnscale train --save-model", metavar="FILE", required=True)
    out: str | None = setting(None, "folder for predictions.npy, probabilities.npy (or logits.npy), embeddings.npy "
                                    "and meta.json", metavar="DIR", required=True)
    nodes: str | None = setting(None, "predict only these node ids (.npy int array, or text with one id per line); "
                                      "row i of every output is then the i-th id, and nodes.npy is written beside "
                                      "them (a typed dataset: local ids of its target type, whose nodes are the "
                                      "rows)", metavar="FILE")
    embeddings: int | None = setting(None, "also write hidden layer LAYER's output (1 .. layers - 1, after its "
                                           "activation)", metavar="LAYER")
    logits: bool = setting(False, "write logits.npy instead of probabilities.npy")
    metric: str | None = setting(None, f"node task: reported per split on the full predictions, one of "
                                       f"{', '.join(METRICS)} (roc_auc: two classes only); --task link: roc_auc, ap, "
                                       "mrr or hits@K of the model's validation and test edges (no scoring without "
                                       "it)", metavar="METRIC", default_text="accuracy for --task node")
    chunk_size: int = setting(DEFAULT_CHUNK_SIZE, "destination nodes per block (memory is bounded by one chunk's "
                                                  "neighborhood)")
    threads: int = threads_setting()
    device: str = device_setting("; on a GPU each chunk's block and rows are copied there and its output rows back, "
                                 "so the GPU holds the weights and one chunk (distributed: each worker its own GPU)")
    task: str = setting(DEFAULT_TASK, "link: write every node's embedding (embeddings.npy), the scores of --pairs, "
                                      "the --topk best candidates per node and --metric; one process",
                        choices=lambda: tuple(OUTPUTS), group=LINK_GROUP)
    pairs: str | None = setting(None, "--task link: candidate pairs, an int .npy array [n, 2] of node ids or text with "
                                      "one pair per line; their scores go to pair_scores.npy (logits)",
                                metavar="FILE", group=LINK_GROUP)
    topk: int | None = setting(None, "--task link: each node's K best-scored other nodes (topk_nodes.npy, "
                                     "topk_scores.npy), computed in chunks of nodes", metavar="K", group=LINK_GROUP)
    topk_exclude: str = setting("none", "--task link: known edges that are no --topk candidates: none, train (the "
                                        "model's training edges, the graph its messages passed over) or all (every "
                                        "edge of the dataset), in either direction", choices=TOPK_EXCLUDE, group=LINK_GROUP)
    link_split: str | None = setting(None, "--task link: the folder of the dataset's own split (gnnscale train "
                                           "--link-split) the model trained with, where it is no longer at the path "
                                           "the model file records", metavar="DIR", group=LINK_GROUP)
    overwrite: bool = setting(False, "replace the outputs of an earlier run in --out")
    partitions: str | None = setting(None, "distributed: a directory from `gnnscale partition` (no --dataset); launch "
                                           "one worker per part (or a divisor of the part count) with torchrun; every "
                                           "worker computes its part's nodes and writes them by original id into "
                                           "--out, which all workers must see (one machine or a shared file system)")
    layout: str | None = setting(None, layout_help(), choices=inference_layouts, default_text=DEFAULT_LAYOUT)
    timeout: float | None = setting(None, "distributed: seconds a worker waits for its peers",
                                    default_text=f"{DEFAULT_TIMEOUT_S:g}")
    arch: str | None = setting(None, "the model the weights belong to", choices=MODELS, group=WEIGHTS_ONLY)
    hidden: int = setting(field_default(ModelConfig, "hidden_dim"),
                          "hidden size it was trained with (per head for GAT)", aliases=("hidden_dim",),
                          group=WEIGHTS_ONLY)
    layers: int = setting(2, "its number of layers", aliases=("num_layers",), group=WEIGHTS_ONLY)
    heads: int = setting(field_default(ModelConfig, "heads"), "GAT: its attention heads in hidden layers",
                         group=WEIGHTS_ONLY)

    def __post_init__(self) -> None:
        for name in ("model", "out"):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required (--{name})")
        check_device_settings(self.device, self.threads)
        for name, allowed in (("task", tuple(OUTPUTS)), ("topk_exclude", TOPK_EXCLUDE)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        OUTPUTS[self.task].check(self)
        if self.partitions is None and (self.layout is not None or self.timeout is not None):
            raise ValueError(f"{'layout' if self.layout is not None else 'timeout'}: applies to a distributed predict "
                             "(--partitions DIR under torchrun); drop it to predict in this process")
        if self.layout is not None and self.layout not in inference_layouts():
            raise ValueError(f"layout: expected one of {', '.join(inference_layouts())}, got {self.layout!r}")

    def check_node_flags(self) -> None:
        """Flags of the link task are errors, not silently ignored."""
        given = [name for name in ("pairs", "topk", "link_split") if getattr(self, name) is not None]
        if self.topk_exclude != "none":
            given.append("topk_exclude")
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ValueError(f"{given[0]}: applies to --task link; add it or drop {flag}")
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"metric: expected one of {', '.join(METRICS)} for a node task, got {self.metric!r}")

    def check_link_flags(self) -> None:
        """Flags of node predictions are errors; --topk-exclude and --link-split need what they act on."""
        given = [flag for flag, value in (("--nodes", self.nodes), ("--embeddings", self.embeddings),
                                          ("--logits", self.logits or None), ("--partitions", self.partitions),
                                          ("--arch", self.arch)) if value is not None]
        if given:
            raise ValueError(f"task: {given[0]} applies to node predictions; --task link writes every node's embedding "
                             "in one process")
        if self.metric is not None:
            check_link_metric(self.metric)
        if self.topk_exclude != "none" and self.topk is None:
            raise ValueError(f"topk_exclude: leaves known edges out of --topk's candidates; add --topk K or drop "
                             f"--topk-exclude {self.topk_exclude}")
        if self.link_split is not None and self.metric is None and self.topk_exclude != "train":
            raise ValueError("link_split: the split is read for --metric or --topk-exclude train; add one or drop "
                             "--link-split")

    @property
    def node_metric(self) -> str:
        """The metric node predictions report (``metric``, accuracy when not given)."""
        return self.metric or "accuracy"

    def weights_only_model(self, in_dim: int, num_classes: int) -> ModelConfig | None:
        """The config of a weight-only file's model (None without ``arch``: the file describes itself)."""
        if self.arch is None:
            return None
        return ModelConfig(name=self.arch, in_dim=in_dim, hidden_dim=self.hidden, num_classes=num_classes,
                           num_layers=self.layers, heads=self.heads, dropout=0.0)


def add_predict_parser(sub) -> None:
    p = sub.add_parser("predict", help="layer-wise inference of a trained model over every node; writes predictions, "
                                       "probabilities and embeddings by node id")
    add_dataset_args(p)
    add_settings(p, PredictConfig)


def read_predict_config(args: argparse.Namespace) -> PredictConfig:
    return read_settings(PredictConfig, args)


def cmd_predict(args: argparse.Namespace) -> None:
    cfg = read_predict_config(args)
    if cfg.partitions is not None:
        return predict_distributed(cfg, args)
    check_out_dir(cfg.out, overwrite=cfg.overwrite)  # before loading the dataset (minutes for a large one)
    device = resolve_device(cfg.device)
    if not Path(cfg.model).is_file():
        raise ValueError(f"model: no model file at {cfg.model}")
    use_threads(cfg.threads)
    dataset = load_cli_dataset(args)
    if isinstance(dataset, TypedDataset):
        check_typed_predict(cfg)
        model_file = read_model_file(cfg.model)  # a typed model's file describes itself
    else:
        model_file = read_model_file(cfg.model, cfg.weights_only_model(dataset.feature_dim, dataset.num_classes))
    OUTPUTS[cfg.task].run(cfg, model_file, dataset, device)


def check_typed_predict(cfg: PredictConfig) -> None:
    """A typed graph's predictions are its target type's classes, from a typed model's own file."""
    if cfg.task != NODE.name:
        raise ValueError(f"task: a typed graph predicts its target type's classes (--task {NODE.name}); --task "
                         f"{cfg.task} reads graphs of one node type")
    if cfg.arch is not None:
        raise ValueError("arch: weight-only files hold models of graphs of one node type; a typed model's file "
                         "describes itself (drop --arch)")


def predict_node_outputs(cfg: PredictConfig, model_file: ModelFile, dataset: NodeDataset | TypedDataset,
                         device: torch.device) -> None:
    """``--task node``: a node classifier's predictions (and probabilities or logits, embeddings, metrics); a typed
    dataset's of its target type, ``--nodes`` by local id of that type."""
    if model_file.decoder is not None:
        raise ValueError(f"model: {cfg.model} is a link model (an embedding and a pair decoder); add --task link")
    count = dataset.graph.count(dataset.target_type) if isinstance(dataset, TypedDataset) else dataset.graph.num_nodes
    nodes = None if cfg.nodes is None else read_nodes(cfg.nodes, count)
    meta = predict(model_file, dataset, cfg.out, nodes=nodes, embeddings=cfg.embeddings, logits=cfg.logits,
                   metric=cfg.node_metric, chunk_size=cfg.chunk_size, overwrite=cfg.overwrite, device=device)
    print_predicted(meta, cfg)


@dataclass(frozen=True, slots=True)
class TaskOutputs:
    """What ``gnnscale predict`` does with a model of a task (:mod:`gnnscale.train.tasks`): the rules of the
    task's flags, and the run that writes its outputs."""

    check: Callable[[PredictConfig], None]
    run: Callable[[PredictConfig, ModelFile, NodeDataset, torch.device], None]


def use_threads(threads: int) -> None:
    torch.set_num_threads(threads)
    set_sampler_threads(threads)


def predict_link_outputs(cfg: PredictConfig, model_file: ModelFile, dataset: NodeDataset,
                         device: torch.device) -> None:
    """``--task link``: embeddings, pair scores, top-K and the held-out metric of a link model."""
    pairs = None if cfg.pairs is None else read_pairs(cfg.pairs, dataset.graph.num_nodes)
    needs_split = cfg.metric is not None or cfg.topk_exclude == "train"
    held_out = held_out_edges(cfg, model_file, dataset) if needs_split else None
    meta = predict_links(model_file, dataset, cfg.out, pairs=pairs, topk=cfg.topk, topk_exclude=cfg.topk_exclude,
                         metric=cfg.metric, held_out=held_out, chunk_size=cfg.chunk_size, overwrite=cfg.overwrite,
                         device=device)
    print(f"wrote {', '.join(meta['files'])} to {cfg.out} ({meta['seconds']:.2f} s)")
    if meta["metrics"] is not None:
        val, test = meta["metrics"]["val"], meta["metrics"]["test"]
        print(f"{cfg.metric} of the model's held-out edges: validation {val[cfg.metric]:.4f} ({val['positives']} "
              f"positives), test {test[cfg.metric]:.4f} ({test['positives']} positives); "
              f"{test['negatives_per_positive']} negatives per positive")


def held_out_edges(cfg: PredictConfig, model_file: ModelFile, dataset: NodeDataset) -> HeldOutEdges:
    """The model's split of ``dataset`` as its one-process training drew it (the same code: the split
    hashed from the recorded seed, or read from the split folder; the evaluation negatives ``cfg.metric``
    draws), from the split the model file records."""
    record = model_file.link_split
    why = "--metric" if cfg.metric is not None else "--topk-exclude train"
    if record is None:
        raise ValueError(f"model: {cfg.model} records no link split (written before model files recorded one), so "
                         f"{why} cannot find its validation and test edges; retrain it with --save-model")
    if cfg.link_split is not None and record.link_split is None:
        raise ValueError(f"link_split: {cfg.model} was trained on a random --edge-split (recomputed from the file), "
                         "not on a split folder; drop --link-split")
    link = LinkConfig(edge_split=record.edge_split, link_split=cfg.link_split or record.link_split,
                      eval_negatives=record.eval_negatives, metric=cfg.metric or record.metric)
    part, edges = link_partition(whole_partition(dataset), link, record.seed, None, rank=0)
    return HeldOutEdges(graph=part.topology, positives={s: edges.split(s).pos.numpy() for s in ("val", "test")},
                        negatives={s: edges.split(s).neg.numpy() for s in ("val", "test")})


def predict_distributed(cfg: PredictConfig, args: argparse.Namespace) -> None:
    """``gnnscale predict --partitions DIR`` in one torchrun worker (see :mod:`gnnscale.inference.partitioned`)."""
    try:
        flags = dataset_flags(args)
        given = [flag for flag, value in (("--dataset", flags.dataset), ("--data-dir", flags.data_dir),
                                          ("-o", args.option), ("--nodes", cfg.nodes)) if value]
        if given:
            raise ValueError(f"partitions: {' and '.join(given)} cannot be used with --partitions (the partition "
                             "directory holds the dataset; every node is predicted); drop them")
        manifest = read_manifest(cfg.partitions)
        if is_typed_manifest(manifest):
            check_typed_predict(cfg)
            model_file = read_model_file(cfg.model)  # a typed model's file describes itself
        else:
            model_file = read_model_file(cfg.model, cfg.weights_only_model(manifest["feature_dim"],
                                                                           manifest["num_classes"]))
        device = resolve_device(cfg.device)  # cuda: this worker's GPU, cuda:LOCAL_RANK
    except (ValueError, TypeError) as err:
        raise LaunchError(str(err)) from None  # every worker finds the same: one line per machine
    use_threads(cfg.threads)
    ctx = init_from_env(timeout_s=DEFAULT_TIMEOUT_S if cfg.timeout is None else cfg.timeout)
    try:
        spec = layout_spec(cfg.layout or DEFAULT_LAYOUT)
        meta = predict_partitioned(model_file, cfg.partitions, spec.view, Comm(ctx), cfg.out, layout=spec.name,
                                   embeddings=cfg.embeddings, logits=cfg.logits, metric=cfg.node_metric,
                                   chunk_size=cfg.chunk_size, overwrite=cfg.overwrite, device=device)
    finally:
        shutdown()
    if meta is not None:
        print_predicted(meta, cfg)


def print_predicted(meta: dict, cfg: PredictConfig) -> None:
    metric = cfg.node_metric
    scores = ", ".join(f"{split} {m[metric]:.4f}" for split, m in meta["metrics"].items() if m["nodes"])
    seconds = meta["inference_seconds"]
    print(f"wrote {meta['rows']} rows ({', '.join(meta['files'])}) to {cfg.out}")
    print(f"{metric}: {scores or 'no labeled nodes'}; inference {seconds:.2f} s "
          f"({1e6 * seconds / meta['rows']:.1f} us per node)")


# Predict's outputs of every task, by the task's registered name (tests/test_cli.py checks every task has them).
OUTPUTS: dict[str, TaskOutputs] = {
    NODE.name: TaskOutputs(check=PredictConfig.check_node_flags, run=predict_node_outputs),
    LINK.name: TaskOutputs(check=PredictConfig.check_link_flags, run=predict_link_outputs),
}
