"""``gnnscale predict --task link``: a trained link model's node embeddings, the scores of candidate pairs
and every node's best-scored candidates, written to an output folder by the dataset's node ids.

Files (memory-mapped ``.npy``, written under a temporary folder and renamed into place, ``meta.json`` last)::

    embeddings.npy    float32 [num_nodes, width]  the encoder's output of every node (layer-wise inference)
    pair_scores.npy   float32 [n]                 the decoder's logit of each ``--pairs`` row (if given)
    topk_nodes.npy    int64 [num_nodes, K]        each node's K best-scored other nodes, best first (--topk)
    topk_scores.npy   float32 [num_nodes, K]      their logits
    meta.json         what was run on what, the files and timings

Memory is bounded by chunks: the embeddings by layer-wise inference's; pair scores ``PAIR_CHUNK`` pairs
at a time; top-K ``SOURCE_CHUNK`` sources against ``CANDIDATE_CHUNK`` candidates at a time, keeping a
running top-K per source (the dot decoder as one product, the MLP decoder over the chunk's pairs).
A node is never its own candidate; existing edges are candidates like any other pair.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnnscale.files import atomic_write
from gnnscale.graph.dataset import NodeDataset
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layerwise_inference
from gnnscale.inference.predict import check_out_dir
from gnnscale.nn.link import DotDecoder, LinkModel
from gnnscale.nn.model_file import ModelFile

LINK_OUTPUT_FILES = ("embeddings.npy", "pair_scores.npy", "topk_nodes.npy", "topk_scores.npy", "meta.json")
PAIR_CHUNK = 1 << 16
SOURCE_CHUNK = 256
CANDIDATE_CHUNK = 4096


def read_pairs(path: str | Path, num_nodes: int) -> np.ndarray:
    """int64 [n, 2] candidate pairs (source, destination) from a ``.npy`` file of node ids."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"pairs: no file at {path}")
    try:
        pairs = np.load(path, allow_pickle=False)
    except ValueError as err:
        raise ValueError(f"pairs: {path} is not a .npy array ({err})") from None
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise ValueError(f"pairs: {path} must hold integer node ids of shape [n, 2], got {pairs.dtype} of shape "
                         f"{pairs.shape}")
    if pairs.size and (int(pairs.min()) < 0 or int(pairs.max()) >= num_nodes):
        raise ValueError(f"pairs: {path} holds ids in [{int(pairs.min())}, {int(pairs.max())}], but the dataset's ids "
                         f"are [0, {num_nodes})")
    return pairs.astype(np.int64)


def pair_scores(model: LinkModel, emb: np.ndarray, pairs: np.ndarray, path: Path) -> Path:
    """The decoder's logit of every pair, ``PAIR_CHUNK`` pairs at a time, into ``path``."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(pairs.shape[0],))
    with torch.no_grad():
        for lo in range(0, pairs.shape[0], PAIR_CHUNK):
            chunk = pairs[lo:lo + PAIR_CHUNK]
            out[lo:lo + chunk.shape[0]] = model.score(torch.from_numpy(np.array(emb[chunk[:, 0]])),
                                                      torch.from_numpy(np.array(emb[chunk[:, 1]]))).numpy()
    out.flush()
    return path


def chunk_scores(model: LinkModel, sources: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """float [s, c]: the logit of every (source, candidate) pair of two embedding chunks."""
    if isinstance(model.decoder, DotDecoder):
        return sources @ candidates.T
    s, c = sources.shape[0], candidates.shape[0]
    return model.score(sources[:, None, :].expand(s, c, -1), candidates[None, :, :].expand(s, c, -1))


def top_k(model: LinkModel, emb: np.ndarray, k: int, nodes_path: Path, scores_path: Path) -> None:
    """Every node's ``k`` best-scored other nodes (module docstring), best first; ties: the lower id."""
    n = emb.shape[0]
    best_nodes = np.lib.format.open_memmap(nodes_path, mode="w+", dtype=np.int64, shape=(n, k))
    best_scores = np.lib.format.open_memmap(scores_path, mode="w+", dtype=np.float32, shape=(n, k))
    with torch.no_grad():
        for lo in range(0, n, SOURCE_CHUNK):
            src = torch.from_numpy(np.array(emb[lo:lo + SOURCE_CHUNK]))
            rows = torch.arange(lo, lo + src.shape[0])
            top_s = torch.full((src.shape[0], k), -torch.inf)
            top_i = torch.full((src.shape[0], k), n, dtype=torch.int64)  # n: no candidate yet
            for c_lo in range(0, n, CANDIDATE_CHUNK):
                cand = torch.from_numpy(np.array(emb[c_lo:c_lo + CANDIDATE_CHUNK]))
                ids = torch.arange(c_lo, c_lo + cand.shape[0])
                s = chunk_scores(model, src, cand)
                s[rows[:, None] == ids[None, :]] = -torch.inf  # never a node's own candidate
                merged_s = torch.cat([top_s, s], 1)
                merged_i = torch.cat([top_i, ids.expand(src.shape[0], -1)], 1)
                # Highest score first, the lower id on a tie (a stable order whatever the chunking).
                order = np.lexsort((merged_i.numpy(), -merged_s.numpy()), axis=1)[:, :k]
                top_s = torch.gather(merged_s, 1, torch.from_numpy(order))
                top_i = torch.gather(merged_i, 1, torch.from_numpy(order))
            best_nodes[lo:lo + src.shape[0]] = top_i.numpy()
            best_scores[lo:lo + src.shape[0]] = top_s.numpy()
    best_nodes.flush()
    best_scores.flush()


