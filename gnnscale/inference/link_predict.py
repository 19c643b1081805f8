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
running top-K per source (the dot decoder as one product, the MLP decoder over the chunk's pairs; a
float ``topk`` per chunk, exact ranking keys for what it picks).
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

from gnnscale.devices import resolve_device
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


def rows_on(emb: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows of the (memory-mapped) embeddings as a tensor on ``device``."""
    return torch.from_numpy(np.array(emb)).to(device)


def pair_scores(model: LinkModel, emb: np.ndarray, pairs: np.ndarray, path: Path,
                device: torch.device = torch.device("cpu")) -> Path:
    """The decoder's logit of every pair, ``PAIR_CHUNK`` pairs at a time (scored on ``device``), into ``path``."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(pairs.shape[0],))
    with torch.no_grad():
        for lo in range(0, pairs.shape[0], PAIR_CHUNK):
            chunk = pairs[lo:lo + PAIR_CHUNK]
            scores = model.score(rows_on(emb[chunk[:, 0]], device), rows_on(emb[chunk[:, 1]], device))
            out[lo:lo + chunk.shape[0]] = scores.cpu().numpy()
    out.flush()
    return path


def chunk_scores(model: LinkModel, sources: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """float [s, c]: the logit of every (source, candidate) pair of two embedding chunks."""
    if isinstance(model.decoder, DotDecoder):
        return sources @ candidates.T
    s, c = sources.shape[0], candidates.shape[0]
    return model.score(sources[:, None, :].expand(s, c, -1), candidates[None, :, :].expand(s, c, -1))


def ranking_keys(scores: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 keys that order (score, id) pairs as the ranking does: a higher score first, the lower id on a
    tie. The high 32 bits are the float32 score's bits mapped to a signed int of the same order (negative
    floats have their magnitude bits flipped); the low 32 bits are ``2**32 - 1 - id``. One ``topk`` over
    the keys is then the exact ranking, with no sort of the scores themselves."""
    bits = (scores.float() + 0.0).view(torch.int32).to(torch.int64)  # + 0.0: -0.0 ranks as 0.0
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return (ordered << 32) | (_LOW32 - ids)


def keys_to_ranking(keys: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, scores)`` of :func:`ranking_keys`' keys; ``NO_CANDIDATE`` gives id ``n`` and score -inf."""
    ordered = keys >> 32
    bits = torch.where(ordered < 0, ordered ^ 0x7FFFFFFF, ordered).to(torch.int32)
    none = keys == NO_CANDIDATE
    ids = torch.where(none, n, _LOW32 - (keys & _LOW32))
    return ids, torch.where(none, -torch.inf, bits.view(torch.float32))


_LOW32 = 0xFFFFFFFF
NO_CANDIDATE = torch.iinfo(torch.int64).min  # below every key: a node itself, or no candidate yet


def top_k(model: LinkModel, emb: np.ndarray, k: int, nodes_path: Path, scores_path: Path,
          device: torch.device = torch.device("cpu")) -> None:
    """Every node's ``k`` best-scored other nodes (module docstring), best first; ties: the lower id.

    A running top-``k`` of :func:`ranking_keys` per source chunk, merged with each candidate chunk's own
    top-``k`` (:func:`chunk_top`), so that the ranking is exact whatever the chunking. Scores and ranking on
    ``device``; each source chunk's result comes back to the host files."""
    n = emb.shape[0]
    best_nodes = np.lib.format.open_memmap(nodes_path, mode="w+", dtype=np.int64, shape=(n, k))
    best_scores = np.lib.format.open_memmap(scores_path, mode="w+", dtype=np.float32, shape=(n, k))
    with torch.no_grad():
        for lo in range(0, n, SOURCE_CHUNK):
            src = rows_on(emb[lo:lo + SOURCE_CHUNK], device)
            rows = torch.arange(lo, lo + src.shape[0], device=device)
            top = torch.full((src.shape[0], k), NO_CANDIDATE, dtype=torch.int64, device=device)
            for c_lo in range(0, n, CANDIDATE_CHUNK):
                cand = rows_on(emb[c_lo:c_lo + CANDIDATE_CHUNK], device)
                ids = torch.arange(c_lo, c_lo + cand.shape[0], device=device)
                scores = chunk_scores(model, src, cand)
                if c_lo < lo + src.shape[0] and lo < c_lo + cand.shape[0]:  # the chunks share nodes
                    scores[rows[:, None] == ids[None, :]] = -torch.inf  # never a node's own candidate
                top = torch.cat([top, chunk_top(scores, ids, k)], 1).topk(k, dim=1).values  # sorted: best first
            nodes, scores = keys_to_ranking(top, n)
            best_nodes[lo:lo + src.shape[0]] = nodes.cpu().numpy()
            best_scores[lo:lo + src.shape[0]] = scores.cpu().numpy()
    best_nodes.flush()
    best_scores.flush()


def chunk_top(scores: torch.Tensor, ids: torch.Tensor, k: int) -> torch.Tensor:
    """int64 [s, <= k]: :func:`ranking_keys` of each row's best ``k`` of a candidate chunk (-inf scores, a
    node's own pair, as :data:`NO_CANDIDATE`).

    A float ``topk`` picks them (linear in the chunk); keys are made for those alone. Only where a row's
    ``k``-th and ``k+1``-th scores tie, which of the tied ids enters is the ranking's choice (the lower id)
    rather than ``topk``'s: such a chunk is ranked by keys over all its pairs."""
    values, where = scores.topk(min(k + 1, scores.shape[1]), dim=1)
    if values.shape[1] > k and bool((values[:, k - 1] == values[:, k]).any()):
        keys = ranking_keys(scores, ids)
        keys[scores == -torch.inf] = NO_CANDIDATE
        return keys.topk(k, dim=1).values
    values, where = values[:, :k], where[:, :k]
    keys = ranking_keys(values, ids.index_select(0, where.reshape(-1)).view(where.shape))
    return keys.masked_fill_(values == -torch.inf, NO_CANDIDATE)


def predict_links(model_file: ModelFile, dataset: NodeDataset, out: str | Path, *, pairs: np.ndarray | None = None,
                  topk: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE, overwrite: bool = False,
                  device: str | torch.device | None = None) -> dict:
    """Write a link model's outputs over ``dataset`` to ``out`` (module docstring); returns ``meta.json``'s
    contents. ``pairs``: int64 [n, 2] (:func:`read_pairs`); ``topk``: K >= 1, K < num_nodes; ``device``:
    where the encoder's layers, the pair scores and the ranking compute (default the CPU)."""
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
    device = resolve_device(device)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".predict-", dir=out) as tmp:
        tmp = Path(tmp)
        layers = layerwise_inference(model.encoder, dataset.graph, dataset.features, tmp, chunk_size=chunk_size,
                                     device=device)
        os.replace(layers[-1], tmp / "embeddings.npy")
        emb = np.load(tmp / "embeddings.npy", mmap_mode="r")
        files = ["embeddings.npy"]
        if pairs is not None:
            pair_scores(model.to(device), emb, pairs, tmp / "pair_scores.npy", device)
            files.append("pair_scores.npy")
        if topk is not None:
            top_k(model.to(device), emb, topk, tmp / "topk_nodes.npy", tmp / "topk_scores.npy", device)
            files += ["topk_nodes.npy", "topk_scores.npy"]
        meta = {"task": "link", "model": {"file": str(model_file.path), "decoder": model_file.decoder},
                "dataset": {"name": dataset.name, "num_nodes": n, "num_edges": dataset.graph.num_edges},
                "rows_are": "node ids 0 .. num_nodes - 1 (pair_scores.npy: the rows of the pairs file)",
                "files": files + ["meta.json"], "pairs": None if pairs is None else int(pairs.shape[0]), "topk": topk,
                "chunk_size": chunk_size, "device": str(device), "seconds": time.perf_counter() - started,
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
