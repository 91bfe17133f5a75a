"""`tracekit analyze CAPTURE [--receiver CAPTURE] [--json]`: connections and findings."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli import common
from tracekit.pipeline import analyze as run_analysis


@click.command()
@common.capture_argument
@click.option(
    "--receiver",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The receiver's capture of the same transfer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print connections and findings as JSON.")
def analyze(capture: Path, receiver: Path | None, as_json: bool) -> None:
    """Explain what held the transfers in CAPTURE back: connections and findings.

    The JSON document is {"connections": [...], "findings": [...]}; its schema is
    docs/analyze.schema.json. Findings are explained in docs/findings.md.
    """
    result = run_analysis(common.read(capture), common.read(receiver) if receiver else None)
    doc = result.to_dict()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for row in doc["connections"]:
        click.echo(
            f"connection {row['conn']}: {row['a']} -> {row['b']}  "
            f"{row['bytes_a2b']} bytes in {row['duration_s']:.3f} s, "
            f"{row['throughput_a2b_bps'] / 1e6:.2f} Mbit/s, {row['retrans_a2b']} resent"
        )
    if not result.findings:
        click.echo("no findings")
    for f in result.findings:
        where = f"connection {f.conn} {f.direction or ''}".rstrip()
        click.echo(
            f"[{f.severity.value}] {f.kind} ({where}, {f.start_s:.3f}-{f.end_s:.3f} s): {f.summary}"
        )
