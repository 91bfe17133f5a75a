"""Findings: what a detector concluded about a connection, with the numbers that show it.

A finding is a plain frozen value. `to_dict` gives the JSON form that `tracekit analyze --json`
prints and `docs/analyze.schema.json` declares; regenerate that file with
`python -m tracekit.findings > docs/analyze.schema.json` (a test keeps them equal).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit import schema

SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
DIRECTIONS = ("a2b", "b2a")

EvidenceValue = bool | int | float | str | tuple[int | float, ...]


class Severity(StrEnum):
    """How much a finding matters; `tracekit check` gates on it."""

    INFO = "info"  # worth knowing, not a problem
    WARNING = "warning"  # held the transfer back
    ERROR = "error"  # broke it: the transfer cannot reach its rate until fixed

    @property
    def rank(self) -> int:
        """0, 1, 2 for info, warning, error: compare severities by rank."""
        return list(Severity).index(self)


def _number(name: str, value: Any) -> int | float:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite (JSON has no NaN or infinity), got {number}")
    return number


def _evidence_value(name: str, value: Any) -> EvidenceValue:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple | np.ndarray):
        items = value.ravel().tolist() if isinstance(value, np.ndarray) else value
        return tuple(_number(f"evidence {name}[{i}]", v) for i, v in enumerate(items))
    return _number(f"evidence {name}", value)


@dataclass(frozen=True)
class Finding:
    """One conclusion about one connection (and direction) over one time range.

    `start_s` and `end_s` are seconds since the capture's first packet. `evidence` maps names
    that carry their unit (`buffer_bytes`, `rate_bps`) to numbers, strings, booleans or lists of
    numbers; numpy values are converted on construction, non-finite numbers are refused.
    """

    kind: str
    severity: Severity
    conn: int
    direction: str | None
    start_s: float
    end_s: float
    evidence: Mapping[str, EvidenceValue] = field(hash=False)
    summary: str
    explanation: str
    advice: str

    def __reduce__(self) -> tuple[type[Finding], tuple[object, ...]]:
        # Pickled as its fields (the evidence a plain dict: a read-only view does not pickle),
        # and checked again as it is made: a forked share's findings come back so.
        return (
            Finding,
            (
                self.kind,
                self.severity,
                self.conn,
                self.direction,
                self.start_s,
                self.end_s,
                dict(self.evidence),
                self.summary,
                self.explanation,
                self.advice,
            ),
        )

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not SNAKE_CASE.fullmatch(self.kind):
            raise ValueError(f"kind must be snake_case, got {self.kind!r}")
        object.__setattr__(self, "severity", Severity(self.severity))
        conn = _number("conn", self.conn)
        if not isinstance(conn, int) or conn < 0:
            raise ValueError(f"conn must be an integer >= 0, got {self.conn!r}")
        object.__setattr__(self, "conn", conn)
        if self.direction is not None and self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be 'a2b', 'b2a' or None, got {self.direction!r}")
        start, end = float(_number("start_s", self.start_s)), float(_number("end_s", self.end_s))
        if not 0 <= start <= end:
            raise ValueError(f"need 0 <= start_s <= end_s, got {start} and {end}")
        object.__setattr__(self, "start_s", start)
        object.__setattr__(self, "end_s", end)
        evidence = {}
        for name, value in self.evidence.items():
            if not isinstance(name, str) or not SNAKE_CASE.fullmatch(name):
                raise ValueError(f"evidence names must be snake_case, got {name!r}")
            evidence[name] = _evidence_value(name, value)
        object.__setattr__(self, "evidence", MappingProxyType(evidence))
        for name in ("summary", "explanation", "advice"):
            text = getattr(self, name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{name} must be a non-empty string")
        if "\n" in self.summary:
            raise ValueError("summary must be one line")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: plain str, int, float, bool, list and None only."""
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "conn": self.conn,
            "direction": self.direction,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "evidence": {
                k: list(v) if isinstance(v, tuple) else v for k, v in self.evidence.items()
            },
            "summary": self.summary,
            "explanation": self.explanation,
            "advice": self.advice,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """The inverse of `to_dict`, for reading a stored `analyze --json` document (whose
        `wireshark_filter` is derived, not part of the finding)."""
        fields = {k: v for k, v in data.items() if k != "wireshark_filter"}
        return cls(**{**fields, "severity": Severity(fields["severity"])})


