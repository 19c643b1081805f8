"""The samplers a run trains and evaluates with, from its training config and device policy."""

from __future__ import annotations

import dataclasses

from gnnscale.distributed.device_policy import DevicePolicy
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.typed import TypedGraph
from gnnscale.nn import ModelConfig
from gnnscale.sampling import BatchSampler
from gnnscale.sampling.registry import SamplerInputs, sampler_spec
from gnnscale.train.config import TrainConfig


def sampler_inputs(graph: CSCGraph | TypedGraph, fanouts: tuple[int, ...], cfg: TrainConfig,
                   model_cfg: ModelConfig | None = None, *,
                   relation_fanouts: dict[str, tuple[int, ...]] | None = None) -> SamplerInputs:
    """What ``cfg.sampler``'s spec builds a sampler of ``graph`` from. The operator LADIES estimates is the
    layer's own: D~^-1 (A + I) for GCN, D^-1 A for SAGE's mean (``model_cfg`` None: a model of one's own,
    estimated as GraphSAGE's). ``relation_fanouts``: a typed graph's relations with fanouts of their own."""
    return SamplerInputs(graph=graph, fanouts=fanouts, bulk=cfg.bulk, replace=cfg.replace,
                         layer_sizes=(cfg.ladies_layer_size,) * cfg.num_layers, self_loops=is_gcn(model_cfg),
                         relation_fanouts=relation_fanouts or {})


def build_samplers(graph: CSCGraph | TypedGraph, model_cfg: ModelConfig | None, cfg: TrainConfig,
                   policy: DevicePolicy | None = None) -> tuple[BatchSampler, BatchSampler]:
    """The training sampler ``cfg.sampler`` names, and the inference sampler. With a ``policy`` that samples on
    its device, the training sampler is that sampler's device build there (the host's blocks, bit for bit).
    Inference samples on the host.

    Inference uses neighbor sampling with the inference fanouts, by the spec's ``eval_method``: the fused
    kernel, or the two-step reference when training with it. The matrix sampler draws the fused kernel's
    blocks, so it would only be slower there; LADIES models are evaluated on (full, with fanouts above
    the largest degree) neighborhoods, as the LADIES paper evaluates on the whole graph.
    """
    spec = sampler_spec(cfg.sampler)
    device = policy.device if policy is not None and policy.sample_on_device else None
    train = spec.build(sampler_inputs(graph, cfg.fanouts, cfg, model_cfg,
                                      relation_fanouts=cfg.relation_fanout_table), device)
    # The eval method is a neighbor sampler's (fused or two_step), which samples plain and typed graphs alike;
    # inference draws without replacement whatever training does.
    evaluate = dataclasses.replace(sampler_inputs(graph, cfg.inference_fanouts, cfg, model_cfg,
                                                  relation_fanouts=cfg.inference_relation_fanouts), replace=False)
    return train, sampler_spec(spec.eval_method).build(evaluate)


def is_gcn(model_cfg: ModelConfig | None) -> bool:
    """Whether LADIES estimates GCN's operator (with self loops) rather than GraphSAGE's mean."""
    return model_cfg is not None and model_cfg.name == "gcn"
