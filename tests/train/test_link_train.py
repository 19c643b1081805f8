"""Link prediction in one process: the batch (keyed negatives, one seed set, exactly its target pairs out of its
blocks, also where a smaller node count's pair keys would collide), the losses against torch's BCE and a
hand-written softmax, the split (message passing without held-out pairs; a split folder's evaluation pairs by
hand), the per-epoch metric against a hand ranking and a full-neighborhood recomputation, a resumed run against
an uninterrupted one and against changed link settings, and the one-line refusals at the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnscale.cli import main
from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.dataset import NodeDataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.inference.link_metrics import link_score
from gnnscale.keys import derive_key
from gnnscale.nn import ModelConfig
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.exclude import block_edges
from gnnscale.sampling.negatives import negative_pairs
from gnnscale.distributed.device_policy import HOST
from gnnscale.train import RunOutputs, TrainConfig, fit
from gnnscale.train.inputs import BuiltinBlockInputs, seeded_link_model
from gnnscale.train.layouts.single import one_worker, whole_partition
from gnnscale.train.metrics import PhaseTimer
from gnnscale.train.stages import Pipeline
from gnnscale.train.steps import Step
from gnnscale.train.tasks.base import TaskContext
from gnnscale.train.tasks.link import BINARY, RANKED, build_link_task, pair_logits, reduce_metric
from gnnscale.train.tasks.link_config import LinkConfig
from gnnscale.train.tasks.link_edges import link_partition
from link_workers import both_ways, edge_set, graph_edges, one_process_view
from test_link_metrics import BY_HAND, BY_HAND_NEG, BY_HAND_POS

SMALL = dict(num_nodes=400, avg_degree=6.0, num_classes=3, feature_dim=8, seed=4)
CFG = TrainConfig(fanouts=(4, 3), eval_fanouts=(-1, -1), batch_size=128, epochs=2, lr=0.01, seed=3, threads=1)


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


def link_model(dataset, seed=3, decoder="dot"):
    encoder = ModelConfig(name="sage", in_dim=dataset.feature_dim, hidden_dim=16, num_classes=16, num_layers=2)
    return seeded_link_model(encoder, decoder, seed)


def test_bce_is_the_two_class_cross_entropy_and_softmax_ranks_each_positive_first():
    s = torch.tensor([1.5, -0.3, 0.2, 2.0, -1.0, 0.7])
    y = torch.tensor([1, 1, 0, 0, 0, 0])
    binary = F.cross_entropy(pair_logits(s, 2, BINARY), y)
    torch.testing.assert_close(binary, F.binary_cross_entropy_with_logits(s, y.float()))
    # Two positives, two negatives each: positive i against s[2 + 2i], s[3 + 2i].
    ranked = F.cross_entropy(pair_logits(s, 2, RANKED), torch.zeros(2, dtype=torch.long))
    by_hand = -(torch.log_softmax(torch.tensor([1.5, 0.2, 2.0]), 0)[0]
                + torch.log_softmax(torch.tensor([-0.3, -1.0, 0.7]), 0)[0]) / 2
    torch.testing.assert_close(ranked, by_hand)


def test_one_process_passes_messages_over_the_graph_without_its_held_out_pairs(dataset, solo_comm):
    # The task and the layout as the setup path builds them; the layout's full-neighborhood sampler shows the
    # graph messages pass over.
    view = one_process_view(dataset, solo_comm)
    graph = graph_edges(dataset.graph)
    train, held = edge_set(view["train"]), edge_set(view["val"]) | edge_set(view["test"])
    assert train | held == graph and not train & held and held  # the split covers the graph, once each
    assert edge_set(view["message_passing"]) == graph - both_ways(held)


@pytest.mark.parametrize("metric", sorted(BY_HAND))
def test_the_epoch_metric_of_scored_pairs_is_the_hand_ranking(solo_comm, metric):
    # Training's reduction (ranking terms summed, then the global mean's all-reduce) of the hand-ranked case.
    got = reduce_metric(metric, torch.from_numpy(BY_HAND_POS).float(), torch.from_numpy(BY_HAND_NEG).float(),
                        solo_comm)
    assert got == pytest.approx(BY_HAND[metric], abs=1e-7)


def block_edge_lists(blocks) -> list[list[tuple[int, int]]]:
    """Each block's edges as (source, destination) global ids, in CSC order."""
    return [list(zip(*(t.tolist() for t in block_edges(block)))) for block in blocks]


