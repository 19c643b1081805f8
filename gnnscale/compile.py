"""Compile every numba kernel into numba's on-disk cache: ``python -m gnnscale.compile``.

The two set-up commands (``make run``, ``make test``) run this as part of the install, so that no
training run pays for compilation (several seconds per kernel) and a kernel that fails to compile
fails the install. It compiles by running the real code paths on tiny data, with every argument type
they meet in use: int32 and int64 graph indices; graphs in memory (writable arrays) and memory-mapped
from a dataset or partition directory (read-only arrays, a different numba type); sampling with and
without replacement, fused, two-step, matrix and LADIES, of plain and typed graphs; the three models and the three
relational ones in training (dropout, attention dropout)
and inference, aggregating first and transforming first; partitioning (METIS and random); and
distributed training in every layout (one worker, gloo on 127.0.0.1); the PyG-compatible loader (on
plain and typed graphs) and the trainer's PyG batches; ``gnnscale generate``. A path added to gnnscale
that calls a new kernel belongs in :data:`WARMUPS`.

Prints one line per step with its seconds and the kernels numba compiled; exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from numba.core import event

from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.generate import generate_dataset
from gnnscale.graph.storage import load_dataset_dir, save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.graph.synthetic_blocks import _fill_alias
from gnnscale.nn import MODELS, GATConv, GCNConv, ModelConfig, SAGEConv
from gnnscale.sampling import derive_key, sample_blocks, set_sampler_threads
from gnnscale.sampling.registry import sampler_spec
from gnnscale.train.api import fit
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import seeded_model

TINY = SyntheticConfig(num_nodes=600, avg_degree=6.0, num_classes=4, feature_dim=8, seed=0)


def _train(dataset: NodeDataset, models=MODELS, **train_overrides) -> None:
    """One epoch of every model, with dropout everywhere, then inference (evaluation)."""
    for name in models:
        model_cfg = ModelConfig(name=name, in_dim=dataset.feature_dim, hidden_dim=8, num_classes=dataset.num_classes,
                                num_layers=2, heads=2, dropout=0.5, input_dropout=0.1, attn_dropout=0.1)
        cfg = TrainConfig(**{**dict(fanouts=(4, 3), batch_size=64, epochs=1, threads=2), **train_overrides})
        fit(seeded_model(model_cfg, cfg.seed), dataset, inputs="blocks", config=cfg, progress=False)


def _with_int64_indices(dataset: NodeDataset) -> NodeDataset:
    """The same dataset with int64 graph indices (what graphs of more than 2**31 nodes use)."""
    graph = dataset.graph
    wide = CSCGraph(indptr=graph.indptr, indices=graph.indices.astype(np.int64), num_nodes=graph.num_nodes)
    return dataclasses.replace(dataset, graph=wide)


def warm_training_in_memory(work: Path) -> None:
    dataset = make_synthetic(TINY)
    _train(dataset)  # what `make run` does (fused sampler, background loading)
    _train(dataset, sampler="two_step", replace=True, prefetch=0)
    _train(_with_int64_indices(dataset))
    _train(dataset, models=("sage",), sampler="matrix", bulk=2)
    _train(dataset, models=("sage", "gcn"), sampler="ladies", bulk=2, layer_size=32)  # weighted blocks: no GAT


def warm_training_memory_mapped(work: Path) -> None:
    directory = save_dataset(make_synthetic(TINY), work / "dataset")
    _train(load_dataset_dir(directory, mmap=True))
    _train(load_dataset_dir(directory, mmap=True), replace=True)


def warm_layer_orders(work: Path) -> None:
    """Both orders of GraphSAGE and GCN, and GAT with attention dropout, float32 and float64, forward and
    backward (float64: what the tests compare against PyG with)."""
    graph = make_synthetic(TINY).graph
    for indices in (graph.indices, graph.indices.astype(np.int64)):
        blocks = sample_blocks(CSCGraph(indptr=graph.indptr, indices=indices, num_nodes=graph.num_nodes),
                               np.arange(0, 600, 9), [3, 3], key=derive_key(0))
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(blocks[0].num_src, 8, dtype=dtype, requires_grad=True)
            for layer in (SAGEConv, GCNConv):
                for order in ("aggregate_first", "transform_first"):
                    layer(8, 8, order=order).to(dtype)(blocks[0], x).sum().backward()
            GATConv(8, 4, heads=2, attn_dropout=0.5).to(dtype)(blocks[0], x, dropout_key=1).sum().backward()


def warm_partition_and_distributed(work: Path) -> None:
    """``gnnscale partition`` (both methods) and one-worker distributed training in every layout."""
    from gnnscale.partition import write_partition_dir
    from gnnscale.train.layouts import LAYOUTS, LayoutOptions

    dataset = make_synthetic(TINY)
    write_partition_dir(dataset, 2, "random", work / "random")
    write_partition_dir(dataset, 1, "metis", work / "metis")
    # From a dataset directory the relabelling reads read-only memory-mapped arrays: compiled apart.
    write_partition_dir(load_dataset_dir(save_dataset(dataset, work / "dataset-to-partition")), 2, "random",
                        work / "mapped")
    with socket.socket() as s:  # a free port for the one-worker process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    options = dict(name="sage", hidden_dim=8, dropout=0.5)
    for name, spec in LAYOUTS.items():
        sampler = spec.samplers[0]  # the fused kernel, or (the matrix layouts) --sampler matrix, no replacement
        for replace in (False,) if sampler_spec(sampler).bulk else (False, True):
            cfg = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=1, threads=2, replace=replace, sampler=sampler)
            train_partitioned(work / "metis", LayoutOptions(layout=name), options, cfg)
    # GAT's split shuffles source rows: owner sampling builds those splits with kernels of their own.
    cfg = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=1, threads=2)
    train_partitioned(work / "metis", LayoutOptions(layout="split"), dict(name="gat", hidden_dim=8, heads=2), cfg)


def train_partitioned(partition_dir: Path, options, model_options: dict, cfg: TrainConfig) -> None:
    """One worker of ``gnnscale train --partitions``: the built-in model, through fit."""
    from gnnscale.train.sources.partitioned import builtin_model_for

    model = builtin_model_for(partition_dir, options, model_options, cfg)
    fit(model, partition_dir, inputs="blocks", config=cfg, layout=options, progress=False, timeout_s=60)


def warm_dgs_sampling(work: Path) -> None:
    """DGS node sampling (``--dgs``: it starts once the first masks exist, mid-run), on both index widths,
    with and without replacement."""
    from gnnscale.sampling.dgs import DGSPolicy, sample_blocks_dgs

    dataset = make_synthetic(TINY)
    n = dataset.graph.num_nodes
    policy = DGSPolicy(local_lo=0, local_hi=n // 2, node_cluster=(np.arange(n) % 4).astype(np.int32),
                       cluster_weight=np.linspace(0.5, 2.0, 4), epsilon=0.1)
    for graph in (dataset.graph, _with_int64_indices(dataset).graph):
        # Training reads the topology from memory-mapped, read-only files: numba compiles those apart.
        frozen = CSCGraph(indptr=_read_only(graph.indptr), indices=_read_only(graph.indices), num_nodes=n)
        for g in (graph, frozen):
            for replace in (False, True):
                sample_blocks_dgs(g, np.arange(0, n, 9), (4, 3), key=derive_key(0), policy=policy, replace=replace)


def warm_dgs_feature_fetch(work: Path) -> None:
    """DGS's feature-sampled fetch: the asked columns of stored rows (float32 and 16-bit, writable and
    memory-mapped), and the arriving rows filled with their cluster means."""
    from gnnscale.features.dgs import _fill_remote_rows
    from gnnscale.graph.features import take_columns

    ids, cols = np.arange(0, 50, 3), np.array([0, 2, 3])
    for dtype in (np.float32, np.float16, np.uint16):
        values = np.zeros((50, 4), dtype=dtype)
        take_columns(values, ids, cols)
        take_columns(_read_only(values), ids, cols)
    rows = np.zeros((ids.shape[0], 3), dtype=np.float32)
    _fill_remote_rows(np.zeros((50, 4), dtype=np.float32), ids, ids, np.zeros(50, dtype=np.int32),
                      np.zeros((2, 4), dtype=np.float32), rows, cols, np.array([1]))


def warm_dgs_explanation(work: Path) -> None:
    """DGS's explanation: the masked input rows and the masks' gradients (float32, from torch tensors)."""
    from gnnscale.distributed.dgs.explainer import _scale_rows, _scale_rows_grads

    rows, masks = np.ones((6, 4), dtype=np.float32), (np.ones(4, dtype=np.float32), np.ones(6, dtype=np.float32))
    _scale_rows(rows, np.zeros(4, dtype=np.float32), *masks)
    _scale_rows_grads(rows, rows, *masks)


def warm_loader(work: Path) -> None:
    """``gnnscale.loader.NeighborLoader`` (node-wise sampling, the attribute gathers) from a dataset on
    both index widths, in memory and memory-mapped, and from a PyG Data grouped by target and in another
    order (edge ids looked up), with and without replacement; attributes of every gather word size; and
    the trainer's PyG batches (``fit(..., inputs="pyg")``), cut from blocks."""
    from gnnscale.loader import NeighborLoader, to_pyg_data
    from gnnscale.sampling.nodewise import nodewise_from_blocks

    dataset = make_synthetic(TINY)
    mapped = load_dataset_dir(save_dataset(dataset, work / "dataset"), mmap=True)
    data = to_pyg_data(dataset)
    shuffled = data.clone()
    order = torch.randperm(data.num_edges, generator=torch.Generator().manual_seed(0))
    shuffled.edge_index = data.edge_index[:, order]
    shuffled.edge_weight = torch.rand(data.num_edges)  # 4-byte rows
    shuffled.degree = torch.zeros(data.num_nodes, dtype=torch.int16)  # 2-byte rows
    for source in (dataset, _with_int64_indices(dataset), mapped, data, shuffled):
        for replace in (False, True):
            for _ in NeighborLoader(source, [4, -1], batch_size=256, replace=replace, seed=0):
                pass
    nodewise_from_blocks(sample_blocks(dataset.graph, np.arange(0, 600, 9), [3, 3], key=derive_key(0)))


