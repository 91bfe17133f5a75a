"""The one function that wires the stages: capture -> connections -> series -> findings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.capture import Capture, read_capture, require_tcp
from tracekit.connections import Connections, build_connections, records
from tracekit.detectors import run_detectors
from tracekit.detectors.base import AnalysisContext
from tracekit.findings import Finding
from tracekit.series import Series, build_series


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

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `tracekit analyze --json` (docs/analyze.schema.json)."""
        return {
            "connections": records(self.sender.connections.table),
            "findings": [f.to_dict() for f in self.findings],
        }


def vantage(capture: Capture) -> Vantage:
    """Connections and series of one capture (which must hold TCP)."""
    require_tcp(capture)
    conns = build_connections(capture)
    return Vantage(connections=conns, series=build_series(conns))


def analyze(
    sender: Capture,
    receiver: Capture | None = None,
    *,
    configs: Mapping[str, object] | None = None,
) -> Analysis:
    """Run every stage and every detector on the sender capture (and the receiver's, if any)."""
    snd = vantage(sender)
    rcv = vantage(receiver) if receiver is not None else None
    ctx = AnalysisContext(
        connections=snd.connections.frame(),
        packets=snd.connections.packets,
        series=snd.series,
    )
    findings = run_detectors(ctx, configs=configs)
    return Analysis(sender=snd, findings=findings, receiver=rcv)


def analyze_paths(sender: str | Path, receiver: str | Path | None = None) -> Analysis:
    """`analyze` from file paths, for callers without a progress bar (batch, tests)."""
    return analyze(read_capture(sender), read_capture(receiver) if receiver is not None else None)
