"""Findings as people read them: each connection's verdict first, then the rest by severity.

Shared by the HTML report and `tracekit analyze`'s text, so both say the same thing in the same
order. A connection's verdict is its `rate_limit_cause` findings (one per direction that carried
data: what held it back, and for how long), its worst other finding, and the one change to make
(the advice of the most severe of the two).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracekit import units
from tracekit.findings import Finding, Severity

# The finding that says what held a direction back: the verdict's first line.
VERDICT_KIND = "rate_limit_cause"

# The class of rate_limit_cause (its `limit_class`) that a finding's cause belongs to, where it
# is not the network's: a window the receiver kept small or shut, a sender's own cap.
_RECEIVE_WINDOW_KINDS = frozenset({"window_limited", "window_oscillation", "zero_window_stall"})


def _cause_class(f: Finding) -> str:
    """The verdict's class of what a finding says held the transfer."""
    if f.kind in _RECEIVE_WINDOW_KINDS:
        return "application" if f.evidence.get("limited_by") == "sender" else "receive_window"
    return "network"


# A list evidence value shows this many items; the rest are counted.
_LIST_ITEMS = 8


@dataclass(frozen=True)
class ConnectionVerdict:
    """What held one connection back, its worst finding, and the change to make."""

    conn: int
    # The rate_limit_cause finding of each direction that carried data, a2b first.
    held_back: tuple[Finding, ...]
    # The most severe of the connection's other findings; of equals, the earliest (a cause
    # comes before its effects: an overrun before its drops, the drops before the resends).
    worst: Finding | None

    @property
    def main(self) -> Finding | None:
        """The verdict of the direction that moved the most data per second (None: no verdict,
        too short a transfer)."""
        if not self.held_back:
            return None
        return max(self.held_back, key=lambda f: _number(f.evidence.get("rate_bps", 0.0)))

    @property
    def change(self) -> str | None:
        """The one change to make. A warning or error outranks the verdict when it is more
        severe and of the class that held the transfer: an overrun or a drop is the thing to
        fix, even on a path whose verdict says the transfer ran as fast as the path allowed,
        and a window too small is said with the window it needs. Where the application or the
        receive window held the transfer most of the time, the network's losses did not set
        its rate, and the verdict's advice comes first (an error still outranks it). Otherwise
        the advice of the verdict of the direction that moved the most data per second; without
        a verdict (too short a transfer), the worst finding's."""
        main = self.main
        worst = self.worst
        if worst is not None and main is None:
            return worst.advice
        if worst is not None and main is not None:
            held = main.evidence.get("limit_class", "network")
            graver = (
                worst.severity is not Severity.INFO and worst.severity.rank > main.severity.rank
            )
            if graver and (held == _cause_class(worst) or worst.severity is Severity.ERROR):
                return worst.advice
        return main.advice if main is not None else None

    @property
    def severity(self) -> Severity:
        """The worst severity among the connection's findings (info when all are)."""
        return self.worst.severity if self.worst is not None else Severity.INFO


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def severity_order(findings: Iterable[Finding]) -> list[Finding]:
    """Errors, then warnings, then info; within each, by connection and time."""
    return sorted(findings, key=lambda f: (-f.severity.rank, f.conn, f.start_s, f.end_s))


def verdicts(findings: Iterable[Finding]) -> dict[int, ConnectionVerdict]:
    """The verdict of every connection that has a finding, by connection number."""
    held: dict[int, list[Finding]] = {}
    worst: dict[int, Finding] = {}
    for f in findings:
        if f.kind == VERDICT_KIND:
            held.setdefault(f.conn, []).append(f)
            continue
        best = worst.get(f.conn)
        if best is None or (-f.severity.rank, f.start_s) < (-best.severity.rank, best.start_s):
            worst[f.conn] = f
    return {
        conn: ConnectionVerdict(
            conn,
            tuple(sorted(held.get(conn, ()), key=lambda f: f.direction or "")),
            worst.get(conn),
        )
        for conn in sorted(held.keys() | worst.keys())
    }


# What the causes say of a connection whose data was too little for a verdict.
NO_VERDICT = "too little data to tell"


@dataclass(frozen=True)
class CauseGroup:
    """The connections one cause held back (the verdict of each one's direction that moved
    the most data per second), the troubled first (errors before warnings), then the
    busiest; `troubled` of them have a warning or an error."""

    cause: str
    members: tuple[tuple[int, Severity], ...]
    troubled: int


def by_cause(
    sizes: Iterable[tuple[int, int]], judged: dict[int, ConnectionVerdict]
) -> list[CauseGroup]:
    """Each connection of `sizes` ((conn, bytes) pairs) by what held it back, NO_VERDICT
    where it has no verdict; causes with troubled connections first, then the most common.
    One step per connection, not per packet."""
    groups: dict[str, list[tuple[int, int, int, Severity]]] = {}
    for conn, size in sizes:
        v = judged.get(conn)
        main = v.main if v is not None else None
        name = NO_VERDICT
        if main is not None:
            name = str(main.evidence.get("cause", NO_VERDICT)).replace("_", " ")
        severity = v.severity if v is not None else Severity.INFO
        groups.setdefault(name, []).append((-severity.rank, -size, conn, severity))
    out = []
    for name, members in groups.items():
        members.sort(key=lambda m: m[:3])
        troubled = sum(1 for m in members if m[3].rank >= Severity.WARNING.rank)
        out.append(CauseGroup(name, tuple((m[2], m[3]) for m in members), troubled))
    out.sort(key=lambda g: (g.cause == NO_VERDICT, -g.troubled, -len(g.members), g.cause))
    return out


def at_least(findings: Sequence[Finding], floor: Severity) -> tuple[list[Finding], list[Finding]]:
    """The findings at or above `floor`, and those below it (hidden, but counted)."""
    shown = [f for f in findings if f.severity.rank >= floor.rank]
    hidden = [f for f in findings if f.severity.rank < floor.rank]
    return shown, hidden


def hidden_counts(hidden: Iterable[Finding]) -> str:
    """'12 info findings' or '2 warning findings and 1 info finding', most severe first."""
    counts: dict[Severity, int] = {}
    for f in hidden:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    parts = [
        f"{n} {s.value} finding{'' if n == 1 else 's'}"
        for s, n in sorted(counts.items(), key=lambda kv: -kv[0].rank)
    ]
    return " and ".join(parts)


def when(f: Finding) -> str:
    """The finding's time range, seconds since the capture's first packet."""
    return f"{f.start_s:.3f}-{f.end_s:.3f} s"


def evidence_rows(f: Finding) -> tuple[tuple[str, str], ...]:
    """The finding's evidence as (name, value with its unit) rows, in the detector's order."""
    return tuple((name, evidence_value(name, value)) for name, value in f.evidence.items())


def evidence_value(name: str, value: object) -> str:
    """One evidence value as text, its unit read off the name's suffix (docs/findings.md)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, tuple | list):
        items = [_scalar(name, v) for v in value[:_LIST_ITEMS]]
        more = f", ... ({len(value)} in all)" if len(value) > _LIST_ITEMS else ""
        return ", ".join(items) + more if items else "none"
    return _scalar(name, value)


def _scalar(name: str, value: object) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        return str(value)
    if name.endswith("_bps"):
        return units.rate(number)
    if name.endswith("_s"):
        return units.duration(number)
    if name.endswith("_bytes"):
        return f"{number:,.0f} bytes"
    if name.endswith("_fraction"):
        return f"{number:.1%}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{number:,.4g}" if abs(number) < 1e6 else f"{number:,.0f}"
