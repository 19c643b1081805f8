"""``gnnscale predict --task link``: a saved link model's embeddings, pair scores and top-K candidates
against a full-graph recomputation and a brute-force ranking (known edges left out too), its held-out
edges scored as its training scored them; bad pairs files are one line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import gnnscale.inference.link_predict as link_predict
from gnnscale.cli import main
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.nn.link import LinkModel
from gnnscale.graph.csc import CSCGraph
from gnnscale.graph.link_split import edge_destinations
from gnnscale.nn.model_file import read_model_file
from gnnscale.sampling import sample_blocks
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import seeded_link_model
from gnnscale.train.tasks.link_config import LinkConfig

SMALL = dict(num_nodes=300, avg_degree=6.0, num_classes=3, feature_dim=8, seed=4)
DATASET_ARGS = ["--dataset", "synthetic", *[w for k, v in SMALL.items() for w in ("-o", f"{k}={v}")]]


def predict_link(model, out, *extra) -> int:
    return main(["predict", "--task", "link", "--model", str(model), "--out", str(out), "--threads", "1",
                 *DATASET_ARGS, *extra])


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


@pytest.fixture(scope="module", params=["dot", "mlp"])
def saved(dataset, tmp_path_factory, request):
    path = tmp_path_factory.mktemp("link_model") / f"{request.param}.pt"
    encoder = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=16, num_layers=2)
    model = seeded_link_model(encoder, request.param, 1)
    cfg = TrainConfig(fanouts=(4, 3), batch_size=128, epochs=1, lr=0.01, seed=1, threads=1)
    fit(model, dataset, inputs="blocks", config=cfg, progress=False, task=LinkConfig(decoder=request.param),
        outputs=RunOutputs(model_out=path, save_model_at="last"))
    return path, model


def test_a_saved_link_model_predicts_embeddings_pair_scores_and_top_k(dataset, saved, tmp_path, monkeypatch):
    path, trained = saved
    model_file = read_model_file(path)
    assert isinstance(model_file.model, LinkModel) and model_file.decoder == trained.decoder_name
    for a, b in zip(model_file.model.state_dict().values(), trained.state_dict().values()):
        assert torch.equal(a, b)
    # Small chunks: several source and candidate chunks, whose running top-K must equal one full ranking.
    monkeypatch.setattr(link_predict, "SOURCE_CHUNK", 64)
    monkeypatch.setattr(link_predict, "CANDIDATE_CHUNK", 100)
    pairs = np.array([[0, 1], [5, 7], [299, 3]])
    link_predict.predict_links(model_file, dataset, tmp_path, pairs=pairs, topk=5)
    model = model_file.model
    n = dataset.graph.num_nodes
    blocks = sample_blocks(dataset.graph, np.arange(n), (-1, -1), key=0)
    with torch.no_grad():
        h = model(blocks, torch.from_numpy(dataset.features[blocks[0].src_ids.numpy()]))
        full = model.score(h[:, None, :].expand(n, n, -1), h[None, :, :].expand(n, n, -1))
    emb = np.load(tmp_path / "embeddings.npy")
    np.testing.assert_allclose(emb, h.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "pair_scores.npy"), full[pairs[:, 0], pairs[:, 1]].numpy(),
                               rtol=1e-4, atol=1e-4)
    full.fill_diagonal_(-torch.inf)
    top = np.load(tmp_path / "topk_nodes.npy")
    scores = np.load(tmp_path / "topk_scores.npy")
    assert top.shape == (n, 5) and not (top == np.arange(n)[:, None]).any()
    # The brute-force oracle's 5th best score: every returned node scores at least that (within rounding).
    fifth = torch.sort(full, dim=1, descending=True).values[:, 4].numpy()
    assert (full.numpy()[np.arange(n)[:, None], top] >= fifth[:, None] - 1e-4).all()
    np.testing.assert_allclose(scores, full.numpy()[np.arange(n)[:, None], top], rtol=1e-4, atol=1e-4)
    assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("array, message", [
    (np.array([1, 2, 3]), "must hold integer node ids of shape \\[n, 2\\]"),
    (np.array([[0, 1], [2, 300]]), "holds ids in \\[0, 300\\], but the dataset's ids are \\[0, 300\\)"),
], ids=["shape", "range"])
def test_a_bad_pairs_file_is_one_line(dataset, saved, tmp_path, capsys, array, message):
    path, _ = saved
    pairs = tmp_path / "pairs.npy"
    np.save(pairs, array)
    assert predict_link(path, tmp_path / "out", "--pairs", str(pairs)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gnnscale predict: error: --pairs: "), err
    assert __import__("re").search(message, err), err


def test_ranking_keys_order_by_score_then_the_lower_id_and_decode_back():
    scores = torch.tensor([[0.5, -1.0, 0.5, -0.0, 0.0, 3e38, -torch.inf, -2.0]])
    ids = torch.tensor([7, 1, 3, 9, 2, 5, 4, 0])
    keys = link_predict.ranking_keys(scores, ids)
    order = keys.argsort(dim=1, descending=True)[0]
    # Highest score first; 0.5 twice: id 3 before 7; -0.0 and 0.0 tie: id 2 before 9.
    assert ids[order].tolist() == [5, 3, 7, 2, 9, 1, 0, 4]
    got_ids, got_scores = link_predict.keys_to_ranking(keys, n=10)
    assert torch.equal(got_ids[0], ids) and torch.equal(got_scores, scores + 0.0)
    none_ids, none_scores = link_predict.keys_to_ranking(torch.tensor([link_predict.NO_CANDIDATE]), n=10)
    assert none_ids.tolist() == [10] and none_scores.tolist() == [-float("inf")]


@pytest.mark.parametrize("chunk", [3, 4, 64], ids=["ties-across-chunks", "chunk-of-k", "one-chunk"])
def test_top_k_ranks_ties_by_the_lower_id_whatever_the_chunking(tmp_path, monkeypatch, chunk):
    """Embeddings with many equal scores (the dot decoder over repeated rows): the running top-K equals a
    brute-force ranking by (score descending, id ascending) exactly, ties across chunk borders included."""
    rng = np.random.default_rng(0)
    emb = rng.integers(-2, 3, size=(40, 3)).astype(np.float32)  # few distinct rows: ties everywhere
    model = LinkModel(seeded_link_model(ModelConfig(name="sage", in_dim=3, hidden_dim=3, num_classes=3,
                                                    num_layers=1), "dot", 0).encoder, "dot")
    monkeypatch.setattr(link_predict, "SOURCE_CHUNK", chunk)
    monkeypatch.setattr(link_predict, "CANDIDATE_CHUNK", chunk)
    link_predict.top_k(model, emb, 4, tmp_path / "n.npy", tmp_path / "s.npy")
    full = emb @ emb.T
    np.fill_diagonal(full, -np.inf)
    expected = np.stack([np.lexsort((np.arange(40), -row))[:4] for row in full])
    np.testing.assert_array_equal(np.load(tmp_path / "n.npy"), expected)
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), np.take_along_axis(full, expected, 1))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_top_k_takes_the_embedding_table_from_the_host_once(tmp_path, monkeypatch, device):
    """50 nodes in source chunks of 8 and candidate chunks of 16: every embedding row leaves the host table once
    (before: each source chunk took its rows and every candidate's again, 400 rows), and the ranking is the
    brute-force one."""
    emb = np.random.default_rng(2).standard_normal((50, 4)).astype(np.float32)
    model = LinkModel(seeded_link_model(ModelConfig(name="sage", in_dim=4, hidden_dim=4, num_classes=4,
                                                    num_layers=1), "dot", 0).encoder, "dot").to(device)
    monkeypatch.setattr(link_predict, "SOURCE_CHUNK", 8)
    monkeypatch.setattr(link_predict, "CANDIDATE_CHUNK", 16)
    taken = []
    from_numpy = torch.from_numpy

    def counting(array):
        if array.dtype == np.float32 and array.ndim == 2:  # embedding rows (not the chunks' known edges)
            taken.append(array.shape[0])
        return from_numpy(array)

    monkeypatch.setattr(torch, "from_numpy", counting)
    link_predict.top_k(model, emb, 3, tmp_path / "n.npy", tmp_path / "s.npy", torch.device(device))
    monkeypatch.undo()
    assert sum(taken) == 50
    full = emb @ emb.T
    np.fill_diagonal(full, -np.inf)
    expected = np.stack([np.lexsort((np.arange(50), -row))[:3] for row in full])
    np.testing.assert_array_equal(np.load(tmp_path / "n.npy"), expected)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_link_predictions_on_a_device_equal_the_cpu_ones(dataset, saved, tmp_path, device):
    """--device: the encoder's layers, pair scores and ranking there; on the CPU the same bits as without
    the setting, on a GPU the same within rounding (and the same top-K wherever no near-tie decides)."""
    path, _ = saved
    pairs = np.array([[0, 1], [5, 7], [299, 3]])
    link_predict.predict_links(read_model_file(path), dataset, tmp_path / "default", pairs=pairs, topk=5)
    meta = link_predict.predict_links(read_model_file(path), dataset, tmp_path / device, pairs=pairs, topk=5,
                                      device=device)
    assert meta["device"].startswith(device)
    for name in ("embeddings.npy", "pair_scores.npy", "topk_scores.npy"):
        got, expected = np.load(tmp_path / device / name), np.load(tmp_path / "default" / name)
        if device == "cpu":
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    if device == "cpu":
        np.testing.assert_array_equal(np.load(tmp_path / device / "topk_nodes.npy"),
                                      np.load(tmp_path / "default" / "topk_nodes.npy"))


# --- pairs as text -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["0 1\n5 7\n299 3\n", "0,1\n5,7\n299,3\n", "0\t1\n\n5 7\n299   3"],
                         ids=["spaces", "commas", "tabs-and-blank-lines"])
def test_pairs_as_text_score_as_the_same_pairs_in_npy(dataset, saved, tmp_path, text):
    path, _ = saved
    (tmp_path / "pairs.txt").write_text(text)
    np.save(tmp_path / "pairs.npy", np.array([[0, 1], [5, 7], [299, 3]]))
    assert predict_link(path, tmp_path / "txt", "--pairs", str(tmp_path / "pairs.txt")) == 0
    assert predict_link(path, tmp_path / "npy", "--pairs", str(tmp_path / "pairs.npy")) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "txt" / "pair_scores.npy"),
                                  np.load(tmp_path / "npy" / "pair_scores.npy"))


@pytest.mark.parametrize("content, message", [
    (b"0 1\n2 3 4\n", r"--pairs: \S+pairs.txt is not a list of node id pairs \(text: 2 ids per line\): "),
    (b"0 1\nfive 6\n", r"--pairs: \S+pairs.txt is not a list of node id pairs \(text: 2 ids per line\): "),
    (b"0 1 2\n3 4 5\n", r"--pairs: \S+pairs.txt must hold integer node ids of shape \[n, 2\], got int64 of shape "
                         r"\(2, 3\)"),
    (b"\x93NUMPY\x00\xff\xfe", r"--pairs: \S+pairs.txt is not a list of node id pairs"),
], ids=["ragged", "a-word", "three-columns", "binary"])
def test_a_pairs_text_file_that_is_not_pairs_is_one_line(dataset, saved, tmp_path, capsys, content, message):
    path, _ = saved
    (tmp_path / "pairs.txt").write_bytes(content)
    assert predict_link(path, tmp_path / "out", "--pairs", str(tmp_path / "pairs.txt")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err) and "pickle" not in err, err


# --- top-K without known edges -------------------------------------------------------------------------

# A directed graph of 6 nodes, its edges src -> dst:
#
#     0 -> 1    2 -> 0    3 -> 0    4 -> 0    1 -> 2    5 -> 4
#
# Node 0 is linked to 1, 2, 3 and 4 (either direction): with K = 2 it keeps one candidate, 5, and a -1.
TINY_EDGES = [(0, 1), (2, 0), (3, 0), (4, 0), (1, 2), (5, 4)]


def csc(edges: list[tuple[int, int]], n: int) -> CSCGraph:
    src, dst = np.array(edges).T
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return CSCGraph(indptr=indptr, indices=src[order].astype(np.int32), num_nodes=n)


def brute_force_top_k(full: np.ndarray, k: int, edges) -> tuple[np.ndarray, np.ndarray]:
    """``full[u, v]``: every pair's score; the node itself and its known edges (either direction) set to
    -inf, ranked by score then id; -1 (score -inf) where a node has fewer than k candidates left."""
    full = full.astype(np.float32)
    np.fill_diagonal(full, -np.inf)
    for a, b in edges:
        full[a, b] = full[b, a] = -np.inf
    order = np.stack([np.lexsort((np.arange(len(row)), -row))[:k] for row in full])
    scores = np.take_along_axis(full, order, 1)
    return np.where(scores == -np.inf, -1, order), scores


@pytest.mark.parametrize("chunk", [2, 4, 64], ids=["chunks-of-2", "chunks-of-4", "one-chunk"])
def test_top_k_leaves_out_known_edges_in_either_direction_as_brute_force_does(tmp_path, monkeypatch, chunk):
    emb = np.random.default_rng(1).integers(-2, 3, size=(6, 3)).astype(np.float32)  # ties as well
    model = LinkModel(seeded_link_model(ModelConfig(name="sage", in_dim=3, hidden_dim=3, num_classes=3,
                                                    num_layers=1), "dot", 0).encoder, "dot")
    monkeypatch.setattr(link_predict, "SOURCE_CHUNK", chunk)
    monkeypatch.setattr(link_predict, "CANDIDATE_CHUNK", chunk)
    link_predict.top_k(model, emb, 2, tmp_path / "n.npy", tmp_path / "s.npy", exclude=csc(TINY_EDGES, 6))
    nodes, scores = brute_force_top_k(emb @ emb.T, 2, TINY_EDGES)
    assert nodes[0, 1] == -1 and nodes[0, 0] == 5  # by hand: node 0's only candidate left
    np.testing.assert_array_equal(np.load(tmp_path / "n.npy"), nodes)
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), scores)


def graph_edges(graph: CSCGraph) -> list[tuple[int, int]]:
    return list(zip(np.asarray(graph.indices).tolist(), edge_destinations(graph.indptr).tolist()))


@pytest.mark.parametrize("exclude", ["train", "all"])
def test_topk_exclude_leaves_out_the_training_or_every_edge(dataset, saved, tmp_path, exclude):
    """Through the command: the ranking of embeddings.npy by brute force, without the model's training
    edges (the message-passing graph of its split, recomputed here from the split's hash) or without
    every edge of the dataset."""
    path, _ = saved
    assert predict_link(path, tmp_path / "out", "--topk", "5", "--topk-exclude", exclude) == 0
    h = torch.from_numpy(np.load(tmp_path / "out" / "embeddings.npy"))
    n = h.shape[0]
    with torch.no_grad():  # the decoder over every pair (dot or MLP)
        full = read_model_file(path).model.score(h[:, None, :].expand(n, n, -1), h[None, :, :].expand(n, n, -1))
    known = graph_edges(dataset.graph)
    if exclude == "train":
        held = held_out_by_hash(dataset.graph, (0.85, 0.05, 0.10), seed=1)
        known = [e for e in known if tuple(sorted(e)) not in held]
        assert len(known) < dataset.graph.num_edges  # held-out edges stay candidates
    nodes, _ = brute_force_top_k(full.numpy(), 5, known)
    got = np.load(tmp_path / "out" / "topk_nodes.npy")
    np.testing.assert_array_equal(got[:, :3], nodes[:, :3])  # the clear leaders (near-ties below may swap by rounding)
    linked = {(a, b) for a, b in known} | {(b, a) for a, b in known}
    assert not any((u, int(v)) in linked for u, row in enumerate(got) for v in row if v >= 0)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["topk_exclude"] == exclude


def held_out_by_hash(graph: CSCGraph, fractions, seed: int) -> set[tuple[int, int]]:
    """The unordered pairs a random split holds out (validation and test), by the split's own hash."""
    from gnnscale.graph.link_split import edge_codes
    from gnnscale.train.tasks.link_edges import split_key
    src, dst = np.asarray(graph.indices, dtype=np.int64), edge_destinations(graph.indptr)
    codes = edge_codes(src, dst, fractions, split_key(seed))
    return {tuple(sorted(e)) for e, c in zip(zip(src.tolist(), dst.tolist()), codes) if c != 0}


# --- the held-out edges, scored -------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["roc_auc", "mrr"])
def selected(dataset, tmp_path_factory, request):
    """A link model trained for 2 epochs with --metric (the param), evaluated with every neighbor (as
    layer-wise inference predicts), its last epoch saved."""
    path = tmp_path_factory.mktemp("selected") / "m.pt"
    encoder = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=16, num_layers=2)
    cfg = TrainConfig(fanouts=(4, 3), eval_fanouts=(-1, -1), batch_size=128, epochs=2, lr=0.01, seed=3, threads=1)
    report = fit(seeded_link_model(encoder, "dot", 3), dataset, inputs="blocks", config=cfg, progress=False,
                 task=LinkConfig(metric=request.param), outputs=RunOutputs(model_out=path, save_model_at="last"))
    return path, request.param, report.history[-1]


def test_predict_scores_the_held_out_edges_as_the_models_training_did(dataset, selected, tmp_path, capsys):
    """The model's split, recomputed from the file's record (seed, fractions), and its evaluation
    negatives: predict's score of the validation and test edges is the one training's own evaluation
    gave its last epoch (a sampled inference with every neighbor there, layer-wise inference here)."""
    path, metric, last = selected
    assert predict_link(path, tmp_path / "out", "--metric", metric) == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["metric"] == metric and meta["graph"].startswith("the model's message-passing graph")
    assert meta["metrics"]["val"][metric] == pytest.approx(last["val_score"], abs=1e-6)
    assert meta["metrics"]["test"][metric] == pytest.approx(last["test_score"], abs=1e-6)
    assert meta["metrics"]["test"]["negatives_per_positive"] == (100 if metric == "mrr" else 1)
    held = held_out_by_hash(dataset.graph, (0.85, 0.05, 0.10), seed=3)
    assert meta["metrics"]["val"]["positives"] + meta["metrics"]["test"]["positives"] == \
        sum(1 for e in graph_edges(dataset.graph) if tuple(sorted(e)) in held)
    out = capsys.readouterr().out
    assert f"{metric} of the model's held-out edges: validation {meta['metrics']['val'][metric]:.4f}" in out


def test_the_held_out_edges_are_no_edges_of_the_graph_the_embeddings_come_from(dataset, selected):
    """No leakage: the message-passing graph predict embeds over is the dataset's without every held-out
    pair, in both directions (the pairs by the split's hash), and no positive scored is an edge of it."""
    from gnnscale.cli.predict import PredictConfig, held_out_edges
    path, metric, _ = selected
    held_out = held_out_edges(PredictConfig(model=str(path), out="o", task="link", metric=metric),
                              read_model_file(path), dataset)
    held = held_out_by_hash(dataset.graph, (0.85, 0.05, 0.10), seed=3)
    expected = sorted(e for e in graph_edges(dataset.graph) if tuple(sorted(e)) not in held)
    assert sorted(graph_edges(held_out.graph)) == expected
    mp = set(expected)
    for split in ("val", "test"):
        pos = held_out.positives[split]
        assert pos.shape[1] and not any((a, b) in mp or (b, a) in mp for a, b in pos.T.tolist())


def test_a_link_model_file_without_its_split_loads_and_says_why_metric_cannot_score(dataset, selected, tmp_path,
                                                                                    capsys):
    path, metric, _ = selected
    payload = torch.load(path, weights_only=True)
    del payload["link"]["split"]  # as files were written before the split was recorded
    old = tmp_path / "old.pt"
    torch.save(payload, old)
    assert read_model_file(old).link_split is None
    assert predict_link(old, tmp_path / "a", "--topk", "3") == 0  # everything but scoring works
    assert predict_link(old, tmp_path / "b", "--metric", metric) == 2
    err = capsys.readouterr().err
    assert err == (f"gnnscale predict: error: --model: {old} records no link split (written before model files "
                   "recorded one), so --metric cannot find its validation and test edges; retrain it with "
                   "--save-model\n")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("extra, message", [
    (["--metric", "accuracy"], "--metric: expected roc_auc, ap, mrr or hits@K (e.g. hits@50) for a link task, "
                               "got 'accuracy'"),
    (["--topk-exclude", "all"], "--topk-exclude: leaves known edges out of --topk's candidates; add --topk K"),
    (["--link-split", "d"], "--link-split: the split is read for --metric or --topk-exclude train"),
    (["--metric", "ap", "--link-split", "d"], "--link-split: {model} was trained on a random --edge-split"),
], ids=["node-metric", "exclude-without-topk", "split-without-use", "split-of-a-random-split"])
def test_link_flags_that_cannot_apply_are_one_line(dataset, selected, tmp_path, capsys, extra, message):
    path, _, _ = selected
    assert predict_link(path, tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gnnscale predict: error: {message.format(model=path)}"), err


def test_node_predictions_refuse_the_link_flags(tmp_path, capsys):
    for extra, flag in ((["--topk-exclude", "train"], "--topk-exclude"), (["--link-split", "d"], "--link-split")):
        assert main(["predict", "--model", "m.pt", "--out", str(tmp_path / "o"), *extra]) == 2
        assert capsys.readouterr().err == f"gnnscale predict: error: {flag}: applies to --task link; add it or drop " \
                                          f"{flag}\n"