def _read_only(array: np.ndarray) -> np.ndarray:
    copy = array.copy()
    copy.setflags(write=False)
    return copy


def warm_generate(work: Path) -> None:
    """gnnscale generate (the alias tables), and the alias kernel with the int64 ids of graphs of more
    than 2**31 nodes."""
    generate_dataset(SyntheticConfig(num_nodes=600, avg_degree=6.0, feature_dim=4, streaming=True), work / "gen",
                     chunk_edges=1000)
    weights, starts = np.ones(4), np.array([0, 2, 4], dtype=np.int64)
    _fill_alias(weights, starts, np.empty(4), np.empty(4, dtype=np.int64), np.empty(2), np.empty(2, dtype=np.int64),
                np.empty(2, dtype=np.int64))


def warm_typed_training(work: Path) -> None:
    """A typed graph: R-GCN, R-SAGE and R-GAT, fused and two-step typed sampling with and without replacement,
    in memory and memory-mapped (read-only arrays, another numba type)."""
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.graph.typed_storage import load_typed_dataset_dir, save_typed_dataset
    from gnnscale.nn.models import TYPED_MODELS
    from gnnscale.nn.typed_models import TypedModelConfig

    in_memory = load_dataset("synthetic", None, preset="mag", scale=0.001)
    mapped = load_typed_dataset_dir(save_typed_dataset(in_memory, work / "typed"), mmap=True)
    dims = {t: d for t, d in in_memory.feature_dims.items() if d is not None}
    for dataset in (in_memory, mapped):
        for name, sampler, replace in zip(TYPED_MODELS, ("fused", "two_step", "fused"), (False, False, True)):
            model_cfg = TypedModelConfig.for_graph(dataset.graph, feature_dims=dims, name=name, hidden_dim=8, heads=2,
                                                   num_classes=dataset.num_classes, num_layers=2, dropout=0.5,
                                                   input_dropout=0.1, attn_dropout=0.1)
            cfg = TrainConfig(fanouts=(4, 3), batch_size=64, epochs=1, threads=2, sampler=sampler, replace=replace)
            fit(seeded_model(model_cfg, cfg.seed), dataset, inputs="blocks", config=cfg, progress=False)