def _json_type(column: schema.Column) -> dict[str, Any]:
    t = column.type
    if pa.types.is_boolean(t):
        return {"type": "boolean"}
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        return {"type": "integer", "minimum": int(info.min), "maximum": int(info.max)}
    if pa.types.is_floating(t):
        return {"type": "number"}
    if pa.types.is_string(t):
        return {"type": "string"}
    raise ValueError(f"no JSON type for column {column.name} of type {t}")


# Added by `tracekit analyze --json` (tracekit.analysis.Analysis.to_dict), not by to_dict.
_WIRESHARK_FILTER = {
    "type": "string",
    "description": "a Wireshark display filter selecting these packets of the sender's capture: "
    "both endpoints and ports, and frame.time_relative from start to end (both included)",
}


def _connection_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    columns = {c.name: c for c in schema.CONNECTION_COLUMNS}
    for column in columns.values():
        prop = _json_type(column)
        unit = f" ({column.unit})" if column.unit else ""
        prop["description"] = column.meaning + unit
        properties[column.name] = prop
    # JSON-friendly forms that `tracekit.connections.records` writes: the protocol by name, an
    # unknown window scale shift as null instead of -1, and the start relative to the first one.
    properties["proto"] = {
        "description": properties["proto"]["description"],
        "anyOf": [{"enum": ["tcp", "udp"]}, _json_type(columns["proto"])],
    }
    for name in ("ws_a", "ws_b"):
        properties[name] = {
            "description": properties[name]["description"],
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": 14}, {"type": "null"}],
        }
    properties["start_s"] = {
        "type": "number",
        "minimum": 0,
        "description": "start_ns relative to the first connection's, in seconds (optional)",
    }
    properties["wireshark_filter"] = _WIRESHARK_FILTER
    return {
        "type": "object",
        "required": list(columns),
        "additionalProperties": False,
        "properties": properties,
    }


def _finding_schema() -> dict[str, Any]:
    seconds = {"type": "number", "minimum": 0}
    number_list = {"type": "array", "items": {"type": "number"}}
    return {
        "type": "object",
        "required": [
            "kind",
            "severity",
            "conn",
            "direction",
            "start_s",
            "end_s",
            "evidence",
            "summary",
            "explanation",
            "advice",
        ],
        "additionalProperties": False,
        "properties": {
            "kind": {"type": "string", "pattern": f"^{SNAKE_CASE.pattern}$"},
            "severity": {"enum": [s.value for s in Severity]},
            "conn": {"type": "integer", "minimum": 0},
            "direction": {"enum": [*DIRECTIONS, None]},
            "start_s": {**seconds, "description": "seconds since the capture's first packet"},
            "end_s": {**seconds, "description": "seconds since the capture's first packet"},
            "evidence": {
                "type": "object",
                "propertyNames": {"pattern": f"^{SNAKE_CASE.pattern}$"},
                "additionalProperties": {
                    "anyOf": [{"type": ["number", "string", "boolean"]}, number_list]
                },
            },
            "summary": {"type": "string", "minLength": 1, "pattern": "^[^\\n]+$"},
            "explanation": {"type": "string", "minLength": 1},
            "advice": {"type": "string", "minLength": 1},
            "wireshark_filter": _WIRESHARK_FILTER,
        },
    }


_NUMBER_OR_NULL = {"type": ["number", "null"]}
_COUNT = {"type": "integer", "minimum": 0}


