"""Per-epoch training metrics: the time split, loss, accuracies and sampling throughput."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(slots=True)
class PhaseTimer:
    """Wall-clock seconds accumulated per named phase of an epoch."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def merge(self, other: "PhaseTimer") -> None:
        """Add ``other``'s phases to this timer's (e.g. a background stage's own timer)."""
        for name, seconds in other.seconds.items():
            self.add(name, seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochMetrics:
    """One epoch. Times in seconds; accuracies in [0, 1]; sampled_edges summed over the epoch's blocks;
    num_bulks: sampler calls (groups of ``--bulk`` batches sampled together; num_batches when 1).
    ``iteration_losses`` the mean loss of every iteration, in order.

    ``sample_s`` and ``gather_s`` are the busy time of the data-loading stage, which overlaps the
    training step when it runs in the background; ``wait_s`` is the time the training step waited for
    its next batch (what the overlap did not hide), so ``epoch_s`` ~ ``forward_backward_s + wait_s``.
    """

    epoch: int
    sample_s: float
    gather_s: float
    forward_backward_s: float
    wait_s: float
    epoch_s: float
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    num_batches: int
    num_bulks: int
    sampled_edges: int
    iteration_losses: list[float]

    @property
    def sampled_edges_per_s(self) -> float:
        return self.sampled_edges / self.sample_s if self.sample_s > 0 else 0.0

    @property
    def seconds_per_bulk(self) -> float:
        """Sampling seconds per sampler call (one bulk of batches)."""
        return self.sample_s / self.num_bulks if self.num_bulks else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "sampled_edges_per_s": self.sampled_edges_per_s,
                "seconds_per_bulk": self.seconds_per_bulk}


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """Write JSON to ``path`` via a temporary file and a rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a failed write (e.g. path is a directory) leaves no stray file
