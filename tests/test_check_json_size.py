"""`check --json` on a load test's capture: quiet connections keep only what names them and
what a baseline compares, so the document stays a few hundred bytes a connection."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.many_connections import write_connections


def test_quiet_connections_are_compact_and_still_a_baseline(tmp_path: Path) -> None:
    n = 2000
    capture = write_connections(tmp_path / "many.pcap", n)
    out = tmp_path / "check.json"
    result = CliRunner().invoke(cli, ["check", str(capture), "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    (entry,) = doc["captures"]
    assert len(entry["connections"]) == n
    assert entry["connections"][5] == {
        "conn": 5,
        "a": "10.1.0.1:10005",
        "b": "10.0.0.2:80",
        "bytes_a2b": 0,
        "bytes_b2a": 0,
        "throughput_a2b_bps": 0.0,
        "throughput_b2a_bps": 0.0,
    }
    assert entry["metrics"] == []
    assert out.stat().st_size < 300 * n
    again = CliRunner().invoke(cli, ["check", str(capture), "--baseline", str(out)])
    assert again.exit_code == 0, again.output
