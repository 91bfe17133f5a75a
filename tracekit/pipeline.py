"""The one function that wires the stages: capture -> connections -> series -> findings."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tracekit.capture import Capture, read_capture
from tracekit.connections import Connections, build_connections, records
from tracekit.detectors import run_detectors
from tracekit.detectors.base import AnalysisContext
from tracekit.errors import CaptureError
from tracekit.findings import Finding
from tracekit.merge import Merge, merge
from tracekit.schema import PROTO_TCP
from tracekit.series import Series, build_series
from tracekit.udpstream import Layout, UdpStream, has_udp_stream, udp_streams


@dataclass(frozen=True)
class Vantage:
    """One capture point's view: its connections and their series."""

    connections: Connections
    series: Series


@dataclass(frozen=True)
class Analysis:
    """What an analysis found: the sender's view, the receiver's if given, and the findings."""

    sender: Vantage
    findings: list[Finding]
    receiver: Vantage | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    # The two captures merged (tracekit.merge), when a receiver capture was given.
    merge: Merge | None = None
    # Numbered UDP test streams (tracekit.udpstream), received against sent.
    udp: tuple[UdpStream, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `tracekit analyze --json` (docs/analyze.schema.json).

        With a receiver capture it adds `two_vantage` (the clock fit, the fate counts, the
        connections seen in one capture only); with numbered UDP streams, `udp_streams`.
        """
        doc: dict[str, Any] = {
            "connections": records(self.sender.connections.table),
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.merge is not None:
            doc["two_vantage"] = {
                "clock": self.merge.clock.to_dict() if self.merge.clock is not None else None,
                "fates": self.merge.counts(),
                "sender_only_connections": [int(c) for c in self.merge.connections.sender_only],
                "receiver_only_connections": [int(c) for c in self.merge.connections.receiver_only],
            }
        if self.udp:
            doc["udp_streams"] = [
                {**stream.to_dict(), "lost_numbers": stream.lost.astype(int).tolist()}
                for stream in self.udp
            ]
        return _json_numbers(doc)


def _json_numbers(value: Any) -> Any:
    """The document with every NaN or infinity as null: JSON has neither (RFC 8259 6)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_numbers(v) for v in value]
    return value


def vantage(capture: Capture, udp_layout: Layout | None = None) -> Vantage:
    """Connections and series of one capture, which must hold TCP or a numbered UDP stream."""
    # Handed over, not lent: with no reference left here, build_connections frees the reader's
    # columns it replaces as it goes (when the caller let the capture go too, as analyze does).
    handed = [capture]
    del capture
    conns = build_connections(handed.pop())
    proto = conns.packets.column("proto").to_numpy()
    if not (proto == PROTO_TCP).any() and not has_udp_stream(conns, udp_layout):
        raise CaptureError(
            conns.capture.path,
            f"no TCP packets and no numbered UDP stream in {conns.capture.stats.frames} frames "
            "(a stream numbered elsewhere: --udp-seq-offset, --udp-seq-width)",
        )
    return Vantage(connections=conns, series=build_series(conns))


def analyze(
    sender: Capture,
    receiver: Capture | None = None,
    *,
    configs: Mapping[str, object] | None = None,
    addr_map: Mapping[str, str] | None = None,
    udp_layout: Layout | None = None,
) -> Analysis:
    """Run every stage and every detector on the sender capture (and the receiver's, if any).

    With a receiver capture, the two are merged (`tracekit.merge`; `addr_map` maps NAT'd
    sender addresses to what the receiver saw) before the detectors run. `udp_layout` says
    where numbered UDP datagrams carry their number (default: first 4 bytes, big-endian).
    """
    # Each capture is handed on and dropped here, so its replaced columns can be freed.
    # mypy does not narrow a list's items: the casts say what the order and the test ensure.
    captures = [receiver, sender]
    del sender, receiver
    snd = vantage(cast(Capture, captures.pop()), udp_layout)
    rcv = vantage(cast(Capture, captures.pop()), udp_layout) if captures[-1] is not None else None
    merged = merge(snd.connections, rcv.connections, addr_map) if rcv is not None else None
    streams = tuple(
        udp_streams(
            snd.connections,
            rcv.connections if rcv is not None else None,
            udp_layout,
            dict(addr_map or {}),
        )
    )
    ctx = AnalysisContext(
        connections=snd.connections.frame(),
        packets=snd.connections.packets,
        series=snd.series,
        merge=merged,
        udp=streams,
    )
    findings = run_detectors(ctx, configs=configs)
    return Analysis(sender=snd, findings=findings, receiver=rcv, merge=merged, udp=streams)


def analyze_paths(sender: str | Path, receiver: str | Path | None = None) -> Analysis:
    """`analyze` from file paths, for callers without a progress bar (batch, tests)."""
    return analyze(read_capture(sender), read_capture(receiver) if receiver is not None else None)
