"""Training on a device (``--device``, ``TrainConfig.device``): on the CPU every device setting is the
run without one, bit for bit; the copy stage is the identity there; a checkpoint resumes under another
device setting; a GPU that is absent is one line. The `gpu` tests compare a CUDA run with the CPU one
(they skip without CUDA; ``pytest -m gpu`` on a GPU machine)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from gnnscale.cli import main
from gnnscale.devices import resolve_device
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic
from gnnscale.nn import ModelConfig
from gnnscale.sampling import NeighborSampler
from gnnscale.train.api import fit
from gnnscale.train.checkpoints.files import on_host, previous_path, read_payload
from gnnscale.train.config import TrainConfig
from gnnscale.train.inputs import check_model_device, model_device, seeded_model
from gnnscale.train.run import RunOutputs
from gnnscale.train.stages import CopyStage, block_to, converted_to
from gnnscale.train.steps import Batch, Step
from gnnscale.train.tasks.node import NodeTargets

SMALL = dict(num_nodes=1200, avg_degree=8.0, num_classes=4, feature_dim=16, seed=3)
# --fanouts 4,3: two layers; dropout on, so that the keyed masks are part of what must match.
CLI = ["train", "--dataset", "synthetic", "-o", "num_nodes=800", "-o", "feature_dim=8", "-o", "num_classes=4",
       "--fanouts", "4,3", "--epochs", "2", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(SyntheticConfig(**SMALL))


def model_config(ds, kernels: str = "auto") -> ModelConfig:
    return ModelConfig(name="sage", in_dim=ds.feature_dim, hidden_dim=16, num_classes=ds.num_classes, num_layers=2,
                       dropout=0.2, kernels=kernels)


def config(**overrides) -> TrainConfig:
    return TrainConfig(**{**dict(fanouts=(4, 3), batch_size=128, epochs=2, lr=0.01, seed=7, threads=1), **overrides})


def trained(ds, cfg: TrainConfig, kernels: str = "auto", **outputs):
    return fit(seeded_model(model_config(ds, kernels), cfg.seed), ds, inputs="blocks", config=cfg,
               outputs=RunOutputs(**outputs), progress=False)


def numbers(report) -> list[tuple]:
    """What a run computed, epoch by epoch (not its timings)."""
    return [(h["loss"], h["iteration_losses"], h["train_acc"], h["val_acc"], h["test_acc"]) for h in report.history]


@pytest.mark.parametrize("kernels", ["numba", "torch"])
def test_device_cpu_and_auto_train_bit_for_bit_like_no_device(tmp_path, capsys, kernels):
    """Through the CLI: --device cpu and --device auto (the CPU on a machine without a GPU; the metrics file
    records the device the run chose) compute exactly the run without the flag, on both kernel paths
    (--kernels torch: the layers a GPU runs)."""
    runs = {}
    for device in (None, "cpu", "auto"):
        out = tmp_path / f"{kernels}-{device}.json"
        flag = [] if device is None else ["--device", device]
        assert main([*CLI, "--kernels", kernels, *flag, "--metrics-out", str(out)]) == 0
        metrics = json.loads(out.read_text())
        assert metrics["train"]["device"] == str(resolve_device(device))
        runs[device] = [(h["loss"], h["iteration_losses"], h["train_acc"], h["val_acc"], h["test_acc"])
                        for h in metrics["history"]]
    assert runs["cpu"] == runs[None] and runs["auto"] == runs[None]
    assert len(runs[None]) == 2
    capsys.readouterr()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: --device cuda runs")
def test_device_cuda_without_a_gpu_is_one_line_and_exit_2(capsys):
    assert main([*CLI, "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gnnscale train: error: --device: cuda asks for a GPU and none is available here")
    with pytest.raises(ValueError, match=r"device: cuda:1 asks for a GPU and none is available"):
        fit(nn.Linear(2, 2), make_synthetic(SyntheticConfig(num_nodes=50, feature_dim=2, num_classes=2)),
            inputs="blocks", config=config(device="cuda:1"), progress=False)


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:0 ", 0])
def test_a_device_that_is_no_device_name_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=rf"device: expected cpu, cuda, cuda:N or auto, got {bad!r}"):
        config(device=bad)


def test_a_model_split_over_devices_or_on_another_device_is_refused():
    """The meta device stands in for a GPU here: a model on two devices cannot train; one on another
    device than the run's is not moved silently."""
    split = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    with pytest.raises(ValueError, match=r"model: its parameters and buffers are on cpu, meta; gnnscale trains a "
                                         r"model on one device"):
        model_device(split)
    elsewhere = nn.Linear(2, 2, device="meta")
    with pytest.raises(ValueError, match=r"device: the model is on meta, this run trains on cpu; pass "
                                         r"device='meta' \(--device\) or give the model on the CPU"):
        check_model_device(elsewhere, torch.device("cpu"))
    check_model_device(nn.Linear(2, 2), torch.device("cpu"))  # on the run's device: accepted


