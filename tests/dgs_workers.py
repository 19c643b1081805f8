"""Worker functions for tests/distributed/test_distributed_dgs.py (DGS on real processes), run by
``test_distributed.spawn_run``: ``fn(rank, world_size, port)``, assertions inside, the process group
closed in a ``finally``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dist_workers import FEATURE_DIM, NUM_NODES, PG_TIMEOUT_S, assert_blocks_equal, make_book, make_features, \
    make_graph, only, part_rows
from gnnscale.distributed import Comm, HybridSampler, init_for_test, shutdown
from gnnscale.distributed.dgs.sampling import DGSHybridSampler, DGSVanillaSampler, policy_for
from gnnscale.distributed.dgs.explainer import ExplainConfig, Masks, OnlineExplainer
from gnnscale.distributed.dgs.explanation import build_cluster_map, build_cluster_map_local, build_explanation_graph
from gnnscale.features.dgs import FeatureSampledStore
from gnnscale.features.partitioned import PartitionedFeatureStore
from gnnscale.nn import ModelConfig, build_model
from gnnscale.partition.directory import LocalPartition, PartRows
from gnnscale.sampling import derive_key, sample_blocks
from gnnscale.sampling.dgs import sample_blocks_dgs

CLUSTERS = 4  # per part
FANOUTS = (5, 3)
ITERATION = 30


def local_partition(rank: int, world_size: int, view: str) -> LocalPartition:
    """This worker's part of the shared test graph, as ``load_partition`` would give it."""
    graph, book, features = make_graph(), make_book(world_size), make_features()
    lo, hi = book.node_range(rank)
    if view == "whole":
        topology = graph
    else:
        indptr, indices = part_rows(graph, book, rank)
        topology = PartRows(local_indptr=indptr, local_indices=indices, node_offset=lo, num_nodes=NUM_NODES)
    ids = np.arange(lo, hi, dtype=np.int64)
    return LocalPartition(dataset_name="test", book=book, part=rank, view=view, topology=topology,
                          features=features[lo:hi], labels=ids % 3, train_idx=ids[::2], val_idx=ids[1::4],
                          test_idx=ids[3::4], num_classes=3)


def made_masks(clusters, rank: int, iteration: int = ITERATION, fingerprint: str | None = None) -> Masks:
    """Masks as an explainer would give them: weights spread over two orders of magnitude."""
    rng = np.random.default_rng(1000 + rank + iteration)
    return Masks(part=rank, iteration=iteration,
                 fingerprint=clusters.graph_fingerprint(rank) if fingerprint is None else fingerprint,
                 cluster_weight=np.exp(rng.uniform(-2.3, 2.3, clusters.num_clusters)),
                 feature_importance=rng.random(FEATURE_DIM).astype(np.float32), loss=0.0, epochs=1, seconds=0.0,
                 cpu_seconds=0.0)


def check_dgs(rank: int, world_size: int, port: int) -> dict:
    ctx = init_for_test(rank, world_size, port, timeout_s=PG_TIMEOUT_S)
    try:
        comm = Comm(ctx)
        clusters = check_cluster_map(comm)
        check_samplers(comm, clusters)
        check_feature_store(comm, clusters)
        return check_online_explanation(comm, clusters)
    finally:
        shutdown()


def check_cluster_map(comm: Comm):
    """Every worker learns the same clusters as the single-process construction, in 2 setup rounds,
    whichever view of the partition it loaded."""
    rank, world = comm.rank, comm.world_size
    expected = build_cluster_map_local(make_graph(), make_book(world), make_features(), CLUSTERS)
    for view in ("whole", "own"):
        comm.stats.snapshot_and_reset()
        got = build_cluster_map(local_partition(rank, world, view), comm, CLUSTERS)
        assert only(comm.stats.snapshot_and_reset(), "setup")["rounds"] == 2
        assert got.fingerprint == expected.fingerprint
        assert np.array_equal(got.node_cluster, expected.node_cluster)
        np.testing.assert_allclose(got.cluster_mean, expected.cluster_mean, rtol=1e-5, atol=1e-6)
        assert np.array_equal(got.cluster_size, expected.cluster_size)
    return got


