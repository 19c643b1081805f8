"""An emulated slower network for the distributed benchmarks, on one machine.

On one machine every collective crosses the loopback device, which queues nothing and moved 8-14
Gbit/s of gloo traffic even on the loaded 2-core development machine, so communication looks nearly
free and layouts that trade rounds or bytes for compute cannot show what they save.
:func:`link_command` wraps the command that launches *all* workers (a torchrun line) so that it runs
in a private network namespace (``unshare -rn``: a user namespace maps the caller to root inside
it, so no privileges are needed) whose loopback device sends through a ``tc`` token-bucket filter
(tbf) at a fixed rate. A benchmark needs three calls::

    add_link_argument(parser)                      # --link-gbit 10,1,inf -> args.link_gbit == [10.0, 1.0, inf]
    check_link_support(args.link_gbit)             # fail now, clearly, if namespaces or tc are missing
    for rate in args.link_gbit:
        cmd = link_command(torchrun_cmd, rate, stats_path=p)   # inf: torchrun_cmd unchanged
        subprocess.run(cmd, ...)                   # the workers share one link of `rate` Gbit/s
        read_link_stats(p)                         # what the link carried; drops (expected 0)

What it models: ONE shared link. All workers' traffic, in both directions, leaves through the same
rate-limited queue, so P workers share the rate (a switch port per worker would give each its own
NIC and its own rate in each direction). There is no propagation delay: a message waits only for the
queue ahead of it and its own serialisation at the rate. What it does not model: per-worker links,
full duplex, wire latency, packet loss, a switch, or the CPU a real NIC would free (the workers also
share this machine's cores, and the TCP stack still runs on them). Only loopback addresses work
inside the namespace (it has no other device): the workers must rendezvous on 127.0.0.1, and gloo
is pointed at ``lo``. CPU (gloo) runs only: NCCL between GPUs would not cross the shaped socket.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The largest packet tbf sees on loopback: the 64 KiB MTU (also its GSO size) plus the 14-byte
# Ethernet header the qdisc counts. A bucket smaller than one packet makes tbf split or drop it.
MAX_PACKET_BYTES = 65536 + 14
# Bucket: tokens for BURST_SECONDS at the rate, and at least 2 packets. A message that follows an
# idle spell passes its first burst_bytes at memory speed, so a round can end up to burst/rate
# earlier than on a true link: 0.5 ms at 10 Gbit/s, 1 ms at 1 Gbit/s (the 2-packet floor), under
# what one small round costs here anyway (0.7-2.5 ms measured). A smaller bucket costs throughput:
# tbf sends a packet only once the bucket holds its size, and the tokens a late timer wake-up
# (softirq latency on a loaded machine) would have added beyond a full bucket are lost; with 2
# packets, one packet's worth of lateness costs nothing. Measured with link_calibration.py
# (benchmarks/README.md): at 1 Gbit/s buckets of 1, 2, 4 and 19 packets all reached 0.90-1.00 of the
# rate; at 10 Gbit/s the loaded 2-core machine, not the bucket, limited the rate (0.5-0.95).
BURST_SECONDS = 0.5e-3
MIN_BURST_BYTES = 2 * MAX_PACKET_BYTES
# Queue: tbf drops what does not fit, and a drop costs far more than the packet (TCP backs off and
# resends): with 4 workers at 1 Gbit/s, a 0.3 MB queue dropped 3,790 packets and cut all-to-all to
# 0.27 of the rate, a 2 MB queue still dropped 892. Below the socket layer TCP keeps at most
# net.ipv4.tcp_limit_output_bytes (4 MiB) per socket queued, so P workers' P(P-1) one-way flows
# hold at most P(P-1) x 4 MiB: 256 MiB covers 8 workers. Only queued packets take memory;
# read_link_stats reports drops, so that a run shows there were none.
QUEUE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkShape:
    """The token bucket put on the namespace's loopback.

    Args:
        rate_gbit: nominal rate in Gbit/s (10^9 bit/s, tc's ``gbit``), finite and > 0.
        burst_bytes: bucket size: bytes that may leave back to back after an idle spell; at least
            one loopback packet (``MAX_PACKET_BYTES``).
        limit_bytes: queue capacity in bytes; a packet that does not fit is dropped.
    """

    rate_gbit: float
    burst_bytes: int
    limit_bytes: int

    def __post_init__(self) -> None:
        if not isinstance(self.rate_gbit, (int, float)) or isinstance(self.rate_gbit, bool):
            raise TypeError(f"rate_gbit: expected a number, got {type(self.rate_gbit).__name__}")
        if not (math.isfinite(self.rate_gbit) and self.rate_gbit > 0):
            raise ValueError(f"rate_gbit: expected a finite rate > 0 Gbit/s, got {self.rate_gbit}")
        for name in ("burst_bytes", "limit_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if self.burst_bytes < MAX_PACKET_BYTES:
            raise ValueError(f"burst_bytes: expected >= {MAX_PACKET_BYTES} (one loopback packet), "
                             f"got {self.burst_bytes}")
        if self.limit_bytes < self.burst_bytes:
            raise ValueError(f"limit_bytes: expected >= burst_bytes ({self.burst_bytes}), got {self.limit_bytes}")

    def tc_arguments(self) -> list[str]:
        """``tc qdisc replace dev lo root`` + these: bit/s and bytes as bare integers (no unit guesswork)."""
        return ["tbf", "rate", f"{round(self.rate_gbit * 1e9)}bit", "burst", str(self.burst_bytes),
                "limit", str(self.limit_bytes)]


def link_shape(rate_gbit: float, *, burst_bytes: int | None = None, limit_bytes: int | None = None) -> LinkShape:
    """The default bucket and queue for ``rate_gbit`` (see the module constants), or the given ones."""
    # A rate LinkShape will reject (inf, a string) gets the floor here, so that its error is the one raised.
    valid = isinstance(rate_gbit, (int, float)) and math.isfinite(rate_gbit)
    if burst_bytes is None:
        burst_bytes = max(MIN_BURST_BYTES, round(rate_gbit * 1e9 / 8 * BURST_SECONDS) if valid else 0)
    if limit_bytes is None:
        limit_bytes = max(QUEUE_BYTES, burst_bytes)
    return LinkShape(rate_gbit=rate_gbit, burst_bytes=burst_bytes, limit_bytes=limit_bytes)


def link_label(rate_gbit: float) -> str:
    """How a rate appears in tables: ``inf`` for the host loopback, else the number (``10``, ``0.5``)."""
    return "inf" if math.isinf(rate_gbit) else f"{rate_gbit:g}"


def parse_link_rates(text: str) -> list[float]:
    """``"10,1,inf"`` -> ``[10.0, 1.0, inf]``; raises ValueError naming ``--link-gbit`` on bad input."""
    rates = []
    for item in text.split(","):
        item = item.strip().lower()
        try:
            rate = float(item)
        except ValueError:
            raise ValueError(f"--link-gbit: expected comma-separated rates in Gbit/s (numbers > 0, or inf for "
                             f"the unlimited host loopback), got {text!r}") from None
        if math.isnan(rate) or rate <= 0:
            raise ValueError(f"--link-gbit: expected rates > 0 (inf for the unlimited host loopback), got {item!r}")
        rates.append(rate)
    if len(set(rates)) != len(rates):
        raise ValueError(f"--link-gbit: expected each rate once, got {text!r}")
    return rates


def add_link_argument(parser: argparse.ArgumentParser, default: str = "inf") -> None:
    """Add ``--link-gbit`` to ``parser``; the parsed value is a list of rates (floats, ``inf`` included)."""

    def rates(text: str) -> list[float]:
        try:
            return parse_link_rates(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix("--link-gbit: ")) from None  # argparse names it

    parser.add_argument(
        "--link-gbit", type=rates, default=rates(default), metavar="R[,R...]",
        help="run every launch over an emulated link of R Gbit/s shared by all workers (a tbf-shaped loopback "
             "in a private network namespace, see benchmarks/emulated_link.py); inf = the host loopback, "
             f"unshaped; comma-separated rates give one run each (default {default})")


def link_command(cmd: Sequence[str], rate_gbit: float, *, stats_path: Path | None = None) -> list[str]:
    """``cmd`` run over an emulated link of ``rate_gbit`` Gbit/s, or ``cmd`` itself when the rate is inf.

    Args:
        cmd: the command that starts every worker (all must rendezvous on 127.0.0.1).
        rate_gbit: the shared link's rate, > 0; ``inf`` leaves the command on the host loopback.
        stats_path: where to write the link's counters when the command ends (read them with
            :func:`read_link_stats`); not written for ``inf`` (the host loopback is shared with
            everything else on the machine).
    """
    if rate_gbit == math.inf:
        return list(cmd)
    return namespace_command(cmd, link_shape(rate_gbit), stats_path=stats_path)


def namespace_command(cmd: Sequence[str], shape: LinkShape | None, *,
                      stats_path: Path | None = None) -> list[str]:
    """``cmd`` in a private network namespace whose loopback is shaped by ``shape`` (None: unshaped).

    The shell inside brings ``lo`` up, installs the qdisc, points gloo at ``lo`` (the only device),
    runs ``cmd`` and keeps its exit status; then, if ``stats_path`` is given, writes the qdisc's and
    the device's counters there (parsed by :func:`read_link_stats`). No fork is needed for a network namespace, so the command stays in
    the caller's process group and a ``killpg`` on timeout reaches every worker.
    """
    if not cmd:
        raise ValueError("cmd: expected a non-empty command")
    setup = ["set -e", "ip link set lo up"]
    if shape is not None:
        setup.append("tc qdisc replace dev lo root " + " ".join(shape.tc_arguments()))
    setup += ["export GLOO_SOCKET_IFNAME=lo", "set +e", '"$@"', "status=$?"]
    if stats_path is not None:
        # Line 1: tc's JSON for the qdiscs (bytes, drops, overlimits); line 2: this namespace's lo line of
        # /proc/net/dev (/proc/net follows the network namespace, /sys/class/net does not).
        path = shlex.quote(str(stats_path))
        setup.append(f"{{ tc -s -j qdisc show dev lo | tr -d '\\n'; echo; grep 'lo:' /proc/net/dev; }} > {path}")
    setup.append("exit $status")
    return ["unshare", "--user", "--map-root-user", "--net", "sh", "-c", "\n".join(setup), "emulated-link", *cmd]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStats:
    """What the namespace's loopback carried during one command.

    Args:
        qdisc_bytes: bytes the tbf sent (headers included; 0 when unshaped).
        qdisc_drops: packets the tbf dropped because its queue was full (should be 0).
        overlimits: times a packet had to wait for tokens (> 0 shows the rate limit acted).
        device_bytes: bytes the loopback device transmitted (everything, shaped or not).
    """

    qdisc_bytes: int
    qdisc_drops: int
    overlimits: int
    device_bytes: int


def read_link_stats(path: Path) -> LinkStats:
    """Parse the counters written by :func:`namespace_command`'s ``stats_path``."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    qdiscs = [q for q in json.loads(lines[0]) if q.get("root")]
    shaped = [q for q in qdiscs if q.get("kind") == "tbf"]
    q = shaped[0] if shaped else {}
    # /proc/net/dev: "lo: rx_bytes rx_packets ... (8 receive fields) tx_bytes ...".
    fields = lines[1].split(":", 1)[1].split()
    return LinkStats(qdisc_bytes=int(q.get("bytes", 0)), qdisc_drops=int(q.get("drops", 0)),
                     overlimits=int(q.get("overlimits", 0)), device_bytes=int(fields[8]))


def check_link_support(rates: Sequence[float]) -> None:
    """Raise RuntimeError saying what is missing if ``rates`` need a shaped namespace and this machine
    cannot make one (nothing to check when every rate is inf). Call it before a long benchmark, so that
    a missing ``tc`` fails in a second instead of after the first runs."""
    if all(math.isinf(rate) for rate in rates):
        return
    missing = [tool for tool in ("unshare", "ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"--link-gbit: needs {', '.join(missing)} on PATH (util-linux and iproute2)")
    probe = namespace_command(["true"], link_shape(1.0))
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(
            "--link-gbit: could not make a rate-limited network namespace (`unshare -rn` + `tc qdisc ... tbf`); "
            "unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, "
            "user.max_user_namespaces, or kernel.apparmor_restrict_unprivileged_userns on Ubuntu 24.04) or the "
            f"tbf qdisc missing; use --link-gbit inf. It said:\n{done.stderr.strip()}")