def a_batch(ds) -> Batch:
    """One prepared batch as the one-process layout makes it: 2-hop blocks, their features and labels."""
    seeds = torch.arange(0, 40)
    blocks = NeighborSampler(ds.graph, (4, 3)).sample(seeds, 11)
    x = torch.from_numpy(np.asarray(ds.features)[blocks[0].src_ids.numpy()])
    return Batch(step=Step(items=seeds, key=11), blocks=blocks, x=x,
                 targets=NodeTargets(torch.from_numpy(np.asarray(ds.labels)[seeds.numpy()])), sampled_edges=0, comm={})


def test_the_copy_stage_on_the_cpu_is_the_identity(dataset):
    batch = a_batch(dataset)
    copier = CopyStage(torch.device("cpu")).stream_copy
    assert copier.stream is None
    sent = copier.send((batch, batch), CopyStage.map_tensors)
    assert sent.ready is None and sent.tensors == ()
    got, model_input = copier.receive(sent)
    assert got is batch and model_input is batch  # the same objects: nothing copied
    converted = object()  # a model's own form of the batch, whatever it is
    assert copier.receive(copier.send((batch, converted), CopyStage.map_tensors)) == (batch, converted)
    # Saved state: CPU tensors are written as they are, sharing their memory.
    state = {"w": torch.ones(3), "opt": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 0.1}]}}
    host = on_host(state)
    assert host["w"].data_ptr() == state["w"].data_ptr()
    assert host["opt"]["state"][0]["exp_avg"].data_ptr() == state["opt"]["state"][0]["exp_avg"].data_ptr()
    assert host["opt"]["param_groups"] == [{"lr": 0.1}]


def test_the_copy_stage_moves_every_tensor_a_step_reads(dataset):
    """What the copy stage sends through ``move`` on a GPU, checked with a move that copies on the CPU: every
    tensor of every block (edge weights included) and of a PyG batch, each once, the values unchanged."""
    batch = a_batch(dataset)
    moved = []

    def move(t):
        if not isinstance(t, torch.Tensor):  # PyG's apply() hands over the batch's numbers too
            return t
        moved.append(t)
        return t.clone()

    weighted = replace(batch.blocks[0], edge_weight=torch.rand(batch.blocks[0].num_edges))
    for block in (batch.blocks[1], weighted):
        moved.clear()
        copy = block_to(block, move)
        expected = [block.indptr, block.indices, block.src_ids] + ([] if block.edge_weight is None else
                                                                     [block.edge_weight])
        assert sorted(id(t) for t in moved) == sorted(id(t) for t in expected)
        for name in ("indptr", "indices", "src_ids", "edge_weight"):
            a, b = getattr(copy, name), getattr(block, name)
            assert (a is None and b is None) or (torch.equal(a, b) and a is not b)
        assert copy.num_dst == block.num_dst
    from gnnscale.train.pyg_inputs import pyg_batch

    data = pyg_batch(batch)
    tensors = {key: value for key, value in data.to_dict().items() if isinstance(value, torch.Tensor)}
    moved.clear()
    converted_to(data, move)
    assert sorted(id(t) for t in moved) == sorted(id(t) for t in tensors.values())
    assert all(torch.equal(data[key], value) and data[key] is not value for key, value in tensors.items())
    assert data.batch_size == 40 and data.num_sampled_nodes[0] == 40
    with pytest.raises(TypeError, match="device: the copy stage moves gnnscale Blocks, got str"):
        block_to("not a block", move)


