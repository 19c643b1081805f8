"""Every script under benchmarks/ prints its ``--help`` (and every helper module there imports): a script
whose imports broke when the helpers it shares (benchmarks/distributed.py, emulated_link.py) changed
fails here, not in a user's run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
def test_every_benchmark_script_prints_its_help() -> None:
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 10, f"expected the benchmark scripts under {BENCHMARKS}"
    # One interpreter for all of them (torch is imported once): run each script's module with --help.
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "failed = []\n"
        "for path in sys.argv[1:]:\n"
        "    sys.argv = [path, '--help']\n"
        "    try:\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "        if '__main__' in open(path).read():  # a script, not a helper module\n"
        "            failed.append(f'{path}: --help did not exit')\n"
        "    except SystemExit as stop:\n"
        "        if stop.code not in (0, None):\n"
        "            failed.append(f'{path}: exit {stop.code}')\n"
        "    except Exception as error:\n"
        "        failed.append(f'{path}: {type(error).__name__}: {error}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *map(str, scripts)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"benchmark scripts that do not print --help:\n{done.stdout}\n{done.stderr[-3000:]}"


@pytest.mark.slow  # runs every stage in child processes: ~25 s
def test_scale_benchmark_reports_every_stage_with_sane_numbers(tmp_path: Path) -> None:
    """benchmarks/scale.py end to end on a tiny papers100M-shaped graph: every stage has a row, every
    peak RSS is positive, and the bytes on disk are the sizes of the files the stage left (--keep)."""
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(BENCHMARKS / "scale.py"), "--scales", "0.0005", "--feature-dim", "8",
           "--parts", "3", "--workers", "2", "--iterations", "2", "--layouts", "hybrid,vanilla", "--work-dir",
           str(tmp_path / "work"),
           "--keep", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["stage"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["generate", "partition kaminpar", "partition kaminpar (2)", "train hybrid", "train vanilla"]
    for row in rows.values():
        assert row["peak_rss_bytes"] > 0 and row["wall_s"] > 0 and row["edges_per_s"] > 0, row
        assert row["num_edges"] > row["num_nodes"] > 0, row
        assert f"| {row['stage']} |" in done.stdout  # the printed table has the row
    here = tmp_path / "work" / "papers100M_scale0.0005"
    for stage, directory in (("generate", "dataset"), ("partition kaminpar", "partition_kaminpar_3"),
                             ("partition kaminpar (2)", "partition_kaminpar_2")):
        on_disk = sum(p.stat().st_size for p in (here / directory).rglob("*") if p.is_file())
        assert rows[stage]["disk_bytes"] == on_disk > 0, stage
    assert "3 parts" in rows["partition kaminpar"]["note"] and "MB/it" in rows["train vanilla"]["note"]
    assert "MB/it" in rows["train hybrid"]["note"]


@pytest.mark.slow
def test_scale_benchmark_refuses_a_run_that_does_not_fit_on_disk(tmp_path: Path) -> None:
    # Scale 100: ~11 billion nodes, terabytes of files; refused before anything is written.
    cmd = [sys.executable, str(BENCHMARKS / "scale.py"), "--scales", "100", "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "GB are free" in done.stderr, done.stderr[-2000:]
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.slow  # runs every stage in child processes: ~25 s
def test_scale_benchmark_compares_metis_and_kaminpar_on_products(tmp_path: Path) -> None:
    """--products-compare alone (--scales ""), tiny: a row per method with the cut, the epoch and the
    bytes per iteration, METIS first (the ratios are against it), and no files left without --keep."""
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(BENCHMARKS / "scale.py"), "--scales", "", "--products-compare", "--products-scale",
           "0.002", "--products-batch-size", "50", "--workers", "2", "--work-dir", str(tmp_path / "work"),
           "--cache-dir", str(tmp_path / "cache"), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["products_compare"]
    assert [r["method"] for r in rows] == ["metis", "kaminpar"]
    for r in rows:
        assert 0 < r["edge_cut_fraction"] < 1 and r["epoch_s"] > 0 and r["bytes_per_iteration"] > 0, r
        assert r["partition_peak_rss_bytes"] > 0 and r["train_peak_rss_bytes"] > 0, r
    assert "| metis | " in done.stdout and "(1.00)" in done.stdout
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.slow  # builds a tiny products-shaped graph, trains it and launches 3 torchrun runs: ~2 min
def test_gpu_benchmark_runs_its_cpu_rows_without_cuda(tmp_path: Path) -> None:
    """benchmarks/gpu.py at a tiny scale: the CPU rows (all of them without CUDA, and the GPU rows beside
    them where CUDA exists) with positive epoch times, the device rows (matrix and LADIES sampling on the
    device, bf16-mixed; on the CPU without CUDA), the split, DGS and vanilla layouts on the device, and the
    accuracy comparison's CPU row and its bf16-mixed row."""
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(BENCHMARKS / "gpu.py"), "--scale", "0.002", "--threads", "2", "--cache-dir",
           str(tmp_path / "cache"), "--accuracy-seeds", "1", "--accuracy-epochs", "1", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {r["row"]: r for r in result["rows"]}
    assert {"CPU trainer", "CPU sampler alone"} <= set(rows)
    assert all(r["epoch_s"] > 0 for r in rows.values())
    assert result["accuracy"][0]["row"] == "CPU trainer" and 0 <= result["accuracy"][0]["mean"] <= 1
    assert "| CPU trainer |" in done.stdout
    where = "GPU" if torch.cuda.is_available() else "CPU"
    assert {f"{where} matrix sampling (bulk 8), {where} step", f"{where} LADIES sampling (bulk 8), {where} step"} <= \
        set(rows)
    assert any(name.endswith("bf16-mixed") for name in rows)
    assert [r["row"].split(",")[0] for r in result["layouts"]] == ["split", "dgs", "vanilla"]
    assert all(r["epoch_s"] > 0 for r in result["layouts"]) and "explanation_cpu_s" in result["layouts"][1]
    assert any(r["row"].endswith("bf16-mixed") and 0 <= r["mean"] <= 1 for r in result["accuracy"])
    assert all(r["same_blocks"] for r in result["matrix"])


