"""Every detector over the awkward inputs a capture can be (STYLE.md, "scikit-learn").

Each input is crafted with scapy as real pcap bytes, read by the real reader and analysed by the
real pipeline; every discovered detector then runs on the context the pipeline built. For each
detector and input: no exception, the same findings when run twice (as JSON), and every evidence
key documented in the detector's `### Evidence` section of docs/findings.md.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.helpers.contexts import analyze_with_context
from tests.helpers.crafting import CLIENT, SERVER, tcp, transfer, write
from tests.test_detectors import DOC, doc_sections
from tracekit.detectors import all_detectors
from tracekit.detectors.base import Detector
from tracekit.errors import CaptureError
from tracekit.pipeline import analyze_files

DETECTORS = all_detectors()
SPORT, DPORT = 40000, 80
ISN_C, ISN_S = 1000, 5000
MSS = 1000


def _data(t: float, rel: int, flags: str = "PA") -> object:
    return tcp(t, CLIENT, SERVER, SPORT, DPORT, flags, ISN_C + rel, ISN_S + 1, MSS)


def _ack(t: float, rel: int, window: int = 65535) -> object:
    return tcp(t, SERVER, CLIENT, DPORT, SPORT, "A", ISN_S + 1, ISN_C + rel, window=window)


def _mid_connection(at_receiver: bool = False) -> list[object]:
    """A transfer caught after its handshake: 60 segments, every second ACKed one RTT later,
    segment 20 lost and resent after duplicate ACKs, then the window shut for 0.4 s.

    At the receiver (one-way delay 20 ms each way) the lost copy of segment 20 is missing."""
    start = 1_000_001  # far into the byte stream
    lag = 0.02 if at_receiver else 0.0
    pkts: list[tuple[float, object]] = []
    for i in range(60):
        t = 0.001 * i
        if not (at_receiver and i == 20):
            pkts.append((t + lag, _data(t + lag, start + i * MSS)))
        acked = 20 if 20 <= i < 26 else i + 1
        if i % 2 or 20 <= i < 26:
            window = 0 if i == 59 else 65535
            at = t + 0.04 - lag
            pkts.append((at, _ack(at, start + acked * MSS, window)))
    pkts.append((0.07 + lag, _data(0.07 + lag, start + 20 * MSS)))
    pkts.append((0.5 - lag, _ack(0.5 - lag, start + 60 * MSS)))
    return [p for _, p in sorted(pkts, key=lambda tp: tp[0])]


def _udp(t: float, number: int) -> object:
    pkt = Ether() / IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=5001)
    pkt = pkt / (struct.pack(">I", number) + b"u" * 996)
    pkt.time = t
    return pkt


def _empty(path: Path) -> Path:
    # A classic pcap header (microseconds, Ethernet) and no record.
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


# name -> builds (sender, receiver or None) in a folder.
Builder = Callable[[Path], tuple[Path, Path | None]]
INPUTS: dict[str, Builder] = {
    "no_handshake": lambda d: (write(d / "s.pcap", _mid_connection()), None),
    "no_handshake_pair": lambda d: (
        write(d / "s.pcap", _mid_connection()),
        write(d / "r.pcap", _mid_connection(at_receiver=True)),
    ),
    "data_without_acks": lambda d: (
        write(d / "s.pcap", [_data(0.001 * i, 1 + i * MSS) for i in range(40)]),
        None,
    ),
    "acks_without_data": lambda d: (
        write(d / "s.pcap", [_ack(0.002 * i, 1 + i * MSS) for i in range(40)]),
        None,
    ),
    "no_acks_at_all": lambda d: (
        write(
            d / "s.pcap",
            [tcp(t, CLIENT, SERVER, SPORT, DPORT, "S", ISN_C) for t in (0.0, 1.0, 3.0)]
            + [_data(3.1 + 0.001 * i, 1 + i * MSS, flags="P") for i in range(20)],
        ),
        None,
    ),
    "udp_only": lambda d: (
        write(d / "s.pcap", [_udp(0.001 * i, i) for i in range(30)]),
        write(d / "r.pcap", [_udp(0.001 * i + 0.02, i) for i in range(30) if i not in (7, 8)]),
    ),
    "single_packet": lambda d: (
        write(d / "s.pcap", [tcp(0.0, CLIENT, SERVER, SPORT, DPORT, "S", ISN_C)]),
        None,
    ),
    "empty": lambda d: (_empty(d / "s.pcap"), None),
    "receiver_holds_one_packet": lambda d: (
        write(d / "s.pcap", transfer()),
        write(d / "r.pcap", transfer()[:1]),
    ),
    # The one packet a data segment: matched to the sender's connection without its handshake.
    "receiver_holds_one_data_packet": lambda d: (
        write(d / "s.pcap", transfer()),
        write(d / "r.pcap", transfer()[3:4]),
    ),
}
# Inputs the reader or the pipeline may refuse, as bad input in one line: a capture of no
# packet holds no TCP and no stream to analyse.
MAY_BE_REFUSED = {"empty"}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """name -> (analysis, context), or the CaptureError that refused it."""
    results: dict[str, Any] = {}
    for name, build in INPUTS.items():
        folder = tmp_path_factory.mktemp(name)
        sender, receiver = build(folder)
        try:
            results[name] = (*analyze_with_context(sender, receiver), sender, receiver)
        except CaptureError as exc:
            results[name] = exc
    return results


def documented_evidence(kind: str) -> set[str]:
    """The names in backquotes of the kind's `### Evidence` section of docs/findings.md."""
    body = doc_sections(DOC.read_text())[kind]
    evidence = re.split(r"^### ", body, flags=re.M)
    (section,) = [s for s in evidence if s.startswith("Evidence\n")]
    return set(re.findall(r"`([a-z0-9_]+)`", section))


