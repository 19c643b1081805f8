"""benchmarks/emulated_link.py: rates from --link-gbit, the tbf shape, and a real shaped namespace that
slows a real TCP transfer on 127.0.0.1 to the rate (skipped where unprivileged network namespaces or
tc are unavailable: that is the machine, not the code)."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from emulated_link import (  # noqa: E402  (benchmarks/ is not a package)
    MAX_PACKET_BYTES, QUEUE_BYTES, LinkShape, add_link_argument, check_link_support, link_command, link_shape,
    namespace_command, parse_link_rates, read_link_stats)

# A sender and a receiver thread in one process, over a TCP connection on 127.0.0.1: prints the
# seconds the receiver took to get TRANSFER_BYTES.
TRANSFER_BYTES = 4_000_000
TRANSFER = f"""
import socket, threading, time
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def send():
    with socket.create_connection(server.getsockname()) as s:
        s.sendall(b"x" * {TRANSFER_BYTES})
sender = threading.Thread(target=send); start = time.perf_counter(); sender.start()
conn, _ = server.accept(); got = 0
while got < {TRANSFER_BYTES}:
    got += len(conn.recv(1 << 20))
print(time.perf_counter() - start); sender.join()
"""


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Skip the test where this machine cannot make a shaped namespace (and say why)."""
    try:
        check_link_support([1.0])
    except RuntimeError as err:
        pytest.skip(f"no shaped network namespace here: {err}")


def test_parse_link_rates():
    assert parse_link_rates("10,1,inf") == [10.0, 1.0, math.inf]
    assert parse_link_rates(" 0.5 , INF") == [0.5, math.inf]


@pytest.mark.parametrize("text, match", [("0", "rates > 0"), ("-1", "rates > 0"), ("nan", "rates > 0"),
                                         ("fast", "expected comma-separated rates"), ("10,,1", "comma-separated"),
                                         ("1,1", "each rate once")])
def test_parse_link_rates_rejects(text, match):
    with pytest.raises(ValueError, match=f"--link-gbit: .*{match}"):
        parse_link_rates(text)


def test_add_link_argument(capsys):
    parser = argparse.ArgumentParser()
    add_link_argument(parser)
    assert parser.parse_args([]).link_gbit == [math.inf]
    assert parser.parse_args(["--link-gbit", "10,1"]).link_gbit == [10.0, 1.0]
    with pytest.raises(SystemExit):
        parser.parse_args(["--link-gbit", "0"])
    assert "argument --link-gbit: expected rates > 0" in capsys.readouterr().err


def test_link_shape_defaults():
    # 10 Gbit/s: 0.5 ms of tokens; 1 Gbit/s: 0.5 ms is 62.5 kB, less than the 2-packet floor.
    assert link_shape(10).burst_bytes == 625_000
    assert link_shape(1).burst_bytes == 2 * MAX_PACKET_BYTES
    assert link_shape(1).limit_bytes == QUEUE_BYTES
    assert link_shape(10).tc_arguments() == ["tbf", "rate", "10000000000bit", "burst", "625000",
                                             "limit", str(QUEUE_BYTES)]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rate_gbit=math.inf), ValueError, "rate_gbit: expected a finite rate > 0"),
    (dict(rate_gbit=0), ValueError, "rate_gbit: expected a finite rate > 0"),
    (dict(rate_gbit="1"), TypeError, "rate_gbit: expected a number"),
    (dict(burst_bytes=1000), ValueError, "burst_bytes: expected >= 65550"),
    (dict(burst_bytes=1e6), TypeError, "burst_bytes: expected an int"),
    (dict(limit_bytes=100_000), ValueError, r"limit_bytes: expected >= burst_bytes \(200000\)"),
])
def test_link_shape_rejects(kwargs, error, match):
    args = dict(rate_gbit=1.0, burst_bytes=200_000, limit_bytes=1 << 20) | kwargs
    with pytest.raises(error, match=match):
        LinkShape(**args)


def test_link_command_leaves_inf_on_the_host():
    cmd = ["torchrun", "--nproc-per-node", "2", "train.py"]
    assert link_command(cmd, math.inf) == cmd
    wrapped = link_command(cmd, 1.0)
    assert wrapped[:4] == ["unshare", "--user", "--map-root-user", "--net"] and wrapped[-4:] == cmd
    with pytest.raises(ValueError, match="cmd: expected a non-empty command"):
        namespace_command([], None)


def test_check_link_support_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no unshare, ip or tc
    check_link_support([math.inf])  # the host loopback needs nothing
    with pytest.raises(RuntimeError, match="--link-gbit: needs unshare, ip, tc on PATH"):
        check_link_support([math.inf, 10.0])


def run_transfer(shape: LinkShape | None, stats: Path) -> float:
    done = subprocess.run(namespace_command([sys.executable, "-c", TRANSFER], shape, stats_path=stats),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_shaped_namespace_slows_a_transfer_to_the_rate(namespaces, tmp_path):
    rate_gbit = 0.1
    shape = link_shape(rate_gbit)
    seconds = run_transfer(shape, tmp_path / "shaped.txt")
    # Everything past the first bucket of tokens leaves at the rate: a lower bound whatever the load.
    floor = (TRANSFER_BYTES - shape.burst_bytes) * 8 / (rate_gbit * 1e9)
    assert seconds >= floor, f"{seconds:.3f} s for {TRANSFER_BYTES} B at {rate_gbit} Gbit/s; floor {floor:.3f} s"
    stats = read_link_stats(tmp_path / "shaped.txt")
    assert stats.qdisc_bytes >= TRANSFER_BYTES and stats.device_bytes >= TRANSFER_BYTES
    assert stats.qdisc_drops == 0 and stats.overlimits > 0


def test_unshaped_namespace_counts_only_its_own_traffic(namespaces, tmp_path):
    run_transfer(None, tmp_path / "plain.txt")
    stats = read_link_stats(tmp_path / "plain.txt")
    assert stats.qdisc_bytes == 0 and stats.overlimits == 0
    # A fresh namespace's loopback carried this transfer (plus handshake, headers and acks) and nothing else.
    assert TRANSFER_BYTES <= stats.device_bytes < 1.2 * TRANSFER_BYTES


def test_namespace_keeps_the_exit_status_and_points_gloo_at_lo(namespaces, tmp_path):
    probe = "import os, sys; print(os.environ['GLOO_SOCKET_IFNAME']); sys.exit(3)"
    done = subprocess.run(link_command([sys.executable, "-c", probe], 1.0, stats_path=tmp_path / "s.txt"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout.strip() == "lo"
    assert (tmp_path / "s.txt").is_file()  # counters are written even when the command fails
