"""Decompression bombs and cut compressed streams: bounded memory, linear time, one-line errors.

The bombs are made at test time (fixtures/crafted/bombs.py): KBs on disk, gigabytes inside.
The commands run in a child process whose peak RSS is its own (wait4), held against the same
command's peak on a tiny capture.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fixtures.crafted import bombs, craft
from tracekit.capture import read_capture, source
from tracekit.capture.source import BUFFER_BYTES, ByteSource
from tracekit.errors import CaptureError

GIB = 1 << 30
MIB = 1 << 20
SMALL = Path(craft.__file__).resolve().parent / "zoo_zstd.pcapng"
# Peak RSS a bomb may add to the command's peak on SMALL: the 16 MiB buffer, the decompressor's
# window and the reader's per-chunk arrays (2**18 records), whatever the decompressed size.
RSS_ALLOWANCE = 96 * MIB
# Seconds per command: a 1 GiB bomb takes 1-3 s on an idle 2-core machine, 10-17 s on a busy one.
TIMEOUT = 60.0


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes
    seconds: float


def tracekit(*args: str, timeout: float = TIMEOUT) -> Run:
    """The `tracekit` console script in a child process, with that child's own peak RSS."""
    code = "import sys; from tracekit.cli.main import main; sys.argv[0] = 'tracekit'; main()"
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=out, stderr=err)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                child.kill()
                os.wait4(child.pid, 0)
                child.returncode = -9
                pytest.fail(f"tracekit {' '.join(args)} still running after {timeout} s")
            time.sleep(0.02)
        seconds = time.monotonic() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(
            child.returncode,
            out.read().decode(),
            err.read().decode(),
            usage.ru_maxrss * 1024,  # KiB on Linux
            seconds,
        )


@pytest.fixture(scope="module")
def baseline() -> dict[str, int]:
    """Each command's peak RSS on a 1 KB capture."""
    return {command: tracekit(command, str(SMALL)).peak_rss for command in ("flows", "analyze")}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bombs")


def _write(folder: Path, name: str, make: Callable[[], bytes]) -> Path:
    """The bomb `make` builds, as folder/name: built once per module's folder, since the
    commands that read the same bomb share it."""
    path = folder / name
    if not path.exists():
        path.write_bytes(make())
    return path


def _one_line_error(run: Run, path: Path) -> str:
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"tracekit: {path}: ")
    return lines[0]


def _bounded(run: Run, baseline: dict[str, int], command: str) -> None:
    assert run.peak_rss < baseline[command] + RSS_ALLOWANCE, (
        f"peak RSS {run.peak_rss / MIB:.0f} MiB, {command} on a tiny capture "
        f"{baseline[command] / MIB:.0f} MiB"
    )


