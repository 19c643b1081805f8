"""``gnnscale predict --task link``: a trained link model's node embeddings, the scores of candidate pairs,
every node's best-scored candidates and the model's metric on its own validation and test edges, written
to an output folder by the dataset's node ids.

Files (memory-mapped ``.npy``, staged and published as :mod:`gnnscale.inference.predict`'s, ``meta.json``
last)::

    embeddings.npy    float32 [num_nodes, width]  the encoder's output of every node (layer-wise inference)
    pair_scores.npy   float32 [n]                 the decoder's logit of each ``--pairs`` row (if given)
    topk_nodes.npy    int64 [num_nodes, K]        each node's K best-scored other nodes, best first (--topk);
                                                  -1 where fewer than K candidates are left (topk_exclude)
    topk_scores.npy   float32 [num_nodes, K]      their logits (-inf for a -1)
    meta.json         what was run on what, the files, timings and the metric per split (with ``metric``)

Memory is bounded by chunks: the embeddings by layer-wise inference's; pair scores ``PAIR_CHUNK`` pairs
at a time; top-K ``SOURCE_CHUNK`` sources against ``CANDIDATE_CHUNK`` candidates at a time, keeping a
running top-K per source (the dot decoder as one product, the MLP decoder over the chunk's pairs; a
float ``topk`` per chunk, exact ranking keys for what it picks). On a GPU the top-K holds the
embedding table there, moved once (``num_nodes * width`` floats of device memory); on the CPU it reads
the memory-mapped file. A node is never its own candidate; the known edges of ``topk_exclude`` (in either direction) are none
either, and other existing edges are candidates like any other pair.

**Scoring held-out edges** (``metric``): the embeddings are computed over the message-passing graph of
the model's split (:class:`HeldOutEdges`: the dataset's graph without its validation and test edges, as
training's evaluation sees it), and each split's positives and negatives are scored by the decoder and
measured by :func:`gnnscale.inference.link_metrics.link_score`, the metric code training's evaluation
uses.
"""

from __future__ import annotations

import os
import resource
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from gnnscale.devices import resolve_device
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.dataset import NodeDataset
from gnnscale.inference.layerwise import DEFAULT_CHUNK_SIZE, layerwise_inference
from gnnscale.inference.link_metrics import check_link_metric, link_score
from gnnscale.inference.predict import check_id_range, check_out_dir, publish, read_id_file, staging
from gnnscale.nn.link import DotDecoder, LinkModel
from gnnscale.nn.model_file import ModelFile

LINK_OUTPUT_FILES = ("embeddings.npy", "pair_scores.npy", "topk_nodes.npy", "topk_scores.npy", "meta.json")
PAIR_CHUNK = 1 << 16
SOURCE_CHUNK = 256
CANDIDATE_CHUNK = 4096
# Which known edges --topk leaves out of each node's candidates: none, the training edges (the graph
# messages passed over in training), or every edge of the dataset.
TOPK_EXCLUDE = ("none", "train", "all")
HELD_OUT_SPLITS = ("val", "test")


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOutEdges:
    """A link model's split of the dataset's edges, as its training drew it.

    Args:
        graph: the message-passing graph: the dataset's graph without the validation and test edges (nor
            their reverses).
        positives: ``{"val": int64 [2, n], "test": ...}``, (source, destination) of each split's positives.
        negatives: ``{"val": int64 [2, n * k], ...}``: their negatives, positive ``i``'s in columns
            ``i * k .. (i + 1) * k - 1`` (the layout training evaluates).
    """

    graph: CSCGraph
    positives: dict[str, np.ndarray]
    negatives: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        for name in ("positives", "negatives"):
            pairs = getattr(self, name)
            if set(pairs) != set(HELD_OUT_SPLITS):
                raise ValueError(f"{name}: expected the splits {HELD_OUT_SPLITS}, got {tuple(pairs)}")
            for split, edges in pairs.items():
                if edges.ndim != 2 or edges.shape[0] != 2 or not np.issubdtype(edges.dtype, np.integer):
                    raise ValueError(f"{name}: expected int [2, n] pairs for {split}, got {edges.dtype} "
                                     f"{edges.shape}")
        for split in HELD_OUT_SPLITS:
            pos, neg = self.positives[split].shape[1], self.negatives[split].shape[1]
            if (pos == 0 and neg != 0) or (pos and neg % pos):
                raise ValueError(f"negatives: expected k negatives per positive for {split}, got {neg} for {pos}")


