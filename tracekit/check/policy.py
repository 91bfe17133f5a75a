"""The check policy: what fails the build, as a frozen value read once from TOML.

docs/commands/check.md documents every key; docs/examples/tracekit.toml shows them all. The
file has three tables (`[fail]`, `[thresholds]`, `[baseline]`), a top-level `on_bad_input`, and
`[[override]]` tables whose `paths` globs select inputs by name and whose tables replace keys.
Its `[detectors.KIND]` tables tune the detectors (tracekit.tunables) for every command that reads
the file: `check`, and `analyze`, `report` and `batch` with `--config`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from tracekit.core.paths import read_toml
from tracekit.errors import TracekitError
from tracekit.findings import Severity
from tracekit.tunables import DetectorConfigs, parse_detector_tables

BadInput = Literal["fail", "report"]


@dataclass(frozen=True)
class Rules:
    """What one input is judged by: the policy's rules after the overrides that match it."""

    # Findings of these kinds fail whatever their severity.
    fail_kinds: frozenset[str] = frozenset()
    # Findings at or above this severity fail; None: severity alone never fails. Warning by
    # default: a warning "held the transfer back" (docs/findings.md), the anomaly CI is for.
    fail_severity: Severity | None = Severity.WARNING
    # Findings of these kinds never fail (they still show in every output).
    ignore_kinds: frozenset[str] = frozenset()
    # Connections whose data direction carried fewer payload bytes are not held to the
    # thresholds or the baseline's throughput: an iperf3 control connection moves a few hundred
    # bytes, and a rate over so few bytes says nothing about the path.
    min_transfer_bytes: int = 65_536
    min_throughput_bps: float | None = None
    max_retrans_ratio: float | None = None
    max_retrans_segments: int | None = None
    max_receiver_drops: int | None = None
    max_duration_s: float | None = None
    # The baseline: a throughput below (1 - this) times the baseline's is a regression. 10%: the
    # spread of repeated runs on one lab path is a few percent.
    max_throughput_drop_ratio: float = 0.10
    # The baseline: a finding kind that the baseline's run of the same input did not show.
    fail_on_new_kinds: bool = True


@dataclass(frozen=True)
class Override:
    """Rules replaced for the inputs whose name matches one of the globs."""

    paths: tuple[str, ...]
    changes: Mapping[str, Any]

    def matches(self, name: str) -> bool:
        """fnmatch globs on the input's name: `*` also crosses `/`."""
        return any(fnmatchcase(name, pattern) for pattern in self.paths)


@dataclass(frozen=True)
class Policy:
    """The rules, their overrides in file order (a later one wins), and what bad input does."""

    rules: Rules = Rules()
    overrides: tuple[Override, ...] = ()
    # "fail": a missing or unreadable capture stops the check, exit 2. "report": it becomes a
    # failed (errored) test case, the other inputs are still checked, exit 1.
    on_bad_input: BadInput = "fail"
    source: str = "the default policy"
    # The [detectors.KIND] tables: kind -> that detector's Config, for every input alike.
    detector_configs: DetectorConfigs = dataclasses.field(default_factory=dict)

    def rules_for(self, name: str) -> Rules:
        """The rules for the input of this name."""
        rules = self.rules
        for override in self.overrides:
            if override.matches(name):
                rules = dataclasses.replace(rules, **override.changes)
        return rules


DEFAULT_POLICY = Policy()


def _severity(value: Any) -> Severity | None:
    if value == "none":
        return None
    if isinstance(value, str) and value in {s.value for s in Severity}:
        return Severity(value)
    raise ValueError("must be one of info, warning, error, none")