def check_samplers(comm: Comm, clusters) -> None:
    """Hybrid and vanilla DGS samplers draw the single-process DGS blocks (vanilla owners with the
    requester's masks); the mask exchange is 1 sample round; foreign or stale masks are refused."""
    rank, world = comm.rank, comm.world_size
    graph, book = make_graph(), make_book(world)
    lo, hi = book.node_range(rank)
    indptr, indices = part_rows(graph, book, rank)
    hybrid = DGSHybridSampler(graph, book, rank, FANOUTS, clusters, epsilon=0.2)
    vanilla = DGSVanillaSampler(book, rank, indptr, indices, FANOUTS, comm, clusters, epsilon=0.2)
    comm.stats.snapshot_and_reset()
    masks = made_masks(clusters, rank)
    seeds = torch.from_numpy(np.random.default_rng(300 + rank).choice(np.arange(lo, hi), 12, replace=False))
    key = derive_key(5, 0, 1, rank)

    # Before any masks: plain sampling in both layouts.
    plain = sample_blocks(graph, seeds, FANOUTS, key=key)
    assert_blocks_equal(hybrid.sample(seeds, key), plain)
    assert_blocks_equal(vanilla.sample(seeds, key), plain)
    comm.stats.snapshot_and_reset()

    hybrid.refresh(masks)
    vanilla.refresh(masks)
    assert only(comm.stats.snapshot_and_reset(), "sample")["rounds"] == 1  # the exchange, once per refresh
    expected = sample_blocks_dgs(graph, seeds, FANOUTS, key=key, policy=policy_for(masks, clusters, rank, 0.2))
    assert_blocks_equal(hybrid.sample(seeds, key), expected)
    assert_blocks_equal(vanilla.sample(seeds, key), expected)
    assert only(comm.stats.snapshot_and_reset(), "sample")["rounds"] == 2 * (len(FANOUTS) - 1)
    assert not all(torch.equal(a.indices, b.indices) and torch.equal(a.src_ids, b.src_ids)
                   for a, b in zip(expected, plain)), "the masks did not change the blocks"

    # An owner holding another version of a requester's masks refuses to sample (local check).
    other = (rank + 1) % world
    with pytest.raises(ValueError, match=rf"masks: rank {other} samples with its masks of iteration 7, this worker "
                                         rf"\(rank {rank}\) holds its masks of iteration {ITERATION}"):
        vanilla._answer(other, np.array([key, 7, lo], dtype=np.int64), 3, 1)
    # Masks of another worker, or of another clustering, are refused before any collective.
    foreign = made_masks(clusters, other)
    for sampler in (hybrid, vanilla):
        with pytest.raises(ValueError, match=rf"masks: computed on explanation graph .*\(part {other}\), but this "
                                             rf"worker's is .*\(part {rank}\)"):
            sampler.refresh(foreign)
        with pytest.raises(ValueError, match=r"masks: computed on explanation graph 0123456789abcdef/part"):
            sampler.refresh(made_masks(clusters, rank, fingerprint=f"0123456789abcdef/part{rank}"))
    # One worker alone passing foreign masks: every worker raises after the exchange, none is left waiting.
    bad = world - 1
    expected = (r"masks: computed on explanation graph" if rank == bad
                else rf"masks: rank {bad} passed masks of another explanation graph to refresh\(\)")
    with pytest.raises(ValueError, match=expected):
        vanilla.refresh(foreign if rank == bad else masks)
    vanilla.refresh(None)  # collective again: back to plain sampling everywhere
    assert_blocks_equal(vanilla.sample(seeds, key), plain)
    comm.stats.snapshot_and_reset()