def read_pairs(path: str | Path, num_nodes: int) -> np.ndarray:
    """int64 [n, 2] candidate pairs (source, destination) from a ``.npy`` file of node ids, or text with
    one pair per line (two ids separated by a space, a tab or a comma)."""
    pairs = read_id_file(path, "pairs", "a list of node id pairs", columns=2)
    return check_id_range(pairs, "pairs", path, num_nodes)


def rows_on(emb: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows of the (memory-mapped) embeddings as a tensor on ``device``."""
    return torch.from_numpy(np.array(emb)).to(device)


def table_on(emb: np.ndarray, device: torch.device) -> torch.Tensor:
    """float32 [num_nodes, width]: the whole (memory-mapped) embedding table on ``device``, read from the host
    once: the top-K ranks every source chunk against all of it. On the CPU the memory map itself (no copy, read
    as the chunks need it); on a GPU one table in device memory, copied over ``CANDIDATE_CHUNK`` rows at a time
    (the host holds one chunk)."""
    if device.type == "cpu":
        with warnings.catch_warnings():  # a read-only map: torch warns of writes, and nothing here writes to it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(np.asarray(emb))
    table = torch.empty(emb.shape, dtype=torch.float32, device=device)
    for lo in range(0, emb.shape[0], CANDIDATE_CHUNK):
        table[lo:lo + CANDIDATE_CHUNK].copy_(torch.from_numpy(np.array(emb[lo:lo + CANDIDATE_CHUNK])))
    return table


def pair_logits(model: LinkModel, emb: np.ndarray, pairs: np.ndarray,
                device: torch.device = torch.device("cpu")) -> Iterator[np.ndarray]:
    """float32 logits of the pairs ``pairs`` (int [n, 2]), ``PAIR_CHUNK`` pairs at a time, scored on ``device``."""
    with torch.no_grad():
        for lo in range(0, pairs.shape[0], PAIR_CHUNK):
            chunk = pairs[lo:lo + PAIR_CHUNK]
            yield model.score(rows_on(emb[chunk[:, 0]], device), rows_on(emb[chunk[:, 1]], device)).cpu().numpy()


def pair_scores(model: LinkModel, emb: np.ndarray, pairs: np.ndarray, path: Path,
                device: torch.device = torch.device("cpu")) -> Path:
    """The decoder's logit of every pair (:func:`pair_logits`) into ``path``."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(pairs.shape[0],))
    lo = 0
    for scores in pair_logits(model, emb, pairs, device):
        out[lo:lo + scores.shape[0]] = scores
        lo += scores.shape[0]
    out.flush()
    return path


def held_out_metrics(model: LinkModel, emb: np.ndarray, held_out: HeldOutEdges, metric: str,
                     device: torch.device = torch.device("cpu")) -> dict:
    """``{split: {"positives", "negatives_per_positive", metric}}`` of the validation and test pairs."""
    out = {}
    for split in HELD_OUT_SPLITS:
        pos, neg = held_out.positives[split], held_out.negatives[split]
        k = neg.shape[1] // pos.shape[1] if pos.shape[1] else 0
        value = link_score(metric, every_logit(model, emb, pos.T, device), every_logit(model, emb, neg.T, device))
        out[split] = {"positives": int(pos.shape[1]), "negatives_per_positive": k, metric: value}
    return out


def every_logit(model: LinkModel, emb: np.ndarray, pairs: np.ndarray, device: torch.device) -> np.ndarray:
    """float32 [n]: :func:`pair_logits` of all the pairs in one array (in memory: a split's pairs)."""
    return np.concatenate([np.zeros(0, np.float32), *pair_logits(model, emb, pairs, device)])


def known_neighbors(graph: CSCGraph) -> sp.csr_matrix:
    """Every node's neighbors in either direction (row ``u``: the ``v`` with an edge ``u -> v`` or
    ``v -> u``), as a CSR pattern; for leaving known edges out of the top-K."""
    n = graph.num_nodes
    inbound = sp.csr_matrix((np.ones(graph.num_edges, dtype=bool), np.asarray(graph.indices),
                             np.asarray(graph.indptr)), shape=(n, n))  # row v: the sources of v's in-edges
    both = (inbound + inbound.T).tocsr()
    both.sort_indices()
    return both


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
          device: torch.device = torch.device("cpu"), exclude: CSCGraph | None = None) -> None:
    """Every node's ``k`` best-scored other nodes (module docstring), best first; ties: the lower id;
    ``exclude``: a graph whose edges (either direction) are no candidates either (a node left with fewer
    than ``k`` gets id -1 and score -inf in the rest of its row).

    A running top-``k`` of :func:`ranking_keys` per source chunk, merged with each candidate chunk's own
    top-``k`` (:func:`chunk_top`), so that the ranking is exact whatever the chunking. Scores and ranking on
    ``device``, against the embedding table moved there once (:func:`table_on`); each source chunk's result
    comes back to the host files."""
    n = emb.shape[0]
    known = None if exclude is None else known_neighbors(exclude)
    best_nodes = np.lib.format.open_memmap(nodes_path, mode="w+", dtype=np.int64, shape=(n, k))
    best_scores = np.lib.format.open_memmap(scores_path, mode="w+", dtype=np.float32, shape=(n, k))
    table = table_on(emb, device)
    with torch.no_grad():
        for lo in range(0, n, SOURCE_CHUNK):
            src = table[lo:lo + SOURCE_CHUNK]
            rows = torch.arange(lo, lo + src.shape[0], device=device)
            top = torch.full((src.shape[0], k), NO_CANDIDATE, dtype=torch.int64, device=device)
            linked = None if known is None else chunk_links(known, lo, lo + src.shape[0], device)
            for c_lo in range(0, n, CANDIDATE_CHUNK):
                cand = table[c_lo:c_lo + CANDIDATE_CHUNK]
                ids = torch.arange(c_lo, c_lo + cand.shape[0], device=device)
                scores = chunk_scores(model, src, cand)
                if c_lo < lo + src.shape[0] and lo < c_lo + cand.shape[0]:  # the chunks share nodes
                    scores.masked_fill_(rows[:, None] == ids[None, :], -torch.inf)  # never a node's own candidate
                if linked is not None:
                    row, col = linked
                    here = (col >= c_lo) & (col < c_lo + cand.shape[0])
                    scores[row[here], col[here] - c_lo] = -torch.inf  # a known edge: no candidate
                top = torch.cat([top, chunk_top(scores, ids, k)], 1).topk(k, dim=1).values  # sorted: best first
            nodes, scores = keys_to_ranking(top, n)
            best_nodes[lo:lo + src.shape[0]] = torch.where(nodes == n, -1, nodes).cpu().numpy()
            best_scores[lo:lo + src.shape[0]] = scores.cpu().numpy()
    best_nodes.flush()
    best_scores.flush()


