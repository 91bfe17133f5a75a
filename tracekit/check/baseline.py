"""A baseline: the connections and finding kinds of an earlier run, to compare a new run with.

A baseline file is the `--json` output of an earlier `tracekit check` (its inputs matched by
name) or of `tracekit analyze` (a reference run every input is compared with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def _run(doc: Mapping[str, Any], where: str) -> BaselineRun:
    connections, findings = doc.get("connections"), doc.get("findings")
    if not isinstance(connections, list) or not isinstance(findings, list):
        raise TracekitError(f"{where}: needs 'connections' and 'findings' lists")
    try:
        kinds = frozenset(str(f["kind"]) for f in findings)
        rows = tuple(dict(row) for row in connections)
    except (TypeError, KeyError, ValueError):
        raise TracekitError(
            f"{where}: a finding without a kind or a connection not an object"
        ) from None
    return BaselineRun(connections=rows, kinds=kinds)


def parse_baseline(doc: Any, source: str) -> Baseline:
    """A Baseline from a parsed `check --json` or `analyze --json` document."""
    if not isinstance(doc, dict):
        raise TracekitError(f"{source}: not a tracekit --json document")
    if "captures" in doc:
        runs = {}
        for entry in doc["captures"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise TracekitError(f"{source}: a capture entry without a name")
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
    return parse_baseline(doc, str(path))
