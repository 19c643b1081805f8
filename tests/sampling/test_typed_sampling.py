"""Typed sampling: the fused kernel with per-relation fanouts against its two-step per-relation baseline (the
same blocks), against the homogeneous kernel on a graph of one relation, against a by-hand count of draws per
relation, and the fanout forms (one list, PyG's dict, DGL's list of dicts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnscale.graph.csc import csc_from_coo
from gnnscale.graph.typed import typed_graph
from gnnscale.sampling import sample_blocks
from gnnscale.sampling.typed import TypedNeighborSampler, sample_typed_blocks, typed_fanouts


@pytest.fixture(scope="module")
def mag_like():
    """A small mag-like graph: papers, authors and fields of study, every relation with its reverse."""
    rng = np.random.default_rng(0)
    edges = {"author__writes__paper": (rng.integers(0, 200, 900), rng.integers(0, 300, 900)),
             "paper__cites__paper": (rng.integers(0, 300, 1200), rng.integers(0, 300, 1200)),
             "paper__has_topic__field": (rng.integers(0, 300, 500), rng.integers(0, 20, 500))}
    return typed_graph({"paper": 300, "author": 200, "field": 20}, edges, reverse=True)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.src_ids, y.src_ids) and x.num_dst == y.num_dst
        for p, q in zip(x.relations, y.relations, strict=True):
            assert torch.equal(p.dst, q.dst) and torch.equal(p.indptr, q.indptr) and torch.equal(p.indices, q.indices)


FANOUTS = [[3, 2], [-1, 0], "per-relation", "per-hop-dicts"]


@pytest.mark.parametrize("fanouts", FANOUTS, ids=["one-list", "all-none", "dict", "dgl"])
@pytest.mark.parametrize("replace", [False, True])
def test_fused_equals_the_two_step_per_relation_baseline(mag_like, fanouts, replace):
    if fanouts == "per-relation":
        fanouts = {str(rel): [r + 1, 2] for r, rel in enumerate(mag_like.relations)}
    elif fanouts == "per-hop-dicts":
        fanouts = [{rel: 1 for rel in mag_like.relations}, {rel: -1 for rel in mag_like.relations}]
    seeds = np.array([3, 17, 250, 400, 510, 301])  # papers, authors and a field
    for key in (0, 7, 123456789):
        assert_same(sample_typed_blocks(mag_like, seeds, fanouts, key=key, replace=replace),
                    sample_typed_blocks(mag_like, seeds, fanouts, key=key, replace=replace, method="two_step"))


@pytest.mark.parametrize("replace", [False, True])
def test_one_relation_samples_as_the_homogeneous_kernel(replace):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 100, 600), rng.integers(0, 100, 600)
    typed = typed_graph({"node": 100}, {"node__edge__node": (src, dst)})
    plain = csc_from_coo(src, dst, 100)
    seeds = np.array([1, 5, 9, 40])
    for a, b in zip(sample_typed_blocks(typed, seeds, [4, 3], key=11, replace=replace),
                    sample_blocks(plain, torch.from_numpy(seeds), (4, 3), key=11, replace=replace)):
        (rel,) = a.relations
        assert torch.equal(a.src_ids, b.src_ids) and torch.equal(rel.indices, b.indices)
        assert torch.equal(rel.indptr, b.indptr) and torch.equal(rel.dst, torch.arange(b.num_dst))


def test_high_degree_rows_draw_as_the_homogeneous_kernel():
    """Rows of hundreds of in-edges under a small fanout: the typed kernel's Floyd draw on a bitmap picks what the
    homogeneous kernel's scan of the draws so far picks."""
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 400, 12000), rng.integers(0, 40, 12000)  # 40 hubs of ~300 in-edges
    typed = typed_graph({"node": 400}, {"node__edge__node": (src, dst)})
    plain = csc_from_coo(src, dst, 400)
    seeds = np.arange(0, 40, 3)
    for a, b in zip(sample_typed_blocks(typed, seeds, [25, 10], key=5), sample_blocks(plain, torch.from_numpy(seeds),
                                                                                      (25, 10), key=5)):
        assert torch.equal(a.src_ids, b.src_ids) and torch.equal(a.relations[0].indices, b.indices)