def chunk_links(known: sp.csr_matrix, lo: int, hi: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(row - lo, neighbor) int64 of every known edge of the sources ``lo .. hi - 1``, on ``device``."""
    indptr = known.indptr[lo:hi + 1]
    row = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(indptr))
    col = np.asarray(known.indices[indptr[0]:indptr[-1]], dtype=np.int64)
    return torch.from_numpy(row).to(device), torch.from_numpy(col).to(device)


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
                  topk: int | None = None, topk_exclude: str = "none", metric: str | None = None,
                  held_out: HeldOutEdges | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  overwrite: bool = False, device: str | torch.device | None = None) -> dict:
    """Write a link model's outputs over ``dataset`` to ``out`` (module docstring); returns ``meta.json``'s
    contents.

    Args:
        pairs: int64 [n, 2] (:func:`read_pairs`) to score; None (default): none.
        topk: K >= 1, K < num_nodes: each node's K best candidates; None (default): no ranking.
        topk_exclude: the known edges left out of the candidates (:data:`TOPK_EXCLUDE`): ``"none"``
            (default), ``"train"`` (``held_out.graph``'s) or ``"all"`` (``dataset.graph``'s).
        metric: roc_auc, ap, mrr or hits@K of the validation and test pairs of ``held_out``, whose graph
            the embeddings are then computed over; None (default): no scoring, the dataset's graph.
        held_out: the model's split (``metric``, ``topk_exclude="train"``).
        chunk_size, overwrite: as :func:`gnnscale.inference.predict.predict`'s.
        device: where the encoder's layers, the pair scores and the ranking compute (default the CPU).
    """
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
    if topk_exclude not in TOPK_EXCLUDE:
        raise ValueError(f"topk_exclude: expected one of {', '.join(TOPK_EXCLUDE)}, got {topk_exclude!r}")
    if metric is not None:
        check_link_metric(metric)
    if held_out is None and (metric is not None or topk_exclude == "train"):
        raise ValueError(f"held_out: {'metric' if metric is not None else 'topk_exclude train'} needs the model's "
                         "split (HeldOutEdges)")
    if held_out is not None and held_out.graph.num_nodes != n:
        raise ValueError(f"held_out: its graph has {held_out.graph.num_nodes} nodes, the dataset {n}")
    device = resolve_device(device)
    graph = dataset.graph if metric is None else held_out.graph
    exclude = {"none": None, "train": None if held_out is None else held_out.graph, "all": dataset.graph}[topk_exclude]
    started = time.perf_counter()
    with staging(out) as tmp:
        layers = layerwise_inference(model.encoder, graph, dataset.features, tmp, chunk_size=chunk_size,
                                     device=device)
        os.replace(layers[-1], tmp / "embeddings.npy")
        emb = np.load(tmp / "embeddings.npy", mmap_mode="r")
        files = ["embeddings.npy"]
        if pairs is not None:
            pair_scores(model.to(device), emb, pairs, tmp / "pair_scores.npy", device)
            files.append("pair_scores.npy")
        if topk is not None:
            top_k(model.to(device), emb, topk, tmp / "topk_nodes.npy", tmp / "topk_scores.npy", device, exclude)
            files += ["topk_nodes.npy", "topk_scores.npy"]
        metrics = None if metric is None else held_out_metrics(model.to(device), emb, held_out, metric, device)
        meta = {"task": "link", "model": {"file": str(model_file.path), "decoder": model_file.decoder},
                "dataset": {"name": dataset.name, "num_nodes": n, "num_edges": dataset.graph.num_edges},
                "graph": "the dataset's" if metric is None else
                "the model's message-passing graph (the dataset's without its validation and test edges)",
                "rows_are": "node ids 0 .. num_nodes - 1 (pair_scores.npy: the rows of the pairs file)",
                "files": files + ["meta.json"], "pairs": None if pairs is None else int(pairs.shape[0]), "topk": topk,
                "topk_exclude": topk_exclude, "metric": metric, "metrics": metrics, "chunk_size": chunk_size,
                "device": str(device), "seconds": time.perf_counter() - started,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        publish(tmp, out, files, meta, LINK_OUTPUT_FILES)
    return meta
