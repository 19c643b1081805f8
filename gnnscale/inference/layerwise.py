"""Layer-wise full-neighborhood inference: every node, every in-neighbor, one layer at a time.

Sampled inference of all nodes recomputes a node's hidden features once for every seed whose sampled
tree reaches it (fanouts multiply the work per hop). Layer by layer, every node's output of layer ``l``
is computed exactly once, from all of its in-neighbors' outputs of layer ``l - 1``, and written to a
memory-mapped ``.npy`` file before layer ``l + 1`` reads it; destinations go in chunks of
``chunk_size`` nodes, so memory holds one chunk's block and rows, not the graph's hidden features.

Each chunk is one :class:`~gnnscale.sampling.block.Block` built from the CSC graph (destinations first,
then their in-neighbors in order of first appearance, by :func:`full_block`), and the model's own layer
modules compute it: the result is the model's forward pass on the full graph (eval mode, no dropout).

With ``nodes`` only the rows those nodes need are computed: layer ``L`` for ``nodes``, layer ``L - 1``
for them and their in-neighbors, and so on (:func:`needed_nodes`); the other rows of a layer file are
left unwritten.

On a device (``device="cuda"``) the model's weights move there for the run; each chunk's block and input
rows are copied there and its output rows back into the layer file, which stays in host memory (or on
disk): device memory holds the weights and one chunk, never a layer of every node. The built-in layers
compute CUDA tensors through their torch-native path (``kernels="auto"``); on the CPU nothing is copied
and the numbers are those of a run without ``device``, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnscale.devices import resolve_device
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.features import gather_rows
from gnnscale.nn.layers import GATConv
from gnnscale.sampling.block import Block

DEFAULT_CHUNK_SIZE = 8192  # destination nodes per block


@numba.njit(cache=True, nogil=True)
def _full_block(indptr, indices, dst, row_offset, local, out_indptr, out_indices, src_ids):
    """CSC block of every in-edge of ``dst``: local source ids (``dst`` first, then new sources as they
    appear) into ``out_indices``, offsets into ``out_indptr``, global source ids into ``src_ids``.
    Node ``v``'s in-edges are CSC row ``v - row_offset`` (0 for a whole graph; a part's first id for a
    part's own rows). ``local`` (int64 [num_nodes], all -1) is the global -> local map; it is reset
    before returning. Returns the number of sources."""
    n = dst.shape[0]
    for i in range(n):
        local[dst[i]] = i
        src_ids[i] = dst[i]
    count = n
    e = 0
    out_indptr[0] = 0
    for i in range(n):
        v = dst[i] - row_offset
        for k in range(indptr[v], indptr[v + 1]):
            u = indices[k]
            if local[u] < 0:
                local[u] = count
                src_ids[count] = u
                count += 1
            out_indices[e] = local[u]
            e += 1
        out_indptr[i + 1] = e
    for i in range(count):
        local[src_ids[i]] = -1
    return count


@numba.njit(cache=True, nogil=True)
def _mark_in_neighbors(indptr, indices, nodes, mark):
    for i in range(nodes.shape[0]):
        v = nodes[i]
        mark[v] = True
        for k in range(indptr[v], indptr[v + 1]):
            mark[indices[k]] = True


def full_block(graph: CSCGraph, dst: np.ndarray, local: np.ndarray | None = None) -> Block:
    """The block of every in-edge of the destinations ``dst`` (int64, distinct node ids): no sampling.

    Args:
        graph: the CSC graph.
        dst: int64 [n] distinct destination node ids.
        local: int64 [num_nodes] scratch map, all -1 (returned so); allocated when None. Pass one to
            build many blocks without allocating ``num_nodes`` entries each time.

    Shapes: ``src_ids[:n] == dst``; ``num_edges == sum of dst's in-degrees``.
    """
    if local is None:
        local = np.full(graph.num_nodes, -1, dtype=np.int64)
    return rows_block(graph.indptr, graph.indices, dst, 0, local)


def rows_block(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray, row_offset: int, local: np.ndarray) -> Block:
    """:func:`full_block` over CSC rows that start at node ``row_offset`` (a part's own rows: node ``v``'s
    in-edges are row ``v - row_offset``; sources are global ids), with the scratch map ``local``."""
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    rows = dst - row_offset
    num_edges = int((indptr[rows + 1] - indptr[rows]).sum())
    out_indptr = np.empty(dst.shape[0] + 1, dtype=np.int64)
    out_indices = np.empty(num_edges, dtype=np.int64)
    src_ids = np.empty(dst.shape[0] + num_edges, dtype=np.int64)  # at most every edge brings a new source
    count = _full_block(indptr, indices, dst, row_offset, local, out_indptr, out_indices, src_ids)
    return Block(indptr=torch.from_numpy(out_indptr), indices=torch.from_numpy(out_indices),
                 src_ids=torch.from_numpy(src_ids[:count]), num_dst=int(dst.shape[0]))


def needed_nodes(graph: CSCGraph, nodes: np.ndarray | None, num_layers: int) -> list[np.ndarray | None]:
    """Per layer (input layer first), the sorted node ids whose output that layer must compute so that
    the last layer can compute ``nodes``; None everywhere when ``nodes`` is None (every node)."""
    if nodes is None:
        return [None] * num_layers
    sets = [np.unique(np.asarray(nodes, dtype=np.int64))]
    for _ in range(num_layers - 1):
        mark = np.zeros(graph.num_nodes, dtype=np.bool_)
        _mark_in_neighbors(graph.indptr, graph.indices, sets[0], mark)
        sets.insert(0, np.flatnonzero(mark).astype(np.int64))
    return sets


def layer_widths(model: nn.Module) -> list[int]:
    """Output width of every layer of a gnnscale model (GraphSAGE, GCN, GAT)."""
    widths = []
    for layer in model.layers:
        if isinstance(layer, GATConv):
            widths.append(layer.heads * layer.out_dim if layer.concat else layer.out_dim)
        else:
            widths.append(layer.out_dim)
    return widths


def weights_device(model: nn.Module) -> torch.device:
    """Where ``model``'s weights are (its first parameter's device; the CPU for a model without any)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