# The keys of each path phase in the clock's JSON (tracekit.merge.clock.PathPhase.to_dict).
_PHASE_KEYS = ("start_s", "end_s", "rtt_s", "min_delay_fwd_s", "min_delay_rev_s")


def _two_vantage_schema() -> dict[str, Any]:
    """With --receiver: the clock fit (tracekit.merge.clock) and each transmission's fate."""
    return {
        "type": "object",
        "required": ["clock", "fates", "sender_only_connections", "receiver_only_connections"],
        "additionalProperties": False,
        "properties": {
            "clock": {
                "description": "receiver minus sender clock: offset at the sender capture's "
                "first packet, skew in ppm; null when no connection was in both captures",
                "type": ["object", "null"],
                "required": ["offset_s", "skew_ppm"],
                "properties": {
                    "offset_s": {"type": "number"},
                    "skew_ppm": {"type": "number"},
                    "path_phases": {
                        "description": "stretches between path changes (both directions' "
                        "minimal one-way delays stepped the same way), in time order; one "
                        "when the path held",
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": list(_PHASE_KEYS),
                            "properties": {k: {"type": "number"} for k in _PHASE_KEYS},
                        },
                    },
                },
            },
            "fates": {
                "type": "object",
                "propertyNames": {"enum": list(schema.FATES)},
                "additionalProperties": _COUNT,
            },
            "sender_only_connections": {"type": "array", "items": _COUNT},
            "receiver_only_connections": {"type": "array", "items": _COUNT},
        },
    }


def _udp_stream_schema() -> dict[str, Any]:
    """A numbered UDP test stream (tracekit.merge.udpstream): received against sent."""
    return {
        "type": "object",
        "required": [
            "conn",
            "direction",
            "sent_packets",
            "received_packets",
            "lost_packets",
            "first_loss_index",
            "lost_numbers",
        ],
        "properties": {
            "conn": _COUNT,
            "direction": {"enum": list(DIRECTIONS)},
            "sent_packets": _COUNT,
            "received_packets": _COUNT,
            "lost_packets": _COUNT,
            "first_loss_index": {"type": ["integer", "null"]},
            "loss_ratio_after_first": _NUMBER_OR_NULL,
            "rate_ratio": _NUMBER_OR_NULL,
            "buffer_bytes": _NUMBER_OR_NULL,
            "lost_blocks": {"type": "array", "items": {"type": "array", "items": _COUNT}},
            "lost_numbers": {"type": "array", "items": _COUNT},
            "competing_share": {
                "description": "share of what reached the stream's host from its first "
                "arrival to its first loss that other flows carried; over one frame of theirs, "
                "no eq. 1 buffer is given",
                "type": "number",
            },
            "source": {"type": "string"},
            "destination": {"type": "string"},
            "conn_of_capture": {
                "description": "the capture whose connection `conn` is: the receiver's for a "
                "stream only it holds",
                "enum": ["sender", "receiver"],
            },
        },
    }


def analyze_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of `tracekit analyze --json`, as docs/analyze.schema.json."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tracekit analyze --json",
        "description": "Connections (tracekit.schema.CONNECTION_COLUMNS) and the findings of "
        "the detectors (tracekit.findings.Finding.to_dict). Generated by "
        "`python -m tracekit.findings`.",
        "type": "object",
        "required": ["connections", "findings"],
        "additionalProperties": False,
        "properties": {
            "connections": {"type": "array", "items": {"$ref": "#/$defs/connection"}},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}},
            "two_vantage": {"$ref": "#/$defs/two_vantage"},
            "udp_streams": {"type": "array", "items": {"$ref": "#/$defs/udp_stream"}},
        },
        "$defs": {
            "connection": _connection_schema(),
            "finding": _finding_schema(),
            "two_vantage": _two_vantage_schema(),
            "udp_stream": _udp_stream_schema(),
        },
    }


def render_schema() -> str:
    """The text of docs/analyze.schema.json."""
    return json.dumps(analyze_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(render_schema(), end="")
