"""Fuzz tracekit.capture.read_capture with mutated crafted captures (hypothesis).

A mutated or truncated capture must give either a result whose tables hold together or a
CaptureError; any other exception is a bug. A capture that reads is also split into
connections, whose tables must hold together too, and ingested as a stream of small chunks,
which must write the same tables. tests/test_capture_fuzz.py runs a bounded
number of examples in the normal suite; run this file to fuzz for longer:

    python tests/fuzz_reader.py --minutes 15

It prints how many inputs it tried and what it found, and saves each failing input to
bench/data/fuzz-failures/.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if __name__ == "__main__":
    # Standalone, the kernels are compiled with bounds checks (into a cache of their own), so an
    # index past a buffer raises IndexError instead of reading stray memory unseen; numba
    # compiles them here, not the ahead-of-time build (tracekit.core.kernels), which has no checks.
    os.environ.setdefault("TRACEKIT_JIT", "1")
    os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
    os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="tracekit-fuzz-numba-"))

from tracekit import schema  # noqa: E402
from tracekit.capture import Capture, read_capture  # noqa: E402
from tracekit.capture.decode import MAX_AMSDU_SUBFRAMES  # noqa: E402
from tracekit.connections import build_connections  # noqa: E402
from tracekit.connections.stream import ingest_capture  # noqa: E402
from tracekit.connections.table_io import connections_path  # noqa: E402
from tracekit.errors import CaptureError  # noqa: E402

CRAFTED = ROOT / "fixtures" / "crafted"
SEEDS = (
    "zoo_ethernet_le_us.pcap",
    "zoo_ethernet_be_ns.pcap",
    "zoo_qinq.pcap",
    "zoo_sll2.pcap",
    "zoo_null_le.pcap",
    "zoo_snap96.pcap",
    "zoo.pcapng",
    "zoo_gzip.pcap",
    "zoo_zstd.pcapng",
    "encap_carried.pcap",
    "encap_damaged.pcap",
    "encap_links.pcapng",
    "amsdu.pcap",
    "amsdu_radiotap.pcap",
    "ipcomp_carried.pcap",
    "ipcomp_damaged.pcap",
)
# Values that sit on the reader's limits: lengths around 0, 256 KiB, the snaplen, 2**31, 2**32.
EDGE_VALUES = (0, 1, 3, 4, 11, 12, 16, 20, 28, 32, 96, 128, 262144, 262145, 2**31, 2**32 - 1)

mutation = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(
        st.just("u32"),
        st.integers(0, 1 << 20),
        st.one_of(st.sampled_from(EDGE_VALUES), st.integers(0, 2**32 - 1)),
    ),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20), st.integers(1, 64)),
    st.tuples(st.just("repeat"), st.integers(0, 1 << 20), st.integers(1, 64)),
)
inputs = st.tuples(st.sampled_from(SEEDS), st.lists(mutation, min_size=1, max_size=6))


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, value in mutations:
        if not out:
            break
        at = where % len(out)
        if kind == "byte":
            out[at] = value
        elif kind == "u32":
            order = "<" if value & 1 else ">"
            out[at : at + 4] = struct.pack(order + "I", value)
        elif kind == "truncate":
            del out[at:]
        elif kind == "delete":
            del out[at : at + value]
        else:
            out[at:at] = out[at : at + value]
    return bytes(out)


def check_consistent(capture: Capture) -> None:
    """Invariants of a successful read that hold for any input."""
    packets = capture.packets
    assert packets.schema == schema.arrow_schema(schema.PACKET_COLUMNS)
    assert capture.flows.schema == schema.arrow_schema(schema.FLOW_COLUMNS)
    assert capture.sack.schema == schema.arrow_schema(schema.SACK_COLUMNS)
    assert capture.udp.schema == schema.arrow_schema(schema.UDP_COLUMNS)
    n = packets.num_rows
    frames = packets.column("frame").to_numpy()
    # A frame is kept (one row, or an A-MSDU's row per subframe kept) or skipped for a reason.
    kept = np.unique(frames).size
    assert kept + sum(capture.stats.skipped.values()) == capture.stats.frames
    assert all(count > 0 for count in capture.stats.skipped.values())
    if n:
        flows = packets.column("flow")
        assert pc.min(flows).as_py() >= 0
        assert pc.max(flows).as_py() < capture.flows.num_rows
        assert frames[0] >= 1 and (frames[1:] >= frames[:-1]).all()
        assert np.bincount(frames).max() <= MAX_AMSDU_SUBFRAMES
        assert frames[-1] <= capture.stats.frames
        assert pc.sum(packets.column("sack_n")).as_py() == capture.sack.num_rows
    for table in (capture.sack, capture.udp):
        if table.num_rows:
            assert pc.max(table.column("row")).as_py() < n
    # A cut tail always says so (other warnings, such as records over the snapshot length,
    # come without one).
    assert not capture.stats.truncated_tail or capture.stats.warnings


def assert_same_tables(got: Capture, want: Capture) -> None:
    """The reader's every table (packets, flows, SACK, UDP) and statistics are the same."""
    for name in ("packets", "flows", "sack", "udp"):
        assert getattr(got, name).equals(getattr(want, name)), name
    assert got.stats == want.stats