def unexcluded_blocks(task, layout, step):
    """The step's blocks as the layout samples them for the task's seeds (the same key), without the task's
    exclusion."""
    [sampled] = layout.sample([step], [task.plan_seeds(step, True).seeds], PhaseTimer(), training=True)
    return sampled.blocks


def assert_only_target_pairs_left_out(before, after, pos) -> None:
    """The per-edge rule: ``after`` is ``before`` without exactly the edges between a pair of ``pos`` [2, b],
    in either direction, in the same order."""
    targets = both_ways(edge_set(pos))
    for kept, oracle in zip(block_edge_lists(after), block_edge_lists(before), strict=True):
        assert kept == [e for e in oracle if e not in targets]


@pytest.mark.parametrize("law", ["uniform", "per_source"])
def test_a_batch_is_one_seed_set_of_its_pairs_without_its_target_edges(dataset, solo_comm, law):
    link = LinkConfig(neg_ratio=2, neg_sampling=law)
    task = build_link_task(TaskContext(part=whole_partition(dataset), cfg=CFG, settings=link, comm=solo_comm,
                                       partition_dir=None, shared_batches=False))
    layout = one_worker(task.part, None, CFG, solo_comm, HOST)
    pipeline = Pipeline(task, layout, BuiltinBlockInputs(), HOST, 0)
    steps = task.plan_epoch(0, task.local_batches())
    assert sum(s.items.shape[1] for s in steps) == task.edges.train.shape[1]  # every training edge once
    for step, (batch, _) in zip(steps, pipeline.batches(steps, PhaseTimer(), training=True)):
        pos = step.items
        b = pos.shape[1]
        neg_src, neg_dst = negative_pairs(pos[0], dataset.graph.num_nodes, 2, step.key, law)
        seeds = batch.blocks[-1].dst_ids
        assert torch.equal(seeds, torch.cat([pos.reshape(-1), neg_src, neg_dst]).unique())
        assert torch.equal(seeds[batch.targets.src], torch.cat([pos[0], neg_src]))
        assert torch.equal(seeds[batch.targets.dst], torch.cat([pos[1], neg_dst]))
        assert batch.y.tolist() == [1] * b + [0] * (2 * b)
        assert_only_target_pairs_left_out(unexcluded_blocks(task, layout, step), batch.blocks, pos)


def hand_dataset(src: list[int], dst: list[int], num_nodes: int) -> NodeDataset:
    """The undirected graph of the edges ``src[i] - dst[i]`` (both directions stored), no features to speak of."""
    graph = csc_from_coo(np.array(src), np.array(dst), num_nodes, symmetrize=True)
    return NodeDataset(name="by_hand", graph=graph, features=np.zeros((num_nodes, 2), np.float32),
                       labels=np.zeros(num_nodes, np.int64), train_idx=np.arange(num_nodes),
                       val_idx=np.zeros(0, np.int64), test_idx=np.zeros(0, np.int64), num_classes=1)


def star_dataset() -> NodeDataset:
    """Node 0 linked both ways with 1, 2, 3, 4, 5, 6, 10, 11 and 12; nodes 7, 8, 9 and 13 .. 19 have no edge.

    A batch of the positive pair (1, 0) holds nodes 0, 1, the star's 8 other leaves and the negatives'
    endpoints off the star: 10 to 12 nodes, and 2 to 4 seeds. Keyed with any node count B below the graph's
    20, the pair (1, 0) is ``1 * B + 0 = B``, and so is the edge 0 -> B (``0 * B + B``), an edge of the batch's
    blocks for each of those counts (B = 2, 3, 4, 10, 11, 12)."""
    return hand_dataset([0] * 9, [1, 2, 3, 4, 5, 6, 10, 11, 12], 20)