def check_feature_store(comm: Comm, clusters) -> None:
    """Remote rows arrive on the kept dimensions only, dropped ones hold the row's cluster mean, local
    rows are whole; 2 rounds, and exactly the bytes of the narrower rows plus the bitmask."""
    rank, world = comm.rank, comm.world_size
    full, book = make_features(), make_book(world)
    lo, hi = book.node_range(rank)
    store = FeatureSampledStore(book, rank, full[lo:hi], comm, clusters)
    plain_store = PartitionedFeatureStore(book, rank, full[lo:hi], comm)
    comm.stats.snapshot_and_reset()
    dims = np.array([0, 2, 3, 5, 7])  # 5 of FEATURE_DIM = 8
    ids_of = [np.random.default_rng(400 + r).choice(NUM_NODES, 50 + 7 * r, replace=False) for r in range(world)]
    ids = torch.from_numpy(ids_of[rank])

    got = store.gather(ids, dims)
    counts = only(comm.stats.snapshot_and_reset(), "feature")
    assert (counts["rounds"], counts["calls"]) == (2, 4)
    owner = book.owner(ids_of[rank])
    remote = owner != rank
    expected = full[ids_of[rank]].copy()
    dropped = np.setdiff1d(np.arange(FEATURE_DIM), dims)
    expected[np.ix_(remote, dropped)] = clusters.cluster_mean[clusters.node_cluster[ids_of[rank][remote]]][:, dropped]
    torch.testing.assert_close(got, torch.from_numpy(expected), rtol=0, atol=0)

    # Bytes: requests are 1 + n int64 words (bitmask, ids) per owner asked; replies 5 float32 per row.
    def asked(r, p):  # rows worker r asks of worker p
        return int((book.owner(ids_of[r]) == p).sum()) if r != p else 0

    def request(n):  # a request costs the bitmask word and the ids; no ids, no request
        return 8 * (1 + n) if n else 0

    k, peers, sizes = len(dims), [p for p in range(world) if p != rank], 2 * 8 * (world - 1)
    sent = sizes + sum(request(asked(rank, p)) + 4 * k * asked(p, rank) for p in peers)
    received = sizes + sum(request(asked(p, rank)) + 4 * k * asked(rank, p) for p in peers)
    assert (counts["bytes_sent"], counts["bytes_received"]) == (sent, received)

    # dims=None is the plain fetch: same rows, same bytes.
    whole = store.gather(ids)
    plain_counts = only(comm.stats.snapshot_and_reset(), "feature")
    torch.testing.assert_close(whole, plain_store.gather(ids), rtol=0, atol=0)
    assert plain_counts == only(comm.stats.snapshot_and_reset(), "feature")
    assert plain_counts["bytes_received"] > counts["bytes_received"] or not remote.any()

    # Half-precision parts (a bfloat16 tensor, float16 numpy): the kept columns travel as stored and are
    # widened on arrival; dropped ones still hold the float32 cluster mean.
    for half in (torch.from_numpy(full[lo:hi]).to(torch.bfloat16), full[lo:hi].astype(np.float16)):
        half_store = FeatureSampledStore(book, rank, half, comm, clusters)
        rounded = torch.from_numpy(full).to(half.dtype if isinstance(half, torch.Tensor) else torch.float16).float()
        expected_half = rounded.numpy()[ids_of[rank]].copy()
        expected_half[np.ix_(remote, dropped)] = expected[np.ix_(remote, dropped)]
        torch.testing.assert_close(half_store.gather(ids, dims), torch.from_numpy(expected_half), rtol=0, atol=0)
    comm.stats.snapshot_and_reset()

    for bad, match in (([3, 1], r"dims: expected sorted unique dimension ids in \[0, 8\), got \[3, 1\]"),
                       ([0, 8], r"dims: expected sorted unique dimension ids in \[0, 8\)"),
                       ([], r"dims: expected a non-empty 1-D array")):
        with pytest.raises(ValueError, match=match):
            store.gather(ids, np.array(bad, dtype=np.int64))
    assert not any(any(c.values()) for c in comm.stats.snapshot_and_reset().values())


def check_online_explanation(comm: Comm, clusters) -> dict:
    """End to end on real masks: the explanation graph (probes sampled and fetched once), an online
    explanation of a model in a background thread, and both layouts sampling alike with its masks."""
    rank, world = comm.rank, comm.world_size
    part = local_partition(rank, world, "whole")
    graph, book = make_graph(), make_book(world)
    store = PartitionedFeatureStore(book, rank, part.features, comm)
    explained = build_explanation_graph(part, HybridSampler(graph, book, rank, FANOUTS), store, clusters,
                                        num_probes=16, seed=3)
    ids = explained.blocks[0].src_ids.numpy()
    torch.testing.assert_close(explained.x, torch.from_numpy(make_features()[ids]), rtol=0, atol=0)
    assert explained.num_probes == 16 and explained.num_super > 0

    def model_factory():
        torch.manual_seed(0)
        return build_model(ModelConfig(name="sage", in_dim=FEATURE_DIM, hidden_dim=16, num_classes=3, num_layers=2))

    model = model_factory()
    with OnlineExplainer(explained, model_factory, ExplainConfig(epochs=5)) as explainer:
        explainer.submit(model.state_dict(), ITERATION)
        masks = explainer.wait(ITERATION, timeout_s=60)
    lo, hi = book.node_range(rank)
    indptr, indices = part_rows(graph, book, rank)
    hybrid = DGSHybridSampler(graph, book, rank, FANOUTS, clusters)
    vanilla = DGSVanillaSampler(book, rank, indptr, indices, FANOUTS, comm, clusters)
    hybrid.refresh(masks)
    vanilla.refresh(masks)
    seeds = torch.arange(lo, hi, 9)
    for step in range(2):
        key = derive_key(9, 1, step, rank)
        assert_blocks_equal(vanilla.sample(seeds, key), hybrid.sample(seeds, key))
    return {"iteration": masks.iteration, "epochs": masks.epochs, "seconds": masks.seconds}
