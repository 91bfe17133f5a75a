"""The front of the report: verdicts, findings by severity, the overview plot and the population.

What a reader needs first: what held each drawn connection back (its verdict), the findings
from the most severe down, each expandable to its explanation, evidence and advice, every
drawn connection's throughput stacked on one plot, and, for a capture of many connections,
their distributions and the troubled ones. Built from the connections table, the findings and
the plots `build` already made: no packet is looked at again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracekit import units
from tracekit.findings import Finding, Severity
from tracekit.report.model import (
    Cause,
    CauseConnection,
    FindingView,
    Kind,
    Plot,
    Population,
    Table,
    Trace,
    Verdict,
)
from tracekit.report.verdict import (
    VERDICT_KIND,
    ConnectionVerdict,
    by_cause,
    evidence_rows,
    severity_order,
    verdicts,
    when,
)
from tracekit.schema import PROTO_TCP

# From this many connections the page summarises them as a population.
POPULATION_FROM = 10
# Troubled connections listed by the population summary (the findings list has every one).
TROUBLED_LISTED = 50
# Connections each cause names on the first screen (the troubled first); the rest are counted.
CAUSE_LISTED = 12
# Points of the overview plot's common time grid: under the renderer's floor, so never thinned.
OVERVIEW_POINTS = 400
# The throughput plot's trace the overview stacks: the ACK line's advance (goodput), the rate
# the path's estimate is measured against.
ACKED_PREFIX = "acked, "
# Qualitative colours for the stacked connections (Okabe and Ito's, safe for colour blindness).
STACK_COLORS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442")


def finding_view(f: Finding, link: int | None) -> FindingView:
    """One finding as the page lists it."""
    return FindingView(
        severity=f.severity.value,
        kind=f.kind,
        connection=f.conn,
        direction=f.direction or "",
        start_s=f.start_s,
        end_s=f.end_s,
        summary=f.summary,
        explanation=f.explanation,
        evidence=evidence_rows(f),
        advice=f.advice,
        link=link,
    )


def finding_views(findings: Sequence[Finding], view_of: dict[int, int]) -> tuple[FindingView, ...]:
    """Every finding, errors first, then warnings, then info."""
    return tuple(finding_view(f, view_of.get(f.conn)) for f in severity_order(findings))


def verdict_views(
    findings: Sequence[Finding], conns: pd.DataFrame, shown: Sequence[int], view_of: dict[int, int]
) -> tuple[Verdict, ...]:
    """The verdict of each drawn connection, in drawing order (the busiest first)."""
    judged = verdicts(findings)
    out = []
    for conn in shown:
        row = conns.loc[conn]
        v = judged.get(conn, ConnectionVerdict(conn, (), None))
        sent = int(row["bytes_a2b"]) + int(row["bytes_b2a"])
        rate = max(float(row["throughput_a2b_bps"]), float(row["throughput_b2a_bps"]))
        arrow = "->" if int(row["bytes_a2b"]) >= int(row["bytes_b2a"]) else "<-"
        title = (
            f"Connection {conn}: {row['a']} {arrow} {row['b']}, {units.size(sent)} in "
            f"{units.duration(float(row['duration_s']))}, {units.rate(rate)}"
        )
        held = tuple(f.summary for f in v.held_back) or (
            "Too little data to tell what held it back.",
        )
        worst = finding_view(v.worst, view_of.get(conn)) if v.worst is not None else None
        out.append(
            Verdict(
                title=title,
                held_back=held,
                worst=worst,
                change=v.change,
                severity=v.severity.value,
                link=view_of.get(conn),
                judged=bool(v.held_back) or v.severity.rank >= Severity.WARNING.rank,
            )
        )
    return tuple(out)


def overview_plot(
    throughput: Sequence[tuple[int, str, Sequence[Plot]]], findings: Sequence[Finding]
) -> Plot | None:
    """Every drawn connection's goodput stacked on a common time grid, their sum, and the
    path's rate where a verdict measured it (the busiest connection's estimate).

    `throughput` is (connection, label, its plots) in drawing order; the ACK-line series of
    its throughput plot is resampled onto the grid (zero outside the connection's span). None
    with fewer than two connections: one connection's own throughput plot says it all.
    """
    series = []
    for conn, label, plots in throughput:
        acked = (t for p in plots for t in p.traces if t.name.startswith(ACKED_PREFIX))
        trace = next(acked, None)
        if trace is not None and len(trace):
            series.append((conn, label, trace.whole()))
    if len(series) < 2:
        return None
    low = min(float(np.nanmin(t.x)) for *_, t in series)
    high = max(float(np.nanmax(t.x)) for *_, t in series)
    if not high > low:
        return None
    grid = np.linspace(low, high, OVERVIEW_POINTS)
    traces = []
    total = np.zeros(OVERVIEW_POINTS)
    for i, (conn, label, trace) in enumerate(series):
        x = np.asarray(trace.x, np.float64)
        y = np.nan_to_num(np.asarray(trace.y, np.float64))
        values = np.interp(grid, x, y, left=0.0, right=0.0)
        total += values
        traces.append(
            Trace(
                f"#{conn} {label}",
                Kind.LINE,
                grid,
                values,
                color=STACK_COLORS[i % len(STACK_COLORS)],
                width=0.5,
                stack="throughput",
            )
        )
    traces.append(Trace("sum", Kind.LINE, grid, total, color="#1d2433", width=2.0))
    drawn = {conn for conn, *_ in series}
    path = []
    for f in findings:
        bps = f.evidence.get("path_rate_bps")
        if f.kind == VERDICT_KIND and f.conn in drawn and isinstance(bps, int | float):
            path.append((f.conn, float(bps)))
    if path:
        # The busiest connection comes first in drawing order; its ACKs measured the path best.
        order = [conn for conn, *_ in series]
        conn, bps = min(path, key=lambda p: order.index(p[0]))
        traces.append(
            Trace(
                f"path rate (connection {conn}'s estimate)",
                Kind.LINE,
                np.array([low, high]),
                np.array([bps, bps]) / 1e6,
                color="#d7191c",
                dash="dash",
            )
        )
    return Plot(
        "Throughput of the drawn connections, stacked (ACKed bytes)",
        "time (s)",
        "Mbit/s",
        tuple(traces),
        height_px=300,
    )


def population(
    conns: pd.DataFrame, findings: Sequence[Finding], view_of: dict[int, int]
) -> Population | None:
    """Distributions of the connections' measures, findings per kind, and the troubled
    connections (a warning or an error), the worst first; None under POPULATION_FROM."""
    if len(conns) < POPULATION_FROM:
        return None
    a2b = conns["bytes_a2b"].to_numpy(np.int64) >= conns["bytes_b2a"].to_numpy(np.int64)
    rate = np.where(a2b, conns["throughput_a2b_bps"], conns["throughput_b2a_bps"]) / 1e6
    packets = np.where(a2b, conns["packets_a2b"], conns["packets_b2a"]).astype(np.float64)
    resent = np.where(a2b, conns["retrans_a2b"], conns["retrans_b2a"]).astype(np.float64)
    ratio = np.divide(resent, packets, out=np.zeros_like(resent), where=packets > 0)
    count = pd.Series([f.conn for f in findings], dtype="int64").value_counts()
    per_conn = count.reindex(conns["conn"].to_numpy(), fill_value=0).to_numpy(np.float64)
    measures = (
        ("duration (s)", conns["duration_s"].to_numpy(np.float64)),
        ("throughput, data direction (Mbit/s)", rate.astype(np.float64)),
        ("retransmitted / packets sent, data direction", ratio),
        ("bytes, both ways", (conns["bytes_a2b"] + conns["bytes_b2a"]).to_numpy(np.float64)),
        ("findings per connection", per_conn),
    )
    quantiles = (0.0, 0.1, 0.5, 0.9, 1.0)
    distributions = Table(
        ("measure", "min", "10%", "median", "90%", "max"),
        tuple(
            (name, *(float(f"{q:.4g}") for q in np.quantile(values, quantiles)))
            for name, values in measures
        ),
    )
    kinds: dict[str, tuple[Severity, int, set[int]]] = {}
    for f in findings:
        worst, n, which = kinds.get(f.kind, (f.severity, 0, set()))
        which.add(f.conn)
        kinds[f.kind] = (max(worst, f.severity, key=lambda s: s.rank), n + 1, which)
    kinds_table = Table(
        ("kind", "worst severity", "findings", "connections"),
        tuple(
            (kind, s.value, n, len(which))
            for kind, (s, n, which) in sorted(
                kinds.items(), key=lambda kv: (-kv[1][0].rank, -kv[1][1], kv[0])
            )
        ),
    )
    judged = verdicts(findings)
    troubled = [v for v in judged.values() if v.severity.rank >= Severity.WARNING.rank]
    rows = conns.set_index("conn", drop=False)
    total = rows["bytes_a2b"] + rows["bytes_b2a"]
    troubled.sort(key=lambda v: (-v.severity.rank, -int(total.get(v.conn, 0)), v.conn))
    listed = troubled[:TROUBLED_LISTED]
    table = Table(
        ("#", "a", "b", "bytes", "duration s", "worst finding", "when", "summary"),
        tuple(
            (
                v.conn,
                str(rows.at[v.conn, "a"]),
                str(rows.at[v.conn, "b"]),
                int(total[v.conn]),
                round(float(rows.at[v.conn, "duration_s"]), 6),
                f"[{v.worst.severity.value}] {v.worst.kind}",
                when(v.worst),
                v.worst.summary,
            )
            for v in listed
            if v.worst is not None
        ),
        links=tuple(view_of.get(v.conn) for v in listed if v.worst is not None),
    )
    tcp = int((conns["proto"] == PROTO_TCP).sum())
    summary = (
        f"{len(conns):,} connections ({tcp:,} TCP, {len(conns) - tcp:,} other); "
        f"{len(troubled):,} with a warning or an error"
        + (f", the worst {len(listed)} listed" if len(troubled) > len(listed) else "")
        + f"; {len(findings):,} findings."
    )
    return Population(summary, distributions, kinds_table, table)


def causes(
    conns: pd.DataFrame,
    findings: Sequence[Finding],
    view_of: dict[int, int],
    listed: Sequence[FindingView],
) -> tuple[Cause, ...]:
    """What held each connection of the capture back, per cause (`verdict.by_cause`); each
    connection named links to its plots when drawn, else to its worst finding in `listed`
    (the page's findings list). Empty when every connection is drawn: each has its own
    verdict."""
    if len(conns) <= len(view_of):
        return ()
    judged = verdicts(findings)
    place = {(f.connection, f.kind, f.start_s, f.end_s): i for i, f in enumerate(listed)}
    total = (conns["bytes_a2b"] + conns["bytes_b2a"]).to_numpy(np.int64)
    sizes = zip(conns["conn"].to_numpy(np.int64).tolist(), total.tolist(), strict=True)
    out = []
    for group in by_cause(sizes, judged):
        named = []
        for conn, severity in group.members[:CAUSE_LISTED]:
            worst = judged[conn].worst if conn in judged else None
            finding = None
            if worst is not None and conn not in view_of:
                finding = place.get((worst.conn, worst.kind, worst.start_s, worst.end_s))
            named.append(CauseConnection(conn, severity.value, view_of.get(conn), finding))
        out.append(Cause(group.cause, len(group.members), group.troubled, tuple(named)))
    return tuple(out)
