"""The registry of samplers: the one place that knows every sampler by name (``--sampler``).

A :class:`SamplerSpec` says which built-in models a sampler serves, which options it takes (``--bulk``,
``--layer-size``, ``--replace``), how inference samples for a model trained with it, on which devices it
runs, and how it is built there.
The CLI's choices, the training config's checks, the trainer and the 1.5D layout all read it. Which
distributed layouts run a sampler is said by each layout's spec (``LayoutSpec.samplers``): layouts sit
above samplers, and a layout knows what its workers can sample with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.typed import TypedGraph
from gnnscale.sampling import BatchSampler, NeighborSampler
from gnnscale.sampling.device import DeviceNeighborSampler
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.sampling.matrix.device_ladies import DeviceLadiesSampler, operator_bytes
from gnnscale.sampling.matrix.device_sage import DeviceMatrixSampler
from gnnscale.sampling.typed import TypedNeighborSampler, with_relation_fanouts

DEFAULT_LAYER_SIZE = 512  # LADIES nodes per layer (Tripathy et al., Table 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplerInputs:
    """What a sampler is built from.

    Args:
        graph: the topology it samples: a plain CSC, or a typed graph (samplers whose spec is ``typed``).
        fanouts: neighbors per hop from the seeds outwards (neighbor samplers; on a typed graph every relation's
            but those in ``relation_fanouts``).
        bulk: consecutive batches drawn by one set of sparse products (bulk samplers; 1 otherwise).
        replace: draw neighbors with replacement.
        layer_sizes: nodes drawn per layer, seeds outwards (layer-wise samplers).
        self_loops: the layer's operator has self loops (GCN's D~^-1 (A + I)), else GraphSAGE's mean D^-1 A.
        relation_fanouts: a typed graph's relations with fanouts of their own (``{relation: per hop}``,
            :func:`~gnnscale.sampling.typed.with_relation_fanouts`); a plain graph takes none.
    """

    graph: CSCGraph | TypedGraph
    fanouts: tuple[int, ...]
    bulk: int
    replace: bool
    layer_sizes: tuple[int, ...]
    self_loops: bool
    relation_fanouts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplerSpec:
    """A sampler as the CLI, the checks and the trainer know it.

    Args:
        name: ``--sampler`` value.
        summary: one line for ``--help``.
        models: the built-in models it trains (LADIES' weighted blocks: not GAT's attention).
        bulk: takes ``--bulk`` (samples several batches per call).
        layerwise: draws ``--layer-size`` nodes per layer instead of ``--fanouts`` per node (LADIES).
        replace: takes ``--replace``.
        weighted: its blocks carry edge weights, which a PyG ``(x, edge_index)`` model cannot take.
        masked: DGS's masked node-sampling kernel stands in for it (``--dgs``).
        typed: samples typed graphs too (:mod:`gnnscale.sampling.typed`: a fanout per relation, the same law).
        eval_method: the neighbor-sampling method inference uses for a model trained with it.
        build_host: the training sampler on the host.
        build_device: the same sampler drawn by torch ops on a device (the host's blocks for the same key),
            None where it runs on the host only.
        device_bytes: what ``build_device`` keeps on the device for a graph (its topology, operator and work
            arrays, in bytes), given with ``build_device``: ``--sample-on auto`` weighs it against the GPU's
            free memory.
    """

    name: str
    summary: str
    models: tuple[str, ...]
    bulk: bool
    layerwise: bool
    replace: bool
    weighted: bool
    masked: bool
    eval_method: str
    build_host: Callable[[SamplerInputs], BatchSampler]
    build_device: Callable[[SamplerInputs, torch.device], BatchSampler] | None = None
    device_bytes: Callable[[CSCGraph], int] | None = None
    typed: bool = False

    def __post_init__(self) -> None:
        if (self.build_device is None) != (self.device_bytes is None):
            raise ValueError(f"device_bytes: sampler {self.name!r} needs both build_device and device_bytes, or "
                             "neither")

    @property
    def runs_on_device(self) -> bool:
        """Whether it can sample on a device (``--sample-on device``) as well as on the host."""
        return self.build_device is not None

    def build(self, inputs: SamplerInputs, device: torch.device | None = None) -> BatchSampler:
        """The training sampler on the host (``device`` None), or on ``device``."""
        if inputs.relation_fanouts and not isinstance(inputs.graph, TypedGraph):
            raise ValueError("relation_fanouts: a relation's own fanouts need a typed graph; this graph has one edge "
                             "type (use --fanouts)")
        if device is None:
            return self.build_host(inputs)
        if self.build_device is None:
            raise ValueError(f"sampler: --sampler {self.name} samples on the host only, not on {device}")
        return self.build_device(inputs, device)


def _neighbor(method: str) -> Callable[[SamplerInputs], BatchSampler]:
    def build(inputs: SamplerInputs) -> BatchSampler:
        if isinstance(inputs.graph, TypedGraph):
            fanouts = with_relation_fanouts(inputs.graph, inputs.fanouts, inputs.relation_fanouts)
            return TypedNeighborSampler(inputs.graph, fanouts, replace=inputs.replace, method=method)
        return NeighborSampler(inputs.graph, inputs.fanouts, replace=inputs.replace, method=method)
    return build


def _on_device(inputs: SamplerInputs, device: torch.device) -> BatchSampler:
    return DeviceNeighborSampler(inputs.graph, inputs.fanouts, replace=inputs.replace, device=device)


def _topology_bytes(graph: CSCGraph) -> int:
    return int(graph.indptr.nbytes + graph.indices.nbytes)


def _fused_bytes(graph: CSCGraph) -> int:
    return _topology_bytes(graph) + 8 * graph.num_nodes  # and the device sampler's int64 first-position array


def _matrix(inputs: SamplerInputs) -> BatchSampler:
    return MatrixSampler(inputs.graph, inputs.fanouts, bulk=inputs.bulk, replace=inputs.replace)


def _matrix_on_device(inputs: SamplerInputs, device: torch.device) -> BatchSampler:
    return DeviceMatrixSampler(inputs.graph, inputs.fanouts, bulk=inputs.bulk, replace=inputs.replace, device=device)


def _ladies(inputs: SamplerInputs) -> BatchSampler:
    return LadiesSampler(inputs.graph, inputs.layer_sizes, bulk=inputs.bulk, self_loops=inputs.self_loops)


def _ladies_on_device(inputs: SamplerInputs, device: torch.device) -> BatchSampler:
    return DeviceLadiesSampler(inputs.graph, inputs.layer_sizes, bulk=inputs.bulk, self_loops=inputs.self_loops,
                               device=device)


ALL_MODELS = ("sage", "gcn", "gat")
SAMPLERS: dict[str, SamplerSpec] = {spec.name: spec for spec in (
    SamplerSpec(name="fused", summary="the fused kernel: each hop straight into a CSC block", models=ALL_MODELS,
                bulk=False, layerwise=False, replace=True, weighted=False, masked=True, eval_method="fused",
                build_host=_neighbor("fused"), build_device=_on_device, device_bytes=_fused_bytes, typed=True),
    SamplerSpec(name="two_step", summary="the two-step reference (COO, relabel, CSC), for comparisons",
                models=ALL_MODELS, bulk=False, layerwise=False, replace=True, weighted=False, masked=False,
                eval_method="two_step", build_host=_neighbor("two_step"), typed=True),
    SamplerSpec(name="matrix", summary="GraphSAGE sampling by sparse products, --bulk batches at a time (the fused "
                "blocks)", models=ALL_MODELS, bulk=True, layerwise=False, replace=True, weighted=False, masked=False,
                eval_method="fused", build_host=_matrix, build_device=_matrix_on_device,
                device_bytes=_topology_bytes),
    SamplerSpec(name="ladies", summary="layer-wise LADIES sampling by sparse products (weighted blocks)",
                models=("sage", "gcn"), bulk=True, layerwise=True, replace=False, weighted=True, masked=False,
                eval_method="fused", build_host=_ladies, build_device=_ladies_on_device,
                device_bytes=operator_bytes),
)}


def sampler_spec(name: str) -> SamplerSpec:
    """The registered sampler called ``name`` (``--sampler``)."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler: expected one of {', '.join(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name]


def samplers_with(feature: str) -> tuple[str, ...]:
    """The samplers whose spec has ``feature`` (a boolean field)."""
    return tuple(name for name, spec in SAMPLERS.items() if getattr(spec, feature))


def check_sampler_fits_model(sampler: str, model_name: str | None) -> None:
    """A built-in model the sampler does not serve (``model_name`` None: a model of one's own, checked by
    its input form instead)."""
    spec = sampler_spec(sampler)
    if model_name is not None and model_name not in spec.models:
        raise ValueError(f"sampler: --sampler {sampler} trains --model {' or '.join(spec.models)}, not --model "
                         f"{model_name}" + (" (its weighted blocks have no use for attention)" if spec.weighted else ""))