def test_a_checkpoint_resumes_under_another_device_setting_exactly(dataset, tmp_path):
    """Written by a run on --device cpu mid-epoch, resumed with --device auto (here the CPU): the run
    continues bit for bit, through the CPU state the checkpoint holds (model, Adam's moments, the epoch's
    running sums), loaded onto the device the run trains on."""
    whole = trained(dataset, config(epochs=3))
    ckpt = tmp_path / "run.pt"
    trained(dataset, config(epochs=2, device="cpu"), checkpoint=ckpt, checkpoint_every=4)
    mid = tmp_path / "mid.pt"  # the save before the last one: epoch 1, 2 of its 6 iterations done
    mid.write_bytes(previous_path(ckpt).read_bytes())
    payload = read_payload(mid)
    assert (payload["epoch"], payload["step"]) == (1, 2)
    assert "device" not in payload["signature"]["train"]  # not part of what a resume must match
    assert all(t.device.type == "cpu" for t in payload["model_state"].values())
    resumed = trained(dataset, config(epochs=3, device="auto"), checkpoint=mid, resume=True)
    assert numbers(resumed) == numbers(whole)


# --- what a run on a GPU sets, and gives back ----------------------------------------------------------------


def test_a_gpu_run_forks_every_visible_gpus_generator_and_a_cpu_run_none(monkeypatch):
    """torch.manual_seed, which the loop calls before each step of a model of one's own, reseeds every GPU's
    generator: a run on a GPU (or where CUDA is initialised) gives them all back; a CPU run forks none (that
    would initialise CUDA). Two GPUs stand in here."""
    from gnnscale.train.run import forked_gpus

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert forked_gpus(torch.device("cuda", 1)) == [0, 1]
    assert forked_gpus(torch.device("cpu")) == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert forked_gpus(torch.device("cpu")) == [0, 1]


def test_deterministic_kernels_are_on_inside_a_gpu_run_and_the_callers_setting_is_back_after(dataset, monkeypatch):
    """A run on CUDA switches torch to its deterministic kernels (index_add_ and index_select's backward use
    float atomics otherwise), warning rather than stopping on an operation without one; here the CPU run is
    made to take that branch, and the model of one's own sees the setting. The caller's setting (on, not
    warn-only) is back afterwards; a CPU run leaves it alone."""
    import torch.utils.deterministic

    from gnnscale.train import setup
    from gnnscale.train.run import needs_deterministic_kernels

    assert needs_deterministic_kernels(torch.device("cuda")) and needs_deterministic_kernels(torch.device("cuda", 3))
    assert not needs_deterministic_kernels(torch.device("cpu"))
    seen = []

    class Recording(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(dataset.feature_dim, dataset.num_classes)

        def forward(self, blocks, x):
            seen.append((torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled(),
                         torch.utils.deterministic.fill_uninitialized_memory))
            return self.lin(x[:blocks[-1].num_dst])

    def run():
        fit(Recording(), dataset, inputs="blocks", config=config(epochs=1, evaluate=False), progress=False)

    monkeypatch.setattr(setup, "needs_deterministic_kernels", lambda device: True)
    torch.use_deterministic_algorithms(True)
    try:
        run()
        assert set(seen) == {(True, True, False)}
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.utils.deterministic.fill_uninitialized_memory
    seen.clear()
    run()
    assert set(seen) == {(True, True, False)} and not torch.are_deterministic_algorithms_enabled()
    monkeypatch.setattr(setup, "needs_deterministic_kernels", needs_deterministic_kernels)
    seen.clear()
    run()
    assert set(seen) == {(False, False, True)}


# --- sampling on the device, feature rows held there -------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(sample_on="device"), dict(sample_on="device", gpu_cache_fraction=0.4),
                                dict(gpu_cache_fraction=1.0)], ids=["device", "device+cache", "cache"])
def test_sampling_and_rows_on_the_device_train_bit_for_bit_like_the_host(dataset, kw):
    """--sample-on device (the device sampler: the fused kernel's blocks in torch ops) and --gpu-cache-fraction
    (hot rows held on the device, the rest gathered on the host), here with --device cpu: the run of the
    host sampler and gather, bit for bit."""
    assert numbers(trained(dataset, config(**kw))) == numbers(trained(dataset, config(sample_on="host")))