def as_json(findings: list[Any]) -> str:
    return json.dumps([f.to_dict() for f in findings], sort_keys=True, allow_nan=False)


@pytest.mark.parametrize("name", INPUTS)
def test_the_pipeline_analyses_the_input_or_refuses_it_in_one_line(
    analysed: dict[str, Any], name: str
) -> None:
    result = analysed[name]
    if isinstance(result, CaptureError):
        assert name in MAY_BE_REFUSED, str(result)
        assert "\n" not in str(result)


@pytest.mark.parametrize("name", [n for n in INPUTS if n not in MAY_BE_REFUSED])
def test_the_whole_pipeline_gives_the_same_findings_twice(
    analysed: dict[str, Any], name: str
) -> None:
    analysis, _, sender, receiver = analysed[name]
    again = analyze_files(sender, receiver)
    assert as_json(again.findings) == as_json(analysis.findings)


@pytest.mark.parametrize("name", [n for n in INPUTS if n not in MAY_BE_REFUSED])
@pytest.mark.parametrize("cls", DETECTORS, ids=lambda cls: cls.kind)
def test_the_detector_conforms_on_the_input(
    analysed: dict[str, Any], cls: type[Detector], name: str
) -> None:
    _, ctx, _, _ = analysed[name]
    first = list(cls().detect(ctx))
    second = list(cls().detect(ctx))
    assert as_json(first) == as_json(second)
    documented = documented_evidence(cls.kind)
    for finding in first:
        assert finding.kind == cls.kind
        undocumented = set(finding.evidence) - documented
        assert not undocumented, f"{cls.kind}: evidence {sorted(undocumented)} not in findings.md"


def test_the_evidence_parser_reads_a_known_section() -> None:
    # From the section as written: slow_start_overrun's eq. 1 inputs.
    keys = documented_evidence("slow_start_overrun")
    assert {"burst_packets", "burst_lost_packets", "buffer_estimate_bytes"} <= keys
    assert "min_lost_packets" not in keys  # named in "What it means", not in the evidence
