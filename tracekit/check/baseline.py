"""A baseline: the connections and finding kinds of an earlier run, to compare a new run with.

A baseline file is the `--json` output of an earlier `tracekit check` (its inputs matched by
name) or of `tracekit analyze` (a reference run every input is compared with).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError


@dataclass(frozen=True)
class BaselineRun:
    """One earlier run: its connection rows (as `analyze --json`) and the kinds it found."""

    connections: tuple[Mapping[str, Any], ...]
    kinds: frozenset[str]

    def connection(self, conn: int) -> Mapping[str, Any] | None:
        """The row of connection `conn` (connections are numbered by first packet, so a repeated
        test numbers its connections the same), or None."""
        return next((row for row in self.connections if row.get("conn") == conn), None)


@dataclass(frozen=True)
class Baseline:
    """Earlier runs by input name, or one reference run for every input."""

    source: str
    runs: Mapping[str, BaselineRun] = field(default_factory=dict)
    reference: BaselineRun | None = None

    def run_for(self, name: str) -> BaselineRun | None:
        """The earlier run to compare the input of this name with, or None."""
        return self.reference if self.reference is not None else self.runs.get(name)


def _describe(value: Any) -> str:
    """A value for an error line: short, whatever a hostile file holds."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    # JSON may say NaN or Infinity: a NaN throughput compares false and never regresses.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# Keys of a connection row the comparison reads, and what each must hold when present.
_ROW_KEYS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "conn": (lambda v: _integer(v) and v >= 0, "an integer >= 0"),
    "bytes_a2b": (lambda v: _integer(v) and v >= 0, "an integer >= 0"),
    "bytes_b2a": (lambda v: _integer(v) and v >= 0, "an integer >= 0"),
    # null: `analyze --json` writes a number it could not tell as null; nothing to compare.
    "throughput_a2b_bps": (lambda v: v is None or (_finite(v) and v >= 0), "a number >= 0"),
    "throughput_b2a_bps": (lambda v: v is None or (_finite(v) and v >= 0), "a number >= 0"),
}


def _list(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise TracekitError(f"{where}: {key}: expected a list, got {_describe(value)}")
    return value


def _run(doc: Mapping[str, Any], where: str) -> BaselineRun:
    """One run's connections and finding kinds, every value the comparison reads checked now,
    so that a bad baseline is refused before any capture is analysed."""
    connections, findings = _list(doc, "connections", where), _list(doc, "findings", where)
    rows = []
    for i, row in enumerate(connections):
        if not isinstance(row, dict):
            raise TracekitError(
                f"{where}: connections[{i}]: expected an object, got {_describe(row)}"
            )
        if "conn" not in row:
            raise TracekitError(f"{where}: connections[{i}]: no conn")
        for key, (valid, expected) in _ROW_KEYS.items():
            if key in row and not valid(row[key]):
                raise TracekitError(
                    f"{where}: connections[{i}].{key}: expected {expected}, "
                    f"got {_describe(row[key])}"
                )
        rows.append(dict(row))
    kinds = set()
    for i, finding in enumerate(findings):
        kind = finding.get("kind") if isinstance(finding, dict) else None
        if not isinstance(kind, str):
            raise TracekitError(
                f"{where}: findings[{i}]: expected an object with a kind (a string), "
                f"got {_describe(finding)}"
            )
        kinds.add(kind)
    return BaselineRun(connections=tuple(rows), kinds=frozenset(kinds))


def parse_baseline(doc: Any, source: str) -> Baseline:
    """A Baseline from a parsed `check --json` or `analyze --json` document."""
    if not isinstance(doc, dict):
        raise TracekitError(
            f"{source}: not a `tracekit check --json` or `analyze --json` document "
            f"(an object), got {_describe(doc)}"
        )
    if "captures" in doc:
        captures = doc["captures"]
        if not isinstance(captures, list):
            raise TracekitError(f"{source}: captures: expected a list, got {_describe(captures)}")
        runs = {}
        for i, entry in enumerate(captures):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise TracekitError(
                    f"{source}: captures[{i}]: expected an object with a name (a string), "
                    f"got {_describe(entry)}"
                )
            if entry.get("error") is not None:
                continue  # an input that could not be read then has nothing to compare with
            runs[entry["name"]] = _run(entry, f"{source}: {entry['name']}")
        return Baseline(source=source, runs=runs)
    if "connections" in doc and "findings" in doc:
        return Baseline(source=source, reference=_run(doc, source))
    raise TracekitError(f"{source}: not a `tracekit check --json` or `analyze --json` document")


def load_baseline(path: Path) -> Baseline:
    """Read a baseline file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TracekitError(f"{path}: no such baseline file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TracekitError(f"{path}: cannot read baseline: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TracekitError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        # The decoder recurses once per nesting level.
        raise TracekitError(f"{path}: not valid JSON: nested too deep") from None
    return parse_baseline(doc, str(path))