@pytest.mark.parametrize("sampler, kw", [("matrix", dict(bulk=3)), ("ladies", dict(bulk=2, layer_size=64))])
def test_matrix_samplers_on_the_device_train_like_on_the_host(dataset, sampler, kw):
    """--sample-on device with --sampler matrix or ladies: the products in torch ops (here on CPU tensors).
    GraphSAGE's blocks are the host's, so is the run, bit for bit; LADIES' weights are the host's within a
    float32 rounding, so its losses are within 1e-6 and the rest alike."""
    cfg = config(sampler=sampler, **kw)
    device, host = trained(dataset, replace(cfg, sample_on="device")), trained(dataset, replace(cfg, sample_on="host"))
    if sampler == "matrix":
        assert numbers(device) == numbers(host)
        return
    for a, b in zip(device.history, host.history, strict=True):
        np.testing.assert_allclose(a["iteration_losses"], b["iteration_losses"], rtol=1e-6)
        assert a["sampled_edges"] == b["sampled_edges"]


def pyg_run(ds, cfg: TrainConfig):
    from fit_models import make_model  # PyG's GraphSAGE: imported where used, the gpu tests collect without PyG

    return fit(make_model("pyg", ds.feature_dim, ds.num_classes, 2), ds, inputs="pyg", config=cfg, progress=False)


def test_a_pyg_model_on_blocks_sampled_on_the_device_trains_bit_for_bit_like_the_host_run(dataset):
    """fit(..., inputs="pyg") with the device sampler (its blocks where the sampler runs, here the CPU, the node-wise
    batch drawn from them on the host) and the device cache in front of the rows: the host sampler's run."""
    assert numbers(pyg_run(dataset, config(sample_on="device"))) == numbers(pyg_run(dataset, config(sample_on="host")))


@pytest.mark.parametrize(("kw", "layout", "message"), [
    (dict(sample_on="device", sampler="two_step"), None, r"sample_on: --sample-on device draws the fused or matrix or "
                                                         r"ladies sampler's blocks; --sampler two_step samples on the "
                                                         r"host"),
    (dict(sample_on="gpu"), None, r"sample_on: expected one of \('auto', 'host', 'device'\)"),
    (dict(gpu_cache_fraction=-0.1), None, r"gpu_cache_fraction: expected a fraction of all nodes in \[0, 1\]"),
    (dict(sample_on="device"), "vanilla", r"sample_on: --sample-on device needs a layout whose workers sample on the "
                                          r"device \(--layout hybrid or 1d or 1.5d\); --layout vanilla samples on the "
                                          r"host"),
    (dict(sample_on="device"), "split", r"sample_on: --sample-on device needs .* \(--layout hybrid or 1d or 1.5d\); "
                                        r"--layout split samples on the host"),
])
def test_device_data_where_it_cannot_run_is_refused_naming_the_flag(kw, layout, message):
    from gnnscale.train.layouts import layout_options
    from gnnscale.train.layouts.registry import check_layout_options

    with pytest.raises(ValueError, match=message):
        check_layout_options(layout_options(layout or "hybrid"), config(**kw), "sage", 2)


# --- on a GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_a_run_on_cuda_trains_like_the_cpu_run(dataset, kernels):
    """The same batches, keyed dropout masks and Adam steps on the GPU: the losses within 1e-4 of the CPU
    run's (sums in another order), the accuracies alike, and the model left on the GPU."""
    cpu = trained(dataset, config(), kernels)
    model = seeded_model(model_config(dataset, kernels), 7)
    gpu = fit(model, dataset, inputs="blocks", config=config(device="cuda"), progress=False)
    assert model_device(model).type == "cuda"
    np.testing.assert_allclose([h["loss"] for h in gpu.history], [h["loss"] for h in cpu.history], rtol=1e-4)
    np.testing.assert_allclose([h["iteration_losses"] for h in gpu.history],
                               [h["iteration_losses"] for h in cpu.history], rtol=1e-4)
    for a, b in zip(gpu.history, cpu.history, strict=True):
        assert abs(a["val_acc"] - b["val_acc"]) <= 0.02 and abs(a["test_acc"] - b["test_acc"]) <= 0.02