def _kinds(value: Any) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError("must be a list of finding kinds")
    return frozenset(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("must be an integer >= 0")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError("must be a number >= 0")
    # nan compares false with everything: a nan threshold would never fail a connection.
    if not math.isfinite(value):
        raise ValueError("must be a finite number >= 0 (not nan or inf)")
    return float(value)


def _ratio(value: Any) -> float:
    number = _number(value)
    if number > 1:
        raise ValueError("must be a ratio between 0 and 1")
    return number


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


# (table, key) in the file -> (field of Rules, parser). One row per key, so a key is
# documented, parsed and checked in one place.
KEYS: Mapping[tuple[str, str], tuple[str, Callable[[Any], Any]]] = {
    ("fail", "kinds"): ("fail_kinds", _kinds),
    ("fail", "severity"): ("fail_severity", _severity),
    ("fail", "ignore_kinds"): ("ignore_kinds", _kinds),
    ("thresholds", "min_transfer_bytes"): ("min_transfer_bytes", _count),
    ("thresholds", "min_throughput_bps"): ("min_throughput_bps", _number),
    ("thresholds", "max_retrans_ratio"): ("max_retrans_ratio", _ratio),
    ("thresholds", "max_retrans_segments"): ("max_retrans_segments", _count),
    ("thresholds", "max_receiver_drops"): ("max_receiver_drops", _count),
    ("thresholds", "max_duration_s"): ("max_duration_s", _number),
    ("baseline", "max_throughput_drop_ratio"): ("max_throughput_drop_ratio", _ratio),
    ("baseline", "fail_on_new_kinds"): ("fail_on_new_kinds", _flag),
}
TABLES = tuple(dict.fromkeys(table for table, _ in KEYS))
# The top-level table of detector tunables, one [detectors.KIND] table per detector.
DETECTORS_TABLE = "detectors"


def _changes(doc: Mapping[str, Any], where: str, known_kinds: Collection[str] | None) -> dict:
    changes: dict[str, Any] = {}
    for table, values in doc.items():
        if table == DETECTORS_TABLE:
            # A per-input detector setting would make one capture's findings mean something else
            # than another's in the same check.
            raise TracekitError(
                f"{where}: [{table}] tables apply to every input: set them at the top level, "
                f"[{table}.KIND]"
            )
        if table not in TABLES:
            known = ", ".join((*TABLES, DETECTORS_TABLE))
            raise TracekitError(f"{where}: unknown table [{table}] (known: {known})")
        if not isinstance(values, dict):
            raise TracekitError(f"{where}: {table} must be a table [{table}], got {values!r}")
        for key, value in values.items():
            if (table, key) not in KEYS:
                raise TracekitError(f"{where}: unknown key {table}.{key}")
            field, parse = KEYS[table, key]
            try:
                changes[field] = parse(value)
            except ValueError as exc:
                raise TracekitError(f"{where}: {table}.{key} {exc}, got {value!r}") from None
            if known_kinds is not None and field in ("fail_kinds", "ignore_kinds"):
                unknown = sorted(changes[field] - set(known_kinds))
                if unknown:
                    # A misspelt kind would never fail anything: say so now.
                    raise TracekitError(
                        f"{where}: {table}.{key}: no detector of kind {unknown[0]!r} "
                        f"(known: {', '.join(sorted(known_kinds)) or 'none'})"
                    )
    return changes


def parse_policy(
    doc: Mapping[str, Any], source: str, known_kinds: Collection[str] | None = None
) -> Policy:
    """A Policy from a parsed TOML document; errors are one line naming `source` and the key.

    `known_kinds`, when given, are the finding kinds a policy may name (the detectors' kinds).
    """
    doc = dict(doc)
    on_bad_input = doc.pop("on_bad_input", "fail")
    if on_bad_input not in ("fail", "report"):
        raise TracekitError(
            f"{source}: on_bad_input must be 'fail' or 'report', got {on_bad_input!r}"
        )
    raw_overrides = doc.pop("override", [])
    detector_configs = parse_detector_tables(doc.pop(DETECTORS_TABLE, {}), source)
    rules = Rules(**_changes(doc, source, known_kinds))
    if not isinstance(raw_overrides, list):
        raise TracekitError(f"{source}: override must be an array of tables: [[override]]")
    overrides = []
    for i, raw in enumerate(raw_overrides, 1):
        where = f"{source}: override {i}"
        if not isinstance(raw, dict):
            raise TracekitError(
                f"{where}: override must be an array of tables: [[override]], got {raw!r}"
            )
        raw = dict(raw)
        paths = raw.pop("paths", None)
        if isinstance(paths, str):
            paths = [paths]
        if not (isinstance(paths, list) and paths and all(isinstance(p, str) and p for p in paths)):
            raise TracekitError(f"{where}: needs paths, a list of globs, got {paths!r}")
        overrides.append(Override(tuple(paths), _changes(raw, where, known_kinds)))
    return Policy(rules, tuple(overrides), on_bad_input, source, detector_configs)


def load_policy(path: Path, known_kinds: Collection[str] | None = None) -> Policy:
    """Read and validate a policy file (TOML)."""
    doc = read_toml(path, "policy", "policy file")
    return parse_policy(doc, str(path), known_kinds)
