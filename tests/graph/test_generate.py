"""gnnscale generate: the block-model dataset written chunk by chunk, byte for byte the in-memory one,
in memory bounded by the chunk size and the node count, atomically."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnscale.cli import main
from gnnscale.graph.datasets import load_dataset
from gnnscale.graph.generate import generate_dataset, memory_bound
from gnnscale.graph.storage import DATASET_ARRAYS, load_dataset_dir, save_dataset
from gnnscale.graph.synthetic import SyntheticConfig, make_synthetic, preset_config
from test_convert import Stop, stop_in

REPO = Path(__file__).resolve().parents[2]
FILES = sorted([f"{stem}.npy" for stem in DATASET_ARRAYS] + ["meta.json"])

# ~2,200 nodes of the papers100M preset, and a config that exercises label noise, informative
# dimensions, few classes and large splits.
CONFIGS = {
    "papers100M": preset_config("papers100M", 2e-5),
    "noisy": SyntheticConfig(num_nodes=3000, avg_degree=12.0, num_classes=3, feature_dim=5, homophily=0.8,
                             informative_features=0.4, label_noise=0.2, train_fraction=0.5, val_fraction=0.2,
                             test_fraction=0.3, seed=7, streaming=True),
}


def read_files(directory: Path) -> dict[str, bytes]:
    assert sorted(p.name for p in directory.iterdir()) == FILES
    return {name: (directory / name).read_bytes() for name in FILES}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_chunk_size_changes_memory_not_output(tmp_path, name):
    cfg = CONFIGS[name]
    tiny = generate_dataset(cfg, tmp_path / "tiny", chunk_edges=500)  # many chunks and buckets
    whole = generate_dataset(cfg, tmp_path / "whole", chunk_edges=10**9)  # one chunk, one bucket
    save_dataset(make_synthetic(cfg), tmp_path / "memory")
    expected = read_files(tmp_path / "memory")
    assert read_files(tmp_path / "tiny") == expected
    assert read_files(tmp_path / "whole") == expected
    assert tiny.num_edges == whole.num_edges == json.loads(expected["meta.json"])["num_edges"]
    assert tiny.file_bytes == {name: len(data) for name, data in expected.items()}
    assert not list(tmp_path.glob(".*"))  # no staging folder (nor bucket file) left behind


def test_generated_graph_is_the_described_model(tmp_path):
    # 22,212 nodes; 8 classes so that repeats (frequent inside a small class) barely bias the homophily.
    cfg = preset_config("papers100M", 2e-4, num_classes=8)
    summary = generate_dataset(cfg, tmp_path / "ds", chunk_edges=20_000)
    ds = load_dataset_dir(tmp_path / "ds")
    g = ds.graph
    assert g.indices.dtype == np.int32 and g.num_edges == summary.num_edges
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    src = g.indices.astype(np.int64)
    keys = dst * g.num_nodes + src
    assert np.all(np.diff(keys) > 0)  # rows sorted by source, no repeats
    assert not np.any(src == dst)
    np.testing.assert_array_equal(np.sort(src * g.num_nodes + dst), keys)  # symmetric
    # avg_degree counts repeats and self loops, which are removed: a little below 29, never above.
    assert 0.85 * cfg.avg_degree < g.num_edges / g.num_nodes < cfg.avg_degree
    assert summary.edges_drawn >= summary.num_edges
    sizes = [ds.train_idx.size, ds.val_idx.size, ds.test_idx.size]
    assert sizes == [int(f * cfg.num_nodes) for f in (cfg.train_fraction, cfg.val_fraction, cfg.test_fraction)]
    assert len(np.unique(np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx]))) == sum(sizes)
    same_class = (ds.labels[src] == ds.labels[dst]).mean()
    expected = cfg.homophily + (1 - cfg.homophily) / cfg.num_classes  # class drawn by weight, ~uniform
    assert same_class == pytest.approx(expected, abs=0.03)
    assert np.bincount(ds.labels, minlength=cfg.num_classes).min() > 0


def test_in_memory_dataset_is_the_generated_one(tmp_path):
    generate_dataset(preset_config("papers100M", 1e-4, seed=3), tmp_path / "ds", chunk_edges=3000)
    on_disk = load_dataset_dir(tmp_path / "ds", mmap=False)
    in_memory = load_dataset("synthetic", preset="papers100M", scale=1e-4, seed=3)
    np.testing.assert_array_equal(on_disk.graph.indices, in_memory.graph.indices)
    np.testing.assert_array_equal(on_disk.features, in_memory.features)
    other_seed = load_dataset("synthetic", preset="papers100M", scale=1e-4, seed=4)
    assert not np.array_equal(other_seed.features, in_memory.features)


# Runs in a fresh interpreter: warm up (numba's cache, numpy's first allocations), then measure the
# peak of every numpy allocation (tracemalloc sees them) during one generation.
MEASURE = """
import json, sys, tracemalloc
from gnnscale.graph.generate import generate_dataset
from gnnscale.graph.synthetic import SyntheticConfig
out, chunk = sys.argv[1], int(sys.argv[2])
generate_dataset(SyntheticConfig(num_nodes=500, avg_degree=8.0, feature_dim=4, streaming=True), out + "-warm")
cfg = SyntheticConfig(**json.loads(sys.argv[3]))
tracemalloc.start()
summary = generate_dataset(cfg, out, chunk_edges=chunk)
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "edges": summary.num_edges}))
"""


@pytest.mark.slow
def test_memory_is_bounded_by_chunk_and_nodes_not_edges(tmp_path):
    # 100,000 nodes, ~8M directed edges (64 MB as int64 keys, 32 MB of int32 indices), 16 MB of features.
    fields = dict(num_nodes=100_000, avg_degree=80.0, num_classes=20, feature_dim=40, degree_exponent=3.0,
                  streaming=True)
    cfg, chunk = SyntheticConfig(**fields), 50_000
    run = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "ds"), str(chunk), json.dumps(fields)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    bound = memory_bound(cfg, chunk)
    assert measured["peak"] <= bound
    assert bound < 8 * measured["edges"] / 2  # the bound itself is far below the edges' bytes
    assert measured["peak"] < cfg.num_nodes * cfg.feature_dim * 4  # and below the features'


def test_an_interrupted_run_leaves_no_directory(tmp_path):
    cfg = CONFIGS["papers100M"]
    for phase in ("edges", "csc", "features"):
        with pytest.raises(Stop):
            generate_dataset(cfg, tmp_path / "ds", chunk_edges=500, progress=stop_in(phase))
        assert list(tmp_path.iterdir()) == []  # neither the target nor the staging folder
    # And over an existing directory, the old one stays whole.
    generate_dataset(cfg, tmp_path / "ds", chunk_edges=500)
    before = read_files(tmp_path / "ds")
    with pytest.raises(Stop):
        generate_dataset(cfg, tmp_path / "ds", overwrite=True, chunk_edges=500, progress=stop_in("csc"))
    assert read_files(tmp_path / "ds") == before
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_bad_input_is_refused_before_any_work(tmp_path):
    cfg = CONFIGS["papers100M"]
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match=r"out_dir: .*taken already exists; pass overwrite=True"):
        generate_dataset(cfg, tmp_path / "taken")
    with pytest.raises(ValueError, match=r"streaming: this config draws its edges in top-up rounds"):
        generate_dataset(preset_config("hard", 0.01), tmp_path / "hard")
    with pytest.raises(ValueError, match=r"chunk_edges: expected an int >= 1, got 0"):
        generate_dataset(cfg, tmp_path / "zero", chunk_edges=0)
    for scale in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"scale: expected a finite number > 0"):
            preset_config("papers100M", scale)
    with pytest.raises(ValueError, match=r"seed: expected < 2\*\*64 with streaming=True"):
        preset_config("papers100M", 1e-4, seed=2**64)
    with pytest.raises(TypeError, match=r"streaming: expected a bool, got str"):
        SyntheticConfig(streaming="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_cli_generates_a_loadable_directory(tmp_path, capsys):
    out = tmp_path / "p100m"
    assert main(["generate", "--preset", "papers100M", "--scale", "2e-5", "--out", str(out), "--chunk-edges", "999",
                 "--feature-dim", "8", "--seed", "1"]) == 0
    printed, progress = capsys.readouterr()
    assert progress == ""  # progress lines on a terminal only
    ds = load_dataset_dir(out)
    assert (ds.feature_dim, ds.num_classes) == (8, 172)
    assert f"{ds.graph.num_edges:,} directed edges" in printed and "indices.npy" in printed
    assert main(["generate", "--preset", "papers100M", "--scale", "2e-5", "--out", str(out)]) == 2
    assert f"error: --out: {out} already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["generate", "--preset", "papers100M", "--scale", "-1", "--out", str(tmp_path / "x")]) == 2
    assert "error: --scale: expected a finite number > 0, got -1.0" in capsys.readouterr().err
    assert main(["generate", "--preset", "papers100M", "--scale", "1e-4", "--out", str(tmp_path / "x"),
                 "-o", "homophily=1.5"]) == 2
    assert "error: homophily: expected in [0, 1], got 1.5" in capsys.readouterr().err
    assert main(["generate", "--preset", "papers100M", "--scale", "1e-4", "--out", str(tmp_path / "x"),
                 "-o", "seed=2"]) == 2
    assert "-o seed=... repeats --seed; give --seed only" in capsys.readouterr().err
    assert main(["generate", "--preset", "products", "--scale", "1e-3", "--out", str(tmp_path / "x")]) == 2
    assert "error: streaming: this config draws its edges in top-up rounds" in capsys.readouterr().err
    # Another preset streams with the block model when asked to.
    assert main(["generate", "--preset", "hard", "--scale", "0.01", "--out", str(tmp_path / "hard"),
                 "-o", "streaming=true"]) == 0
    assert load_dataset_dir(tmp_path / "hard").graph.num_nodes == 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard", "p100m"]
