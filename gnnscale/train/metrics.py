"""Per-epoch timing (the phase timer) and writing the metrics file."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gnnscale.files import atomic_write


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


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """Write JSON to ``path`` via a temporary file and a rename, so readers never see half a file."""
    atomic_write(path, lambda f: f.write(json.dumps(payload, indent=2).encode()))
