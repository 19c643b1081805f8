"""Every rule between a run's settings, checked by one function before any data loads.

``gnnscale train`` (and ``python -m gnnscale.launch``, before any worker starts) and ``fit`` call
:func:`check_run`, so each refuses a combination with the same line. What needs the data itself (a
partition's manifest, a dataset's class count) is checked afterwards, by the run's source
(:mod:`gnnscale.train.sources.in_process`, :mod:`gnnscale.train.sources.partitioned`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from torch import nn

from gnnscale.sampling.registry import SAMPLERS, check_sampler_fits_model, sampler_spec
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import BlockInputs, BuiltinBlockInputs, ModelInputs, model_device
from gnnscale.train.layouts.base import LayoutOptions, LayoutSpec
from gnnscale.train.layouts.registry import (check_layout_options, check_layout_sampler, layout_spec, layouts_with,
                                            resolved)
from gnnscale.train.layouts.single import SINGLE
from gnnscale.train.run import RunOutputs, check_model_outputs
from gnnscale.nn.models import ModelConfig
from gnnscale.nn.typed_models import TYPED_MODELS
from gnnscale.train.tasks.base import TaskSpec

INPUTS = ("blocks", "pyg")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """Everything a run was told, before any data is read.

    Args:
        train: the training settings.
        task: the task's spec; ``task_settings`` its own settings (None where it has none).
        layout: a partition directory's layout and its options; None: one process.
        outputs: what the run writes and resumes.
        model: the built-in model's name; None for a model of one's own.
        inputs: what the model's forward takes (``"blocks"`` or ``"pyg"``).
        world_size: the launch's worker count, once known (the flags alone are checked without it).
    """

    train: TrainConfig
    task: TaskSpec
    task_settings: object | None
    layout: LayoutOptions | None
    outputs: RunOutputs
    model: str | None
    inputs: str = "blocks"
    world_size: int | None = None


def check_run(run: RunSettings) -> LayoutSpec:
    """Refuse a combination of settings that cannot run (ValueError naming the setting, one line); return the
    layout's spec (one process: :data:`~gnnscale.train.layouts.single.SINGLE`)."""
    if run.inputs not in INPUTS:
        raise ValueError(f"inputs: expected one of {INPUTS} (what the model's forward takes: gnnscale blocks "
                         f"`model(blocks, x)` or PyG's `model(x, edge_index)`), got {run.inputs!r}")
    # The task first: a layout that cannot serve it is named before that layout's own rules.
    check_task(run, SINGLE if run.layout is None else layout_spec(run.layout.layout))
    if run.model in TYPED_MODELS:
        return check_typed(run)
    if run.train.relation_fanouts and run.model is not None:
        raise ValueError(f"relation_fanouts: a relation's own fanouts need a typed graph and --model "
                         f"{' or '.join(TYPED_MODELS)}; --model {run.model} trains one edge type (use --fanouts)")
    if run.layout is None:
        spec = SINGLE
        check_sampler_fits_model(run.train.sampler, run.model)
    else:
        spec = check_layout_options(run.layout, run.train, run.model, run.world_size)
    check_outputs(run, spec)
    if run.inputs == "pyg" and sampler_spec(run.train.sampler).weighted:
        unweighted = [name for name, s in SAMPLERS.items() if not s.weighted]
        raise ValueError(f"sampler: --sampler {run.train.sampler} gives weighted blocks, and a PyG model's (x, "
                         f"edge_index) batch has no edge weights; train it with sampler {', '.join(unweighted)}")
    note_host_cache(run.train)
    note_cpu_float16(run.train)
    return spec


def check_typed(run: RunSettings) -> LayoutSpec:
    """A typed model (R-GCN, R-SAGE, R-GAT) trains on a typed graph in one process or over a typed partition with a
    layout that trains typed graphs (hybrid, vanilla), sampled on the host by a sampler that draws typed graphs
    (one the layout samples with), and scored every epoch on sampled neighborhoods (``--eval full`` adds layer-wise
    inference, in one process or over the partition). Returns the layout's spec."""
    cfg, name = run.train, run.model
    spec = SINGLE if run.layout is None else layout_spec(run.layout.layout)
    if not spec.typed:
        raise ValueError(f"layout: --model {name} trains a typed graph in one process or with --layout "
                         f"{layouts_with('typed')}, got --layout {spec.name}")
    if run.layout is not None:
        check_typed_layout(run.layout, cfg, name, spec)
    if not sampler_spec(cfg.sampler).typed:
        typed = " or ".join(n for n, s in SAMPLERS.items() if s.typed)
        raise ValueError(f"sampler: --model {name} samples a typed graph with --sampler {typed}, got --sampler "
                         f"{cfg.sampler}")
    if cfg.sample_on == "device" or cfg.gpu_cache_fraction > 0:
        flag = "sample_on: --sample-on device" if cfg.sample_on == "device" else \
            f"gpu_cache_fraction: --gpu-cache-fraction {cfg.gpu_cache_fraction:g}"
        raise ValueError(f"{flag} holds a plain graph's data on the device; a typed graph samples and reads its rows "
                         "on the host (the model and the step still run on --device)")
    return spec


