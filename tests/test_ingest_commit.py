"""`tracekit ingest` writes the packet table and its connections file as one unit: a pair of
one write, checked by read_connections; temporaries of killed runs removed by the next; a
footer whose size does not grow with the connections."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.many_connections import write_connections
from tracekit.connections import packet_schema, table_io
from tracekit.connections.stream import ingest_capture
from tracekit.connections.table_io import connections_path, read_connections
from tracekit.errors import TracekitError

REPO = Path(__file__).parent.parent


def test_the_files_of_one_ingest_read_as_a_pair(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    ingest_capture(write_connections(tmp_path / "three.pcap", 3), out)
    conns = read_connections(out)
    assert conns.num_rows == 3
    assert conns.equals(pq.read_table(connections_path(out)))


def test_a_run_killed_between_the_renames_is_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "t.parquet"
    ingest_capture(write_connections(tmp_path / "three.pcap", 3), out)
    earlier = out.read_bytes()

    def killed(self: object) -> None:
        raise KeyboardInterrupt  # as a kill between the two renames would leave them

    monkeypatch.setattr(table_io.ParquetStream, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest_capture(write_connections(tmp_path / "five.pcap", 5), out)
    assert out.read_bytes() == earlier  # the packets of the first capture...
    assert pq.read_table(connections_path(out)).num_rows == 5  # ...beside the second's
    with pytest.raises(TracekitError, match="not the connections of"):
        read_connections(out)
    assert not list(tmp_path.glob(".*.tmp"))


def test_files_from_two_ingests_are_no_pair(tmp_path: Path) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    capture = write_connections(tmp_path / "three.pcap", 3)
    ingest_capture(capture, a)
    ingest_capture(capture, b)
    connections_path(b).replace(connections_path(a))
    with pytest.raises(TracekitError, match="not the connections of"):
        read_connections(a)


def test_a_killed_ingest_leaves_temporaries_the_next_one_removes(tmp_path: Path) -> None:
    capture = write_connections(tmp_path / "many.pcap", 50_000)
    out = tmp_path / "out" / "t.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    main = "from tracekit.cli.main import main; main()"
    # The kill can land just after the temporary was renamed into place (a loaded machine
    # wakes the poll late, and the suite's other worker loads it): then the run is made
    # again, up to ten times.
    for _ in range(10):
        out.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", main, "ingest", str(capture), "-o", str(out)],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while (
            proc.poll() is None
            and time.monotonic() < deadline
            and not list(out.parent.glob(".*.tmp"))
        ):
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = list(out.parent.glob(".*.tmp"))
        if left or not out.exists():
            break
    assert left, f"the run was not caught writing (exit status {proc.returncode})"
    # Not ours to remove: other names, other outputs' temporaries, a temporary being written.
    others = [out.parent / ".t.parquet.notours.tmp", out.parent / ".u.parquet.0123abcd.tmp"]
    for path in others:
        path.write_bytes(b"x")
    time.sleep(0.01)  # older than the next run, which starts now
    result = CliRunner().invoke(cli, ["ingest", str(capture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(out.parent.glob(".*.tmp")) == sorted(others), left
    assert read_connections(out).num_rows == 50_000


def test_a_temporary_being_written_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    stream = table_io.ParquetStream(out, packet_schema())  # another writer, at work
    time.sleep(0.01)
    ingest_capture(write_connections(tmp_path / "three.pcap", 3), out)
    assert stream.tmp.exists()  # its writer holds it
    stream.abort()


@pytest.mark.parametrize("n", [10, 20_000])
def test_the_footer_does_not_grow_with_the_connections(tmp_path: Path, n: int) -> None:
    out = tmp_path / "t.parquet"
    ingest_capture(write_connections(tmp_path / "c.pcap", n), out)
    footer = pq.read_metadata(out)
    # The schema with a format version, the capture's path and the pair id: a few kB, however
    # many connections (20,000 took 17 MB when the footer held them).
    assert footer.serialized_size < 8_000
    assert {k.decode() for k in footer.metadata} == {
        "tracekit.format",
        "tracekit.capture",
        "tracekit.pair",
        "ARROW:schema",
    }
    assert read_connections(out).num_rows == n
