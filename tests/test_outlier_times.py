"""One outlier timestamp in a real transfer: every command ends (exit 0, or exit 2 with one line),
in bounded memory and time, and no time is wrapped, negative or infinite.

The captures are fixtures.crafted.outliers: 200 packets of the bundled slow-start transfer with
one ACK at 0 s, at 2**32 - 1 s, 100 days late, in the year 2400 (pcapng), or an interface whose
if_tsoffset is 2**62 s. Each command runs in a child process whose address space is capped, so
a command that asks for terabytes fails there instead of on the machine, and whose peak RSS is
taken from its own rusage (os.wait4).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures.crafted import outliers
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.merge.udpstream import Layout, udp_streams
from tracekit.series import rate

GIB = 1 << 30
PEAK_RSS_LIMIT = GIB
SECONDS_LIMIT = 20.0
# The child's address-space cap: above what numba and numpy map at start, far under what a
# bin per RTT of decades asks for.
ADDRESS_SPACE_CAP = 3 * GIB
CLI = "from tracekit.cli.main import main; main()"


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def run_cli(tmp_path: Path, *args: str) -> tuple[int, str, str, int, float]:
    """Run `tracekit args` in a child: (exit status, stdout, stderr, peak RSS bytes, seconds)."""
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    start = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", CLI, *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=_cap_address_space,
        )
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > SECONDS_LIMIT * 3:
                child.send_signal(signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    seconds = time.monotonic() - start
    peak = usage.ru_maxrss * 1024  # kilobytes on Linux
    return child.returncode, out_path.read_text(), err_path.read_text(), peak, seconds


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return outliers.write_all(tmp_path_factory.mktemp("outliers"))


def _commands(capture: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "analyze": ["analyze", "--json", str(capture)],
        "report": ["report", str(capture), "-o", str(tmp_path / "report.html")],
        "check": ["check", str(capture)],
        "tsg": ["tsg", str(capture), "--export", str(tmp_path / "series")],
    }


def _all_commands_end(capture: Path, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """Run every command on one capture; assert each ends well, and return (status, stdout)."""
    results = {}
    for name, args in _commands(capture, tmp_path).items():
        status, out, err, peak, seconds = run_cli(tmp_path, *args)
        what = f"tracekit {name} {capture.name}"
        # check's exit 1 is its policy's verdict on the findings, not an error.
        allowed = (0, 1, 2) if name == "check" else (0, 2)
        assert status in allowed, f"{what}: exit {status}: {err[-2000:]}"
        if status == 2:
            assert len(err.strip().splitlines()) == 1, f"{what}: {err}"
        assert peak < PEAK_RSS_LIMIT, f"{what}: peak RSS {peak / GIB:.2f} GiB"
        assert seconds < SECONDS_LIMIT, f"{what}: {seconds:.1f} s"
        results[name] = (status, out)
    return results


def _times_are_sane(analysis: str) -> None:
    doc = json.loads(analysis)
    for conn in doc["connections"]:
        assert 0 <= conn["start_ns"] <= conn["end_ns"], conn
    for finding in doc["findings"]:
        start, end = finding["start_s"], finding["end_s"]
        assert np.isfinite(start) and np.isfinite(end) and 0 <= start <= end, finding


@pytest.mark.parametrize("name", ["ack_at_zero.pcap", "ack_at_max.pcap", "ack_days_late.pcap"])
def test_a_far_ack_leaves_every_command_bounded(
    name: str, captures: dict[str, Path], tmp_path: Path
) -> None:
    results = _all_commands_end(captures[name], tmp_path)
    # Classic pcap holds 32-bit seconds: every such time fits, and the capture is read whole.
    assert all(status != 2 for status, _ in results.values())
    _times_are_sane(results["analyze"][1])


def test_a_time_past_2262_is_skipped_not_wrapped(captures: dict[str, Path], tmp_path: Path) -> None:
    path = captures["year_2400.pcapng"]
    capture = read_capture(path)
    assert capture.stats.skipped == {"bad_timestamp": 1}
    assert any("1677-2262" in w for w in capture.stats.warnings)
    assert capture.packets.num_rows == outliers.PACKETS - 1
    assert min(capture.packets.column("ts_ns").to_pylist()) > 0
    results = _all_commands_end(path, tmp_path)
    assert results["analyze"][0] == 0
    _times_are_sane(results["analyze"][1])


def test_an_offset_no_time_survives_is_one_line(captures: dict[str, Path], tmp_path: Path) -> None:
    results = _all_commands_end(captures["huge_tsoffset.pcapng"], tmp_path)
    assert {status for status, _ in results.values()} == {2}


def test_rate_rows_are_bounded_by_packets_not_span() -> None:
    """A connection whose packets span ten years: the rate table of 1 ms windows (some
    3e11 of them over the span) has at most three rows per packet, and keeps every byte."""
    year_s = 365.25 * 86_400
    rng = np.random.default_rng(7)
    seg_t = np.sort(np.r_[rng.random(300) * 0.5, 10 * year_s - rng.random(300) * 0.5])
    ack_t = np.sort(np.r_[rng.random(200) * 0.5 + 0.01, 10 * year_s])
    segments = pd.DataFrame({"t_s": seg_t, "len": np.full(seg_t.size, 1448)})
    acks = pd.DataFrame({"t_s": ack_t, "ack_rel": np.arange(ack_t.size) * 1448})
    packets = seg_t.size + ack_t.size
    table = rate(segments, acks, window_s=1e-3)
    assert len(table) <= 3 * packets
    assert table["sent_bps"].sum() * 1e-3 / 8 == pytest.approx(1448 * seg_t.size)
    assert table["acked_bps"].sum() * 1e-3 / 8 == pytest.approx(1448 * (ack_t.size - 1))
    # A gap is drawn down to zero on both sides.
    assert (table["sent_bps"] == 0).sum() >= 2
    assert np.all(np.diff(table["t_s"].to_numpy()) > 0)


def _datagrams(path: Path, payloads: list[bytes]) -> Path:
    """A classic pcap of UDP datagrams 10.2.0.1:9000 -> 10.2.0.2:9001, 20 ms apart (a voice
    call's packet time), each with 160 bytes of audio after the given head."""
    records = []
    for i, head in enumerate(payloads):
        payload = head + bytes(160)
        udp = struct.pack(">HHHH", 9000, 9001, 8 + len(payload), 0) + payload
        ip = struct.pack(
            ">BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(udp),
            i,
            0,
            64,
            17,
            0,
            bytes([10, 2, 0, 1]),
            bytes([10, 2, 0, 2]),
        )
        frame = bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00" + ip + udp
        sec, usec = divmod(1_700_000_000_000_000 + 20_000 * i, 1_000_000)
        records.append((sec, usec, len(frame), frame))
    path.write_bytes(outliers.pcap(records))
    return path


def _rtp(seq: int, payload_type: int = 0) -> bytes:
    """An RTP header (RFC 3550 5.1): version 2, the payload type, the 16-bit sequence number
    at offset 2, a timestamp of 160 samples per packet, an SSRC."""
    return struct.pack(">BBHII", 0x80, payload_type, seq, 160 * seq, 0x1234)


def test_a_udp_counter_with_one_outlier_number_is_not_a_stream(tmp_path: Path) -> None:
    """A numbered stream (4-byte counter at offset 0) with one datagram numbered 2**31: its
    range is two billion numbers for 1001 datagrams. Not a test stream, in bounded memory."""
    heads = [n.to_bytes(4, "big") for n in range(1000)]
    path = _datagrams(
        tmp_path / "outlier.pcap", [*heads[:500], (2**31).to_bytes(4, "big"), *heads[500:]]
    )
    status, _, err, peak, seconds = run_cli(tmp_path, "analyze", "--json", str(path))
    assert status == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert "no numbered UDP stream" in err
    assert peak < PEAK_RSS_LIMIT and seconds < SECONDS_LIMIT
    assert udp_streams(build_connections(read_capture(path))) == []
    # The same counter without the outlier, a third of it lost, is a stream.
    kept = _datagrams(tmp_path / "counter.pcap", [h for i, h in enumerate(heads) if i % 3])
    (stream,) = udp_streams(build_connections(read_capture(kept)))
    assert stream.sent_count == 998 and stream.received_count == 666  # numbers 1..998


def test_a_voice_call_is_not_a_test_stream(tmp_path: Path) -> None:
    """RTP read as the default 4-byte number (version, payload type, sequence) counts up by
    one, as a test stream does; one RTCP sender report (packet type 200) or one DTMF event
    (payload type 101) among it puts millions of numbers between its lowest and highest."""
    call = [_rtp(seq) for seq in range(3000)]
    for odd in (struct.pack(">BBHI", 0x80, 200, 6, 0x1234), _rtp(1500, payload_type=101)):
        path = _datagrams(tmp_path / "call.pcap", [*call[:1500], odd, *call[1500:]])
        status, _, err, peak, seconds = run_cli(tmp_path, "analyze", "--json", str(path))
        assert status == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
        assert peak < PEAK_RSS_LIMIT and seconds < SECONDS_LIMIT
    # Read where RTP keeps it (2 bytes at offset 2), the sequence is a stream.
    (stream,) = udp_streams(build_connections(read_capture(path)), layout=Layout(2, 2))
    assert stream.received_count == 3000


def test_a_finding_before_the_first_packet_starts_at_it() -> None:
    """A receiver's arrival put on the sender's clock can fall a little before the sender's
    first packet: the finding starts at 0 s, never at a negative time (which Finding refuses)."""
    from tracekit.detectors.network_drop import NetworkDrop

    finding = NetworkDrop().finding(
        conn=0,
        direction="a2b",
        start_s=-0.002,
        end_s=-0.001,
        evidence={},
        summary="one drop",
        explanation="e",
        advice="a",
    )
    assert (finding.start_s, finding.end_s) == (0.0, 0.0)