@pytest.mark.slow  # a child process that builds a tiny graph and samples a few batches four ways: ~20 s
def test_bulk_benchmark_times_the_device_twins_on_the_cpu(tmp_path: Path) -> None:
    """benchmarks/bulk.py device on CPU tensors: a row per sampler and bulk, positive times, and the device
    twins drew the host's blocks."""
    out = tmp_path / "device.json"
    cmd = [sys.executable, str(BENCHMARKS / "bulk.py"), "device", "--scale", "0.002", "--batch-size", "128",
           "--batches", "3", "--bulks", "1,3", "--fanouts", "5,3", "--ladies", "32", "--repeat", "1", "--device", "cpu",
           "--cache-dir", str(tmp_path / "cache"), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["sampler"], r["bulk"]) for r in rows] == [("matrix", 1), ("matrix", 3), ("ladies", 1), ("ladies", 3)]
    assert all(r["same_blocks"] and r["host_ms_per_batch"] > 0 and r["device_ms_per_batch"] > 0 for r in rows)


@pytest.mark.slow  # a child process that builds a graph and times the loaders: ~15 s
def test_link_benchmark_runs_its_loader_rows_at_a_tiny_scale() -> None:
    """benchmarks/link.py's loader part on a tiny products-shaped graph: every loader this Python can run
    has a row, and each batch holds its 32 seed edges and 32 binary negatives."""
    cmd = [sys.executable, str(BENCHMARKS / "link.py"), "--scale", "0.001", "--batch-size", "32", "--num-batches", "2",
           "--repeat", "1", "--parts", "loader"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line[:24].strip(): line[24:].split() for line in done.stdout.splitlines()
            if line.startswith(("gnnscale, prefetch", "PyG LinkNeighborLoader"))}
    assert {"gnnscale, prefetch 1", "gnnscale, prefetch 0"} <= set(rows), done.stdout
    for cells in rows.values():
        batches_per_s, pairs = float(cells[0]), int(cells[2])
        assert batches_per_s > 0 and pairs == 64, cells


HETERO_TINY = ["--scale", "0.003", "--threads", "1", "--num-batches", "2", "--repeat", "1", "--batch-size", "256",
               "--fanouts", "8,4", "--iterations", "1", "--epoch-threads", "1", "--accuracy-scale", "0.003",
               "--accuracy-seeds", "0", "--accuracy-epochs", "1", "--loader-epochs", "1", "--full-batch-epochs", "2"]
