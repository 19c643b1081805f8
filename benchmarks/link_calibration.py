"""Check the emulated link: throughput of large collectives and the latency of one small round, per rate.

    python benchmarks/link_calibration.py [--link-gbit 10,1,inf] [--workers 2] [--sizes-mb 4,64]
                                          [--repeats 5] [--burst-bytes B] [--limit-bytes B] [--json FILE]

For every rate, ``--workers`` gloo processes (torchrun) run inside a private network namespace
(benchmarks/emulated_link.py; ``inf``: the same namespace without a qdisc, so that its loopback
counters hold only this traffic) and time ``all_to_all_single`` and ``all_reduce`` of ``--sizes-mb``
MB per worker (median of ``--repeats`` after one warm-up; each from the first worker's start to the
last worker's end), and the latency of one round: an ``all_reduce`` of one float and an
``all_to_all_single`` of one int64 per peer (mean of 200). Throughput is given twice: *payload*,
the bytes the collective must move between workers (all-to-all: N(P-1) in total; a ring
all-reduce: 2N(P-1)), and *wire*, what the loopback device counted (TCP/IP headers and
acknowledgements included), both over that time, against the nominal rate. ``--burst-bytes`` and
``--limit-bytes`` override the bucket and queue that emulated_link.py picks, to see what they
change; the table reports the qdisc's drops.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from emulated_link import (  # noqa: E402  (benchmarks/ is not a package)
    LinkShape, add_link_argument, check_link_support, link_label, link_shape, namespace_command, read_link_stats)

LATENCY_ROUNDS = 200
MB = 1e6


# --- worker (runs under torchrun inside the namespace) --------------------------------------------


def lo_tx_bytes() -> int:
    """Bytes sent by this namespace's loopback (/proc/net/dev follows the network namespace; /sys does not)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            return int(line.split(":", 1)[1].split()[8])
    raise RuntimeError("no lo device in /proc/net/dev")


def timed(op) -> tuple[float, int]:
    """(seconds, loopback bytes) of one call of ``op`` on every worker: from the first worker's start to
    the last worker's end (perf_counter is the system-wide monotonic clock, comparable across processes)."""
    import torch
    import torch.distributed as dist

    dist.barrier()  # collective: everyone idle before rank 0 reads the counter...
    tx = lo_tx_bytes()
    dist.barrier()  # collective: ...and nobody starts before it has
    start = time.perf_counter()
    op()
    span = torch.tensor([-start, time.perf_counter()], dtype=torch.float64)
    dist.all_reduce(span, op=dist.ReduceOp.MAX)  # collective: earliest start, latest end (after the clock)
    tx = lo_tx_bytes() - tx  # the all_reduce above has finished on every worker: op's bytes are all counted
    return float(span.sum()), tx


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank, p = dist.get_rank(), dist.get_world_size()
        rows = []
        for size_mb in a.size_list:
            n = int(size_mb * MB) // 4 // p * p  # float32 elements, divisible by the worker count
            send, recv = torch.ones(n), torch.empty(n)
            ops = {"all_to_all": (lambda: dist.all_to_all_single(recv, send), n * 4 * (p - 1)),
                   "all_reduce": (lambda: dist.all_reduce(send), 2 * n * 4 * (p - 1))}
            for name, (op, payload) in ops.items():
                timed(op)  # warm-up: TCP windows and gloo buffers grow on the first large message
                runs = [timed(op) for _ in range(a.repeats)]
                seconds = statistics.median(t for t, _ in runs)
                rows.append({"op": name, "mb_per_worker": n * 4 / MB, "seconds": seconds, "payload_bytes": payload,
                             "wire_bytes": statistics.median(b for _, b in runs)})
        latency = {}
        one, small = torch.ones(1), torch.arange(p, dtype=torch.int64)
        small_out = torch.empty_like(small)
        for name, op in (("all_reduce", lambda: dist.all_reduce(one)),
                         ("all_to_all", lambda: dist.all_to_all_single(small_out, small))):
            op()
            dist.barrier()  # collective
            start = time.perf_counter()
            for _ in range(LATENCY_ROUNDS):
                op()  # collective
            latency[name] = (time.perf_counter() - start) / LATENCY_ROUNDS
        if rank == 0:
            Path(a.out).write_text(json.dumps({"rows": rows, "latency_s": latency}), encoding="utf-8")
    finally:
        dist.destroy_process_group()