def check_typed_layout(options: LayoutOptions, cfg: TrainConfig, name: str, spec: LayoutSpec) -> None:
    """What a typed run over a typed partition cannot take: DGS (its masks and kernels are a plain graph's), a
    feature cache, a sampler the layout does not sample with."""
    if options.dgs is not None:
        raise ValueError(f"dgs: --dgs explains plain models over a plain graph; --model {name} trains without --dgs")
    if getattr(resolved(options).settings, "cache_fraction", 0) > 0:
        raise ValueError(f"cache_fraction: --model {name} fetches every node type's rows from their owners, without a "
                         "cache; drop --cache-fraction")
    check_layout_sampler(cfg, spec, "typed")


def check_task(run: RunSettings, spec: LayoutSpec) -> None:
    """The task runs on the layout (its spec has every capability the task needs), with DGS only where the
    task takes it, and its own settings fit the run."""
    task = run.task
    for capability in task.needs:
        if run.layout is not None and not getattr(spec, capability):
            raise ValueError(f"task: --task {task.name} trains with --layout {layouts_with(capability)}, got "
                             f"--layout {spec.name}")
    if run.layout is not None and run.layout.dgs is not None and not task.dgs:
        raise ValueError(f"task: --task {task.name} trains without --dgs")
    if run.outputs.full_eval is not None and not task.full_eval:
        raise ValueError(f"full_eval: --eval full scores nodes; --task {task.name} is scored by --metric every epoch")
    task.check_settings(run.task_settings, run.layout is not None)


def check_outputs(run: RunSettings, spec: LayoutSpec) -> None:
    """What only a built-in model can write, and what a distributed full evaluation can score."""
    check_model_outputs(run.model, run.outputs)
    if run.outputs.full_eval is None or run.layout is None:
        return
    if not spec.layerwise_inference:
        raise ValueError(f"full_eval: full evaluation over a partition runs with --layout "
                         f"{layouts_with('layerwise_inference')}, not {spec.name}; run gnnscale predict --partitions "
                         "on the saved model instead")
    if run.outputs.full_eval == "roc_auc":
        raise ValueError("metric: roc_auc ranks every score together, which a distributed full evaluation does not "
                         "gather; use accuracy or f1_macro, or gnnscale predict --partitions on the saved model")


def note_host_cache(cfg: TrainConfig) -> None:
    """``--gpu-cache-fraction`` with ``--device cpu`` runs (it is how the cache is tested without a GPU) but saves
    nothing: the "device" copy of the hot rows is a second host copy. Say so once."""
    if cfg.gpu_cache_fraction > 0 and cfg.device == "cpu":
        warnings.warn(f"gpu_cache_fraction: {cfg.gpu_cache_fraction:g} with --device cpu keeps a second host copy of "
                      "the hottest rows, which saves nothing; it is meant for a GPU (--device cuda)", stacklevel=2)


def note_cpu_float16(cfg: TrainConfig) -> None:
    """``--precision 16-mixed`` with ``--device cpu`` runs (it is how the gradient scaler is tested without a
    GPU), but a CPU without float16 arithmetic converts every product, and float16 needs the scaler that bfloat16
    does without. Say so once."""
    if cfg.precision == "16-mixed" and cfg.device == "cpu":
        warnings.warn("precision: 16-mixed with --device cpu autocasts to float16, which most CPUs compute by "
                      "conversion (slower than 32); bf16-mixed is the CPU's half precision, 16-mixed is meant for a "
                      "GPU (--device cuda)", stacklevel=2)


def model_inputs(model: nn.Module, inputs: str, model_name: str | None) -> ModelInputs:
    """The loop's calling convention for ``model`` given as ``inputs`` (``"blocks"`` or ``"pyg"``);
    ``model_name``: the built-in model's name (its config's), None for a model of one's own."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if inputs not in INPUTS:
        raise ValueError(f"inputs: expected one of {INPUTS} (what the model's forward takes: gnnscale blocks "
                         f"`model(blocks, x)` or PyG's `model(x, edge_index)`), got {inputs!r}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model: {type(model).__name__} has no trainable parameters")
    model_device(model)  # one device for the whole model
    if model_name is not None:
        if inputs != "blocks":
            raise ValueError(f"inputs: {type(model).__name__} is a gnnscale model, which takes blocks; pass "
                             "inputs='blocks'")
        return BuiltinBlockInputs()
    if inputs == "blocks":
        return BlockInputs()
    # Imported here: only PyG models need torch_geometric (seconds to import) in the training processes.
    from gnnscale.train.pyg_inputs import PygInputs

    return PygInputs()


def checked_model(model: nn.Module, inputs: str, task: TaskSpec) -> tuple[ModelConfig | None, ModelInputs]:
    """The built-in model config ``model`` is built on (None: a model of one's own) and how the loop calls it,
    after the task's rules for its model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    task.check_model(model)
    model_cfg = task.model_config(model)
    return model_cfg, model_inputs(model, inputs, None if model_cfg is None else model_cfg.name)
