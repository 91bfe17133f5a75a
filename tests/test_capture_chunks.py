"""The reader's tables do not depend on how many records it walks and decodes per call.

Every fixture of the lab is smaller than one default chunk (2**16 records), so these tests read
each capture in chunks as small as one record, and read a real capture of 225172 packets
(fixtures/kernel, made by `python -m fixtures.kernel.record big`) in chunks of every size.
Its SACK blocks are checked at their frames against tshark, and its numbered UDP stream against
the record of the lab's sender, which sent numbers 0..count-1 in order.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import zstandard

from tests.fuzz_reader import assert_same_tables
from tracekit.capture import Capture, read_capture
from tracekit.errors import CaptureError
from tracekit.pipeline import analyze

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "fixtures" / "kernel"
BIG = KERNEL / "veth_v4_sack_udp_s128.pcap.zst"
BIG_RECORD = json.loads((KERNEL / "veth_v4_sack_udp_s128.json").read_text())
CRAFTED = sorted((ROOT / "fixtures" / "crafted").glob("*.pcap*"))
LAB = sorted((ROOT / "fixtures" / "captures").glob("*/*.pcap"))
# One chunk for every capture here: the reference read.
WHOLE = 1 << 20


def _read(path: Path, records_per_call: int) -> Capture | None:
    try:
        return read_capture(path, records_per_call=records_per_call)
    except CaptureError:
        return None


@pytest.mark.parametrize(
    ("records_per_call", "captures"),
    [(1, CRAFTED), (7, CRAFTED + LAB), (4099, LAB), (1 << 16, LAB)],
    ids=["1-crafted", "7-all", "4099-lab", "default-lab"],
)
def test_every_table_is_the_same_in_chunks_of_any_size(
    records_per_call: int, captures: list[Path]
) -> None:
    read = 0
    for path in captures:
        whole = _read(path, WHOLE)
        chunked = _read(path, records_per_call)
        assert (whole is None) == (chunked is None), path.name
        if whole is not None and chunked is not None:
            assert_same_tables(chunked, whole)
            read += 1
    assert read >= min(len(captures), 20)


@pytest.fixture(scope="module")
def big() -> Capture:
    return read_capture(BIG, records_per_call=WHOLE)


@cache
def _chunked(records_per_call: int) -> Capture:
    """The big capture read `records_per_call` records per call: once per process for each
    size, since the tables, SACK and UDP tests each check the same read (read it, do not
    change it)."""
    return read_capture(BIG, records_per_call=records_per_call)


def test_the_big_capture_spans_several_chunks(big: Capture) -> None:
    # Without chunks of every record kept there would be nothing to test.
    assert big.stats.frames == 225172 > 3 * (1 << 16)
    assert big.packets.num_rows == big.stats.frames
    assert big.sack.num_rows > 2_000


@pytest.mark.slow
@pytest.mark.parametrize("records_per_call", [7, 4099, 1 << 16])
def test_the_big_captures_tables_in_chunks(big: Capture, records_per_call: int) -> None:
    assert_same_tables(_chunked(records_per_call), big)


@cache
def _tshark_sack(path: Path) -> tuple[tuple[int, int, int], ...]:
    """(frame, left, right) of every SACK block, raw sequence numbers, as tshark reads them
    (once per process: each chunk size is held against the same reading)."""
    out = subprocess.run(
        [
            *("tshark", "-n", "-r", str(path), "-o", "tcp.relative_sequence_numbers:FALSE"),
            *("-Y", "tcp.options.sack_le", "-T", "fields", "-E", "occurrence=a"),
            *("-E", "aggregator=,", "-e", "frame.number"),
            *("-e", "tcp.options.sack_le", "-e", "tcp.options.sack_re"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    blocks = []
    for line in out.splitlines():
        frame, lefts, rights = line.split("\t")
        for left, right in zip(lefts.split(","), rights.split(","), strict=True):
            blocks.append((int(frame), int(left), int(right)))
    return tuple(blocks)


def _our_sack(capture: Capture) -> tuple[tuple[int, int, int], ...]:
    frames = capture.packets.column("frame").to_numpy()
    rows = capture.sack.column("row").to_numpy()
    left = capture.sack.column("left").to_numpy()
    right = capture.sack.column("right").to_numpy()
    return tuple(zip(frames[rows].tolist(), left.tolist(), right.tolist(), strict=True))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
@pytest.mark.parametrize("records_per_call", [7, 1 << 16, WHOLE])
def test_every_sack_block_is_at_its_frame_as_tshark_reads_it(
    big: Capture, records_per_call: int
) -> None:
    want = _tshark_sack(BIG)
    assert len(want) > 2_000
    capture = big if records_per_call == WHOLE else _chunked(records_per_call)
    assert _our_sack(capture) == want


def _stream_numbers(capture: Capture) -> np.ndarray:
    """The 4-byte numbers of the datagrams sent to the lab's UDP port, in capture order."""
    port = BIG_RECORD["udp"]["port"]
    flows = capture.flows.to_pandas()
    stream = flows.index[(flows.proto == 17) & ((flows.port0 == port) | (flows.port1 == port))]
    assert len(stream) == 1
    rows = capture.udp.column("row").to_numpy()
    mine = capture.packets.column("flow").to_numpy()[rows] == stream[0]
    heads = capture.udp.column("head").to_numpy()[mine]
    return (heads >> np.uint64(32)).astype(np.int64)


@pytest.mark.parametrize("records_per_call", [4099, 1 << 16, WHOLE])
def test_a_udp_stream_longer_than_a_chunk_keeps_its_numbers(
    big: Capture, records_per_call: int
) -> None:
    capture = big if records_per_call == WHOLE else _chunked(records_per_call)
    sent = BIG_RECORD["udp"]
    assert sent["datagrams"] > 1 << 16
    numbers = _stream_numbers(capture)
    # Captured at the sender, after its queue: every datagram, in the order it was sent.
    assert numbers.tolist() == list(range(sent["first"], sent["first"] + sent["datagrams"]))


@pytest.mark.slow
def test_the_findings_do_not_depend_on_the_chunk_size(tmp_path: Path) -> None:
    # Uncompressed, the file is within one mapped window: one call walks all of it.
    plain = tmp_path / "big.pcap"
    plain.write_bytes(zstandard.ZstdDecompressor().decompressobj().decompress(BIG.read_bytes()))
    one_call = read_capture(plain, records_per_call=WHOLE)
    docs = []
    for capture in (read_capture(BIG), one_call):
        docs.append([f.to_dict() for f in analyze(capture).findings])
    assert docs[0] == docs[1]
    assert docs[0]
