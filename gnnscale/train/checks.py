"""Input checks that run before any work starts: a bad path or an impossible launch is one clear line
at start-up, not a traceback after an hour of training, and nothing is overwritten by accident.

Messages name the argument and the command-line flag that sets it.
"""

from __future__ import annotations

import math
from pathlib import Path

from gnnscale.partition.directory import group_counts, parts_per_worker, read_manifest
from gnnscale.train.checkpoints.files import previous_path


class LaunchError(ValueError):
    """Bad input found before the workers of a distributed run join it. Every worker checks the same
    arguments and finds the same problem, so one report per machine says it all."""


def check_output_file(path: str | Path, name: str, flag: str, *, overwrite: bool) -> Path:
    """Raise ValueError unless ``path`` can be written as a new file (or replaced, with ``overwrite``).

    Args:
        path: the file a run will write at its end (metrics JSON, checkpoint).
        name: the argument's name in the library (``metrics_out``); flag: the CLI flag (``--metrics-out``).
        overwrite: an existing file may be replaced (``--overwrite``).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name}: {path} is a directory; give a file path ({flag} FILE)")
    if path.exists() and not path.is_file():
        raise ValueError(f"{name}: {path} is not a regular file (a device or a socket); give a file path ({flag} FILE)")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{name}: cannot write {path}: {parent} is a file, not a folder ({flag})")
            break
    if path.exists() and not overwrite:
        raise ValueError(f"{name}: {path} already exists; pass --overwrite to replace it, or choose another {flag}")
    return path


def check_run_outputs(*, metrics_out: str | Path | None, checkpoint: str | Path | None, resume: bool | str,
                      overwrite: bool, model_out: str | Path | None = None) -> None:
    """The output checks of ``gnnscale train``: metrics file, checkpoint file, model file and ``--resume``.

    A checkpoint that exists is continued with ``--resume`` or replaced with ``--overwrite``, never
    silently overwritten (it may belong to another run or model). A resumed run continues its metrics
    file. No two outputs may be one file: the last writer would destroy the other. ``resume="auto"``
    (``--resume auto``) continues the checkpoint if there is one and starts afresh if not: what a run that
    torchrun restarts after a failure needs, with the same command line every time.
    """
    if resume not in (False, True, "auto"):
        raise ValueError(f"resume: expected --resume or --resume auto, got {resume!r}")
    outputs = {flag: Path(path) for flag, path in (("--metrics-out", metrics_out), ("--checkpoint", checkpoint),
                                                    ("--save-model", model_out)) if path is not None}
    check_distinct(outputs)
    if metrics_out is not None:
        check_output_file(metrics_out, "metrics_out", "--metrics-out", overwrite=overwrite or resume)
    if model_out is not None:
        check_output_file(model_out, "save_model", "--save-model", overwrite=overwrite or resume)
    if resume and checkpoint is None:
        raise ValueError("resume: --resume needs --checkpoint FILE, the checkpoint to continue from")
    if checkpoint is None:
        return
    path = check_output_file(checkpoint, "checkpoint", "--checkpoint", overwrite=True)  # a file, in a folder
    if resume is True and not path.is_file() and not previous_path(path).is_file():
        raise ValueError(f"checkpoint: no file at {path} to resume from (--resume continues an existing "
                         "--checkpoint; drop --resume to start a new run)")
    if not resume and path.exists() and not overwrite:
        raise ValueError(f"checkpoint: {path} already exists; pass --resume to continue that run, or --overwrite "
                         "to start over and replace it")


def check_distinct(outputs: dict[str, Path]) -> None:
    """ValueError when two output flags name one file (also through a link or a relative path)."""
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        key = path.resolve()
        if key in seen:
            raise ValueError(f"outputs: {seen[key]} and {flag} both name {path}; each output needs a file of its own")
        seen[key] = flag


def check_partition_launch(partition_dir: str | Path, world_size: int, batch_size: int, *,
                           per_worker_batches: bool = True) -> dict:
    """Check, from the manifest alone, that ``world_size`` workers can train on ``partition_dir``.

    Worker ``RANK`` loads the ``num_parts / world_size`` consecutive parts from ``RANK`` times that,
    so the worker count must divide the part count. With ``per_worker_batches`` (data parallelism)
    every worker draws micro-batches from its own training nodes and runs the same number of
    iterations per epoch (enough for the worker with most training nodes), so every worker needs at
    least that many training nodes; split parallelism draws from all training nodes and needs none
    per worker. Returns the manifest.
    """
    manifest = read_manifest(partition_dir)
    num_parts = manifest["num_parts"]
    k = parts_per_worker(num_parts, world_size, partition_dir)
    if not per_worker_batches:
        return manifest
    train = group_counts(manifest["split_sizes"]["train_idx"], world_size)
    holds = (lambda w: f"part {w}") if k == 1 else (lambda w: f"worker {w} (parts {w * k}-{w * k + k - 1})")
    largest = max(range(world_size), key=lambda w: train[w])
    smallest = min(range(world_size), key=lambda w: train[w])
    if train[smallest] == 0:
        raise ValueError(f"partitions: {holds(smallest)} of {partition_dir} has no training nodes, so its worker "
                         f"cannot take part in the iterations of an epoch; {repartition_advice(manifest)}")
    iterations = math.ceil(train[largest] / batch_size)
    if train[smallest] < iterations:
        least = math.ceil(train[largest] / train[smallest])
        raise ValueError(f"batch_size: with --batch-size {batch_size}, {holds(largest)} ({train[largest]} training "
                         f"nodes) needs {iterations} iterations per epoch, but {holds(smallest)} has only "
                         f"{train[smallest]} training nodes and every worker runs the same iterations; use "
                         f"--batch-size {least} or more, or {repartition_advice(manifest)}")
    return manifest


def repartition_advice(manifest: dict) -> str:
    """How repartitioning can even out the training nodes of the parts described by ``manifest``.

    ``gnnscale partition`` spreads the training nodes over the parts to within one node with either
    ``--method`` (and any ``--seed``), so for its partitions another method or seed changes nothing:
    only fewer parts give each part more. A directory whose parts differ by more than one was written
    otherwise (by hand, or by another tool), and ``gnnscale partition`` itself is the fix.
    """
    train = manifest["split_sizes"]["train_idx"]
    total, parts = sum(train), len(train)
    method = manifest.get("method", "metis")
    if max(train) - min(train) > 1:
        return (f"repartition with gnnscale partition (--method {method} spreads the training nodes evenly over "
                "the parts)")
    if total < parts:
        return (f"the dataset has only {total} training node{'' if total == 1 else 's'} for {parts} parts: "
                f"repartition with --parts {max(total, 1)} or fewer, or give the dataset more training nodes")
    return (f"repartition with fewer --parts (gnnscale partition already gives each of the {parts} parts "
            f"{min(train)} or {min(train) + 1} of the {total} training nodes, with either --method)")