def test_one_sampler_over_many_batches_equals_fresh_baselines(mag_like):
    """The fused sampler keeps its mapping array across batches (and past a batch that raised, and across the refill
    when its base nears the dtype's end): every batch equals the two-step baseline's."""
    sampler = TypedNeighborSampler(mag_like, [3, 2])
    rng = np.random.default_rng(3)
    for step in range(6):
        if step == 2:
            with pytest.raises(ValueError, match="seeds: expected unique node ids"):
                sampler.sample(np.array([5, 9, 5]), 1)
        if step == 4:
            sampler.workspace.base = int(np.iinfo(sampler.workspace.node_map.dtype).max) - 10
        seeds = rng.choice(mag_like.num_nodes, 8, replace=False)
        assert_same(sampler.sample(seeds, step), sample_typed_blocks(mag_like, seeds, [3, 2], key=step,
                                                                     method="two_step"))


def test_each_relation_draws_its_own_fanout(mag_like):
    """Per destination and relation: min(fanout, degree by that relation) distinct in-neighbors by it, counted
    from the graph by hand."""
    fanouts = {str(rel): [f] for rel, f in zip(mag_like.relations, [2, 5, 1, 3, 4, 6])}
    seeds = np.arange(0, 520, 7)
    (block,) = sample_typed_blocks(mag_like, seeds, fanouts, key=3)
    table = typed_fanouts(mag_like, fanouts)[0]
    for r, rel in enumerate(mag_like.relations):
        src_local, dst_local = mag_like.edges(rel)
        lo_src, lo_dst = mag_like.node_range(rel.src)[0], mag_like.node_range(rel.dst)[0]
        neighbors = {}
        for s, d in zip(src_local + lo_src, dst_local + lo_dst):
            neighbors.setdefault(int(d), set()).add(int(s))
        rb = block.relations[r]
        for i, pos in enumerate(rb.dst.tolist()):
            v = int(block.src_ids[pos])
            chosen = block.src_ids[rb.indices[rb.indptr[i]:rb.indptr[i + 1]]].tolist()
            have = neighbors.get(v, set())
            assert len(chosen) == min(table[r], len(have)) and set(chosen) <= have and len(set(chosen)) == len(chosen)
        # Every destination of the relation's type is in the relation's block, and only those.
        types = np.searchsorted(mag_like.type_offsets, block.dst_ids.numpy(), side="right") - 1
        assert rb.dst.tolist() == np.nonzero(types == mag_like.type_id(rel.dst))[0].tolist()


def test_fanout_forms_and_their_errors(mag_like):
    rels = mag_like.relations
    assert typed_fanouts(mag_like, [5, 2]).tolist() == [[5] * len(rels), [2] * len(rels)]
    by_dict = typed_fanouts(mag_like, {rel: [r, 1] for r, rel in enumerate(rels)})
    assert by_dict.tolist() == [list(range(len(rels))), [1] * len(rels)]
    with pytest.raises(ValueError, match="missing paper__rev_writes__author"):
        typed_fanouts(mag_like, {rel: [1] for rel in rels if rel.name != "rev_writes"})
    with pytest.raises(ValueError, match="the same number of hops for every relation"):
        typed_fanouts(mag_like, {rel: [1] * (1 + (r == 0)) for r, rel in enumerate(rels)})
    with pytest.raises(ValueError, match="relation: expected one of"):
        typed_fanouts(mag_like, {"paper__wrote__author": [1], **{rel: [1] for rel in rels}})
    with pytest.raises(ValueError, match="fanouts: expected every entry >= 0, or -1"):
        typed_fanouts(mag_like, [-2])
