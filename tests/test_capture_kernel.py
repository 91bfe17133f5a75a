"""tracekit.capture on real kernel captures, frame by frame against tshark's independent reading."""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from tests.helpers.independent import conversations
from tracekit.capture import Capture, read_capture

KERNEL = Path(__file__).resolve().parent.parent / "fixtures" / "kernel"
CAPTURES = sorted(p.name for p in KERNEL.glob("*.pcap*"))

# One tshark run per capture and table: a few seconds in all.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark"),
]

FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.id",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "tcp.window_size_value",
    "tcp.flags",
    "tcp.options.mss_val",
    "tcp.options.wscale.shift",
    "tcp.options.timestamp.tsval",
    "tcp.options.timestamp.tsecr",
    "tcp.options.sack_le",
    "tcp.options.sack_re",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.payload",
)


def tshark_rows(path: Path) -> list[dict[str, str]]:
    fields = [arg for name in FIELDS for arg in ("-e", name)]
    out = subprocess.run(
        [
            *("tshark", "-n", "-r", str(path), "-o", "tcp.relative_sequence_numbers:FALSE"),
            *("-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"),
            *fields,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


def number(text: str, default: int = 0) -> int:
    return int(text, 0) if text else default


@pytest.fixture(scope="module", params=CAPTURES)
def pair(request: pytest.FixtureRequest) -> tuple[Path, Capture, list[dict[str, str]]]:
    path = KERNEL / request.param
    return path, read_capture(path), tshark_rows(path)


def test_there_are_real_captures() -> None:
    assert len(CAPTURES) >= 4


def test_every_frame_agrees_with_tshark(pair: tuple[Path, Capture, list[dict[str, str]]]) -> None:
    path, capture, shark = pair
    assert capture.stats.frames == len(shark)
    flows = capture.flows.to_pylist()
    ours = {row["frame"]: row for row in capture.packets.to_pylist()}
    sack: dict[int, list[tuple[int, int]]] = {}
    for block in capture.sack.to_pylist():
        sack.setdefault(block["row"], []).append((block["left"], block["right"]))
    heads = {u["row"]: u for u in capture.udp.to_pylist()}
    rows = {row["frame"]: i for i, row in enumerate(capture.packets.to_pylist())}
    transport = [t for t in shark if t["tcp.srcport"] or t["udp.srcport"]]
    assert len(ours) == len(transport) > 0
    for t in transport:
        frame = int(t["frame.number"])
        row = ours[frame]
        where = f"{path.name} frame {frame}"
        assert row["ts_ns"] == int(Decimal(t["frame.time_epoch"]) * 10**9), where
        src = t["ip.src"] or t["ipv6.src"]
        dst = t["ip.dst"] or t["ipv6.dst"]
        flow = flows[row["flow"]]
        ends = [(flow["addr0"], flow["port0"]), (flow["addr1"], flow["port1"])]
        if t["tcp.srcport"]:
            sport, dport = int(t["tcp.srcport"]), int(t["tcp.dstport"])
            want = {
                "proto": 6,
                "payload_bytes": int(t["tcp.len"]),
                "seq": int(t["tcp.seq_raw"]),
                "ack": int(t["tcp.ack_raw"]),
                "win_raw": int(t["tcp.window_size_value"]),
                "tcp_flags": int(t["tcp.flags"], 16) & 0xFF,
                "mss": number(t["tcp.options.mss_val"]),
                "wscale": number(t["tcp.options.wscale.shift"], 255),
                "tsval": number(t["tcp.options.timestamp.tsval"]),
                "tsecr": number(t["tcp.options.timestamp.tsecr"]),
            }
            lefts = [int(x) for x in t["tcp.options.sack_le"].split(",") if x]
            rights = [int(x) for x in t["tcp.options.sack_re"].split(",") if x]
            assert sack.get(rows[frame], []) == list(zip(lefts, rights, strict=True)), where
        else:
            sport, dport = int(t["udp.srcport"]), int(t["udp.dstport"])
            want = {"proto": 17, "payload_bytes": int(t["udp.length"]) - 8}
            head = bytes.fromhex(t["udp.payload"].replace(":", ""))[:8]
            got = heads[rows[frame]]
            assert got["head_len"] == len(head), where
            assert got["head"] == int.from_bytes(head.ljust(8, b"\x00"), "big"), where
        want["ip_id"] = number(t["ip.id"])
        assert {k: row[k] for k in want} == want, where
        assert ends[row["src_end"]] == (src, sport), where
        assert ends[1 - row["src_end"]] == (dst, dport), where


def test_packets_per_connection_agree_with_tshark_conv(
    pair: tuple[Path, Capture, list[dict[str, str]]],
) -> None:
    path, capture, _ = pair
    flows = capture.flows.to_pylist()
    counts = capture.packets.column("flow").value_counts().to_pylist()
    ours = {}
    for item in counts:
        flow = flows[item["values"]]
        if flow["proto"] == 6:
            ends = frozenset(
                (f"{flow['addr0']}:{flow['port0']}", f"{flow['addr1']}:{flow['port1']}")
            )
            ours[ends] = item["counts"]
    assert ours == conversations(path)


def test_payload_bytes_per_connection_agree_with_tshark(
    pair: tuple[Path, Capture, list[dict[str, str]]],
) -> None:
    _, capture, shark = pair
    want: dict[frozenset[tuple[str, int]], int] = {}
    for t in shark:
        if t["tcp.srcport"]:
            key = frozenset(
                (
                    (t["ip.src"] or t["ipv6.src"], int(t["tcp.srcport"])),
                    (t["ip.dst"] or t["ipv6.dst"], int(t["tcp.dstport"])),
                )
            )
            want[key] = want.get(key, 0) + int(t["tcp.len"])
    table = capture.packets.group_by("flow").aggregate([("payload_bytes", "sum")]).to_pylist()
    flows = capture.flows.to_pylist()
    got = {}
    for item in table:
        flow = flows[item["flow"]]
        if flow["proto"] == 6:
            key = frozenset(((flow["addr0"], flow["port0"]), (flow["addr1"], flow["port1"])))
            got[key] = item["payload_bytes_sum"]
    assert got == want
