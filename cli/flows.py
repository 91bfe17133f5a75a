"""`tracekit flows CAPTURE`: one row per connection."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import click
from tracekit.cli import common

from tracekit.connections import records

# (header, key, formatter) of the text table.
_MBIT = 1e6


def _si_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _pair(a: Any, b: Any, missing: Any = 0) -> str:
    """a/b with '-' for a missing value (an MSS of 0, a window scale of None)."""
    return f"{'-' if a == missing else a}/{'-' if b == missing else b}"


def _text_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = [
        [
            "#",
            "proto",
            "a",
            "b",
            "pkts a>b",
            "pkts b>a",
            "bytes a>b",
            "bytes b>a",
            "start s",
            "dur s",
            "Mbit/s a>b",
            "Mbit/s b>a",
            "rexmt a>b",
            "rexmt b>a",
            "MSS a/b",
            "WS a/b",
            "SACK",
        ]
    ]
    for r in rows:
        ws = _pair(r["ws_a"], r["ws_b"], None) if r["ws_state"] == "known" else str(r["ws_state"])
        out.append(
            [
                str(r["conn"]),
                str(r["proto"]),
                str(r["a"]),
                str(r["b"]),
                str(r["packets_a2b"]),
                str(r["packets_b2a"]),
                _si_bytes(int(r["bytes_a2b"])),
                _si_bytes(int(r["bytes_b2a"])),
                f"{r['start_s']:.3f}",
                f"{r['duration_s']:.3f}",
                f"{float(r['throughput_a2b_bps']) / _MBIT:.2f}",
                f"{float(r['throughput_b2a_bps']) / _MBIT:.2f}",
                str(r["retrans_a2b"]),
                str(r["retrans_b2a"]),
                _pair(r["mss_a"], r["mss_b"]),
                ws,
                "yes" if r["sack_ok"] else "no",
            ]
        )
    return out


def _align(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    left = {1, 2, 3}  # text columns
    lines = []
    for row in table:
        cells = [
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


@click.command()
@common.capture_argument
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON array.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV with a header.")
def flows(capture: Path, as_json: bool, as_csv: bool) -> None:
    """List the connections in CAPTURE: endpoints, volumes, timing, retransmissions, options.

    Side a is the one that sent the first SYN (without a handshake in the capture, the first
    packet's source). Throughput counts unique payload bytes over the connection's duration.
    """
    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    rows = records(common.connections_table(capture))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    else:
        click.echo(_align(_text_rows(rows)))
