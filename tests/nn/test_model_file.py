"""The self-describing model file: round trips of every model, weight-only files, one-line errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

import gnnscale
from gnnscale.graph.csc import csc_from_coo
from gnnscale.nn import ModelConfig, build_model
from gnnscale.nn.link import build_link_model
from gnnscale.nn.model_file import DatasetFacts, LinkSplitRecord, read_model_file, save_model_file
from gnnscale.sampling import Block

from conftest import TINY_DST, TINY_NUM_NODES, TINY_SRC

CONFIGS = {
    "sage": dict(name="sage", hidden_dim=16, num_layers=2),
    "gcn": dict(name="gcn", hidden_dim=16, num_layers=2),
    "gat": dict(name="gat", hidden_dim=8, num_layers=2, heads=4, out_heads=2),
    "sage3": dict(name="sage", hidden_dim=12, num_layers=3),
}


def random_model(cfg: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """A model with random weights and random (non-zero) biases, in eval mode."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return model.eval()


FACTS = DatasetFacts(name="tiny", feature_dim=5, num_classes=3, num_nodes=TINY_NUM_NODES)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_load_model_round_trips_every_model(name, tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, dropout=0.25, **CONFIGS[name])
    model = random_model(cfg, seed=3)
    save_model_file(tmp_path / "m.pt", model, cfg, FACTS)
    loaded = gnnscale.load_model(tmp_path / "m.pt")
    assert not loaded.training and type(loaded) is type(model)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    file = read_model_file(tmp_path / "m.pt")
    assert file.config == cfg and file.dataset == FACTS
    # The same outputs, not only the same tensors: the config rebuilt the same architecture.
    graph = csc_from_coo(TINY_SRC, TINY_DST, TINY_NUM_NODES)
    x = torch.randn(TINY_NUM_NODES, 5)
    block = Block(indptr=torch.from_numpy(graph.indptr), indices=torch.from_numpy(graph.indices.astype(np.int64)),
                  src_ids=torch.arange(TINY_NUM_NODES), num_dst=TINY_NUM_NODES)
    blocks = [block] * cfg.num_layers
    assert torch.equal(loaded(blocks, x), model(blocks, x))


def test_a_weight_only_file_loads_with_its_config(tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, **CONFIGS["gcn"])
    model = random_model(cfg)
    torch.save(model.state_dict(), tmp_path / "old.pt")
    loaded = gnnscale.load_model(tmp_path / "old.pt", cfg)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert read_model_file(tmp_path / "old.pt", cfg).dataset is None
    with pytest.raises(ValueError, match=r"old.pt holds weights only .* give the model's flags"):
        gnnscale.load_model(tmp_path / "old.pt")


def test_a_wrong_file_or_shape_is_one_line_naming_it(tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, **CONFIGS["sage"])
    model = random_model(cfg)
    cases = {}
    (tmp_path / "text.pt").write_text("not a model\n")
    cases["text.pt"] = r"model: \S+text.pt is not a gnnscale model file .*: it is not a file torch.save wrote$"
    torch.save({"epoch": 3}, tmp_path / "dict.pt")
    cases["dict.pt"] = r"model: \S+dict.pt is not a gnnscale model file .*: it holds a dict of other contents$"
    cases["missing.pt"] = r"model: no model file at \S+missing.pt"
    torch.save(model.state_dict(), tmp_path / "old.pt")
    for file, pattern in cases.items():
        with pytest.raises(ValueError, match=pattern) as err:
            gnnscale.load_model(tmp_path / file)
        assert "\n" not in str(err.value)
    wider = ModelConfig(in_dim=5, num_classes=3, name="sage", hidden_dim=32, num_layers=2)
    with pytest.raises(ValueError, match=r"model: \S+old.pt does not fit model sage \(5 features -> hidden 32 -> "
                                         r"3 classes, 2 layers\): .*size mismatch") as err:
        gnnscale.load_model(tmp_path / "old.pt", wider)
    assert "\n" not in str(err.value)
    save_model_file(tmp_path / "new.pt", model, cfg, FACTS)
    with pytest.raises(ValueError, match=r"new.pt holds model sage \(5 features -> hidden 16 .*, not the model sage "
                                         r"\(5 features -> hidden 32"):
        gnnscale.load_model(tmp_path / "new.pt", wider)
    with pytest.raises(ValueError, match=r"model: \S+new.pt was trained on tiny \(5 features, 3 classes\), but "
                                         r"dataset cora has 1433 features and 7 classes"):
        read_model_file(tmp_path / "new.pt").check_fits(name="cora", feature_dim=1433, num_classes=7)


