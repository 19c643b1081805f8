"""``gnnscale generate``: a synthetic dataset directory written chunk by chunk, at any scale.

Writes the directory :func:`gnnscale.graph.storage.load_dataset_dir` reads, for a config with
``streaming=True`` (the ``papers100M`` preset), byte for byte what ``save_dataset(make_synthetic(cfg))``
writes, whatever ``chunk_edges``:

1. the block model's per-node arrays (:func:`gnnscale.graph.synthetic_blocks.build_model`);
2. edges drawn block of source nodes by block, both directions of each, gathered until a chunk holds
   ``chunk_edges`` and appended to temporary bucket files by destination range
   (:class:`gnnscale.graph.external_csc.EdgeBuckets`; ranges expected to hold ``chunk_edges`` each);
3. each bucket read back, sorted, deduplicated and appended to ``indptr.npy`` / ``indices.npy``, its
   file deleted at once;
4. features and labels row block by row block, then the splits and ``meta.json``.

Everything goes into a hidden staging sibling of the target (the bucket files too: same disk) that
is moved into place at the end; on error the staging folder is removed, and a killed run leaves at
most that hidden folder, never a directory under the target name.

Peak memory: :func:`memory_bound` (about 40 bytes per node plus ~50 bytes per chunk edge), whatever
the edge and feature counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnscale.graph.csc import index_dtype
from gnnscale.graph.external_csc import EdgeBuckets, NpyWriter, bucket_bounds
from gnnscale.graph.storage import (DATASET_ARRAYS, META_FILE, _staging_directory, check_target, dataset_meta,
                                    finish_directory, with_array_specs)
from gnnscale.graph.synthetic import SyntheticConfig, informative_dimensions
from gnnscale.graph.synthetic_blocks import (ROW_BLOCK, SOURCE_BLOCK, BlockModel, build_model, centroids,
                                             draw_block_edges, feature_rows, observed_labels, row_blocks, split_ids)

# Directed edges per chunk (and expected per bucket): 2**24, about 0.8 GB of working memory.
CHUNK_EDGES = 1 << 24
# Measured peak bytes (tracemalloc) per node and per chunk edge, with margin: tests/graph/test_generate.py
# checks that a run stays below memory_bound().
BYTES_PER_NODE = 48
BYTES_PER_CHUNK_EDGE = 64

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateSummary:
    """What :func:`generate_dataset` wrote.

    directory: the dataset directory.
    num_nodes, num_edges: the graph's counts (edges: directed, after removing repeats).
    edges_drawn: directed edges drawn (both directions of every draw, self loops left out), repeats included.
    file_bytes: {file name: bytes on disk}.
    """

    directory: Path
    num_nodes: int
    num_edges: int
    edges_drawn: int
    file_bytes: dict[str, int]


def check_generate_args(cfg: SyntheticConfig, chunk_edges: int) -> None:
    """What :func:`generate_dataset` checks before any work (the CLI calls it before printing a plan)."""
    if not isinstance(cfg, SyntheticConfig):
        raise TypeError(f"cfg: expected a SyntheticConfig, got {type(cfg).__name__}")
    if not cfg.streaming:
        raise ValueError("streaming: this config draws its edges in top-up rounds over the whole graph, which "
                         "cannot be written chunk by chunk; use a streaming preset (papers100M) or set "
                         "streaming=True (-o streaming=true: the block model, a different graph)")
    if isinstance(chunk_edges, bool) or not isinstance(chunk_edges, (int, np.integer)) or chunk_edges < 1:
        raise ValueError(f"chunk_edges: expected an int >= 1, got {chunk_edges!r}")


def memory_bound(cfg: SyntheticConfig, chunk_edges: int) -> int:
    """Bytes of working memory :func:`generate_dataset` stays below: per-node arrays, one chunk of
    edges and the largest bucket, one block of draws and rows.

    A bucket expects at most ``chunk_edges`` edges plus one node's (a hub alone can pass the chunk):
    the hub is estimated from the degree law as 10 times the 1 - 1/num_nodes quantile of the expected
    degree (a largest propensity above that has probability about 10**-(exponent - 1)), at most
    num_nodes.
    """
    block_draws = int(SOURCE_BLOCK * cfg.avg_degree) + 1
    rows = ROW_BLOCK * cfg.feature_dim * 4 * 3
    tail = cfg.degree_exponent - 1.0
    hub = min(cfg.num_nodes, 10 * cfg.num_nodes ** (1 / tail) * cfg.avg_degree * (tail - 1) / tail)
    # A chunk holds whole source blocks: it may pass chunk_edges by one block of draws (both directions).
    edges = min(chunk_edges, int(cfg.avg_degree * cfg.num_nodes)) + 2 * block_draws + int(hub)
    return BYTES_PER_NODE * cfg.num_nodes + BYTES_PER_CHUNK_EDGE * edges + rows + (1 << 20)


def generate_dataset(cfg: SyntheticConfig, out_dir: str | Path, *, chunk_edges: int = CHUNK_EDGES,
                     overwrite: bool = False, progress: Progress | None = None) -> GenerateSummary:
    """Write the dataset of ``cfg`` to ``out_dir`` chunk by chunk, atomically.

    Args:
        cfg: a config with ``streaming=True`` (e.g. ``preset_config("papers100M", scale)``).
        out_dir: the dataset directory to write; its parent is created if missing.
        chunk_edges: int >= 1, directed edges per chunk (default 2**24): memory, not output.
        overwrite: replace an existing ``out_dir`` (else it is a ValueError, raised before any work).
        progress: called as ``progress(phase, done, total)`` after each step of the phases
            ``"edges"`` (source blocks), ``"csc"`` (buckets), ``"features"`` (row blocks).
    """
    check_generate_args(cfg, chunk_edges)
    out_dir = Path(out_dir)
    check_target(out_dir, overwrite, "out_dir")
    report = progress or (lambda phase, done, total: None)
    n = cfg.num_nodes
    with _staging_directory(out_dir) as tmp:
        model = build_model(cfg)
        buckets = EdgeBuckets(tmp / "buckets", bucket_bounds(2.0 * model.rate, int(chunk_edges)), n)
        _draw_edges(cfg, model, buckets, int(chunk_edges), report)
        labels = model.labels
        del model  # the alias tables are done with: free them before the features
        specs = {"indptr": (np.dtype(np.int64), (n + 1,))}
        with NpyWriter(tmp / "indptr.npy", np.int64, (n + 1,)) as indptr, \
                NpyWriter(tmp / "indices.npy", index_dtype(n), (None,)) as indices:
            num_edges = buckets.write_csc(indptr, indices, progress=lambda done, total: report("csc", done, total))
        specs["indices"] = (index_dtype(n), (num_edges,))
        specs.update(_write_nodes(cfg, labels, tmp, report))
        if tuple(specs) != DATASET_ARRAYS:  # the storage format's array list, in its order
            raise RuntimeError(f"generate wrote arrays {tuple(specs)}, the storage format expects {DATASET_ARRAYS}")
        meta = with_array_specs(dataset_meta(name="synthetic", num_nodes=n, num_edges=num_edges,
                                             feature_dim=cfg.feature_dim, num_classes=cfg.num_classes), specs)
        file_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        finish_directory(tmp, out_dir, META_FILE, meta)
    file_bytes[META_FILE] = (out_dir / META_FILE).stat().st_size
    return GenerateSummary(directory=out_dir, num_nodes=n, num_edges=num_edges, edges_drawn=buckets.edges_added,
                           file_bytes=file_bytes)


def _draw_edges(cfg: SyntheticConfig, model: BlockModel, buckets: EdgeBuckets, chunk_edges: int,
                report: Progress) -> None:
    """Every source block's edges, both directions, into ``buckets``, ``chunk_edges`` at a time."""
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    held = 0
    for block in range(model.num_blocks):
        u, v = draw_block_edges(cfg, model, block)
        pending.append((u, v))
        held += 2 * u.shape[0]
        if held >= chunk_edges or block == model.num_blocks - 1:
            u = np.concatenate([p[0] for p in pending])
            v = np.concatenate([p[1] for p in pending])
            pending.clear()
            buckets.add(np.concatenate([u, v]), np.concatenate([v, u]))
            del u, v
            held = 0
        report("edges", block + 1, model.num_blocks)


def _write_nodes(cfg: SyntheticConfig, labels: np.ndarray, tmp: Path,
                 report: Progress) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """features.npy and labels.npy row block by row block, then the splits; returns their specs."""
    n, d = cfg.num_nodes, cfg.feature_dim
    class_centroids = centroids(cfg, informative_dimensions(cfg))
    blocks = -(-n // ROW_BLOCK)
    with NpyWriter(tmp / "features.npy", np.float32, (n, d)) as features, \
            NpyWriter(tmp / "labels.npy", np.int64, (n,)) as observed:
        for block, _, _ in row_blocks(n):
            features.write(feature_rows(cfg, labels, class_centroids, block))
            observed.write(observed_labels(cfg, labels, block))
            report("features", block + 1, blocks)
    specs = {"features": (np.dtype(np.float32), (n, d)), "labels": (np.dtype(np.int64), (n,))}
    for stem, ids in zip(("train_idx", "val_idx", "test_idx"), split_ids(cfg)):
        with NpyWriter(tmp / f"{stem}.npy", np.int64, ids.shape) as f:
            f.write(ids)
        specs[stem] = (np.dtype(np.int64), ids.shape)
    return specs

