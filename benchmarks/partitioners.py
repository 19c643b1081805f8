"""METIS vs KaMinPar on the products-shaped graph: partitioning seconds, peak memory, edge cut, as
ratios against METIS measured in the same run.

    python benchmarks/partitioners.py [--scale 0.25] [--parts 4] [--kaminpar-parts 8,16] [--threads 2]
                                      [--no-metis] [--seed 0] [--cache-dir DIR] [--json FILE]

The dataset is the one benchmarks/distributed.py caches (generated on first use). Each row is one child
process under ``/usr/bin/time -v`` that memory-maps the graph and runs what ``gnnscale partition
--method M`` runs before writing the directory (``assign_parts``: the partitioner, then the exact
balancing of training nodes and nodes); writing the directory is the same for every method and is left
out. Columns: seconds of ``assign_parts``; peak RSS of the child (``/usr/bin/time``'s maximum resident
set size, which includes the interpreter and the graph pages it touched: "base" is the child's peak
before partitioning); edge cut as a fraction of the directed edges. Rows:

    metis                    pymetis, unit weights (the default method)
    kaminpar t=1             --method kaminpar --threads 1 (deterministic)
    kaminpar t=T             --method kaminpar --threads T
    kaminpar t=T compressed  the same with the graph compressed on load and KaMinPar's terapart context
                             (what --method kaminpar does above COMPRESS_ABOVE_EDGES directed edges)

``--kaminpar-parts`` adds kaminpar t=T rows for more parts (METIS is not rerun for them). ``--no-metis``
leaves METIS out (at full scale it needs ~17 GB; the ratios are then against kaminpar t=1).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed import add_cache_dir_argument, cached_dataset  # noqa: E402

MB = 1 << 20
# A command under this reports its peak resident set size on stderr: the largest of the process and
# every descendant it waited for (torchrun's workers included), which RUSAGE_SELF in a parent cannot see.
TIME_V = ["/usr/bin/time", "-v"]


def peak_rss_bytes(time_v_output: str) -> int:
    """The "Maximum resident set size" that ``/usr/bin/time -v`` printed into ``time_v_output``, in bytes."""
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v_output)
    if found is None:
        raise ValueError(f"time_v_output: expected /usr/bin/time -v's report, got ...{time_v_output[-500:]!r}")
    return int(found.group(1)) * 1024


def child(args: argparse.Namespace) -> None:
    """One partitioning, in this process; prints a JSON line, saves the parts to ``--save``."""
    from gnnscale.graph.storage import load_dataset_dir
    from gnnscale.partition import assign_parts
    from gnnscale.partition.assign import balance_counts
    from gnnscale.partition.kaminpar_parts import kaminpar_parts
    from gnnscale.partition.parhip import temporary_parhip

    ds = load_dataset_dir(args.dataset_dir, mmap=True)
    graph, train_idx = ds.graph, np.asarray(ds.train_idx)
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if args.child == "kaminpar-compressed":
        # assign_parts' kaminpar path with compression forced (it chooses by edge count).
        is_train = np.zeros(graph.num_nodes, dtype=bool)
        is_train[train_idx] = True
        with temporary_parhip(graph) as (path, xadj, adjncy):
            part = kaminpar_parts(path, graph.num_nodes, int(xadj[-1]), args.parts, seed=args.seed,
                                  threads=args.threads, compress=True)
            balance_counts(part, xadj, adjncy, is_train, args.parts)
    else:
        part = assign_parts(graph, args.parts, args.child, train_idx=train_idx, seed=args.seed, threads=args.threads)
    seconds = time.perf_counter() - start
    np.save(args.save, part)
    print(json.dumps({"seconds": seconds, "base_mb": base_kb * 1024 / MB}), flush=True)


def measure(dataset_dir: Path, method: str, parts: int, threads: int, seed: int, save: Path) -> dict:
    cmd = [*TIME_V, sys.executable, __file__, "--child", method, "--dataset-dir", str(dataset_dir),
           "--parts", str(parts), "--threads", str(threads), "--seed", str(seed), "--save", str(save)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{method} ({parts} parts) failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "peak_mb": peak_rss_bytes(done.stderr) / MB}


def cut_and_balance(dataset_dir: Path, part: np.ndarray, parts: int) -> tuple[float, float]:
    """(cut fraction of the directed edges, training nodes max/mean), reading the graph in node chunks."""
    from gnnscale.graph.storage import load_dataset_dir

    ds = load_dataset_dir(dataset_dir, mmap=True)
    g, cut, step = ds.graph, 0, 1 << 18
    for lo in range(0, g.num_nodes, step):
        hi = min(lo + step, g.num_nodes)
        src = np.asarray(g.indices[g.indptr[lo]:g.indptr[hi]])
        cut += int(np.count_nonzero(part[src] != np.repeat(part[lo:hi], np.diff(g.indptr[lo:hi + 1]))))
    train = np.bincount(part[np.asarray(ds.train_idx)], minlength=parts)
    return cut / max(g.num_edges, 1), float(train.max() / train.mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.25, help="fraction of products' 2.45M nodes (default 0.25)")
    p.add_argument("--parts", type=int, default=4, help="parts for METIS and KaMinPar (default 4)")
    p.add_argument("--kaminpar-parts", default="", help="more part counts for KaMinPar only, e.g. 8,16")
    p.add_argument("--threads", type=int, default=2, help="KaMinPar's threads for the t=T rows (default 2)")
    p.add_argument("--no-metis", action="store_true", help="leave METIS out (ratios against kaminpar t=1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the dataset and the partitioners")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    add_cache_dir_argument(p)
    # The child's own flags (one partitioning per process, so that each peak RSS is its own).
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dataset-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--save", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        args.parts = int(args.parts)
        return child(args)

    dataset_dir = cached_dataset(args.scale, args.seed, Path(args.cache_dir))
    meta = json.loads((dataset_dir / "meta.json").read_text(encoding="utf-8"))
    t = args.threads
    runs = [("metis", "metis", args.parts, 1), ("kaminpar t=1", "kaminpar", args.parts, 1),
            (f"kaminpar t={t}", "kaminpar", args.parts, t),
            (f"kaminpar t={t} compressed", "kaminpar-compressed", args.parts, t)]
    runs += [(f"kaminpar t={t}", "kaminpar", int(k), t) for k in args.kaminpar_parts.split(",") if k]
    if args.no_metis:
        runs = runs[1:]
    print(f"products-shaped, scale {args.scale:g}: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges; "
          f"{Path('/proc/cpuinfo').read_text().count('processor')} cores", flush=True)
    rows = []
    save = Path(args.cache_dir) / "partitioners_part.npy"
    for name, method, parts, threads in runs:
        row = {"name": name, "parts": parts, **measure(dataset_dir, method, parts, threads, args.seed, save)}
        row["cut"], row["train_balance"] = cut_and_balance(dataset_dir, np.load(save), parts)
        rows.append(row)
        print(f"  done: {name}, {parts} parts: {row['seconds']:.1f} s", flush=True)
    save.unlink()
    ref = rows[0]
    x = f"x {ref['name']}" if args.no_metis else "x METIS"
    print(f"\n| method | parts | seconds | {x} | peak RSS MB (base) | {x} | edge cut | {x} | train max/mean |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        same = r["parts"] == ref["parts"]
        ratio = (lambda key: f"{r[key] / ref[key]:.2f}" if same else "-")
        print(f"| {r['name']} | {r['parts']} | {r['seconds']:.1f} | {ratio('seconds')} | {r['peak_mb']:,.0f} "
              f"({r['base_mb']:,.0f}) | {ratio('peak_mb')} | {r['cut']:.4f} | {ratio('cut')} | "
              f"{r['train_balance']:.4f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"scale": args.scale, "meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