# -- whole commands on bombs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "size", "level"),
    [("zstd", GIB // 2, 19), ("gzip", 256 * MIB, 9), ("xz", 256 * MIB, 0)],
)
@pytest.mark.parametrize("command", ["flows", "analyze"])
def test_zeros_after_a_header_are_read_in_bounded_memory(
    folder: Path, baseline: dict[str, int], compression: str, size: int, level: int, command: str
) -> None:
    # A record header of zeros is a record of caplen 0: the reader walks them all, 16 bytes
    # each, keeps none, and says there is no TCP.
    path = _write(
        folder, f"zeros.{compression}", lambda: bombs.zeros_bomb(compression, size, level)
    )
    assert path.stat().st_size < 2 * MIB
    run = tracekit(command, str(path))
    line = _one_line_error(run, path)
    assert f"in {size // 16} frames" in line
    _bounded(run, baseline, command)


def test_repeated_tcp_record_flows(folder: Path, baseline: dict[str, int]) -> None:
    # The shape of the reported bomb: one record repeated, 45 KB of zstd for 512 MiB. The flows
    # command keeps no packet table, so 7.7 M packets of one connection fit in bounded memory.
    path = _write(folder, "tcp.zst", lambda: bombs.tcp_bomb("zstd", GIB // 2))
    assert path.stat().st_size < 256 * 1024
    run = tracekit("flows", "--json", str(path))
    assert run.returncode == 0, run.stderr
    assert f'"packets_a2b": {bombs.repeats(bombs.tcp_record(), GIB // 2)}' in run.stdout
    _bounded(run, baseline, "flows")


def test_repeated_skipped_record_analyze(folder: Path, baseline: dict[str, int]) -> None:
    # 9 M ARP records: each is a frame the reader counts and skips, and the packet table
    # grows only for TCP and UDP.
    path = _write(folder, "arp.zst", lambda: bombs.arp_bomb("zstd", GIB // 2))
    run = tracekit("analyze", str(path))
    _one_line_error(run, path)
    _bounded(run, baseline, "analyze")


@pytest.mark.slow
def test_four_gib_of_zeros_in_128_kb(folder: Path, baseline: dict[str, int]) -> None:
    # 128 KiB of zstd (RLE blocks, RFC 8878 3.1.1.2.2) for 4 GiB; unbounded it passed 8 GiB RSS.
    path = _write(folder, "zeros4.zst", lambda: bombs.zeros_bomb("zstd", 4 * GIB))
    assert path.stat().st_size < 140 * 1024
    run = tracekit("flows", str(path), timeout=4 * TIMEOUT)
    assert f"in {4 * GIB // 16} frames" in _one_line_error(run, path)
    _bounded(run, baseline, "flows")


# -- ByteSource ---------------------------------------------------------------------------------


def _steps(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[tuple[int, int]]]:
    """Every byte of the file through a ByteSource: (total, [(room, written) per step])."""
    steps: list[tuple[int, int]] = []
    for decoder in (source._StepDecoder, source._ZstdDecoder):
        real = decoder.readinto

        def readinto(self: object, view: memoryview, real: object = real) -> int:
            got = real(self, view)  # type: ignore[operator]
            steps.append((len(view), got))
            return got

        monkeypatch.setattr(decoder, "readinto", readinto)
    with ByteSource(path) as src:
        assert not src.buf[24 : src.n].any()
        while not src.eof:
            src.advance(src.n)
            assert src.n <= BUFFER_BYTES
            assert not src.buf[: src.n].any()
        assert src.cut_reason is None
        return src.base + src.n, steps


@pytest.mark.parametrize("compression", ["zstd", "xz", "gzip"])
def test_bytesource_steps_fit_the_buffer(
    folder: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    size = GIB if compression != "gzip" else 256 * MIB
    path = _write(folder, f"source.{compression}", lambda: bombs.zeros_bomb(compression, size, 1))
    tracemalloc.start()
    try:
        total, steps = _steps(path, monkeypatch)
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 24 + size
    assert all(0 < got <= room for room, got in steps[:-1]) and steps[-1][1] == 0
    if compression != "zstd":  # each step's bytes object is at most _OUT_STEP
        assert max(got for _, got in steps) <= source._OUT_STEP
    # Nothing decompressed piles up beside the buffer (numpy reports it to tracemalloc).
    assert python_peak < BUFFER_BYTES + 4 * MIB


# -- cut streams ----------------------------------------------------------------------------------


def test_zstd_cut_inside_its_only_compressed_block(tmp_path: Path) -> None:
    # A compressed block decodes only whole (RFC 8878 3.1.1.3.2.1: its sequences are read from
    # its end), so nothing precedes the cut; tshark reads no packet from it and says nothing.
    whole = bombs.zstd_one_block(bombs.tcp_records(1000))
    path = tmp_path / "cut.pcap.zst"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CaptureError) as info:
        read_capture(path)
    assert info.value.problem == "zstd stream cut off before its first byte"
    run = tracekit("flows", str(path))
    assert _one_line_error(run, path).endswith("zstd stream cut off before its first byte")


def test_zstd_cut_inside_its_only_raw_block_is_read_to_the_cut(tmp_path: Path) -> None:
    plain = bombs.tcp_records(1000)
    frame = bombs.zstd_raw_frame(plain)
    cut = len(frame) // 2
    path = tmp_path / "cut.pcap.zst"
    path.write_bytes(frame[:cut])
    with ByteSource(path) as src:
        assert src.eof and src.cut_reason == "zstd stream ends before its end marker"
        got = bytes(src.buf[: src.n])
    assert got == plain[: len(got)] and len(got) == cut - 12  # magic, header, block header
    capture = read_capture(path)
    assert capture.stats.frames == (len(got) - 24) // 70
    assert any("zstd stream ends before its end marker" in w for w in capture.stats.warnings)
    assert capture.stats.truncated_tail


@pytest.mark.parametrize("compression", ["zstd", "xz", "gzip"])
def test_cut_after_the_first_block_is_read_up_to_the_last_whole_block(
    compression: str, tmp_path: Path
) -> None:
    plain = bombs.tcp_records(20_000)  # 1.4 MB: several zstd blocks and xz chunks
    data = bombs.compress([plain], compression, 6)
    path = tmp_path / f"cut.{compression}"
    path.write_bytes(data[: len(data) * 3 // 4])
    with ByteSource(path) as src:
        got = bytes(src.buf[: src.n])
        assert src.eof and src.cut_reason == f"{compression} stream ends before its end marker"
    assert 0 < len(got) < len(plain) and got == plain[: len(got)]
    assert read_capture(path).stats.truncated_tail


@pytest.mark.parametrize("compression", ["zstd", "xz", "gzip"])
def test_concatenated_streams_are_all_read(compression: str, tmp_path: Path) -> None:
    # gzip members (RFC 1952 2.2), xz streams (xz file format 2.2), zstd frames (RFC 8878 3.1)
    # and a skippable zstd frame (RFC 8878 3.1.2) between two.
    plain = bombs.tcp_records(3000)
    parts = [plain[:1000], plain[1000:150_000], plain[150_000:]]
    pieces = [bombs.compress([part], compression, 3) for part in parts]
    if compression == "zstd":
        pieces.insert(1, (0x184D2A5E).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc")
    path = tmp_path / f"three.{compression}"
    path.write_bytes(b"".join(pieces))
    capture = read_capture(path)
    assert capture.stats.frames == 3000
    assert not capture.stats.truncated_tail and not capture.stats.warnings


def test_truncated_zstd_header_is_a_cut(tmp_path: Path) -> None:
    whole = bombs.zstd_one_block(bombs.tcp_records(10))
    head = whole + whole[:5]  # a second frame's magic and descriptor, then nothing
    path = tmp_path / "head.zst"
    path.write_bytes(head)
    assert read_capture(path).stats.truncated_tail


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        # 2**28: libzstd's own default limit is 2**27 (ZSTD_WINDOWLOG_LIMIT_DEFAULT).
        ("w.zst", bombs.zstd_raw_frame(bombs.tcp_records(10), 28), "zstd data needs a window"),
        # LZMA2 dictionary code 32: 256 MiB.
        ("d.xz", bombs.xz_dictionary(bombs.tcp_records(10), 32), "xz data needs a dictionary"),
    ],
)
def test_history_larger_than_allowed_is_refused(
    tmp_path: Path, name: str, data: bytes, problem: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(CaptureError) as info:
        read_capture(path)
    assert info.value.problem == f"{problem} over the 128 MiB allowed"


def test_history_within_the_limit_is_read(tmp_path: Path) -> None:
    for name, data in [
        ("w.zst", bombs.zstd_raw_frame(bombs.tcp_records(10), 27)),
        ("d.xz", bombs.xz_dictionary(bombs.tcp_records(10), 26)),  # 64 MiB, as xz -9
    ]:
        (tmp_path / name).write_bytes(data)
        assert read_capture(tmp_path / name).stats.frames == 10
