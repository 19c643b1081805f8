"""Link prediction under torchrun (real processes, gloo on 127.0.0.1): one worker trains and scores exactly
like one process, and hybrid and vanilla workers train identically (each positive edge with the owner of
its destination, the split decided by every worker alone from the original ids); two spawned workers' split
is one process's, and their layouts pass no message over a held-out pair."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest

from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.partition import write_partition_dir
from gnnscale.train import TrainConfig, fit
from gnnscale.train.inputs import seeded_link_model
from gnnscale.train.tasks.link_config import LinkConfig
import link_workers
from launch import run_launch, torchrun
from link_workers import both_ways, edge_set, graph_edges, one_process_view
from test_distributed import spawn_ok

SMALL = dict(num_nodes=400, avg_degree=6.0, num_classes=3, feature_dim=8, seed=4)
ARGS = ["--task", "link", "--model", "sage", "--hidden", "16", "--fanouts", "4,3", "--batch-size", "128",
        "--epochs", "2", "--lr", "0.01", "--seed", "3", "--threads", "1", "--neg-ratio", "2", "--quiet"]
LINK = LinkConfig(neg_ratio=2)
CFG = TrainConfig(fanouts=(4, 3), batch_size=128, epochs=2, lr=0.01, seed=3, threads=1)


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


@pytest.fixture(scope="module")
def partitions(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("link_parts")
    for p in (1, 2):
        write_partition_dir(dataset, p, "metis", root / f"p{p}")
    return {p: root / f"p{p}" for p in (1, 2)}


def launch(partitions, tmp_path, nproc: int, layout: str) -> dict:
    out = tmp_path / f"{layout}{nproc}.json"
    run = run_launch(torchrun(nproc, "--partitions", str(partitions[nproc]), "--layout", layout, "--metrics-out",
                              str(out), *ARGS))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def one_process(dataset) -> list[dict]:
    encoder = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=16, num_layers=2)
    model = seeded_link_model(encoder, LINK.decoder, CFG.seed)
    return fit(model, dataset, inputs="blocks", config=CFG, progress=False, task=LINK).history


KEYS = ("loss", "train_acc", "val_score", "test_score", "sampled_edges", "iteration_losses")


@pytest.mark.slow  # the default tier's link workers: test_two_link_workers_split_the_edges_of_one_process...
@pytest.mark.parametrize("layout", ["hybrid", "vanilla"])
def test_one_link_worker_equals_one_process(dataset, partitions, tmp_path, layout):
    distributed = launch(partitions, tmp_path, 1, layout)
    assert distributed["task"] == "link"
    for d, s in zip(distributed["history"], one_process(dataset), strict=True):
        assert {k: d[k] for k in KEYS} == {k: s[k] for k in KEYS}


@pytest.mark.slow
def test_hybrid_and_vanilla_link_workers_train_identically(partitions, tmp_path):
    hybrid, vanilla = (launch(partitions, tmp_path, 2, layout) for layout in ("hybrid", "vanilla"))
    for h, v in zip(hybrid["history"], vanilla["history"], strict=True):
        assert {k: h[k] for k in KEYS} == {k: v[k] for k in KEYS}
        assert h["rounds_per_iteration"]["sample"] == 0 < v["rounds_per_iteration"]["sample"]


def test_two_link_workers_split_the_edges_of_one_process_and_hold_no_held_out_pair(dataset, partitions, solo_comm):
    # Each worker builds the task and the layout from its part, as the setup path does (tests/link_workers.py),
    # for hybrid (the whole topology) and vanilla (its own rows); ids are mapped back to the dataset's.
    views = spawn_ok(partial(link_workers.link_views, str(partitions[2])), 2)
    new_to_old = np.load(partitions[2] / "new_to_old.npy")
    one = one_process_view(dataset, solo_comm)
    graph = graph_edges(dataset.graph)
    for layout in ("hybrid", "vanilla"):
        workers = [view[layout] for view in views]
        for name in ("train", "val", "test"):  # the union of the workers' edges is one process's
            assert set().union(*(edge_set(new_to_old[w[name]]) for w in workers)) == edge_set(one[name]), name
        held = both_ways(edge_set(one["val"]) | edge_set(one["test"]))
        for rank, w in enumerate(workers):
            lo, hi = w["owned"]
            for name in ("train", "val", "test"):  # each positive with the owner of its destination
                assert ((w[name][1] >= lo) & (w[name][1] < hi)).all(), (layout, rank, name)
            assert w["rows"] == (dataset.graph.num_nodes if layout == "hybrid" else hi - lo)
            assert edge_set(new_to_old[w["message_passing"]]) == graph - held, (layout, rank)
