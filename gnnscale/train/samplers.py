"""The samplers a run trains and evaluates with, from its training config."""

from __future__ import annotations

from gnnscale.graph.csc import CSCGraph
from gnnscale.nn import ModelConfig
from gnnscale.sampling import BatchSampler, NeighborSampler
from gnnscale.sampling.registry import SamplerInputs, sampler_spec
from gnnscale.train.config import TrainConfig


def build_samplers(graph: CSCGraph, model_cfg: ModelConfig | None,
                   cfg: TrainConfig) -> tuple[BatchSampler, BatchSampler]:
    """The training sampler ``cfg.sampler`` names, and the inference sampler. ``model_cfg``: the built-in
    model's config, None for a model of one's own (LADIES then estimates GraphSAGE's operator).

    Inference uses neighbor sampling with the inference fanouts, by the spec's ``eval_method``: the fused
    kernel, or the two-step reference when training with it. The matrix sampler draws the fused kernel's
    blocks, so it would only be slower there; LADIES models are evaluated on (full, with fanouts above
    the largest degree) neighborhoods, as the LADIES paper evaluates on the whole graph.
    """
    spec = sampler_spec(cfg.sampler)
    eval_sampler = NeighborSampler(graph, cfg.inference_fanouts, method=spec.eval_method)
    # The operator LADIES estimates is the layer's own: D~^-1 (A + I) for GCN, D^-1 A for SAGE's mean.
    inputs = SamplerInputs(graph=graph, fanouts=cfg.fanouts, bulk=cfg.bulk, replace=cfg.replace,
                           layer_sizes=(cfg.ladies_layer_size,) * cfg.num_layers, self_loops=is_gcn(model_cfg))
    return spec.build(inputs), eval_sampler


def is_gcn(model_cfg: ModelConfig | None) -> bool:
    """Whether LADIES estimates GCN's operator (with self loops) rather than GraphSAGE's mean."""
    return model_cfg is not None and model_cfg.name == "gcn"
