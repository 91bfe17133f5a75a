"""`tracekit tsg --export`: the series files hold the crafted transfer's known events."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner
from crafting import transfer, write
from many_connections import write_connections
from tracekit.cli.main import cli


def test_export_csv_and_parquet(tmp_path: Path) -> None:
    capture = write(tmp_path / "t.pcap", transfer())
    for fmt in ("csv", "parquet"):
        out = tmp_path / fmt
        result = CliRunner().invoke(
            cli, ["tsg", str(capture), "--export", str(out), "--format", fmt]
        )
        assert result.exit_code == 0, result.output
        # Only a2b carries data: its five series.
        assert sorted(p.name for p in out.iterdir()) == [
            f"conn0_a2b_{kind}.{fmt}" for kind in ("acks", "flight", "rtt", "sacks", "segments")
        ]
        read = pd.read_csv if fmt == "csv" else pd.read_parquet
        seg = read(out / f"conn0_a2b_segments.{fmt}")
        assert seg["seq_rel"].tolist() == [1, 1001, 2001, 3001, 4001, 2001, 5000, 5001, 5501, 6500]
        assert seg["kind"].astype(str).tolist().count("retransmission") == 1
        sacks = read(out / f"conn0_a2b_sacks.{fmt}")
        assert sacks["dsack"].tolist() == [False, False, False, True]


def test_unknown_connection_is_bad_input(tmp_path: Path) -> None:
    capture = write(tmp_path / "t.pcap", transfer())
    result = CliRunner().invoke(
        cli, ["tsg", str(capture), "--connection", "3", "--export", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "no connection 3" in result.stderr


def test_export_is_limited_to_the_busiest_connections(tmp_path: Path) -> None:
    # Connection i carries 10 i + 5 bytes: the busiest are the last ones.
    capture = write_connections(tmp_path / "many.pcap", 150, np.arange(150) * 10 + 5)
    out = tmp_path / "series"
    result = CliRunner().invoke(cli, ["tsg", str(capture), "--export", str(out)])
    assert result.exit_code == 0, result.output
    exported = {int(p.name[4:].split("_")[0]) for p in out.iterdir()}
    assert exported == set(range(50, 150))
    assert len(list(out.iterdir())) == 100 * 5
    assert result.stderr.splitlines()[1] == (
        f"tracekit: {capture}: exported the 100 busiest of 150 connections with data; "
        "--max-connections 0 exports all, --connection N one"
    )
    args = ["tsg", str(capture), "--export", str(tmp_path / "three"), "--max-connections", "3"]
    result = CliRunner().invoke(cli, args)
    assert {p.name.split("_")[0] for p in (tmp_path / "three").iterdir()} == {
        "conn147",
        "conn148",
        "conn149",
    }
    args = ["tsg", str(capture), "--export", str(tmp_path / "all"), "--max-connections", "0"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("\n") == 1
    assert len(list((tmp_path / "all").iterdir())) == 150 * 5
