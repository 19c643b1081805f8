"""A crashed run finishes by itself, with the weights of a run that never crashed.

    python benchmarks/restarts.py [--runs hybrid,vanilla,split,1d,1.5d,hybrid-dgs] [--workers 4] [--epochs 8]
                                  [--checkpoint-every 5] [--seed 0] [--cache-dir DIR] [--json FILE]

For each run (a layout and its flags, as in faults.py): one uninterrupted launch, then one launch with
``torchrun --max-restarts 2 ... --checkpoint F --checkpoint-every K --resume auto`` in which a random
worker is SIGKILLed once a mid-epoch checkpoint in epoch 1 or later exists. torchrun restarts the group, every
worker resumes from the newest complete checkpoint, and the run must finish on its own (exit 0) with
final weights equal, bit for bit, to the uninterrupted run's. Partitions of a small products-shaped
graph are cached in --cache-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from faults import RUNS, cached_partition
from gnnscale.train.checkpoints.files import newest_complete

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESUMED = re.compile(r"resuming from \S+: (\d+) of \d+ epochs done, continuing at epoch (\d+) step (\d+)")
LAUNCH_TIMEOUT_S = 900.0


def command(partition_dir: Path, run: str, a: argparse.Namespace, *extra: str, restarts: int = 0) -> list[str]:
    layout, flags = RUNS[run]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.workers),
            "--max-restarts", str(restarts), "-m", "gnnscale", "train", "--partitions", str(partition_dir),
            "--layout", layout, *flags, "--fanouts", "10,5", "--batch-size", "64", "--hidden", "64",
            "--dropout", "0.5", "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", "1", "--no-eval",
            *extra]  # not --quiet: the restarted run's "resuming from ..." line is read


def wait_for_mid_run_checkpoint(path: Path, proc: subprocess.Popen, deadline: float) -> dict:
    while time.monotonic() < deadline and proc.poll() is None:  # polling a file another process writes
        found = newest_complete(path)
        if found is not None and found.payload["epoch"] >= 1 and found.payload["step"] > 0:
            return found.payload
        time.sleep(0.02)
    raise RuntimeError(f"no mid-epoch checkpoint in epoch 1 or later before the run ended (exit {proc.poll()})")


def trial(partition_dir: Path, run: str, a: argparse.Namespace, scratch: Path, rng: np.random.Generator) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, model, ckpt = scratch / f"{run}_full.pt", scratch / f"{run}_auto.pt", scratch / f"{run}.ckpt"
    subprocess.run(command(partition_dir, run, a, "--save-model", str(full)), cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=LAUNCH_TIMEOUT_S)
    proc = subprocess.Popen(command(partition_dir, run, a, "--checkpoint", str(ckpt), "--resume", "auto",
                                    "--checkpoint-every", str(a.checkpoint_every), "--save-model", str(model),
                                    restarts=2),
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    try:
        saved = wait_for_mid_run_checkpoint(ckpt, proc, start + LAUNCH_TIMEOUT_S)
        workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        victim = int(rng.integers(len(workers)))
        os.kill(int(workers[victim]), signal.SIGKILL)
        killed_at = time.monotonic()
        output, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    resumed = RESUMED.search(output)
    equal = False
    if proc.returncode == 0 and model.is_file():
        weights, reference = torch.load(model), torch.load(full)
        equal = weights.keys() == reference.keys() and all(torch.equal(weights[k], reference[k]) for k in reference)
    return {"run": run, "workers": a.workers, "killed_local_rank": victim,
            "checkpoint_seen": f"epoch {saved['epoch']} step {saved['step']}",
            "resumed_at": f"epoch {resumed[2]} step {resumed[3]}" if resumed else None,
            "exit": proc.returncode, "weights_equal": equal, "finish_after_kill_s": time.monotonic() - killed_at,
            "tail": output[-600:] if not equal else ""}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {','.join(RUNS)}")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--scale", type=float, default=0.01, help="products-shaped graph, fraction of 2.45M nodes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=str(HERE / ".cache"))
    p.add_argument("--json", default=None)
    a = p.parse_args()
    a.run_list = a.runs.split(",")
    if not set(a.run_list) <= set(RUNS):
        p.error(f"--runs: expected a subset of {','.join(RUNS)}, got {a.runs}")
    return a


def main() -> None:
    a = parse_args()
    partition_dir = cached_partition(Path(a.cache_dir), a.workers, a.scale)
    rng = np.random.default_rng(a.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnscale-restarts-") as scratch:
        for run in a.run_list:
            rows.append(trial(partition_dir, run, a, Path(scratch), rng))
            r = rows[-1]
            print(f"{run}: killed local rank {r['killed_local_rank']} after the checkpoint of {r['checkpoint_seen']}; "
                  f"resumed at {r['resumed_at']}; exit {r['exit']} {r['finish_after_kill_s']:.0f} s after the kill; "
                  f"weights {'equal' if r['weights_equal'] else 'DIFFERENT'} {r['tail']}", flush=True)
    print("\n| run | workers | killed (local rank) | resumed at | exit | final weights = uninterrupted |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['workers']} | {r['killed_local_rank']} | {r['resumed_at']} | {r['exit']} | "
              f"{'yes' if r['weights_equal'] else 'NO'} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": vars(a), "rows": rows}, indent=2))
    sys.exit(0 if all(r["weights_equal"] for r in rows) else 1)


if __name__ == "__main__":
    main()