ANCHOR_PYTHON = Path.home() / ".cache" / "gnnscale-anchors" / "bin" / "python"  # shared/tools/anchors/setup.sh


@pytest.mark.slow  # a child process that builds a tiny mag-shaped graph, samples, trains and scores it: ~40 s
def test_hetero_benchmark_runs_every_part_on_a_tiny_mag_shaped_graph(tmp_path: Path) -> None:
    """benchmarks/hetero.py, gnnscale's rows alone: both typed samplers drew the same edges (the same blocks by
    their law), an R-GCN epoch row, and a score in [0, 1] for the MLP, each typed model and PyG's to_hetero model
    with gnnscale's loader and full batch, each table printed."""
    out = tmp_path / "hetero.json"
    cmd = [sys.executable, str(BENCHMARKS / "hetero.py"), *HETERO_TINY, "--cache-dir", str(tmp_path / "cache"),
           "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    samplers = {r["sampler"]: r for r in result["sampler"]}
    assert set(samplers) == {"gnnscale typed fused", "gnnscale typed two_step"}
    assert samplers["gnnscale typed fused"]["edges_per_batch"] == samplers["gnnscale typed two_step"]["edges_per_batch"]
    assert all(r["ms_per_batch"] > 0 and r["edges_per_batch"] > 256 for r in samplers.values())
    (epoch,) = result["epoch"]
    assert epoch["system"].startswith("gnnscale rgcn") and epoch["epoch_s"] > 0
    assert [r["model"] for r in result["accuracy"]] == ["mlp", "rgcn", "rsage", "rgat", "pyg_loader", "pyg_full_batch"]
    assert all(0 <= acc <= 1 for r in result["accuracy"] for acc in r["test_acc"])
    for row in ("| 1 | gnnscale typed fused |", "| gnnscale rgcn (prefetch 1) |", "| rgat |",
                "| PyG to_hetero(SAGE), gnnscale NeighborLoader |", "| PyG to_hetero(SAGE), full batch |"):
        assert row in done.stdout


@pytest.mark.slow  # DGL builds its heterograph and trains in child processes: ~60 s
@pytest.mark.skipif(not ANCHOR_PYTHON.exists(), reason="the DGL anchor environment (shared/tools/anchors/setup.sh)")
def test_hetero_benchmark_runs_dgl_on_the_same_graph_and_seeds(tmp_path: Path) -> None:
    """The DGL side of benchmarks/hetero.py (benchmarks/anchors/dgl_hetero_*.py) on a tiny graph: both DGL samplers
    have a row with a ratio, drawing about as many edges as gnnscale's kernel (the first hop's count is
    min(fanout, degree) per relation on both sides, the second's depends on the nodes drawn), and DGL's R-GCN an
    epoch row."""
    out = tmp_path / "hetero.json"
    cmd = [sys.executable, str(BENCHMARKS / "hetero.py"), *HETERO_TINY, "--parts", "sampler,epoch", "--samplers",
           "fused", "--dgl-python", str(ANCHOR_PYTHON), "--cache-dir", str(tmp_path / "cache"), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    samplers = {r["sampler"]: r for r in result["sampler"]}
    assert set(samplers) == {"gnnscale typed fused", "dgl_sample_neighbors+to_block", "dgl_sample_neighbors_fused"}
    ours = samplers["gnnscale typed fused"]["edges_per_batch"]
    for r in samplers.values():
        assert r["x_dgl"] > 0 and abs(r["edges_per_batch"] - ours) < 0.1 * ours, r
    assert [r["system"] for r in result["epoch"]] == ["gnnscale rgcn (prefetch 1)", "DGL 2.1 HeteroGraphConv"]
    assert all(r["epoch_s"] > 0 for r in result["epoch"])
    # The summary puts both parts' ratios in one table: the fused sampler's at the one thread count, the epoch's.
    summary = done.stdout[done.stdout.index("summary:"):]
    fused = samplers["gnnscale typed fused"]["x_dgl"]
    epoch = result["epoch"][1]["epoch_s"] / result["epoch"][0]["epoch_s"]
    assert f"| sampler, 1 thread(s) | {fused:.2f}x | >= 3x |" in summary, summary
    assert f"| R-GCN epoch | {epoch:.2f}x | >= 2x |" in summary, summary