def predict_links(model_file: ModelFile, dataset: NodeDataset, out: str | Path, *, pairs: np.ndarray | None = None,
                  topk: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE, overwrite: bool = False) -> dict:
    """Write a link model's outputs over ``dataset`` to ``out`` (module docstring); returns ``meta.json``'s
    contents. ``pairs``: int64 [n, 2] (:func:`read_pairs`); ``topk``: K >= 1, K < num_nodes."""
    out = check_out_dir(out, overwrite=overwrite)
    model = model_file.model
    if not isinstance(model, LinkModel):
        raise ValueError(f"model: {model_file.path} is a node classifier; --task link needs a model trained with "
                         "gnnscale train --task link --save-model")
    if dataset.feature_dim != model_file.config.in_dim:
        raise ValueError(f"model: {model_file.path} was trained on {model_file.config.in_dim} features, but dataset "
                         f"{dataset.name} has {dataset.feature_dim}; use the dataset the model was trained on")
    n = dataset.graph.num_nodes
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk < n):
        raise ValueError(f"topk: expected an int in [1, {n - 1}] (other nodes per node), got {topk!r}")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".predict-", dir=out) as tmp:
        tmp = Path(tmp)
        layers = layerwise_inference(model.encoder, dataset.graph, dataset.features, tmp, chunk_size=chunk_size)
        os.replace(layers[-1], tmp / "embeddings.npy")
        emb = np.load(tmp / "embeddings.npy", mmap_mode="r")
        files = ["embeddings.npy"]
        if pairs is not None:
            pair_scores(model, emb, pairs, tmp / "pair_scores.npy")
            files.append("pair_scores.npy")
        if topk is not None:
            top_k(model, emb, topk, tmp / "topk_nodes.npy", tmp / "topk_scores.npy")
            files += ["topk_nodes.npy", "topk_scores.npy"]
        meta = {"task": "link", "model": {"file": str(model_file.path), "decoder": model_file.decoder},
                "dataset": {"name": dataset.name, "num_nodes": n, "num_edges": dataset.graph.num_edges},
                "rows_are": "node ids 0 .. num_nodes - 1 (pair_scores.npy: the rows of the pairs file)",
                "files": files + ["meta.json"], "pairs": None if pairs is None else int(pairs.shape[0]), "topk": topk,
                "chunk_size": chunk_size, "seconds": time.perf_counter() - started,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        for name in LINK_OUTPUT_FILES:  # outputs of an earlier run that this one does not replace would mislead
            if name not in files and name != "meta.json":
                (out / name).unlink(missing_ok=True)
        for name in files:
            with open(tmp / name, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp / name, out / name)
        atomic_write(out / "meta.json", lambda f: f.write(json.dumps(meta, indent=2).encode()))
    return meta