def test_a_file_written_before_kernels_loads_with_auto_and_a_torch_file_keeps_torch(tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, kernels="torch", **CONFIGS["gat"])
    save_model_file(tmp_path / "m.pt", random_model(cfg), cfg, FACTS)
    assert read_model_file(tmp_path / "m.pt").model.kernels == "torch"
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    del payload["config"]["kernels"]  # what a gnnscale without the field wrote
    torch.save(payload, tmp_path / "old.pt")
    file = read_model_file(tmp_path / "old.pt")
    assert file.config.kernels == "auto" and file.model.kernels == "auto"
    assert all(torch.equal(file.model.state_dict()[k], v) for k, v in payload["state_dict"].items())


@pytest.mark.parametrize("payload", [torch.nn.Linear(2, 2), {"ratio": Fraction(1, 3)}],
                         ids=["a pickled module", "a pickled object"])
def test_a_file_of_pickled_objects_is_refused_without_torchs_advice(tmp_path, recwarn, payload):
    # torch's own message tells the user to retry with weights_only=False, which would run the file's code.
    torch.save(payload, tmp_path / "pickled.pt")
    with pytest.raises(ValueError) as err:
        gnnscale.load_model(tmp_path / "pickled.pt")
    assert str(err.value) == (f"model: {tmp_path / 'pickled.pt'} is not a gnnscale model file (those are written by "
                              "train --save-model): it holds Python objects other than tensors and plain data, "
                              "which gnnscale never loads (loading them could run code)")
    assert not [w for w in recwarn if "pickle" in str(w.message)]


def test_save_model_file_refuses_what_is_not_a_regular_file(tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, **CONFIGS["sage"])
    with pytest.raises(ValueError, match="exists and is not a regular file"):
        save_model_file(tmp_path, random_model(cfg), cfg, FACTS)


SPLIT = LinkSplitRecord(edge_split=(0.8, 0.1, 0.1), link_split=None, eval_negatives=5, metric="mrr", seed=7)


def test_a_link_model_file_records_its_split_and_one_without_it_still_loads(tmp_path):
    encoder = ModelConfig(in_dim=5, num_classes=4, **CONFIGS["sage"])
    model = build_link_model(encoder, "mlp")
    save_model_file(tmp_path / "link.pt", model, encoder, FACTS, link_split=SPLIT)
    file = read_model_file(tmp_path / "link.pt")
    assert (file.decoder, file.link_split) == ("mlp", SPLIT)
    payload = torch.load(tmp_path / "link.pt", weights_only=True)
    assert payload["link"]["split"] == {"edge_split": [0.8, 0.1, 0.1], "link_split": None, "eval_negatives": 5,
                                        "metric": "mrr", "seed": 7}
    del payload["link"]["split"]  # a file written before the split was recorded
    torch.save(payload, tmp_path / "old.pt")
    old = read_model_file(tmp_path / "old.pt")
    assert (old.decoder, old.link_split) == ("mlp", None)
    assert all(torch.equal(a, b) for a, b in zip(old.model.state_dict().values(), model.state_dict().values()))
    payload["link"]["split"] = {"edge_split": [0.8, 0.2], "seed": 1}
    torch.save(payload, tmp_path / "strange.pt")
    with pytest.raises(ValueError, match=r"^model: \S+strange.pt records a link split this gnnscale does not know"):
        read_model_file(tmp_path / "strange.pt")


def test_a_node_classifier_has_no_link_split(tmp_path):
    cfg = ModelConfig(in_dim=5, num_classes=3, **CONFIGS["sage"])
    with pytest.raises(ValueError, match=r"^link_split: a node classifier has no link split"):
        save_model_file(tmp_path / "m.pt", random_model(cfg), cfg, FACTS, link_split=SPLIT)
    assert not (tmp_path / "m.pt").exists()