def check_one(data: bytes, folder: Path) -> None:
    """Read one input: a result that holds together, or a CaptureError. What reads is then
    split into connections (every command's next stage), whose tables must hold together too."""
    path = folder / "fuzz.cap"
    path.write_bytes(data)
    try:
        capture = read_capture(path)
    except CaptureError as exc:
        assert "\n" not in str(exc)
        return
    check_consistent(capture)
    # Every table the reader writes, read in chunks of 3 records, must be the same.
    assert_same_tables(read_capture(path, records_per_call=3), capture)
    rows = capture.packets.num_rows
    conns = build_connections(capture)
    assert conns.packets.num_rows == rows
    table = conns.table
    if rows:
        assert pc.max(conns.packets.column("conn")).as_py() == table.num_rows - 1
    sent = pc.sum(table.column("packets_a2b")).as_py() or 0
    assert sent + (pc.sum(table.column("packets_b2a")).as_py() or 0) == rows
    data_segments = pc.sum(pc.greater(conns.packets.column("payload_bytes"), 0)).as_py() or 0
    resent = pc.sum(table.column("retrans_a2b")).as_py() or 0
    assert resent + (pc.sum(table.column("retrans_b2a")).as_py() or 0) <= data_segments
    # `tracekit ingest` makes the same tables as a stream of chunks (3 records each here), and
    # refuses a capture without TCP or UDP, as flows does.
    if rows == 0:
        try:
            ingest_capture(path, folder / "stream.parquet", records_per_call=3)
        except CaptureError as exc:
            assert "no TCP or UDP packets" in str(exc)
            return
        raise AssertionError("ingest wrote an empty table")
    streamed = ingest_capture(path, folder / "stream.parquet", records_per_call=3)
    assert streamed.packets == rows and streamed.connections == table.num_rows
    assert pq.read_table(folder / "stream.parquet").equals(conns.packets)
    assert pq.read_table(connections_path(folder / "stream.parquet")).equals(table)


def seed_bytes(name: str) -> bytes:
    return (CRAFTED / name).read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description="Fuzz read_capture for a while.")
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    failures_dir = ROOT / "bench" / "data" / "fuzz-failures"
    deadline = time.monotonic() + args.minutes * 60
    tried = 0
    failures: list[str] = []
    seeds = {name: seed_bytes(name) for name in SEEDS}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)

        # Runs of 1000 examples, one after another until the time is up.
        @settings(
            max_examples=1000,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        @given(inputs)
        def fuzz(case: tuple[str, list[tuple[str, int, int]]]) -> None:
            nonlocal tried
            if time.monotonic() > deadline:
                return
            tried += 1
            name, mutations = case
            data = mutate(seeds[name], mutations)
            try:
                check_one(data, folder)
            except Exception:
                failures_dir.mkdir(parents=True, exist_ok=True)
                saved = failures_dir / f"failure-{len(failures)}-{name}"
                saved.write_bytes(data)
                failures.append(f"{saved}: {traceback.format_exc().splitlines()[-1]}")

        start = time.monotonic()
        while time.monotonic() < deadline:
            try:
                fuzz()
            except Exception as exc:  # the harness itself broke: report it, stop
                failures.append(f"harness: {exc!r}")
                break
    minutes = (time.monotonic() - start) / 60
    print(f"fuzz_reader: {tried} inputs in {minutes:.1f} min, {len(failures)} failures")
    for line in failures:
        print("  " + line)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
