"""One check for every entry (gnnscale/train/rules.py): each combination of settings that ``gnnscale train``
refuses, ``fit`` refuses too, before any data loads, with the same line (the command line names the flag where
``fit`` names the argument); what the run records of its device and of a link task's data."""

from __future__ import annotations

import json

import pytest

from gnnscale.cli import main
from gnnscale.devices import resolve_device
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import seeded_link_model, seeded_model
from gnnscale.train.layouts import layout_options
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.rules import RunSettings, check_run
from gnnscale.train.tasks.link_config import LinkConfig
from gnnscale.train.tasks.node import NODE

SMALL = dict(num_nodes=300, avg_degree=6.0, num_classes=3, feature_dim=8, seed=2)
SYNTH = ["--dataset", "synthetic", "-o", "num_nodes=300", "-o", "feature_dim=8", "-o", "num_classes=3"]
PARTS = ["--partitions", "P"]  # refused before the directory is read: it need not exist


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


def node_model(name: str = "sage"):
    return seeded_model(ModelConfig(name=name, in_dim=8, hidden_dim=8, num_classes=3, num_layers=2), 0)


def link_model():
    return seeded_link_model(ModelConfig(name="sage", in_dim=8, hidden_dim=8, num_classes=8, num_layers=2), "dot", 0)


# (id, the command line after `train`, fit's arguments but the data; "P" or the dataset)
CASES = [
    ("link-on-split", [*PARTS, "--layout", "split", "--task", "link"],
     lambda: dict(model=link_model(), data="P", layout="split", task="link")),
    ("link-with-dgs", [*PARTS, "--dgs", "--task", "link"],
     lambda: dict(model=link_model(), data="P", layout=layout_options("hybrid", dgs=DGSConfig()), task="link")),
    ("link-eval-full", [*SYNTH, "--task", "link", "--eval", "full"],
     lambda: dict(model=link_model(), data=None, outputs=RunOutputs(full_eval="accuracy"), task="link")),
    ("eval-full-on-split", [*PARTS, "--layout", "split", "--eval", "full"],
     lambda: dict(model=node_model(), data="P", layout="split", outputs=RunOutputs(full_eval="accuracy"))),
    ("distributed-roc-auc", [*PARTS, "--eval", "full", "--metric", "roc_auc"],
     lambda: dict(model=node_model(), data="P", outputs=RunOutputs(full_eval="roc_auc"))),
    ("ladies-gat", [*SYNTH, "--sampler", "ladies", "--model", "gat"],
     lambda: dict(model=node_model("gat"), data=None, config=TrainConfig(sampler="ladies"))),
    ("vanilla-samples-on-device", [*PARTS, "--layout", "vanilla", "--sample-on", "device"],
     lambda: dict(model=node_model(), data="P", layout="vanilla", config=TrainConfig(sample_on="device"))),
    ("dgs-with-gpu-cache", [*PARTS, "--dgs", "--gpu-cache-fraction", "0.5"],
     lambda: dict(model=node_model(), data="P", layout=layout_options("hybrid", dgs=DGSConfig()),
                  config=TrainConfig(gpu_cache_fraction=0.5))),
    ("link-split-distributed", [*PARTS, "--task", "link", "--link-split", "D"],
     lambda: dict(model=link_model(), data="P", task=LinkConfig(link_split="D"))),
]


@pytest.mark.filterwarnings("ignore:gpu_cache_fraction")
@pytest.mark.parametrize("argv, fit_args", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_fit_refuses_what_the_command_line_refuses_with_the_same_line(argv, fit_args, dataset, capsys):
    assert main(["train", "--quiet", *argv]) == 2
    cli_line = capsys.readouterr().err.strip()
    assert cli_line.startswith("gnnscale train: error: "), cli_line
    args = fit_args()
    data = dataset if args.pop("data") is None else args.pop("data", "P")
    with pytest.raises((ValueError, TypeError)) as refused:
        fit(args.pop("model"), data, inputs="blocks", progress=False, **args)
    # "name: what" from fit, "--flag: what" from the command line: the same "what".
    fit_words = str(refused.value).partition(": ")[2]
    cli_words = cli_line.removeprefix("gnnscale train: error: ").partition(": ")[2]
    assert fit_words and fit_words == cli_words, (fit_words, cli_words)


def test_a_gpu_cache_on_the_cpu_runs_and_says_it_saves_nothing():
    run = RunSettings(train=TrainConfig(gpu_cache_fraction=0.5), task=NODE, task_settings=None, layout=None,
                      outputs=RunOutputs(), model="sage")
    with pytest.warns(UserWarning, match=r"^gpu_cache_fraction: 0.5 with --device cpu keeps a second host copy"):
        check_run(run)


def test_the_metrics_file_names_the_device_the_run_chose(dataset, tmp_path):
    out = tmp_path / "m.json"
    fit(node_model(), dataset, inputs="blocks", config=TrainConfig(fanouts=(3, 2), epochs=1, device="auto"),
        outputs=RunOutputs(metrics_out=out), progress=False)
    assert json.loads(out.read_text())["train"]["device"] == str(resolve_device("auto"))


def test_a_link_run_prints_and_records_its_edge_split(dataset, tmp_path, capsys):
    """The split's sizes against the graph: every undirected pair falls in one split, each direction counted as
    an edge owned by its destination, so the three counts add up to the graph's directed edges."""
    out = tmp_path / "m.json"
    fit(link_model(), dataset, inputs="blocks", config=TrainConfig(fanouts=(3, 2), epochs=1),
        outputs=RunOutputs(metrics_out=out), task="link")
    written = json.loads(out.read_text())
    split = written["link_split"]
    assert sum(split.values()) == dataset.graph.num_edges and min(split.values()) > 0
    assert (f"link split: {split['train_edges']:,} train edges, {split['val_edges']:,} val edges, "
            f"{split['test_edges']:,} test edges") in capsys.readouterr().out
    encoder = written["model"]["encoder"]
    assert encoder["embedding_dim"] == 8 and "num_classes" not in encoder