def test_a_batch_loses_its_target_pairs_and_no_edge_whose_key_would_collide_under_a_smaller_node_count(solo_comm):
    dataset = star_dataset()
    cfg = replace(CFG, fanouts=(-1, -1), batch_size=1)
    task = build_link_task(TaskContext(part=whole_partition(dataset), cfg=cfg,
                                       settings=LinkConfig(edge_split=(1.0, 0.0, 0.0)), comm=solo_comm,
                                       partition_dir=None, shared_batches=False))
    layout = one_worker(task.part, None, cfg, solo_comm, HOST)
    pipeline = Pipeline(task, layout, BuiltinBlockInputs(), HOST, 0)
    pos = torch.tensor([[1], [0]])
    assert (1, 0) in edge_set(task.edges.train)
    steps = [Step(items=pos, key=derive_key(cfg.seed, 0, i)) for i in range(4)]
    counts = set()
    for step, (batch, _) in zip(steps, pipeline.batches(steps, PhaseTimer(), training=True)):
        before = unexcluded_blocks(task, layout, step)
        counts |= {len(task.plan_seeds(step, True).seeds), *(block.num_src for block in before)}
        assert {(0, 1), (1, 0)} <= set().union(*block_edge_lists(before))  # the target pair, both ways
        assert_only_target_pairs_left_out(before, batch.blocks, pos)
    assert counts <= {2, 3, 4, 10, 11, 12}  # each a colliding count (star_dataset's docstring)


def test_a_split_folders_negatives_are_paired_with_their_own_positives_source(tmp_path, solo_comm):
    # The path 0 - 1 - 2 - 3 - 4 - 5 - 6 - 7 and the chords 0 - 4, 2 - 6. Validation 1 -> 2 and 4 -> 5, test
    # 0 -> 4 and 6 -> 7, each positive with its own 3 negative destinations (OGB's target_node_neg [2, 3]).
    dataset = hand_dataset([0, 1, 2, 3, 4, 5, 6, 0, 2], [1, 2, 3, 4, 5, 6, 7, 4, 6], 8)
    for name, src, dst, neg in (("train", [0, 2], [1, 3], None), ("valid", [1, 4], [2, 5], [[7, 3, 0], [6, 1, 2]]),
                                ("test", [0, 6], [4, 7], [[3, 5, 6], [0, 2, 4]])):
        arrays = {"source_node": np.array(src), "target_node": np.array(dst)}
        np.savez(tmp_path / f"{name}.npz", **arrays, **({} if neg is None else {"target_node_neg": np.array(neg)}))
    task = build_link_task(TaskContext(part=whole_partition(dataset), cfg=CFG,
                                       settings=LinkConfig(link_split=str(tmp_path), metric="mrr"), comm=solo_comm,
                                       partition_dir=None, shared_batches=False))
    val, test = task.edges.val, task.edges.test
    assert val.pos.tolist() == [[1, 4], [2, 5]] and val.neg.tolist() == [[1, 1, 1, 4, 4, 4], [7, 3, 0, 6, 1, 2]]
    assert test.pos.tolist() == [[0, 6], [4, 7]] and test.neg.tolist() == [[0, 0, 0, 6, 6, 6], [3, 5, 6, 0, 2, 4]]
    # Training and message passing: the rest, 0 - 1, 2 - 3, 3 - 4, 5 - 6 and 2 - 6, both ways.
    rest = both_ways({(0, 1), (2, 3), (3, 4), (5, 6), (2, 6)})
    assert edge_set(task.edges.train) == rest and graph_edges(task.part.topology) == rest


