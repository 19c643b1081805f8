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
iterations); a resumed run continues at the saved epoch and step (:mod:`gnnscale.train.dist_checkpoint`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from torch import nn

from gnnscale.distributed.comm import Comm
from gnnscale.distributed.context import DistContext, init_from_env, rank_from_env, world_size_from_env
from gnnscale.inference.distributed import evaluate_full_distributed
from gnnscale.nn import ModelConfig
from gnnscale.nn.models import builtin_config
from gnnscale.partition.directory import LocalPartition, load_partition
from gnnscale.train.checks import LaunchError, check_distinct, check_partition_launch, check_run_outputs
from gnnscale.train.config import TrainConfig
from gnnscale.train.dist_checkpoint import check_checkpoint_at_launch, run_identity
from gnnscale.train.inputs import model_inputs, model_signature, seeded_link_model, seeded_model, training_device
from gnnscale.train.layouts import (Layout, LayoutContext, LayoutOptions, LayoutSpec, build_layout, check_layout_options,
                                    resolved)
from gnnscale.train.link import build_link_layout, check_link_launch, link_header, task_signature
from gnnscale.train.link_config import LinkConfig
from gnnscale.train.run import RunOutputs, check_inputs_fit_sampler, check_model_outputs
from gnnscale.train.setup import CheckedLaunch


def load_local_partition(partition_dir: str | Path, view: str, comm: Comm) -> LocalPartition:
    """Load this worker's part (its consecutive parts, where fewer workers than parts were launched) in
    the layout's ``view`` (the whole topology, or its part's in-edges); if any worker fails (missing or
    corrupt file, a worker count that does not divide the part count), every worker raises with that
    worker's message instead of waiting forever for it."""
    part, error = None, ""
    try:
        part = load_partition(partition_dir, comm.rank, view, workers=comm.world_size)
    except (ValueError, TypeError, OSError) as err:
        error = str(err)
    comm.agree(part is not None and not error, error)
    return part


def builtin_model_for(partition_dir: str | Path, options: LayoutOptions, model_options: dict, cfg: TrainConfig,
                      outputs: RunOutputs = RunOutputs(), link: LinkConfig | None = None) -> nn.Module:
    """The built-in model ``gnnscale train --partitions`` trains: ``model_options`` (ModelConfig fields but
    in_dim, num_classes and num_layers) sized for the partitioned dataset, initialised from ``cfg.seed``
    (the same weights on every worker). The launch checks that need no manifest come first, in
    :func:`check_launch`'s order. With ``link``: a link model whose encoder's output is ``hidden_dim`` wide."""
    try:
        spec = check_before_manifest(options, cfg, model_options["name"], outputs)
        manifest = check_partition_launch(partition_dir, world_size_from_env(), cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        width = manifest["num_classes"] if link is None else model_options.get("hidden_dim", 128)
        model_cfg = ModelConfig(in_dim=manifest["feature_dim"], num_classes=width, num_layers=cfg.num_layers,
                                **model_options)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return seeded_model(model_cfg, cfg.seed) if link is None else seeded_link_model(model_cfg, link.decoder, cfg.seed)


def check_before_manifest(options: LayoutOptions, cfg: TrainConfig, model_name: str | None,
                          outputs: RunOutputs) -> LayoutSpec:
    """The flags, the output paths and the launch's worker count (ValueError): what needs no partition."""
    # The flags first: a bad combination is named even when the launch itself is wrong too.
    spec = check_layout_options(options, cfg, model_name)
    check_model_outputs(model_name, outputs)
    # The checkpoint file itself is rank 0's to check (check_checkpoint_at_launch): another machine has none.
    check_run_outputs(metrics_out=outputs.metrics_out, checkpoint=None, resume=False,
                      overwrite=outputs.overwrite or outputs.resume, model_out=outputs.model_out)
    check_distinct({flag: Path(path) for flag, path in (("--metrics-out", outputs.metrics_out),
                                                        ("--checkpoint", outputs.checkpoint),
                                                        ("--save-model", outputs.model_out)) if path is not None})
    check_layout_options(options, cfg, model_name, world_size_from_env())
    return spec


def check_launch(partition_dir: str | Path, options: LayoutOptions, model: nn.Module, inputs: str,
                 cfg: TrainConfig, outputs: RunOutputs, link: LinkConfig | None = None) -> CheckedLaunch:
    """Every check that needs no peer, before joining the run: every worker fails at once with the same
    line (a :class:`LaunchError`) instead of after loading its part (or, for a metrics path, after the
    whole run)."""
    try:
        check_link_launch(link, model, outputs, layout=options.layout, dgs=options.dgs is not None)
        adapter = model_inputs(model, inputs)
    except (ValueError, TypeError) as err:
        raise LaunchError(str(err)) from err
    model_cfg = builtin_config(model) if link is None else model.config
    try:
        spec = check_before_manifest(options, cfg, None if model_cfg is None else model_cfg.name, outputs)
        device = training_device(model, cfg.device)  # this worker's: under torchrun, cuda:LOCAL_RANK
        check_inputs_fit_sampler(adapter, cfg)
        world_size = world_size_from_env()
        manifest = check_partition_launch(partition_dir, world_size, cfg.batch_size,
                                          per_worker_batches=spec.per_worker_batches)
        if model_cfg is not None:
            check_builtin_fits(model_cfg, manifest, cfg, partition_dir, embeds=link is not None)
        identity = run_identity(partition_dir, manifest, task_signature(model_signature(model, adapter), link), cfg,
                                options, world_size)
        resume_path = check_checkpoint_at_launch(outputs.checkpoint, resume=outputs.resume,
                                                 overwrite=outputs.overwrite, every=outputs.checkpoint_every,
                                                 rank=rank_from_env(), run=identity, epochs=cfg.epochs)
    except ValueError as err:
        raise LaunchError(str(err)) from err
    return CheckedLaunch(inputs=adapter, spec=spec, options=options, model_cfg=model_cfg, identity=identity,
                         device=device, resume_path=resume_path, link=link)


def check_builtin_fits(model_cfg: ModelConfig, manifest: dict, cfg: TrainConfig, partition_dir: str | Path, *,
                       embeds: bool = False) -> None:
    """A built-in model's input and output widths are the dataset's (``embeds``, a link encoder: its input
    width only), and its layers the fanouts' hops."""
    if model_cfg.num_layers != cfg.num_layers:
        raise ValueError(f"fanouts: {cfg.num_layers} hops given for a model of {model_cfg.num_layers} layers")
    if embeds:
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
        link: a link task's settings; None: node classification.
    """

    partition_dir: Path
    options: LayoutOptions
    timeout_s: float
    link: LinkConfig | None = None

    def __post_init__(self) -> None:
        # The layout's own options filled in (its defaults where not given): recorded whole.
        object.__setattr__(self, "options", resolved(self.options))

    def check(self, model: nn.Module, inputs: str, cfg: TrainConfig, outputs: RunOutputs) -> CheckedLaunch:
        return check_launch(self.partition_dir, self.options, model, inputs, cfg, outputs, self.link)

    def join(self) -> DistContext:
        return init_from_env(timeout_s=self.timeout_s)

    def load(self, launch: CheckedLaunch, comm: Comm) -> LocalPartition:
        return load_local_partition(self.partition_dir, launch.spec.view, comm)

    def build(self, ctx: LayoutContext) -> Layout:
        if self.link is not None:
            return build_link_layout(ctx, self.link)
        return build_layout(ctx)

    def header(self, launch: CheckedLaunch, cfg: TrainConfig, world_size: int) -> dict:
        options = self.options
        return {"partitions": str(self.partition_dir), "layout": options.layout, "world_size": world_size,
                "layout_options": asdict(options.settings),
                "dgs": None if options.dgs is None else asdict(options.dgs),
                "model": launch.identity.signature["model"], "train": asdict(cfg), **link_header(self.link)}

    def full_eval(self, model: nn.Module, part: LocalPartition, comm: Comm, metric: str) -> dict:
        return evaluate_full_distributed(model, part, comm, metric)
