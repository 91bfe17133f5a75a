"""`tracekit flows`: the rows a user and a machine see, on a crafted two-connection capture."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import CLIENT, SERVER, tcp, write


@pytest.fixture(scope="module")
def two_connections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    opts = [("MSS", 1460), ("WScale", 0), ("SAckOK", b"")]
    pkts = [
        tcp(10.0, CLIENT, SERVER, 40000, 80, "S", 100, 0, 0, opts),
        tcp(10.1, SERVER, CLIENT, 80, 40000, "SA", 900, 101, 0, opts),
        tcp(10.2, CLIENT, SERVER, 40000, 80, "A", 101, 901, 1000),
        tcp(10.3, CLIENT, SERVER, 40000, 80, "A", 101, 901, 1000),  # resent
        tcp(10.4, SERVER, CLIENT, 80, 40000, "A", 901, 1101),
        # A second connection without handshake, IPv6, server speaking first.
        tcp(11.0, "2001:db8::2", "2001:db8::1", 443, 5555, "PA", 7, 9, 300),
        tcp(12.0, "2001:db8::1", "2001:db8::2", 5555, 443, "A", 9, 307),
    ]
    return write(tmp_path_factory.mktemp("flows") / "two.pcap", pkts)


def test_json_rows(two_connections: Path) -> None:
    result = CliRunner().invoke(cli, ["flows", str(two_connections), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["a"], r["b"]) for r in rows] == [
        (f"{CLIENT}:40000", f"{SERVER}:80"),
        ("[2001:db8::2]:443", "[2001:db8::1]:5555"),
    ]
    first, second = rows
    assert (first["packets_a2b"], first["packets_b2a"]) == (3, 2)
    assert (first["bytes_a2b"], first["bytes_b2a"]) == (2000, 0)
    assert first["retrans_a2b"] == 1
    assert (first["mss_a"], first["ws_a"], first["ws_state"], first["sack_ok"]) == (
        1460,
        0,
        "known",
        True,
    )
    assert first["duration_s"] == pytest.approx(0.4)
    # 1000 unique bytes over 0.4 s.
    assert first["throughput_a2b_bps"] == pytest.approx(1000 * 8 / 0.4)
    assert (second["bytes_a2b"], second["ws_state"], second["ws_a"]) == (300, "unknown", None)
    assert second["start_s"] == pytest.approx(1.0)


def test_csv_has_the_same_rows(two_connections: Path) -> None:
    result = CliRunner().invoke(cli, ["flows", str(two_connections), "--csv"])
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["packets_a2b"] for r in rows] == ["3", "1"]
    assert rows[0]["a"] == f"{CLIENT}:40000"


def test_text_table(two_connections: Path) -> None:
    result = CliRunner().invoke(cli, ["flows", str(two_connections)])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["#", "proto", "a", "b"]
    assert len(lines) == 3
    assert "1460/1460" in lines[1] and "0/0" in lines[1] and "unknown" in lines[2]


def test_json_and_csv_together_is_a_usage_error(two_connections: Path) -> None:
    result = CliRunner().invoke(cli, ["flows", str(two_connections), "--json", "--csv"])
    assert result.exit_code == 2