def warm_typed_loader(work: Path) -> None:
    """``gnnscale.loader.NeighborLoader`` on typed graphs (the typed node-wise kernel, the attribute gathers): a
    TypedDataset in memory and memory-mapped, and its ``HeteroData``, with and without replacement."""
    from gnnscale.graph.datasets import load_dataset
    from gnnscale.graph.typed_storage import load_typed_dataset_dir, save_typed_dataset
    from gnnscale.loader import NeighborLoader, to_pyg_hetero_data

    in_memory = load_dataset("synthetic", None, preset="mag", scale=0.001)
    mapped = load_typed_dataset_dir(save_typed_dataset(in_memory, work / "typed"), mmap=True)
    for source in (in_memory, mapped, to_pyg_hetero_data(in_memory)):
        for replace in (False, True):
            for _ in NeighborLoader(source, [4, -1], input_nodes="paper", batch_size=256, replace=replace, seed=0):
                pass


WARMUPS: list[tuple[str, Callable[[Path], None]]] = [
    ("training, graph in memory", warm_training_in_memory),
    ("training, memory-mapped dataset", warm_training_memory_mapped),
    ("layers in both orders", warm_layer_orders),
    ("partitioning and distributed training", warm_partition_and_distributed),
    ("DGS node sampling", warm_dgs_sampling),
    ("DGS feature fetch", warm_dgs_feature_fetch),
    ("DGS explanation", warm_dgs_explanation),
    ("NeighborLoader (PyG batches)", warm_loader),
    ("gnnscale generate", warm_generate),
    ("typed graphs (R-GCN, R-SAGE, R-GAT)", warm_typed_training),
    ("NeighborLoader on typed graphs (PyG HeteroData batches)", warm_typed_loader),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnnscale.compile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    set_sampler_threads(2)
    compiled: list[str] = []
    event.register("numba:compile", _CompileNames(compiled))
    start_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gnnscale-compile-") as tmp:
        for i, (what, warm) in enumerate(WARMUPS):
            before, start = len(compiled), time.perf_counter()
            work = Path(tmp) / str(i)
            work.mkdir()
            warm(work)
            new = sorted(set(compiled[before:]))
            print(f"{what}: {time.perf_counter() - start:.1f}s, compiled {len(new)} kernels"
                  + (f" ({', '.join(new)})" if new else ""), flush=True)
    print(f"numba cache ready in {time.perf_counter() - start_all:.0f}s", flush=True)
    return 0


class _CompileNames(event.Listener):
    """Appends the name of every gnnscale function numba starts compiling (a cache miss) to ``names``
    (numba's own helpers, compiled inside them, are left out)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def on_start(self, ev) -> None:
        func = ev.data["dispatcher"].py_func
        if func.__module__.startswith("gnnscale."):
            self.names.append(f"{func.__module__}.{func.__qualname__}")

    def on_end(self, ev) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