def test_the_epoch_metric_is_the_full_neighborhood_score_of_the_trained_model(dataset):
    link = LinkConfig(neg_ratio=1, eval_negatives=3)
    model = link_model(dataset)
    report = fit(model, dataset, inputs="blocks", config=CFG, progress=False, task=link)
    last = report.history[-1]
    assert last["metric"] == "roc_auc" and "val_acc" not in last
    # The oracle: every node's embedding over its whole neighborhood in the message-passing graph (the
    # dataset's without the held-out pairs in either direction, built here), the split's pairs and
    # negatives recomputed, and the metric of numpy's scores.
    _, edges = link_partition(whole_partition(dataset), link, CFG.seed, None, 0)
    held = both_ways(edge_set(edges.val.pos) | edge_set(edges.test.pos))
    kept = np.array(sorted(graph_edges(dataset.graph) - held)).T
    message_passing = csc_from_coo(kept[0], kept[1], dataset.graph.num_nodes)
    model.eval()
    nodes = np.arange(dataset.graph.num_nodes)
    blocks = sample_blocks(message_passing, nodes, (-1, -1), key=0)
    with torch.no_grad():
        h = model(blocks, torch.from_numpy(dataset.features[blocks[0].src_ids.numpy()]))
    for split in ("val", "test"):
        pairs = edges.split(split)
        pos = model.score(h[pairs.pos[0]], h[pairs.pos[1]]).numpy()
        neg = model.score(h[pairs.neg[0]], h[pairs.neg[1]]).numpy()
        assert pairs.neg.shape[1] == 3 * pairs.pos.shape[1]
        assert last[f"{split}_score"] == pytest.approx(link_score("roc_auc", pos, neg), abs=1e-6)
    best = max(report.history, key=lambda h: (h["val_score"], h["epoch"]))
    assert (report.best_epoch, report.best_val_acc) == (best["epoch"], best["val_score"])
    assert set(report.to_json()) >= {"metric", "best_val_score", "test_score_at_best_val", "final_test_score"}


def test_a_resumed_link_run_equals_the_uninterrupted_one_and_refuses_a_changed_link_setting(dataset, tmp_path):
    link = LinkConfig(neg_ratio=2, neg_sampling="per_source", link_loss="softmax", decoder="mlp", metric="mrr")
    cfg = replace(CFG, epochs=2)
    whole = fit(link_model(dataset, decoder="mlp"), dataset, inputs="blocks", config=cfg, progress=False, task=link)
    ckpt = tmp_path / "run.ckpt"
    first = fit(link_model(dataset, decoder="mlp"), dataset, inputs="blocks", config=replace(cfg, epochs=1),
                progress=False, task=link, outputs=RunOutputs(checkpoint=ckpt, checkpoint_every=2))
    # A link setting is part of the run: a resume that changes one is refused, naming it (and the file is kept).
    with pytest.raises(ValueError, match=r"was written with model\.link\.neg_ratio=2, this run has "
                                         r"model\.link\.neg_ratio=3; resume with the same --neg-ratio"):
        fit(link_model(dataset, decoder="mlp"), dataset, inputs="blocks", config=cfg, progress=False,
            task=replace(link, neg_ratio=3), outputs=RunOutputs(checkpoint=ckpt, resume=True))
    resumed = fit(link_model(dataset, decoder="mlp"), dataset, inputs="blocks", config=cfg, progress=False, task=link,
                  outputs=RunOutputs(checkpoint=ckpt, resume=True))
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in whole.history]
    assert [(h["val_score"], h["test_score"]) for h in resumed.history] == \
           [(h["val_score"], h["test_score"]) for h in whole.history]
    assert first.history[0]["loss"] == whole.history[0]["loss"] and whole.metric == "mrr"


SYNTH = ["--dataset", "synthetic", "-o", "num_nodes=300", "-o", "feature_dim=8", "-o", "num_classes=3"]


