"""The samplers a run trains and evaluates with, from its training config."""

from __future__ import annotations

import torch

from gnnscale.graph.csc import CSCGraph
from gnnscale.nn import ModelConfig
from gnnscale.sampling import BatchSampler, NeighborSampler
from gnnscale.sampling.device import DeviceNeighborSampler
from gnnscale.sampling.registry import SamplerInputs, sampler_spec
from gnnscale.train.config import TrainConfig

# --sample-on auto samples on a GPU when the topology (and the sampler's work array) takes at most this
# share of its free memory: the rest is for the model's activations and the batches in flight.
AUTO_TOPOLOGY_SHARE = 0.5


def samples_on_device(cfg: TrainConfig, device: torch.device, graph: CSCGraph) -> bool:
    """Whether the training sampler runs on ``device`` (``cfg.sample_on``, ``auto`` resolved: a GPU with room
    for the topology, and the fused sampler, whose law the device sampler draws)."""
    if cfg.sample_on != "auto":
        return cfg.sample_on == "device"
    if device.type != "cuda" or cfg.sampler != "fused":
        return False
    needed = graph.indptr.nbytes + graph.indices.nbytes + 8 * graph.num_nodes  # + the relabel work array
    free, _ = torch.cuda.mem_get_info(device)
    return needed <= AUTO_TOPOLOGY_SHARE * free


def build_samplers(graph: CSCGraph, model_cfg: ModelConfig | None, cfg: TrainConfig,
                   sample_device: torch.device | None = None) -> tuple[BatchSampler, BatchSampler]:
    """The training sampler ``cfg.sampler`` names, and the inference sampler. ``model_cfg``: the built-in
    model's config, None for a model of one's own (LADIES then estimates GraphSAGE's operator). With
    ``sample_device`` (where :func:`samples_on_device` says), the training sampler is the device sampler
    there: the fused sampler's blocks, bit for bit. Inference samples on the host.

    Inference uses neighbor sampling with the inference fanouts, by the spec's ``eval_method``: the fused
    kernel, or the two-step reference when training with it. The matrix sampler draws the fused kernel's
    blocks, so it would only be slower there; LADIES models are evaluated on (full, with fanouts above
    the largest degree) neighborhoods, as the LADIES paper evaluates on the whole graph.
    """
    spec = sampler_spec(cfg.sampler)
    if sample_device is not None:
        train = DeviceNeighborSampler(graph, cfg.fanouts, replace=cfg.replace, device=sample_device)
        return train, NeighborSampler(graph, cfg.inference_fanouts, method=spec.eval_method)
    eval_sampler = NeighborSampler(graph, cfg.inference_fanouts, method=spec.eval_method)
    # The operator LADIES estimates is the layer's own: D~^-1 (A + I) for GCN, D^-1 A for SAGE's mean.
    inputs = SamplerInputs(graph=graph, fanouts=cfg.fanouts, bulk=cfg.bulk, replace=cfg.replace,
                           layer_sizes=(cfg.ladies_layer_size,) * cfg.num_layers, self_loops=is_gcn(model_cfg))
    return spec.build(inputs), eval_sampler


def is_gcn(model_cfg: ModelConfig | None) -> bool:
    """Whether LADIES estimates GCN's operator (with self loops) rather than GraphSAGE's mean."""
    return model_cfg is not None and model_cfg.name == "gcn"
