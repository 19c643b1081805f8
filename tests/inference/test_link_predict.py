"""``gnnscale predict --task link``: a saved link model's embeddings, pair scores and top-K candidates
against a full-graph recomputation and a brute-force ranking; bad pairs files are one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gnnscale.inference.link_predict as link_predict
from gnnscale.cli import main
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.nn.link import LinkModel
from gnnscale.nn.model_file import read_model_file
from gnnscale.sampling import sample_blocks
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import seeded_link_model
from gnnscale.train.tasks.link_config import LinkConfig

SMALL = dict(num_nodes=300, avg_degree=6.0, num_classes=3, feature_dim=8, seed=4)


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
    argv = ["predict", "--task", "link", "--model", str(path), "--out", str(tmp_path / "out"), "--pairs", str(pairs),
            "--dataset", "synthetic", *[w for k, v in SMALL.items() for w in ("-o", f"{k}={v}")]]
    assert main(argv) == 2
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