@pytest.mark.gpu
def test_gpu_sampling_and_the_gpu_cache_train_like_the_cpu_run(dataset):
    """--sample-on device on the GPU draws the host sampler's blocks (bit for bit); with every row held on the
    GPU the losses are the CPU run's within 1e-4."""
    cpu = trained(dataset, config())
    gpu = trained(dataset, config(device="cuda", sample_on="device", gpu_cache_fraction=1.0))
    np.testing.assert_allclose([h["loss"] for h in gpu.history], [h["loss"] for h in cpu.history], rtol=1e-4)
    assert [h["sampled_edges"] for h in gpu.history] == [h["sampled_edges"] for h in cpu.history]


@pytest.mark.gpu
def test_the_copy_stage_on_cuda_sends_split_parallelisms_blocks(dataset):
    """One worker's splits of a mini-batch (one worker owns every vertex: no shuffle moves a row), layer 0's
    exchange done ahead on the host, through the copy stage to the GPU: every tensor of every split there, the
    input and the exchange's input one tensor, and the model's logits on the GPU within 1e-5 of the CPU's."""
    from gnnscale.distributed import Comm, cooperative_blocks, exchange_input_ahead, shutdown
    from gnnscale.distributed.context import init_single_process
    from gnnscale.partition.book import PartitionBook

    comm = Comm(init_single_process())
    try:
        seeds = torch.arange(0, 40)
        blocks = NeighborSampler(dataset.graph, (4, 3)).sample(seeds, 11)
        book = PartitionBook(offsets=np.array([0, dataset.graph.num_nodes], dtype=np.int64))
        coop = cooperative_blocks(blocks, book, comm)
        x = torch.from_numpy(np.asarray(dataset.features)[coop[0].split.src_ids.numpy()])
        coop[0] = exchange_input_ahead(coop[0], x, comm)
        labels = torch.from_numpy(np.asarray(dataset.labels)[coop[-1].split.dst_ids.numpy()])
        batch = Batch(step=Step(items=seeds, key=11), blocks=coop, x=x, targets=NodeTargets(labels), sampled_edges=0,
                      comm={})
        copier = CopyStage(torch.device("cuda", torch.cuda.current_device())).stream_copy
        got, model_input = copier.receive(copier.send((batch, batch), CopyStage.map_tensors))
        assert model_input is got and got.x.is_cuda and got.blocks[0].input_ahead.x is got.x
        for block in got.blocks:
            split = block.split
            assert all(t.is_cuda for t in (split.src_ids, split.degrees, split.indptr, split.indices,
                                            split.reference_ids, split.plan.send_index, split.plan.recv_index))
        model = seeded_model(model_config(dataset), 7).eval()
        with torch.no_grad():
            on_cpu = model(batch.blocks, batch.x)
            on_gpu = model.to(got.x.device)(got.blocks, got.x)
        torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-5, atol=1e-6)
    finally:
        shutdown()


@pytest.mark.gpu
def test_a_pyg_model_on_cuda_samples_there_and_trains_the_same_twice(dataset):
    """fit(..., inputs="pyg", device="cuda") with sample_on auto: the device sampler's blocks (on the GPU) become
    the node-wise batch; the blocks are the CPU run's (the same edges sampled), and a second run is the first
    bit for bit (deterministic kernels; the model's dropout draws from CUDA's generator, so not the CPU's
    masks)."""
    cpu = pyg_run(dataset, config())
    first, second = (pyg_run(dataset, config(device="cuda")) for _ in range(2))
    assert [h["sampled_edges"] for h in first.history] == [h["sampled_edges"] for h in cpu.history]
    assert numbers(first) == numbers(second)


