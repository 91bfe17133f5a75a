"""`tracekit tsg --export`: the series files hold the crafted transfer's known events."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import transfer, write
from tests.helpers.many_connections import write_connections


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


PAIR = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "slow_start_overrun"
XPLOT_COLOURS = {"white", "green", "red", "blue", "yellow", "purple", "orange", "magenta", "pink"}
# Each command's number of coordinates (x y pairs); a colour may follow them.
XPLOT_ARITY = {
    "line": 2,
    "darrow": 1,
    "uarrow": 1,
    "dtick": 1,
    "utick": 1,
    "htick": 1,
    "dot": 1,
    "x": 1,
    "diamond": 1,
    "box": 1,
    "atext": 1,
    "rtext": 1,
}


def _truth() -> dict:
    import json

    return json.loads((PAIR / "truth.json").read_text())


def _tshark_data_segments(path: Path) -> int:
    import subprocess

    port = _truth()["flow"]["sender"].rsplit(":", 1)[1]
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(path),
            "-Y",
            f"tcp.len > 0 && tcp.srcport == {port}",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return len(out.split())


def _xplot_commands(path: Path) -> list[tuple[str, str, list[str]]]:
    """(colour in force, command, its words) of each drawing command; every line must parse."""
    lines = path.read_text().splitlines()
    assert lines[0].split() in (["double", "double"], ["dtime", "signed"])
    assert lines[-1] == "go"
    i, colour, out = 1, "white", []
    while i < len(lines) - 1:
        words = lines[i].split()
        if words[0] in ("title", "xlabel", "ylabel"):
            i += 2  # the text is the next line
            continue
        if words[0] in ("atext", "rtext"):
            i += 1  # their label is the next line
        if len(words) == 1 and words[0] in XPLOT_COLOURS:
            colour = words[0]
        else:
            assert words[0] in XPLOT_ARITY, lines[i]
            n = 2 * XPLOT_ARITY[words[0]]
            assert len(words) in (1 + n, 2 + n), lines[i]
            [float(w) for w in words[1 : 1 + n]]
            if len(words) == 2 + n:
                assert words[-1] in XPLOT_COLOURS, lines[i]
            out.append((colour, words[0], words))
        i += 1
    return out


def test_receiver_and_merge_series(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        [
            "tsg",
            str(PAIR / "sender.pcap"),
            "--receiver",
            str(PAIR / "receiver.pcap"),
            "--export",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    series = ("acks", "flight", "rtt", "sacks", "segments")
    assert names == sorted(
        [f"conn0_a2b_{k}.csv" for k in series]
        + [f"receiver_conn0_a2b_{k}.csv" for k in series]
        + ["merge_conn0_a2b_transmissions.csv", "merge_conn0_a2b_delay.csv"]
    )
    received = pd.read_csv(out / "receiver_conn0_a2b_segments.csv")
    assert len(received) == _tshark_data_segments(PAIR / "receiver.pcap")
    fates = pd.read_csv(out / "merge_conn0_a2b_transmissions.csv")["fate"].value_counts()
    assert fates["network_drop"] == _truth()["drops"]["network"]
    delay = pd.read_csv(out / "merge_conn0_a2b_delay.csv")
    assert (delay["owd_s"] > 0).all()


def test_map_needs_receiver(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "tsg",
            str(PAIR / "sender.pcap"),
            "--map",
            "1.2.3.4=5.6.7.8",
            "--export",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2


def test_xplot_matches_tcptraces_structure(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["tsg", str(PAIR / "sender.pcap"), "--export", str(out), "--format", "xplot"]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["conn0_a2b_tsg.xpl"]
    ours = _xplot_commands(out / "conn0_a2b_tsg.xpl")
    ref_dir = tmp_path / "tcptrace"
    ref_dir.mkdir()
    subprocess.run(
        ["tcptrace", "-S", "-zxy", str(PAIR / "sender.pcap")],
        cwd=ref_dir,
        check=True,
        capture_output=True,
    )
    theirs = _xplot_commands(ref_dir / "a2b_tsg.xpl")
    # The same vocabulary: every command and colour we use, tcptrace uses in its TSG.
    assert {c for _, c, _ in ours} <= {c for _, c, _ in theirs}
    assert {col for col, _, _ in ours} <= {col for col, _, _ in theirs}
    # One segment (down arrow, up arrow, vertical line) per data segment tshark counts; the
    # resent ones red, as many as the sender's kernel retransmitted.
    data = _tshark_data_segments(PAIR / "sender.pcap")
    assert sum(c == "darrow" for _, c, _ in ours) == data
    assert sum(c == "uarrow" for _, c, _ in ours) == data
    red = [w for col, c, w in ours if col == "red" and c == "line"]
    assert len(red) == _truth()["retransmissions"]["segments"]
    assert all(w[1] == w[3] for w in red)  # vertical
    # tcptrace draws the SACK blocks as purple lines with a tick at each end; so do we.
    assert sum(c == "htick" for _, c, _ in ours) == sum(c == "htick" for _, c, _ in theirs)
    assert sum(col == "purple" and c == "line" for col, c, _ in ours) == sum(
        col == "purple" and c == "line" for col, c, _ in theirs
    )
    # The ACK line green, the window edge yellow, both drawn.
    assert any(col == "green" and c == "line" for col, c, _ in ours)
    assert any(col == "yellow" and c == "line" for col, c, _ in ours)
