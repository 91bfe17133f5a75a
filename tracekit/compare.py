"""Two runs of one test side by side: did the change help? (`tracekit compare BASE NEW`).

Each side is one input as `check` finds it (`tracekit.inputs`): a capture, or a sender/receiver
pair. One connection of each is compared, matched by role; the numbers are check's
(`tracekit.check.metrics`) and a regression is what `check --baseline` calls one, under the same
policy (`tracekit.check.verdict.judge`, with BASE's connection as the baseline run).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tracekit import __version__
from tracekit.analysis import Analysis, json_numbers
from tracekit.check.baseline import parse_baseline
from tracekit.check.metrics import ConnectionMetrics, connection_metrics
from tracekit.check.policy import DEFAULT_POLICY, Policy, Rules
from tracekit.check.verdict import Failure, judge
from tracekit.core.paths import printable
from tracekit.errors import CaptureError, TracekitError
from tracekit.findings import Finding, Severity
from tracekit.inputs import CaptureInput, analyze_input, find_inputs
from tracekit.merge import same_file
from tracekit.report import html as report_html
from tracekit.report.model import (
    ConnectionView,
    FindingView,
    Kind,
    Plot,
    Report,
    Table,
    Trace,
    Verdict,
)
from tracekit.series import kind_mask, rate

COMPARE_FORMAT = 1  # the version of the `compare --json` document
SIDES = ("BASE", "NEW")
# The verdict's finding: it says what held a direction back, not that anything went wrong, so
# it is compared as the verdict, not as a finding kind that came or went.
_VERDICT_KIND = "rate_limit_cause"
# Colours of the two runs on the overlays: BASE muted, NEW strong, each with a darker tone for
# its resent segments and its ACK line.
_COLORS = {
    "BASE": {"data": "#7f8fa6", "resent": "#c0392b", "ack": "#95a5a6"},
    "NEW": {"data": "#1f3b73", "resent": "#e67e22", "ack": "#1a9641"},
}


@dataclass(frozen=True)
class Side:
    """One run's connection: its input, analysis, judged numbers and findings."""

    label: str  # "BASE" or "NEW"
    input: CaptureInput
    analysis: Analysis
    metrics: ConnectionMetrics
    findings: tuple[Finding, ...]
    # Data transmissions lost between the capture points (the merge's fate network_drop);
    # None without a receiver capture that holds the connection.
    network_drops: int | None
    server_port: int | None

    @property
    def direction(self) -> int:
        """The data direction as the series index it: 0 a2b, 1 b2a."""
        return 0 if self.metrics.direction == "a2b" else 1

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of this connection's findings, the verdict left out."""
        return frozenset(f.kind for f in self.findings if f.kind != _VERDICT_KIND)

    @property
    def verdict(self) -> str | None:
        """What held the data direction back, as `bandwidth-limited`; None without a verdict."""
        for f in self.findings:
            if f.kind == _VERDICT_KIND and f.direction == self.metrics.direction:
                cause = f.evidence.get("cause")
                if isinstance(cause, str):
                    return f"{cause.replace('_', '-')}-limited"
        return None

    @property
    def start_s(self) -> float:
        """The connection's first packet on its series' time axis: the overlays' origin."""
        row = self.analysis.sender.connections.frame().loc[self.metrics.conn]
        return float(int(row["start_ns"]) - self.analysis.sender.series.t0_ns) / 1e9

    def to_dict(self) -> dict[str, Any]:
        """This side in the `compare --json` document."""
        return {
            "name": self.input.name,
            "sender": str(self.input.sender),
            "receiver": None if self.input.receiver is None else str(self.input.receiver),
            "metrics": self.metrics.to_dict(),
            "network_drops": self.network_drops,
            "server_port": self.server_port,
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class Comparison:
    """BASE's and NEW's matched connections, what changed, and the regressions under the policy."""

    base: Side
    new: Side
    matched_by: str  # "busiest", "server port N" or "chosen"
    regressions: tuple[Failure, ...]
    policy_source: str

    @property
    def throughput_change(self) -> float | None:
        """NEW's throughput over BASE's, minus one; None when BASE moved nothing."""
        before = self.base.metrics.throughput_bps
        return self.new.metrics.throughput_bps / before - 1 if before > 0 else None

    @property
    def gone(self) -> list[str]:
        """Finding kinds BASE showed and NEW does not."""
        return sorted(self.base.kinds - self.new.kinds)

    @property
    def appeared(self) -> list[str]:
        """Finding kinds NEW shows and BASE did not."""
        return sorted(self.new.kinds - self.base.kinds)

    def counts(self) -> list[tuple[str, int | None, int | None]]:
        """(name, BASE, NEW) of the counters the summary compares; None: not known there."""
        b, n = self.base, self.new
        rows: list[tuple[str, int | None, int | None]] = [
            ("network drops", b.network_drops, n.network_drops),
            ("receiver drops", b.metrics.receiver_drops, n.metrics.receiver_drops),
            ("retransmissions", b.metrics.retrans_segments, n.metrics.retrans_segments),
        ]
        # A counter neither side could tell (no receiver capture) says nothing.
        return [r for r in rows if r[1] is not None or r[2] is not None]

    def summary(self) -> str:
        """The one-line answer: throughput, findings gone and new, counters, verdicts."""
        b, n = self.base.metrics, self.new.metrics
        parts = [f"throughput {_mbps(b.throughput_bps)} -> {_mbps(n.throughput_bps)} Mbit/s"]
        change = self.throughput_change
        if change is not None:
            parts[0] += f" ({_percent(change)})"
        parts += [f"{kind} gone" for kind in self.gone]
        parts += [f"{kind} new" for kind in self.appeared]
        parts += [f"{name} {_count(x)} -> {_count(y)}" for name, x, y in self.counts()]
        parts.append(f"verdict: {self.base.verdict or 'none'} -> {self.new.verdict or 'none'}")
        return "; ".join(parts)

    def text(self) -> str:
        """What the command prints: the matched connections, the summary, the regressions."""
        lines = [
            f"{s.label}: connection {s.metrics.conn} {s.metrics.a} -> {s.metrics.b} "
            f"({s.metrics.direction}), {s.metrics.bytes} bytes in {s.metrics.duration_s:.3f} s"
            for s in (self.base, self.new)
        ]
        lines[1] += f"; matched by {self.matched_by}"
        lines.append(self.summary())
        lines += [f"regression: {f.message}" for f in self.regressions]
        return "\n".join(printable(line) for line in lines)

    def to_dict(self) -> dict[str, Any]:
        """The `tracekit compare --json` document."""
        return json_numbers(
            {
                "tracekit_compare": COMPARE_FORMAT,
                "policy": self.policy_source,
                "matched_by": self.matched_by,
                "base": self.base.to_dict(),
                "new": self.new.to_dict(),
                "throughput_change_ratio": self.throughput_change,
                "kinds_gone": self.gone,
                "kinds_new": self.appeared,
                "counts": {
                    name.replace(" ", "_"): {"base": x, "new": y} for name, x, y in self.counts()
                },
                "summary": self.summary(),
                "regressed": bool(self.regressions),
                "regressions": [
                    {"rule": f.rule, "name": f.name, "message": f.message} for f in self.regressions
                ],
            }
        )


def _mbps(bps: float) -> str:
    return f"{bps / 1e6:.1f}"


def _percent(change: float) -> str:
    # A small change keeps a decimal: "+0%" would hide which way it went.
    pct = change * 100
    return f"{pct:+.1f}%" if abs(pct) < 10 else f"{pct:+.0f}%"


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


# --- inputs and matching ----------------------------------------------------------------------


def one_input(path: Path, label: str) -> CaptureInput:
    """The one input `path` names (a capture, a NAME.sender.pcap pair, a pair's folder)."""
    found = find_inputs([path])
    if len(found) != 1:
        names = ", ".join(i.name for i in found[:3]) + (", ..." if len(found) > 3 else "")
        what = f"{len(found)} inputs ({names})" if found else "no capture"
        raise TracekitError(
            f"{printable(path)}: {label} must be one capture or one sender/receiver pair, "
            f"found {what}"
        )
    inp = found[0]
    if inp.problem is not None:
        raise CaptureError(printable(inp.sender), inp.problem)
    if inp.receiver is not None and same_file(inp.sender, inp.receiver):
        raise CaptureError(printable(inp.receiver), f"is the sender's capture ({inp.sender}) too")
    return inp


def parse_choice(text: str) -> tuple[int, int]:
    """`--connection N` or `BASE_N:NEW_N` as (BASE's, NEW's) connection numbers."""
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or any(n < 0 for n in numbers):
        raise TracekitError(f"--connection {text!r}: expected N or BASE_N:NEW_N (numbers >= 0)")
    return (numbers[0], numbers[-1])


def _server_port(analysis: Analysis, conn: int) -> int | None:
    """The port of the side that accepted the connection (`b`, when the handshake shows it)."""
    row = analysis.sender.connections.frame().loc[conn]
    if not (bool(row["syn_seen"]) or bool(row["synack_seen"])):
        return None
    return int(str(row["b"]).rsplit(":", 1)[1])


def _candidates(metrics: list[ConnectionMetrics]) -> list[ConnectionMetrics]:
    """TCP connections that moved data, the busiest first (payload bytes in the data direction;
    of equals, the first)."""
    tcp = [m for m in metrics if m.proto == "tcp" and m.bytes > 0]
    return sorted(tcp, key=lambda m: (-m.bytes, m.conn))


def match(
    base: Analysis, new: Analysis, choice: tuple[int, int] | None = None
) -> tuple[int, int, str]:
    """(BASE's connection, NEW's connection, how they were matched).

    Without a choice: BASE's busiest connection, and NEW's busiest of the same server port
    when NEW has one (a test's data connection, not a control connection beside it), else
    NEW's busiest.
    """
    if choice is not None:
        for label, analysis, conn in (("BASE", base, choice[0]), ("NEW", new, choice[1])):
            count = analysis.sender.connections.table.num_rows
            if conn >= count:
                raise TracekitError(
                    f"--connection: {label} has no connection {conn} (it has {count})"
                )
        return choice[0], choice[1], "choice (--connection)"
    ranked = [_candidates(connection_metrics(a)) for a in (base, new)]
    for label, found in zip(SIDES, ranked, strict=True):
        if not found:
            raise TracekitError(f"{label}: no TCP connection carried data")
    b = ranked[0][0].conn
    port = _server_port(base, b)
    if port is not None:
        same = [m for m in ranked[1] if _server_port(new, m.conn) == port]
        if same:
            return b, same[0].conn, f"server port {port}"
    return b, ranked[1][0].conn, "the busiest connection"


def _side(label: str, inp: CaptureInput, analysis: Analysis, conn: int) -> Side:
    metrics = next(m for m in connection_metrics(analysis) if m.conn == conn)
    network_drops = None
    merged = analysis.merge
    if merged is not None and conn in set(merged.connections.pairs["conn_s"].tolist()):
        tx = merged.transmissions
        direction = 0 if metrics.direction == "a2b" else 1
        mine = tx[(tx["conn"] == conn) & (tx["dir"] == direction)]
        network_drops = int((mine["fate"] == "network_drop").sum())
    findings = tuple(f for f in analysis.findings if f.conn == conn)
    return Side(
        label=label,
        input=inp,
        analysis=analysis,
        metrics=metrics,
        findings=findings,
        network_drops=network_drops,
        server_port=_server_port(analysis, conn),
    )


def _regressions(base: Side, new: Side, rules: Rules) -> tuple[Failure, ...]:
    """What `check --baseline` fails NEW's connection for, with BASE's connection as the
    baseline run (its `analyze --json` row and finding kinds)."""
    doc = base.analysis.to_dict()
    row = next(r for r in doc["connections"] if r["conn"] == base.metrics.conn)
    # The baseline matches connections by number: BASE's row takes NEW's.
    run_doc = {
        "connections": [{**row, "conn": new.metrics.conn}],
        "findings": [{"kind": f.kind} for f in base.findings],
    }
    run = parse_baseline(run_doc, base.input.name).reference
    # judge reads the whole analysis; only NEW's matched connection is compared.
    verdict = judge(new.input, new.analysis, rules, run, has_baseline=True)
    mine = next(c for c in verdict.connections if c.metrics.conn == new.metrics.conn)
    return tuple(f for f in mine.failures if f.rule == "regression")


def compare(
    base_path: Path,
    new_path: Path,
    *,
    policy: Policy = DEFAULT_POLICY,
    choice: tuple[int, int] | None = None,
    on_warning: Callable[[str], None] | None = None,
    after_stage: Callable[[], None] | None = None,
) -> Comparison:
    """Analyse BASE and NEW and compare their matched connections.

    Raises TracekitError (one line) for a path that names no input or several, a capture that
    cannot be read, or a connection that is not there. `on_warning` hears each reader warning;
    `after_stage` is called between each analysis's stages (`analyze_files`).
    """
    inputs = [one_input(base_path, "BASE"), one_input(new_path, "NEW")]
    analyses = []
    for inp in inputs:
        analysis, warnings = analyze_input(inp, policy.detector_configs, after_stage)
        for warning in warnings:
            if on_warning is not None:
                on_warning(warning)
        analyses.append(analysis)
    b, n, how = match(analyses[0], analyses[1], choice)
    base = _side("BASE", inputs[0], analyses[0], b)
    new = _side("NEW", inputs[1], analyses[1], n)
    rules = policy.rules_for(new.input.name)
    return Comparison(
        base=base,
        new=new,
        matched_by=how,
        regressions=_regressions(base, new, rules),
        policy_source=policy.source,
    )


# --- the page -------------------------------------------------------------------------------


def _on_origin(side: Side, t: np.ndarray) -> np.ndarray:
    """Series times from the connection's first packet: both runs start at 0."""
    return np.asarray(t, np.float64) - side.start_s


def tsg_overlay(base: Side, new: Side) -> Plot:
    """Sequence against time of both runs' data directions, on one time origin."""
    traces = []
    for side in (base, new):
        d = side.analysis.sender.series.of(side.metrics.conn, side.direction)
        colors = _COLORS[side.label]
        data = d.data
        resent = kind_mask(data, "retransmission", "partial_retransmission")
        fresh = ~resent
        for name, rows, color in (
            ("data", fresh, colors["data"]),
            ("resent", resent, colors["resent"]),
        ):
            part = data[rows]
            traces.append(
                Trace(
                    f"{side.label} {name}",
                    Kind.SEGMENTS,
                    _on_origin(side, part["t_s"].to_numpy()),
                    part["seq_rel"].to_numpy(np.float64),
                    part["end_rel"].to_numpy(np.float64),
                    color=color,
                    keep=np.full(len(part), name == "resent"),
                )
            )
        acks = d.acks
        traces.append(
            Trace(
                f"{side.label} ACK line",
                Kind.STEP,
                _on_origin(side, acks["t_s"].to_numpy()),
                acks["ack_rel"].to_numpy(np.float64),
                color=colors["ack"],
                dash="solid" if side.label == "NEW" else "dot",
            )
        )
    return Plot(
        "Time-sequence graphs, BASE and NEW overlaid",
        "time since the connection's first packet (s)",
        "sequence offset (bytes)",
        tuple(traces),
        height_px=460,
    )


def _window_s(base: Side, new: Side) -> float:
    """One averaging window for both runs (the longer median RTT), so their rates compare."""
    rtts = []
    for side in (base, new):
        rtt = side.analysis.sender.series.of(side.metrics.conn, side.direction).rtt
        if len(rtt):
            rtts.append(float(rtt["rtt_s"].median()))
    return max(rtts) if rtts else 0.1


def rate_overlay(base: Side, new: Side) -> Plot:
    """Both runs' throughput over time, averaged over one common window."""
    window = _window_s(base, new)
    label = f"{window * 1e3:.1f} ms" if window < 1 else f"{window:g} s"
    traces = []
    for side in (base, new):
        d = side.analysis.sender.series.of(side.metrics.conn, side.direction)
        r = rate(d.segments, d.acks, window)
        traces.append(
            Trace(
                f"{side.label} sent, {label} avg",
                Kind.LINE,
                _on_origin(side, r["t_s"].to_numpy()),
                r["sent_bps"].to_numpy(np.float64) / 1e6,
                color=_COLORS[side.label]["data"],
                dash="solid" if side.label == "NEW" else "dot",
                width=2.0,
            )
        )
    return Plot("Throughput, BASE and NEW", "time since the connection's first packet (s)",
                "Mbit/s", tuple(traces))  # fmt: skip


def _facts(c: Comparison) -> tuple[tuple[str, str], ...]:
    b, n = c.base, c.new
    facts = [
        ("BASE", f"{b.input.name}: connection {b.metrics.conn} {b.metrics.a} -> {b.metrics.b}"),
        ("NEW", f"{n.input.name}: connection {n.metrics.conn} {n.metrics.a} -> {n.metrics.b}"),
        ("matched by", c.matched_by),
    ]
    return tuple(facts)


def _rows(c: Comparison) -> list[tuple[str, str, str, str, int]]:
    """(measure, BASE, NEW, change, sign) where sign is +1 better, -1 worse, 0 the same."""
    b, n = c.base.metrics, c.new.metrics
    change = c.throughput_change
    rows = [
        (
            "throughput (Mbit/s)",
            _mbps(b.throughput_bps),
            _mbps(n.throughput_bps),
            "-" if change is None else _percent(change),
            0 if change is None or abs(change) < 0.005 else (1 if change > 0 else -1),
        ),
        ("duration (s)", f"{b.duration_s:.3f}", f"{n.duration_s:.3f}", "", 0),
        ("payload bytes", str(b.bytes), str(n.bytes), "", 0),
    ]
    for name, x, y in c.counts():
        sign = 0 if x is None or y is None or x == y else (1 if y < x else -1)
        delta = "" if x is None or y is None else f"{y - x:+d}"
        rows.append((name, _count(x), _count(y), delta, sign))
    verdicts = (c.base.verdict or "none", c.new.verdict or "none")
    rows.append(("verdict", *verdicts, "" if verdicts[0] == verdicts[1] else "changed", 0))
    for kind in c.gone:
        rows.append((f"finding {kind}", "yes", "no", "gone", 1))
    for kind in c.appeared:
        rows.append((f"finding {kind}", "no", "yes", "new", -1))
    for kind in sorted(c.base.kinds & c.new.kinds):
        rows.append((f"finding {kind}", "yes", "yes", "", 0))
    return rows


_CSS = (
    ".compare td.better{background:#dff3e4;font-weight:600}"
    ".compare td.worse{background:#fbe3e4;font-weight:600}"
    ".compare table{border-collapse:collapse}.compare td,.compare th{padding:3px 10px;"
    "border-bottom:1px solid #e3e7ee;text-align:left}"
    ".compare .regressed{color:#b0171f;font-weight:600}"
)


def _compare_section(c: Comparison) -> str:
    """The key numbers side by side, each change marked better or worse, and the regressions."""

    def esc(text: str) -> str:
        return html.escape(text, quote=True)

    body = []
    for measure, x, y, change, sign in _rows(c):
        cls = {1: ' class="better"', -1: ' class="worse"', 0: ""}[sign]
        body.append(
            f'<tr><th scope="row">{esc(measure)}</th><td>{esc(x)}</td><td>{esc(y)}</td>'
            f"<td{cls}>{esc(change)}</td></tr>"
        )
    if c.regressions:
        verdict = "".join(f'<p class="regressed">{esc(f.message)}</p>' for f in c.regressions)
    else:
        verdict = "<p>No regression under the policy.</p>"
    return (
        f"<style>{_CSS}</style>"
        '<section class="compare"><h2>BASE against NEW</h2>'
        f'<p class="summary">{esc(c.summary())}</p>'
        '<table class="compare-table"><thead><tr><th scope="col">measure</th>'
        f'<th scope="col">BASE: {esc(c.base.input.name)}</th>'
        f'<th scope="col">NEW: {esc(c.new.input.name)}</th><th scope="col">change</th>'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>{verdict}</section>"
    )


def _finding_view(side: Side, f: Finding) -> FindingView:
    """A finding of one run, on the overlays' time origin, named by its run."""
    start = f.start_s - side.start_s
    end = f.end_s - side.start_s
    finite = math.isfinite(start) and math.isfinite(end)
    return FindingView(
        severity=f.severity.value,
        kind=f"{side.label} {f.kind}",
        connection=f.conn,
        direction=f.direction or "",
        start_s=start,
        end_s=end,
        summary=f.summary,
        explanation=f.explanation,
        evidence=tuple((k, str(v)) for k, v in f.evidence.items()),
        advice=f.advice,
        link=0 if finite else None,
    )


def build_page(c: Comparison) -> Report:
    """The comparison as the report's view model: one section with both overlays."""
    sides = (c.base, c.new)
    overview = Table(
        columns=("run", "#", "a", "b", "direction", "bytes", "duration s", "Mbit/s", "resent"),
        rows=tuple(
            (
                s.label,
                s.metrics.conn,
                s.metrics.a,
                s.metrics.b,
                s.metrics.direction,
                s.metrics.bytes,
                round(s.metrics.duration_s, 6),
                round(s.metrics.throughput_bps / 1e6, 3),
                s.metrics.retrans_segments,
            )
            for s in sides
        ),
    )
    findings = [(s, f) for s in sides for f in s.findings]
    table = Table(
        columns=("run", "severity", "kind", "connection", "from s", "to s", "summary"),
        rows=tuple(
            (
                s.label,
                f.severity.value,
                f.kind,
                f.conn,
                round(f.start_s - s.start_s, 6),
                round(f.end_s - s.start_s, 6),
                f.summary,
            )
            for s, f in findings
        ),
    )
    views = tuple(_finding_view(s, f) for s, f in findings)
    verdicts = tuple(
        Verdict(
            title=f"{s.label}: connection {s.metrics.conn} {s.metrics.a} -> {s.metrics.b}",
            held_back=tuple(f.summary for f in s.findings if f.kind == _VERDICT_KIND),
            worst=None,
            change=None,
            severity=max(
                (f.severity for f in s.findings), key=lambda v: v.rank, default=Severity.INFO
            ).value,
            link=0,
        )
        for s in sides
    )
    plots: tuple[Plot, ...] = (tsg_overlay(c.base, c.new), rate_overlay(c.base, c.new))
    end = max(s.metrics.duration_s for s in sides)
    pad = 0.02 * end or 1e-3
    plots = tuple(replace(p, x_range=(-pad, end + pad)) for p in plots)
    view = ConnectionView(
        title=f"BASE connection {c.base.metrics.conn} and NEW connection {c.new.metrics.conn}, "
        "overlaid from each one's first packet",
        facts=_facts(c),
        plots=plots,
    )
    return Report(
        title=f"tracekit compare: {c.base.input.name} -> {c.new.input.name}",
        overview=overview,
        findings=table,
        connections=(view,),
        inputs=(c.base.input.name, c.new.input.name),
        version=__version__,
        verdicts=verdicts,
        finding_views=views,
    )


def render_page(c: Comparison) -> str:
    """The comparison as one HTML document that opens offline (the report's renderer)."""
    page = report_html.render(build_page(c))
    # The renderer knows no comparison: its table of changes goes first in <main>. Every
    # value in it is escaped; "<main>" occurs once, the page's own (all else is escaped text).
    return page.replace("<main>\n", "<main>\n" + _compare_section(c) + "\n", 1)