@contextmanager
def evaluating_on(model: nn.Module, device: str | torch.device | None) -> Iterator[torch.device]:
    """``model`` in eval mode on ``device`` (:func:`~gnnscale.devices.resolve_device`'s names; None: where
    its weights are) while the block runs; yields that device. Its mode and device are restored after,
    as a caller (a trainer evaluating between epochs) left them."""
    home = weights_device(model)
    target = home if device is None else resolve_device(device)
    was_training = model.training
    model.eval()
    model.to(target)  # in place: the same Parameter objects, so an optimizer's references stay valid
    try:
        yield target
    finally:
        model.to(home)
        model.train(was_training)


def apply_layer(model: nn.Module, i: int, block: Block, x_src: torch.Tensor) -> np.ndarray:
    """Layer ``i`` of ``model`` on ``block`` in eval mode, with the model's activation after every layer
    but the last (what its forward does between layers; dropout is off in eval mode). ``block`` and
    ``x_src`` (host tensors) are copied to the device of the model's weights; the output rows come back
    as a host array (on the CPU: no copy either way)."""
    device = weights_device(model)
    if device.type != "cpu":
        block, x_src = block.to(device), x_src.to(device)
    h = model.layers[i](block, x_src)
    if i < len(model.layers) - 1:
        h = F.relu(h) if model.activation == "relu" else F.elu(h)
    return h.cpu().numpy()  # on a device: waits for the chunk's kernels (the one sync point per chunk)


@torch.no_grad()
def layerwise_inference(model: nn.Module, graph: CSCGraph, features: np.ndarray, workdir: str | Path, *,
                        nodes: np.ndarray | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                        device: str | torch.device | None = None) -> list[Path]:
    """Run ``model`` (eval mode) over the full graph layer by layer; return the ``.npy`` file of every
    layer's output (input layer first), each float32 [num_nodes, width] and indexed by node id.

    Args:
        model: a gnnscale model (:class:`~gnnscale.nn.models.GraphSAGE`, ``GCN`` or ``GAT``).
        graph: the CSC graph the model runs on.
        features: float32 [num_nodes, in_dim] (may be memory-mapped).
        workdir: an existing folder for the layer files ``layer1.npy .. layerL.npy``.
        nodes: int64 node ids whose last-layer output is wanted; None (the default): every node.
        chunk_size: destination nodes per block (> 0). Default :data:`DEFAULT_CHUNK_SIZE`.
        device: where the layers compute: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or a
            ``torch.device``; None (the default): where the model's weights are. The layer files stay
            on the host either way (see the module docstring).

    Hidden layers' files hold the activation's output (what the next layer reads); the last layer's
    file holds the logits. Rows no wanted node depends on are left unwritten (see the module docstring).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    if features.ndim != 2 or features.shape[0] != graph.num_nodes:
        raise ValueError(f"features: expected shape [{graph.num_nodes}, in_dim], got {tuple(features.shape)}")
    if nodes is not None and np.asarray(nodes).size and (int(np.min(nodes)) < 0 or
                                                          int(np.max(nodes)) >= graph.num_nodes):
        raise ValueError(f"nodes: expected node ids in [0, {graph.num_nodes}), got range "
                         f"[{int(np.min(nodes))}, {int(np.max(nodes))}]")
    workdir = Path(workdir)
    local = np.full(graph.num_nodes, -1, dtype=np.int64)
    paths, x = [], features
    with evaluating_on(model, device):
        for i, (width, todo) in enumerate(zip(layer_widths(model), needed_nodes(graph, nodes, len(model.layers)))):
            path = workdir / f"layer{i + 1}.npy"
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(graph.num_nodes, width))
            count = graph.num_nodes if todo is None else todo.shape[0]
            for lo in range(0, count, chunk_size):
                hi = min(lo + chunk_size, count)
                dst = np.arange(lo, hi, dtype=np.int64) if todo is None else todo[lo:hi]
                block = full_block(graph, dst, local)
                h = apply_layer(model, i, block, torch.from_numpy(gather_rows(x, block.src_ids.numpy())))
                if todo is None:
                    out[lo:hi] = h
                else:
                    out[dst] = h
            out.flush()
            del out
            paths.append(path)
            x = np.load(path, mmap_mode="r")  # the next layer reads this one's rows from the file
    return paths
