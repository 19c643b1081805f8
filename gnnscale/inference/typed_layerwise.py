"""Layer-wise full-neighborhood inference of a typed model (R-GCN, R-SAGE, R-GAT) over every node type.

The typed counterpart of :mod:`gnnscale.inference.layerwise`, over the same files and rules: one layer at a time,
every node's output of layer ``l`` computed once from all of its in-neighbors' (by every relation) outputs of layer
``l - 1``, in chunks of ``chunk_size`` destinations, each layer's output in a memory-mapped ``.npy`` file indexed by
global id; with ``nodes`` only the rows those nodes need (:func:`~gnnscale.inference.layerwise.needed_nodes` over
the typed graph's CSC, which holds every relation's edges).

**Input.** The model's encoder (each type's projection, or its embedding) runs once per node, before the first
layer, into a scratch file ``input.npy`` [num_nodes, width] that the first layer reads as the others read their
predecessor's file.

**Blocks.** A chunk's block is the typed sampler's with fanout -1 (every in-neighbor by every relation,
:data:`~gnnscale.sampling.choose.ALL_NEIGHBORS`): destinations first, one CSC per relation, the block a layer
consumes in training. The model's own layer modules compute it, with the activation of its forward between layers
(eval mode: no dropout).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gnnscale.features.typed import TypedLocalStore
from gnnscale.graph.features import gather_rows
from gnnscale.graph.typed import TypedGraph
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, evaluating_on, needed_nodes, weights_device
from gnnscale.nn.relational import RGATConv
from gnnscale.nn.typed_models import TypedModel, sources_by_type
from gnnscale.sampling.choose import ALL_NEIGHBORS
from gnnscale.sampling.typed import TypedBlock, TypedNeighborSampler


def typed_layer_widths(model: TypedModel) -> list[int]:
    """Output width of every layer of a typed model: its width between layers, its classes at the end."""
    cfg = model.config
    return [cfg.width] * (cfg.num_layers - 1) + [cfg.num_classes]


def apply_typed_layer(model: TypedModel, i: int, block: TypedBlock, x_src: torch.Tensor,
                      graph: TypedGraph) -> np.ndarray:
    """Layer ``i`` of ``model`` (eval mode) on ``block``, with the activation its forward applies after every layer
    but the last; ``block`` and ``x_src`` (host tensors) go to the device of the model's weights, the output rows
    come back as a host array."""
    device = weights_device(model)
    layer = model.layers[i]
    if isinstance(layer, RGATConv):  # R-GAT transforms each relation's source type: where they are in the block
        positions = {t: pos.to(device) for t, (pos, _) in sources_by_type(block.src_ids, graph).items()}
        h = layer(block.to(device), x_src.to(device), positions)
    else:
        h = layer(block.to(device), x_src.to(device))
    if i < model.num_layers - 1:
        h = F.elu(h) if model.config.name == "rgat" else F.relu(h)
    return h.cpu().numpy()  # on a device: waits for the chunk's kernels (the one sync point per chunk)


def check_typed_inputs(model: TypedModel, graph: TypedGraph, features: Mapping[str, np.ndarray | None],
                       nodes: np.ndarray | None, chunk_size: int) -> None:
    """ValueError/TypeError naming the argument for anything :func:`typed_layerwise_inference` cannot run on."""
    if not isinstance(model, TypedModel):
        raise TypeError(f"model: expected a TypedModel (R-GCN, R-SAGE or R-GAT), got {type(model).__name__}")
    if not isinstance(graph, TypedGraph):
        raise TypeError(f"graph: expected a TypedGraph, got {type(graph).__name__}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    for t, width in model.config.feature_dims.items():
        x = features.get(t)
        if x is None or x.ndim != 2 or x.shape != (graph.count(t), width):
            got = "none" if x is None else f"shape {tuple(x.shape)}"
            raise ValueError(f"features: expected node type {t!r}'s rows of shape [{graph.count(t)}, {width}] (the "
                             f"model's width), got {got}")
    if nodes is not None and np.asarray(nodes).size and (int(np.min(nodes)) < 0 or
                                                          int(np.max(nodes)) >= graph.num_nodes):
        raise ValueError(f"nodes: expected global ids in [0, {graph.num_nodes}), got range "
                         f"[{int(np.min(nodes))}, {int(np.max(nodes))}]")


def encode_nodes(model: TypedModel, store: TypedLocalStore, todo: np.ndarray | None, path: Path,
                 chunk_size: int) -> np.ndarray:
    """The encoder's output (each node's projected features or embedding row) of the nodes ``todo`` (None: every
    node) into the memory-mapped file ``path``, float32 [num_nodes, width]; returns it opened for reading."""
    device = weights_device(model)
    num_nodes = store.graph.num_nodes
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num_nodes, model.config.width))
    count = num_nodes if todo is None else todo.shape[0]
    for lo in range(0, count, chunk_size):
        ids = np.arange(lo, min(lo + chunk_size, count), dtype=np.int64) if todo is None else todo[lo:lo + chunk_size]
        out[ids] = model.encoder(store.gather(torch.from_numpy(ids)).to(device)).cpu().numpy()
    out.flush()
    del out
    return np.load(path, mmap_mode="r")


@torch.no_grad()
def typed_layerwise_inference(model: TypedModel, graph: TypedGraph, features: Mapping[str, np.ndarray | None],
                              workdir: str | Path, *, nodes: np.ndarray | None = None,
                              chunk_size: int = DEFAULT_CHUNK_SIZE,
                              device: str | torch.device | None = None) -> list[Path]:
    """Run a typed ``model`` (eval mode) over the whole typed graph layer by layer; return the ``.npy`` file of every
    layer's output (input layer first), each float32 [num_nodes, width], row ``v`` global id ``v``.

    Args:
        model: a :class:`~gnnscale.nn.typed_models.TypedModel` of ``graph``'s schema.
        graph: the typed graph.
        features: ``{node type: float [count, d_t] or None}`` (may be memory-mapped; float16 and bfloat16 as
            stored): the rows of every type the model projects; the other types' nodes read their embeddings.
        workdir: an existing folder for ``input.npy`` (the encoder's output) and ``layer1.npy .. layerL.npy``.
        nodes: int64 global ids whose last-layer output is wanted (the target type's, say); None (the default):
            every node.
        chunk_size: destination nodes per block (> 0). Default :data:`~gnnscale.inference.layerwise.DEFAULT_CHUNK_SIZE`.
        device: where the layers compute (as :func:`~gnnscale.inference.layerwise.layerwise_inference`'s); the
            files stay on the host.

    Hidden layers' files hold the activation's output; the last layer's the logits. Rows no wanted node depends on
    are left unwritten.
    """
    check_typed_inputs(model, graph, features, nodes, chunk_size)
    workdir = Path(workdir)
    sampler = TypedNeighborSampler(graph, [ALL_NEIGHBORS])  # one hop, every in-edge: no draw depends on the key
    # [the encoder's nodes, layer 1's, ..., layer L's]: the encoder feeds layer 1's sources.
    todo = needed_nodes(graph.graph, nodes, model.num_layers + 1)
    paths = []
    with evaluating_on(model, device):
        x = encode_nodes(model, TypedLocalStore(graph, features), todo[0], workdir / "input.npy", chunk_size)
        for i, (width, dst_ids) in enumerate(zip(typed_layer_widths(model), todo[1:])):
            path = workdir / f"layer{i + 1}.npy"
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(graph.num_nodes, width))
            count = graph.num_nodes if dst_ids is None else dst_ids.shape[0]
            for lo in range(0, count, chunk_size):
                dst = (np.arange(lo, min(lo + chunk_size, count), dtype=np.int64) if dst_ids is None
                       else dst_ids[lo:lo + chunk_size])
                block = sampler.sample(dst, 0)[0]
                x_src = torch.from_numpy(gather_rows(x, block.src_ids.numpy()))
                out[dst] = apply_typed_layer(model, i, block, x_src, graph)
            out.flush()
            del out
            paths.append(path)
            x = np.load(path, mmap_mode="r")  # the next layer reads this one's rows from the file
    return paths