@pytest.mark.parametrize("argv, line", [
    (["--task", "link", "--neg-ratio", "0"], "--neg-ratio: expected an int >= 1 negatives per positive, got 0"),
    (["--task", "link", "--edge-split", "0.8,0.1,0.05"], "--edge-split: the fractions train,val,test must sum to 1"),
    (["--task", "link", "--edge-split", "1.2,-0.1,-0.1"], "--edge-split: expected fractions >= 0"),
    (["--task", "link", "--edge-split", "0,0.5,0.5"], "--edge-split: a train fraction of 0 leaves no training edge"),
    (["--task", "link", "--link-loss", "softmax"], "--link-loss: softmax ranks each positive against its own "
                                                   "negatives; add --neg-sampling per_source"),
    (["--task", "link", "--metric", "hits@0"], "--metric: expected roc_auc, ap, mrr or hits@K"),
    (["--neg-ratio", "2"], "--neg-ratio: applies to --task link"),
    (["--task", "link", "--partitions", "P", "--layout", "split"],
     "--task: --task link trains with --layout hybrid or vanilla, got --layout split"),
    (["--task", "link", "--partitions", "P", "--layout", "1.5d"],
     "--task: --task link trains with --layout hybrid or vanilla, got --layout 1.5d"),
    (["--task", "link", "--partitions", "P", "--dgs"], "--task: --task link trains without --dgs"),
    (["--task", "link", "--eval", "full"], "--eval: --eval full scores nodes"),
], ids=["neg-ratio-0", "split-sum", "split-negative", "no-train", "softmax-uniform", "hits0", "node-task",
        "split-layout", "matrix-layout", "dgs", "eval-full"])
def test_bad_link_input_is_one_line_naming_the_flag(argv, line, capsys):
    data = [] if "--partitions" in argv else SYNTH
    assert main(["train", "--quiet", "--epochs", "1", *data, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gnnscale train: error: {line}") and err.count("\n") == 1, err


def test_a_split_file_missing_a_key_is_one_line_at_the_cli(tmp_path, capsys):
    pairs = {"source_node": np.array([0]), "target_node": np.array([1])}
    for name, arrays in (("train", pairs), ("valid", pairs), ("test", {"source_node": np.array([1])})):
        np.savez(tmp_path / f"{name}.npz", **arrays)
    assert main(["train", "--quiet", "--epochs", "1", *SYNTH, "--task", "link", "--link-split", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gnnscale train: error: --link-split: ") and "test has no 'target_node'" in err, err
    assert err.count("\n") == 1


def test_the_cli_trains_a_link_task_and_writes_its_metric(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["train", *SYNTH, "--task", "link", "--epochs", "1", "--fanouts", "4,3", "--hidden", "16",
                 "--metric", "ap", "--metrics-out", str(out), "--threads", "1"]) == 0
    text = capsys.readouterr().out
    metrics = json.loads(out.read_text())
    assert metrics["task"] == "link" and metrics["metric"] == "ap"
    assert f"val ap {metrics['history'][0]['val_score']:.4f}" in text
    assert f"final: test ap {metrics['final_test_score']:.4f}" in text


def test_two_threads_train_a_link_model_the_same_twice(dataset):
    """The pairs' embeddings are gathered with index_select: the backward of ``h[src]`` (index_put_ with
    accumulate) adds rows in an order that varies between runs on 2 CPU threads."""
    cfg = replace(CFG, threads=2, epochs=1, evaluate=False)
    link = LinkConfig(decoder="mlp", neg_ratio=3)
    losses = [fit(link_model(dataset, decoder="mlp"), dataset, inputs="blocks", config=cfg, progress=False,
                  task=link).history[0]["iteration_losses"] for _ in range(2)]
    assert losses[0] == losses[1]


def test_fit_takes_task_link_as_the_default_link_config(dataset):
    cfg = replace(CFG, epochs=1, evaluate=False)
    by_name, by_config = (fit(link_model(dataset), dataset, inputs="blocks", config=cfg, progress=False, task=task)
                          for task in ("link", LinkConfig()))
    assert by_name.history[0]["iteration_losses"] == by_config.history[0]["iteration_losses"]
    with pytest.raises(ValueError, match="^task: expected 'node', 'link' or a LinkConfig, got 'edge'$"):
        fit(link_model(dataset), dataset, inputs="blocks", config=cfg, progress=False, task="edge")
    with pytest.raises(ValueError, match="^task: a LinkModel trains a link task"):
        fit(link_model(dataset), dataset, inputs="blocks", config=cfg, progress=False)