# --- launcher --------------------------------------------------------------------------------------


def calibrate(rate: float, a: argparse.Namespace, scratch: Path) -> dict:
    """Launch the workers over one emulated rate and return their measurements and the link counters."""
    out, stats = scratch / f"rate{link_label(rate)}.json", scratch / f"rate{link_label(rate)}_link.json"
    shape: LinkShape | None = None
    if not math.isinf(rate):
        shape = link_shape(rate, burst_bytes=a.burst_bytes, limit_bytes=a.limit_bytes)
    worker_cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(a.workers),
                  "--master-addr", "127.0.0.1", "--master-port", "29500",  # a private namespace: every port is free
                  str(Path(__file__).resolve()), "--worker", "--out", str(out), "--sizes-mb", a.sizes_mb,
                  "--repeats", str(a.repeats)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(namespace_command(worker_cmd, shape, stats_path=stats), env=env, capture_output=True,
                          text=True, timeout=a.timeout)
    if done.returncode != 0 or not out.is_file():
        sys.exit(f"calibration at {link_label(rate)} Gbit/s failed (exit {done.returncode}):\n"
                 f"{done.stdout}\n{done.stderr}")
    result = json.loads(out.read_text(encoding="utf-8"))
    result["link"] = read_link_stats(stats)
    result["shape"] = shape
    return result


def print_table(rate: float, result: dict, workers: int) -> None:
    shape, link = result["shape"], result["link"]
    setting = (f"burst {shape.burst_bytes / 1e3:.0f} kB, queue {shape.limit_bytes / 1e6:.1f} MB"
               if shape else "no qdisc")
    print(f"\n{link_label(rate)} Gbit/s ({setting}), {workers} workers: tbf sent {link.qdisc_bytes / MB:.0f} MB, "
          f"dropped {link.qdisc_drops} packets, waited for tokens {link.overlimits} times")
    print(f"{'op':>10} {'MB/worker':>9} {'s':>8} {'payload Gbit/s':>14} {'wire Gbit/s':>11} {'wire/nominal':>12}")
    for r in result["rows"]:
        payload, wire = r["payload_bytes"] * 8 / r["seconds"] / 1e9, r["wire_bytes"] * 8 / r["seconds"] / 1e9
        ratio = f"{wire / rate:.2f}" if not math.isinf(rate) else "-"
        print(f"{r['op']:>10} {r['mb_per_worker']:9.1f} {r['seconds']:8.4f} {payload:14.2f} {wire:11.2f} {ratio:>12}")
    lat = result["latency_s"]
    print(f"one small round: all_reduce {lat['all_reduce'] * 1e6:.0f} us, all_to_all {lat['all_to_all'] * 1e6:.0f} us")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_link_argument(p, default="10,1,inf")
    p.add_argument("--workers", type=int, default=2, help="gloo processes (default 2)")
    p.add_argument("--sizes-mb", default="4,64", help="MB per worker of the large collectives (default 4,64)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--burst-bytes", type=int, default=None, help="override emulated_link's bucket size")
    p.add_argument("--limit-bytes", type=int, default=None, help="override emulated_link's queue size")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one rate (default 600)")
    p.add_argument("--json", default=None, help="write the measurements here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    try:
        a.size_list = [float(s) for s in a.sizes_mb.split(",")]
    except ValueError:
        p.error(f"--sizes-mb: expected comma-separated numbers, got {a.sizes_mb!r}")
    if a.workers < 2:
        p.error(f"--workers: expected >= 2 (one worker sends nothing), got {a.workers}")
    if a.repeats < 1:
        p.error(f"--repeats: expected >= 1, got {a.repeats}")
    return a


def main() -> None:
    a = parse_args()
    if a.worker:
        worker(a)
        return
    try:
        check_link_support([1.0])  # even inf runs in a namespace here (for its private counters)
    except RuntimeError as err:
        sys.exit(str(err))
    results = {}
    with tempfile.TemporaryDirectory(prefix="gnnscale-link-") as scratch:
        for rate in a.link_gbit:
            results[link_label(rate)] = calibrate(rate, a, Path(scratch))
            print_table(rate, results[link_label(rate)], a.workers)
    if a.json:
        for r in results.values():
            r["link"] = {k: getattr(r["link"], k) for k in r["link"].__slots__}
            r["shape"] = None if r["shape"] is None else {k: getattr(r["shape"], k) for k in r["shape"].__slots__}
        Path(a.json).write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
