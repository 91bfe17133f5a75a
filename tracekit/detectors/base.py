"""The detector protocol: what a detector declares, what it reads, what it yields.

A detector is one module in `tracekit.detectors` holding one class derived from `Detector`:

    class SlowStartOverrun(Detector):
        kind = "slow_start_overrun"          # stable snake_case, the `## kind` of docs/findings.md
        title = "Slow start overran the bottleneck buffer"
        severity = Severity.WARNING          # the default; a finding may raise or lower it
        evidence = (                         # every key its findings' evidence may hold
            Evidence("buffer_estimate_bytes", "bytes", "the bottleneck buffer by eq. 1"),
        )

        @dataclass(frozen=True)
        class Config:
            # Why this default, with its source.
            min_burst_packets: int = 100

        config: Config                       # for the type checker only

        def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
            ...
            yield self.finding(conn=..., direction="a2b", start_s=..., end_s=..., ...)

`detect` reads whole columns from the context and yields findings; it never prints, plots or
opens files. `check_detector` enforces the declarations; `tracekit.detectors.discover` runs it
on every detector it finds (a run's discovery of tracekit's own detectors leaves out the check
of their source's comments, which the tests make). A finding whose evidence holds a key its
detector does not declare is refused (DetectorError), so the declarations, and
docs/findings.md that a test holds to them, name every key a finding can carry.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema
from tracekit.findings import SNAKE_CASE, EvidenceValue, Finding, Severity
from tracekit.merge import Merge
from tracekit.merge.udpstream import UdpStream
from tracekit.series import Series

# Suffixes a numeric tunable's name must end with, so its unit is never a guess (STYLE.md:
# "units in names"). Dimensionless quantities say what they count or compare.
UNIT_SUFFIXES = (
    "_s",
    "_ms",
    "_us",
    "_ns",
    "_bytes",
    "_bits",
    "_bps",
    "_pps",
    "_packets",
    "_segments",
    "_rtts",
    "_count",
    "_ratio",
    "_fraction",
    "_factor",
)

# The packet table's columns a detector reads: those of the connections stage's table
# (`tracekit.connections.packet_schema`) that are about a packet's timing, its connection and
# what it carried. The pipeline hands the detectors these alone; the others (raw and relative
# numbers, windows, frame numbers, the handshake's options) are read into the series and the
# merge, which the detectors read instead, and are let go before the detectors run.
PACKET_COLUMN_NAMES = frozenset(
    ("ts_ns", "conn", "dir", "proto", "payload_bytes", "tcp_flags", "opts", "tsval", "tsecr")
)
CONNECTION_COLUMN_NAMES = frozenset(c.name for c in schema.CONNECTION_COLUMNS)


# The unit an evidence name's suffix says (STYLE.md: "units in names"); longest suffix first.
# Counts, ratios and fractions are plain numbers; a name without a suffix is a label or flag.
EVIDENCE_UNITS = (
    ("_per_s", "/s"),  # a rate of something per second: the unit ends so
    ("_bytes", "bytes"),
    ("_bps", "bit/s"),
    ("_packets", "packets"),
    ("_segments", "segments"),
    ("_rtts", "RTTs"),
    ("_s", "s"),
    ("_count", ""),
    ("_ratio", ""),
    ("_fraction", ""),
    ("_fractions", ""),
)


class DetectorError(Exception):
    """A detector that breaks the protocol: a bug in tracekit, not bad input."""


@dataclass(frozen=True)
class Evidence:
    """One key a detector's findings may hold in their evidence, declared in `Detector.evidence`.

    `values` lists the strings a text key takes when they are a fixed set (docs/findings.md
    may name them).
    """

    name: str
    unit: str
    meaning: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class AnalysisContext:
    """What every detector reads, built once per analysis.

    `connections` has one row per connection (CONNECTION_COLUMNS); `packets` is the packet table
    after the connections stage, in capture order, with at least PACKET_COLUMN_NAMES; `series`
    holds the per (conn, dir) series of `tracekit.series` (none by default: a context of the
    two tables alone). `merge` is the `tracekit.merge.Merge` of the sender's and the receiver's
    captures (None with one capture); `udp` the numbered UDP test streams
    (`tracekit.merge.udpstream.UdpStream`, empty when none). Missing columns raise ValueError.
    """

    connections: pd.DataFrame
    packets: pa.Table
    series: Series = field(default_factory=Series.empty)
    merge: Merge | None = None
    udp: tuple[UdpStream, ...] = ()

    def __post_init__(self) -> None:
        missing = sorted(CONNECTION_COLUMN_NAMES - set(self.connections.columns))
        if missing:
            raise ValueError(f"connections lack columns {missing}")
        missing = sorted(PACKET_COLUMN_NAMES - set(self.packets.column_names))
        if missing:
            raise ValueError(f"packets lack columns {missing}")

    @property
    def origin_ns(self) -> int:
        """Timestamp of the capture's first packet: time zero of every finding (0 if empty)."""
        if self.packets.num_rows == 0:
            return 0
        return int(pc.min(self.packets["ts_ns"]).as_py())

    def seconds(self, ts_ns: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Capture timestamps as seconds since the capture's first packet."""
        return (np.asarray(ts_ns, dtype=np.int64) - self.origin_ns) / 1e9


class Detector(ABC):
    """Base of every detector: declarations as class attributes, tunables in a nested Config."""

    kind: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[Severity]
    # Every key the evidence of this detector's findings may hold.
    evidence: ClassVar[tuple[Evidence, ...]] = ()
    # The shared measures of a direction this detector reads (`Direction.memo` names, through
    # the helpers of `_measure`): run_detectors keeps each until the last detector naming it
    # has run. One not named is computed again if asked for: slower, never different.
    measures: ClassVar[frozenset[str]] = frozenset()
    # Whether the detector judges each connection apart: it walks the directions
    # `Series.with_data` lists (`_measure.data_directions`), and a connection's findings read
    # that connection's own rows and tables every connection shares (the merge, the packets),
    # never another connection's. run_detectors may then hand shares of the connections to
    # other cores, each listing its own, and the findings are the same.
    per_connection: ClassVar[bool] = False

    @dataclass(frozen=True)
    class Config:
        """No tunables; a detector that has some declares its own nested Config."""

    def __init__(self, config: Any = None) -> None:
        config_type = type(self).Config
        if config is None:
            config = config_type()
        elif not isinstance(config, config_type):
            raise TypeError(f"{type(self).__name__} takes a {config_type.__qualname__}")
        self.config = config

    @abstractmethod
    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        """Yield the findings of this detector for the analysis in ctx."""

    def finding(
        self,
        *,
        conn: int,
        direction: str | None,
        start_s: float,
        end_s: float,
        evidence: Mapping[str, EvidenceValue | Any],
        summary: str,
        explanation: str,
        advice: str,
        severity: Severity | None = None,
    ) -> Finding:
        """A Finding of this detector's kind, at its default severity unless one is given.

        A time before the capture's first packet (a receiver's arrival put on the sender's
        clock, whose fit is only as good as its error bound) is reported at that first packet.
        A key of `evidence` that the detector does not declare is a DetectorError.
        """
        undeclared = sorted(set(evidence) - {e.name for e in type(self).evidence})
        if undeclared:
            raise DetectorError(
                f"{type(self).__name__}: evidence {', '.join(undeclared)} not declared in "
                "its `evidence`"
            )
        start = max(float(start_s), 0.0)
        return Finding(
            kind=self.kind,
            severity=self.severity if severity is None else severity,
            conn=conn,
            direction=direction,
            start_s=start,
            end_s=max(float(end_s), start),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=advice,
        )


def _uncommented_fields(config: type) -> list[str]:
    """Fields declared in config itself with no comment on their line or the line before."""
    own = set(vars(config).get("__annotations__", {}))
    lines, _ = inspect.getsourcelines(config)
    missing = []
    for f in dataclasses.fields(config):
        if f.name not in own:
            continue
        for i, line in enumerate(lines):
            if re.match(rf"\s*{f.name}\s*:", line):
                if "#" not in line and not (i and lines[i - 1].strip().startswith("#")):
                    missing.append(f.name)
                break
    return missing


def check_detector(cls: type[Detector], read_source: bool = True) -> None:
    """Raise DetectorError unless cls declares everything the protocol asks for; with
    `read_source`, also that each tunable's default has a comment saying why (from its source)."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if inspect.isabstract(cls):
        raise DetectorError(f"{name} does not implement detect()")
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not SNAKE_CASE.fullmatch(kind):
        raise DetectorError(f"{name}.kind must be a snake_case string, got {kind!r}")
    title = getattr(cls, "title", None)
    if not isinstance(title, str) or not title.strip() or "\n" in title:
        raise DetectorError(f"{name}.title must be a one-line string")
    if not isinstance(getattr(cls, "severity", None), Severity):
        raise DetectorError(f"{name}.severity must be a Severity")
    config = cls.Config
    if not dataclasses.is_dataclass(config) or not config.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise DetectorError(f"{name}.Config must be a frozen dataclass")
    for f in dataclasses.fields(config):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DetectorError(f"{name}.Config.{f.name} needs a default")
        numeric = f.type in ("int", "float", int, float)
        if numeric and not f.name.endswith(UNIT_SUFFIXES):
            raise DetectorError(
                f"{name}.Config.{f.name}: a numeric tunable ends with its unit "
                f"({', '.join(UNIT_SUFFIXES)})"
            )
    uncommented = _uncommented_fields(config) if read_source else []
    if uncommented:
        raise DetectorError(
            f"{name}.Config.{uncommented[0]}: say why this default in a comment above it"
        )
    _check_evidence(name, getattr(cls, "evidence", None))


def _check_evidence(name: str, evidence: object) -> None:
    """Raise DetectorError unless `evidence` declares unique snake_case keys, each with the unit
    its name's suffix says and a meaning."""
    if not isinstance(evidence, tuple) or not all(isinstance(e, Evidence) for e in evidence):
        raise DetectorError(f"{name}.evidence must be a tuple of Evidence")
    seen: set[str] = set()
    for e in evidence:
        if not SNAKE_CASE.fullmatch(e.name):
            raise DetectorError(f"{name}.evidence: {e.name!r} is not snake_case")
        if e.name in seen:
            raise DetectorError(f"{name}.evidence: {e.name} is declared twice")
        seen.add(e.name)
        if not e.meaning.strip():
            raise DetectorError(f"{name}.evidence: {e.name} needs a meaning")
        suffix_unit = next((u for s, u in EVIDENCE_UNITS if e.name.endswith(s)), None)
        if suffix_unit is not None and not (
            e.unit.endswith(suffix_unit) if suffix_unit.startswith("/") else e.unit == suffix_unit
        ):
            raise DetectorError(
                f"{name}.evidence: {e.name} ends with a unit, so its unit is "
                f"{suffix_unit or 'none'!r}, not {e.unit!r}"
            )