@pytest.mark.gpu
def test_a_cuda_run_is_bit_for_bit_the_same_twice_and_no_kernel_it_runs_is_nondeterministic(dataset):
    """Deterministic kernels on the GPU (the torch-native aggregation's index_add_, index_select's backward):
    two runs give the same losses bit for bit, and torch warns of no operation without a deterministic kernel."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*does not have a deterministic implementation")
        first, second = (numbers(trained(dataset, config(device="cuda"), "torch")) for _ in range(2))
    assert first == second
    assert not torch.are_deterministic_algorithms_enabled()  # the caller's setting, back


@pytest.mark.gpu
def test_fit_on_cuda_gives_the_callers_cuda_generator_back(dataset):
    """The loop seeds torch (CPU and CUDA generators) before every step of a model of one's own; the caller's
    CUDA generator state is back after the run."""
    torch.cuda.manual_seed(123)
    torch.rand(5, device="cuda")  # an offset into the stream, not just a seed
    before = torch.cuda.get_rng_state()
    pyg_run(dataset, config(device="cuda", epochs=1, evaluate=False))  # its dropout draws from CUDA's generator
    assert torch.equal(torch.cuda.get_rng_state(), before)


@pytest.mark.gpu
def test_the_copy_stage_on_cuda_gives_the_batch_on_the_device(dataset):
    batch = a_batch(dataset)
    copier = CopyStage(torch.device("cuda", torch.cuda.current_device())).stream_copy
    sent = copier.send((batch, batch), CopyStage.map_tensors)
    got, model_input = copier.receive(sent)
    assert model_input is got and len(sent.tensors) == 2 + 3 * len(batch.blocks)
    assert got.x.is_cuda and got.y.is_cuda and all(b.indices.is_cuda and b.indptr.is_cuda for b in got.blocks)
    assert torch.equal(got.x.cpu(), batch.x) and torch.equal(got.y.cpu(), batch.y)
    for a, b in zip(got.blocks, batch.blocks, strict=True):
        assert torch.equal(a.indptr.cpu(), b.indptr) and torch.equal(a.indices.cpu(), b.indices)
        assert torch.equal(a.src_ids.cpu(), b.src_ids)
    assert got.step is batch.step  # the seeds stay on the host


def test_split_parallelism_trains_on_a_gpu_with_its_rows_cached_there():
    """--layout split takes --device cuda and --gpu-cache-fraction (a setting: whether a GPU is there is checked
    when the run starts); it samples on the host, so --sample-on device is refused (above)."""
    from gnnscale.train.layouts import layout_options
    from gnnscale.train.layouts.registry import check_layout_options

    for device in ("cuda", "cuda:0", "cpu", "auto"):
        check_layout_options(layout_options("split"), config(device=device, gpu_cache_fraction=0.25), "sage", 2)


def test_vanilla_and_dgs_train_on_a_gpu_sampling_on_the_host():
    """--layout vanilla takes --device cuda and --gpu-cache-fraction (its in-degrees gathered from every part);
    --dgs takes --device cuda and keeps its own sampling and fetch on the host: --sample-on device and
    --gpu-cache-fraction are refused with it, naming both flags."""
    from gnnscale.train.layouts import layout_options
    from gnnscale.train.layouts.dgs_config import DGSConfig
    from gnnscale.train.layouts.registry import check_layout_options

    for device in ("cuda", "cuda:0", "cpu", "auto"):
        check_layout_options(layout_options("vanilla"), config(device=device, gpu_cache_fraction=0.25), "sage", 2)
        for layout in ("hybrid", "vanilla"):
            check_layout_options(layout_options(layout, dgs=DGSConfig()), config(device=device), "sage", 2)
    for kw, flags in ((dict(sample_on="device"), "--sample-on device"),
                      (dict(gpu_cache_fraction=0.5), "--gpu-cache-fraction 0.5")):
        with pytest.raises(ValueError, match=rf"{flags} and --dgs: DGS samples and fetches with its own kernels on "
                                             r"the host; drop one of them"):
            check_layout_options(layout_options("hybrid", dgs=DGSConfig()), config(device="cuda", **kw), "sage", 2)


@pytest.mark.gpu
def test_training_on_a_gpu_gathers_features_straight_into_pinned_memory(dataset):
    from gnnscale.features.local import LocalFeatureStore

    ids = torch.tensor([5, 0, 9])
    rows = LocalFeatureStore(np.ascontiguousarray(dataset.features, dtype=np.float32), pinned=True).gather(ids)
    assert rows.is_pinned()
    assert torch.equal(rows, torch.from_numpy(np.asarray(dataset.features, dtype=np.float32)[ids.numpy()]))
