"""`tracekit analyze CAPTURE [--receiver CAPTURE] [--json]`: connections and findings."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import click
from tracekit.cli import common

from tracekit import units
from tracekit.connections import ranked, records
from tracekit.merge.clock import PathPhase

# The finding that says what held a direction back: printed with its connection.
VERDICT_KIND = "rate_limit_cause"

# Connection lines printed: those with findings, then the busiest (a load test's capture has
# tens of thousands of connections, which `tracekit flows` and `--json` give in full).
MAX_LISTED = 50


@click.command()
@common.capture_argument
@common.analysis_options
@click.option("--json", "as_json", is_flag=True, help="Print connections and findings as JSON.")
def analyze(
    capture: Path,
    receiver: Path | None,
    maps: tuple[str, ...],
    udp_seq_offset: int,
    udp_seq_width: int,
    as_json: bool,
) -> None:
    """Explain what held the transfers in CAPTURE back: connections and findings.

    The JSON document is {"connections": [...], "findings": [...]}; its schema is
    docs/analyze.schema.json. Findings are explained in docs/findings.md.
    """
    result = common.run_analysis(capture, receiver, maps, udp_seq_offset, udp_seq_width)
    common.require_merge(result, capture, receiver)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    table = result.sender.connections.table
    # Connection numbers are the table's row numbers.
    shown = ranked(table, {f.conn for f in result.findings}, MAX_LISTED)
    # Each connection's verdict (what held each direction back, for how long) comes with it;
    # the other findings follow, the most severe first.
    verdicts = {(f.conn, f.direction): f.summary for f in result.findings if f.kind == VERDICT_KIND}
    lines = []
    for row in records(table.take(shown)):
        lines.append(
            f"connection {row['conn']}: {row['a']} -> {row['b']}  "
            f"{row['bytes_a2b']} bytes in {row['duration_s']:.3f} s, "
            f"{units.rate(row['throughput_a2b_bps'])}, {row['retrans_a2b']} resent"
        )
        lines += [
            f"  {verdicts[(row['conn'], d)]}"
            for d in ("a2b", "b2a")
            if (row["conn"], d) in verdicts
        ]
    if table.num_rows > len(shown):
        lines.append(
            f"... {table.num_rows - len(shown)} more connections (those with findings and the "
            "busiest come first; tracekit flows lists every one)"
        )
    click.echo("\n".join(lines))
    _two_vantage(result)
    rest = [f for f in result.findings if f.kind != VERDICT_KIND]
    if not rest:
        click.echo("no findings")
    for f in sorted(rest, key=lambda f: -f.severity.rank):
        where = f"connection {f.conn} {f.direction or ''}".rstrip()
        click.echo(
            f"[{f.severity.value}] {f.kind} ({where}, {f.start_s:.3f}-{f.end_s:.3f} s): {f.summary}"
        )


def _path_change(before: PathPhase, after: PathPhase) -> str:
    """One line for a step of the path's minimal delays that the merge found."""

    def shift(seconds: float) -> str:
        return ("+" if seconds >= 0 else "-") + units.duration(abs(seconds))

    return (
        f"path change at {after.start_s:.3f} s: RTT {units.duration(before.rtt_s)} -> "
        f"{units.duration(after.rtt_s)} (forward "
        f"{shift(after.min_delay_fwd_s - before.min_delay_fwd_s)}, reverse "
        f"{shift(after.min_delay_rev_s - before.min_delay_rev_s)}: both ways at once, a path "
        "change, not clock skew)"
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
                click.echo(
                    f"receiver clock: offset {c.offset_s:+.6f} s "
                    f"(+-{c.offset_bound_s * 1e3:.3f} ms), skew {c.skew_ppm:+.2f} ppm "
                    f"(directions disagree by {abs(c.skew_disagreement_ppm):.2f} ppm)"
                )
                for before, after in itertools.pairwise(c.phases):
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
