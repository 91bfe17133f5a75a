"""`tracekit ingest`: the packet table as Parquet that pandas reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit.connections import packet_schema
from tracekit.connections.table_io import read_connections
from tracekit.schema import FATES


def test_ingest_writes_packet_table_and_connections(tmp_path: Path) -> None:
    pkts = [
        tcp(1.0, CLIENT, SERVER, 40000, 80, "S", 2**32 - 1),
        tcp(1.5, SERVER, CLIENT, 80, 40000, "SA", 50, 0),
        tcp(2.0, CLIENT, SERVER, 40000, 80, "A", 0, 51, 700),  # crosses the 4 GiB wrap
    ]
    capture = write(tmp_path / "in.pcap", pkts)
    out = tmp_path / "table.parquet"
    result = CliRunner().invoke(cli, ["ingest", str(capture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{out}: 3 packets, 1 connection"
    table = pq.read_table(out)
    assert table.schema.remove_metadata() == packet_schema()
    df = table.to_pandas()
    assert df["frame"].tolist() == [1, 2, 3]
    assert df["dir"].tolist() == [0, 1, 0]
    assert df["seq_rel"].tolist() == [0, 0, 1]
    assert df["payload_bytes"].tolist() == [0, 0, 700]
    assert df["ts_ns"].tolist() == [1_000_000_000, 1_500_000_000, 2_000_000_000]
    conns = pd.read_parquet(tmp_path / "table.connections.parquet")
    assert conns["a"].tolist() == [f"{CLIENT}:40000"]
    assert conns["b"].tolist() == [f"{SERVER}:80"]
    assert read_connections(out).to_pandas().equals(conns)
    assert not list(tmp_path.glob(".*.tmp"))


def test_ingest_with_receiver_adds_each_packets_fate(tmp_path: Path) -> None:
    lab = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "receiver_drops"
    truth = json.loads((lab / "truth.json").read_text())
    out = tmp_path / "t.parquet"
    args = ["ingest", str(lab / "sender.pcap"), "--receiver", str(lab / "receiver.pcap")]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    fate = pd.read_parquet(out, columns=["fate"])["fate"]
    # The kernel's nftables counter: the packets the receiving host dropped after capture.
    assert int((fate == FATES.index("receiver_drop")).sum()) == truth["drops"]["receiver"]
    assert int((fate == FATES.index("network_drop")).sum()) == truth["drops"]["network"]


def test_duckdb_and_polars_read_the_delta_encoded_columns(tmp_path: Path) -> None:
    import duckdb
    import polars as pl

    lab = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "slow_start_overrun"
    truth = json.loads((lab / "truth.json").read_text())
    out = tmp_path / "t.parquet"
    result = CliRunner().invoke(cli, ["ingest", str(lab / "sender.pcap"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    encodings = pq.ParquetFile(out).metadata.row_group(0).column(0).encodings
    assert "DELTA_BINARY_PACKED" in encodings  # ts_ns, the first column
    # The data's last byte is the transfer's size (the first data byte is 1); every resend is
    # one of the kernel's retransmitted segments.
    query = (
        f"select max(seq_rel + payload_bytes) - 1, count(*) - count(distinct seq_rel) "
        f"from '{out}' where dir = 0 and payload_bytes > 0"
    )
    ((top, resent),) = duckdb.sql(query).fetchall()
    assert top == truth["transfer"]["sender"]["bytes"]
    assert resent == truth["retransmissions"]["segments"]
    data = pl.read_parquet(out).filter((pl.col("dir") == 0) & (pl.col("payload_bytes") > 0))
    assert (data["seq_rel"] + data["payload_bytes"]).max() - 1 == top
    assert data["ts_ns"].is_sorted()  # capture order, through the deltas
