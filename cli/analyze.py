"""`tracekit analyze CAPTURE [--receiver CAPTURE] [--json]`: connections and findings."""

from __future__ import annotations

import itertools
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np
from tracekit.cli import common

from tracekit import units
from tracekit.connections import data_direction, ranked, records
from tracekit.findings import Finding, Severity
from tracekit.merge.clock import MAX_SKEW_PPM, PathPhase, joined_phases
from tracekit.report.verdict import (
    ConnectionVerdict,
    at_least,
    by_cause,
    evidence_rows,
    hidden_counts,
    severity_order,
    verdicts,
    when,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Connection lines printed: those with findings, then the busiest (a load test's capture has
# tens of thousands of connections, which `tracekit flows` and `--json` give in full).
MAX_LISTED = 50
# Troubled connections each cause names when not every connection is listed.
CAUSE_NAMED = 5

# Explanations and advice are wrapped to this width under `-v`.
_WIDTH = 100


@click.command()
@common.capture_argument
@common.analysis_options
@common.config_option
@common.selection_options
@click.option("--json", "as_json", is_flag=True, help="Print connections and findings as JSON.")
@click.option(
    "--min-severity",
    type=click.Choice([s.value for s in Severity]),
    default=None,
    help="List findings at or above this severity; the others are counted "
    "[default: warning; info with -v].",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Explain each finding: its explanation, evidence and advice; list info findings too.",
)
def analyze(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
    jobs: int,
    config_file: Path | None,
    conn: int | None,
    from_s: float | None,
    to_s: float | None,
    as_json: bool,
    min_severity: str | None,
    verbose: bool,
) -> None:
    """Explain what held the transfers in CAPTURE back: connections and findings.

    Each connection comes with its verdict (what held it back and for how long, its worst
    finding, the change to make); the findings follow, the most severe first. The JSON document
    is {"connections": [...], "findings": [...]}; its schema is docs/analyze.schema.json.
    Findings are explained in docs/findings.md. --connection, --from and --to limit the
    analysis to one connection and a time window; each connection and finding comes with a
    Wireshark display filter that selects its packets.
    """
    selection = common.selection(conn, from_s, to_s)
    configs = common.detector_configs(config_file)
    # Findings, connections and the merge's counts: nothing here reads the receiver's series
    # or the merge's delay table.
    result = common.run_analysis(
        capture,
        receiver,
        maps,
        udp_seq_offset,
        udp_seq_width,
        configs=configs,
        selection=selection,
        receiver_series=False,
        merge_delay=False,
        jobs=jobs,
    )
    common.require_merge(result, capture, receiver)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    default = Severity.INFO if verbose else Severity.WARNING
    floor = Severity(min_severity) if min_severity else default
    wireshark = result.wireshark_filter if verbose else None
    click.echo("\n".join(_connection_lines(result.connection_table(), result.findings, wireshark)))
    _two_vantage(result)
    if not result.findings:
        click.echo("no findings")
    shown, hidden = at_least(severity_order(result.findings), floor)
    for f in shown:
        click.echo(_finding_line(f))
        if verbose:
            click.echo(_explained(f))
            click.echo(f"    wireshark: {result.wireshark_filter(f.conn, f.start_s, f.end_s)}")
    if hidden:
        lowest = min(f.severity.rank for f in hidden)
        how = (
            "-v shows them, or --min-severity info"
            if lowest == Severity.INFO.rank and not verbose and min_severity is None
            else f"--min-severity {list(Severity)[lowest].value} shows them"
        )
        click.echo(f"{hidden_counts(hidden)} hidden: {how}")


def _connection_lines(
    table: pa.Table,
    findings: list[Finding],
    wireshark: Callable[[int], str] | None = None,
) -> list[str]:
    """Each listed connection, then its verdict: what held each direction back and for how
    long, its worst finding, and the change to make. Troubled connections come first (the
    worst severity first), then the busiest. `wireshark` gives a connection's display filter,
    printed under it."""
    judged = verdicts(findings)
    # A selection keeps some rows only: connection numbers are found, not taken as positions.
    position = {int(c): i for i, c in enumerate(table.column("conn").to_pylist())}
    chosen = ranked(table, set(judged), MAX_LISTED)
    listed = records(table.take([position[c] for c in chosen]))
    listed.sort(
        key=lambda r: (
            -judged[r["conn"]].severity.rank if r["conn"] in judged else 1,
            -(r["bytes_a2b"] + r["bytes_b2a"]),
            r["conn"],
        )
    )
    lines = []
    for row in listed:
        # The connection is told by its data direction, from the end that sent the most: a
        # download captured at its client reads server -> client.
        b2a = int(data_direction(row["bytes_a2b"], row["bytes_b2a"])) == 1
        ends, d = ((row["b"], row["a"]), "b2a") if b2a else ((row["a"], row["b"]), "a2b")
        lines.append(
            f"connection {row['conn']}: {ends[0]} -> {ends[1]}{' (b2a)' if b2a else ''}  "
            f"{row[f'bytes_{d}']} bytes in {row['duration_s']:.3f} s, "
            f"{units.rate(row[f'throughput_{d}_bps'])}, {row[f'retrans_{d}']} resent"
        )
        if wireshark is not None:
            lines.append(f"  wireshark: {wireshark(row['conn'])}")
        verdict = judged.get(row["conn"])
        if verdict is None:
            continue
        lines += [f"  {f.summary}" for f in verdict.held_back]
        if verdict.worst is not None:
            w = verdict.worst
            lines.append(f"  worst: [{w.severity.value}] {w.kind} ({when(w)}): {w.summary}")
        if verdict.change is not None:
            lines.append(f"  change: {verdict.change}")
    if table.num_rows > len(listed):
        lines.append(
            f"... {table.num_rows - len(listed)} more connections (those with findings and the "
            "busiest come first; tracekit flows lists every one)"
        )
        lines += _cause_lines(table, judged)
    return lines


def _cause_lines(table: pa.Table, judged: dict[int, ConnectionVerdict]) -> list[str]:
    """Every connection by what held it back, where not every one is listed: per cause, how
    many, and how many of them have a warning or an error, the first of those named."""
    sizes = zip(
        table.column("conn").to_pylist(),
        (
            a + b
            for a, b in zip(
                table.column("bytes_a2b").to_pylist(),
                table.column("bytes_b2a").to_pylist(),
                strict=True,
            )
        ),
        strict=True,
    )
    lines = [
        f"all {table.num_rows:,} connections by what held them back (the verdict of each one's "
        "direction that moved the most data per second):"
    ]
    for group in by_cause(sizes, judged):
        line = f"  {group.cause}: {len(group.members):,}"
        if group.troubled:
            first = group.members[: min(group.troubled, CAUSE_NAMED)]
            named = ", ".join(f"#{conn}" for conn, _ in first)
            more = " first" if group.troubled > CAUSE_NAMED else ""
            line += f", {group.troubled:,} with a warning or an error ({named}{more})"
        lines.append(line)
    return lines


def _finding_line(f: Finding) -> str:
    where = f"connection {f.conn} {f.direction or ''}".rstrip()
    return f"[{f.severity.value}] {f.kind} ({where}, {when(f)}): {f.summary}"


def _explained(f: Finding) -> str:
    """A finding's explanation, evidence and advice, indented under its line."""

    def para(text: str, indent: str) -> list[str]:
        return textwrap.wrap(text, _WIDTH, initial_indent=indent, subsequent_indent=indent)

    rows = evidence_rows(f)
    width = max((len(name) for name, _ in rows), default=0)
    lines = para(f.explanation, "    ")
    if rows:
        lines.append("    evidence:")
        lines += [f"      {name:<{width}}  {value}" for name, value in rows]
    lines += para(f"change: {f.advice}", "    ")
    return "\n".join(lines)


def _path_change(before: PathPhase, after: PathPhase) -> str:
    """One line for a step of the path's minimal delays that the merge found."""

    def shift(seconds: float) -> str:
        return ("+" if seconds >= 0 else "-") + units.duration(abs(seconds))

    return (
        f"path change at {after.start_s:.3f} s: RTT {units.duration(before.rtt_s)} -> "
        f"{units.duration(after.rtt_s)} (forward "
        f"{shift(after.min_delay_fwd_s - before.min_delay_fwd_s)}, reverse "
        f"{shift(after.min_delay_rev_s - before.min_delay_rev_s)}: a step of the round trip and "
        "of the ACKs' way, a path change, not clock skew)"
    )


def _two_vantage(result: object) -> None:
    """The merge's clock and fates, and the UDP streams, one line each."""
    merged = getattr(result, "merge", None)
    if merged is not None:
        cm = merged.connections
        if cm.sender_only or cm.receiver_only:
            click.echo(
                f"only in the sender capture: connections {list(cm.sender_only)}; "
                f"only in the receiver capture: {list(cm.receiver_only)}"
            )
        if merged.clock is not None:
            c = merged.clock
            if c.offset_known:
                # Skew moves the two floors opposite ways by one slope: slopes that disagree by
                # more than two clocks' worth of drift are a queue's trend, not the clocks.
                apart = abs(c.skew_disagreement_ppm)
                why = (
                    ": a queue's trend, no clock drifts so fast" if apart > 2 * MAX_SKEW_PPM else ""
                )
                click.echo(
                    f"receiver clock: offset {c.offset_s:+.6f} s "
                    f"(+-{c.offset_bound_s * 1e3:.3f} ms), skew {c.skew_ppm:+.2f} ppm "
                    f"(directions disagree by {apart:.2f} ppm{why})"
                )
                # The steps a direction ran across as its path's (`path_change`): the merge's
                # others are the hosts' own time, smaller than a sender's answer to an ACK.
                told = np.array(
                    [
                        t
                        for f in getattr(result, "findings", ())
                        if f.kind == "path_change"
                        for t in np.atleast_1d(f.evidence.get("step_times_s", ()))
                    ],
                    dtype=np.float64,
                )
                kept = joined_phases(c.phases, lambda _, b: bool(np.isclose(told, b.start_s).any()))
                for before, after in itertools.pairwise(kept):
                    click.echo(_path_change(before, after))
            else:
                # One direction only (a UDP stream): offset and one-way delay cannot be told
                # apart, and skew is taken as 0 (ClockFit).
                click.echo(
                    f"receiver clock: offset {c.offset_s:+.6f} s, the smallest one-way delay "
                    "included (one direction only: skew taken as 0)"
                )
        counts = {k: v for k, v in merged.counts().items() if v}
        click.echo("transmissions: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    for stream in getattr(result, "udp", ()):
        d = stream.to_dict()
        buffer = f", buffer {d['buffer_bytes']:,.0f} bytes (eq. 1)" if d["buffer_bytes"] else ""
        # A stream only the receiver's capture holds is numbered by that capture's connection.
        where = " (receiver capture)" if d["conn_of_capture"] == "receiver" else ""
        if not d["buffer_bytes"] and d["competing_share"] > 0:
            buffer = (
                f"; other flows carried {d['competing_share']:.0%} of what reached its host up "
                "to the first loss, so the queue was not this stream's alone (no eq. 1 buffer)"
            )
        click.echo(
            f"udp stream {d['conn']} {d['direction']}{where}: {d['received_packets']} of "
            f"{d['sent_packets']} received, first loss at index {d['first_loss_index']}, "
            f"{d['loss_ratio_after_first']:.1%} lost after it, "
            f"{len(d['lost_blocks'])} lost blocks{buffer}"
        )
