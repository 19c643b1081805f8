"""Worker function for tests/distributed/test_matrix_distributed.py, run in spawned processes (see dist_workers.py):
the 1.5D samplers and feature store against the single-process matrix samplers on the whole graph."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from gnnscale.distributed import Comm, init_for_test, shutdown
from gnnscale.distributed.matrix.grid15d import build_15d
from gnnscale.partition import load_partition
from gnnscale.sampling import derive_key
from gnnscale.sampling.matrix import LadiesSampler, MatrixSampler
from gnnscale.train.layouts.matrix import column_store

FANOUTS = (4, 3)
LAYER_SIZES = (40, 40)
BULK = 3


# LADIES on the device: its weights are the host's within a float32 rounding (docs/matrix_sampling.md).
DEVICE_WEIGHT_RTOL = 2.0**-22


def same_blocks(got, want, what: str, weights_rtol: float = 0.0) -> None:
    assert len(got) == len(want), what
    for b, (batch_got, batch_want) in enumerate(zip(got, want)):
        for layer, (g, w) in enumerate(zip(batch_got, batch_want, strict=True)):
            where = f"{what}: batch {b} layer {layer}"
            assert g.num_dst == w.num_dst, where
            for name in ("indptr", "indices", "src_ids"):
                assert torch.equal(getattr(g, name).long(), getattr(w, name).long()), f"{where}: {name}"
            if w.edge_weight is None:
                assert g.edge_weight is None, where
            else:
                torch.testing.assert_close(g.edge_weight, w.edge_weight, rtol=weights_rtol, atol=0,
                                           msg=f"{where}: edge_weight")


def compare_15d_with_single_process(partition_dir: str, rank: int, world_size: int, port: int) -> dict:
    """For C in 1, 2, 4: the 1.5D GraphSAGE and LADIES blocks of this worker's stack, sampled on the host and
    on the device (torch ops on CPU tensors: the path a GPU runs), equal the single-process samplers' on the
    whole graph (LADIES' weights on the device within rounding), with the same rounds; the fetched features
    equal the whole feature matrix's rows; returns the sample bytes this worker moved per C."""
    ctx = init_for_test(rank, world_size, port, timeout_s=60.0)
    try:
        comm = Comm(ctx)
        part = load_partition(partition_dir, rank, "own")
        graph = load_partition(partition_dir, rank, "whole").topology
        features = np.concatenate([load_partition(partition_dir, q, "own").features for q in range(world_size)])
        seeds = list(torch.from_numpy(part.train_idx.copy()).split(16))[:BULK + 1]
        keys = [derive_key(7, 0, step, rank) for step in range(len(seeds))]
        sage = MatrixSampler(graph, FANOUTS, bulk=BULK).sample_many(seeds, keys)
        ladies = LadiesSampler(graph, LAYER_SIZES, bulk=BULK, self_loops=True).sample_many(seeds, keys)
        sample_bytes = {}
        for c in (1, 2, 4):
            for (name, want), device in itertools.product((("matrix", sage), ("ladies", ladies)), (None, "cpu")):
                layout = build_15d(partition_dir, part, comm, c, sampler=name, fanouts=FANOUTS,
                                   inference_fanouts=FANOUTS, bulk=BULK, replace=False, layer_sizes=LAYER_SIZES,
                                   self_loops=True, device=None if device is None else torch.device(device))
                store = column_store(layout)
                layout.column.stats.snapshot_and_reset()
                got = layout.sampler.sample_many(seeds, keys)
                counts = layout.column.stats.snapshot_and_reset()["sample"]
                rtol = DEVICE_WEIGHT_RTOL if device is not None and name == "ladies" else 0.0
                same_blocks(got, want, f"C={c} {name} on {device or 'the host'}", rtol)
                assert counts["rounds"] == 2 * len(FANOUTS), counts  # ids out, rows back, per hop
                if name == "matrix" and device is None:
                    sample_bytes[c] = counts["bytes_sent"] + counts["bytes_received"]
                    x = store.gather(got[0][0].src_ids)
                    assert torch.equal(x, torch.from_numpy(features[got[0][0].src_ids.numpy()])), f"C={c} features"
        return sample_bytes
    finally:
        shutdown()
