"""Coverage-guided fuzzing of the whole pipeline (atheris): read, connections, series, merge,
detectors, the CI metrics, the report model and its HTML, for one capture or for a pair.

Any input must give a result or a TracekitError (bad input, one line); any other exception, a
signal or a heap abort is a bug. The kernels run as numba compiles them with bounds checks
(into a numba cache of their own), so an index past an array raises IndexError here, where
the ahead-of-time build would write past it unseen.

An input is one capture, or a pair: PAIR_MAGIC, the sender capture's length (4 bytes,
big-endian), the sender capture, then the receiver capture.

    python tests/fuzz_pipeline.py -max_total_time=3600 CORPUS_DIR   (make fuzz)

The corpus starts from `seeds()`: the crafted formats, the lab's pairs and the kernel's
captures, each cut to its first records so that an input runs in milliseconds. A crash is
saved by libFuzzer as crash-<sha1> in the working folder; it then belongs in
fixtures/crafted/fuzz/ as a regression input (tests/test_fuzz_regressions.py).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if __name__ == "__main__":
    os.environ.setdefault("TRACEKIT_JIT", "1")
    os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
    # A cache of its own: kernels cached without bounds checks would be loaded otherwise.
    os.environ.setdefault(
        "NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "tracekit-fuzz-numba")
    )

PAIR_MAGIC = b"TKPAIR"
# Records kept of each seed capture: enough for a handshake, slow start and some loss.
SEED_RECORDS = 160
PCAP_HEADER_BYTES = 24


def split_input(data: bytes) -> tuple[bytes, bytes | None]:
    """The sender capture and, for a pair, the receiver capture."""
    head = len(PAIR_MAGIC) + 4
    if data.startswith(PAIR_MAGIC) and len(data) >= head:
        (length,) = struct.unpack(">I", data[len(PAIR_MAGIC) : head])
        sender = data[head : head + length]
        return sender, data[head + length :]
    return data, None


def pair_input(sender: bytes, receiver: bytes) -> bytes:
    return PAIR_MAGIC + struct.pack(">I", len(sender)) + sender + receiver


def run_pipeline(data: bytes, folder: Path) -> None:
    """Every stage on one input; raises only TracekitError for bad input."""
    from tracekit.capture import read_capture
    from tracekit.check.metrics import connection_metrics
    from tracekit.errors import TracekitError
    from tracekit.pipeline import analyze
    from tracekit.report.build import RECEIVER_TABLES, ReportConfig, build_report
    from tracekit.report.early import EarlyPlots
    from tracekit.report.html import Budget, render

    sender, receiver = split_input(data)
    paths = [folder / "sender.cap", folder / "receiver.cap"]
    paths[0].write_bytes(sender)
    if receiver is not None:
        paths[1].write_bytes(receiver)
    try:
        snd = read_capture(paths[0])
        rcv = read_capture(paths[1]) if receiver is not None else None
        # Half the pairs as `tracekit report` makes a big pair's page: the receiver's TSG and
        # the delay plots encoded as soon as their tables are made, under a data limit small
        # enough that some encodings made ahead are withheld.
        early = EarlyPlots(budget=Budget(max_bytes=4000), min_packets=0) if len(data) % 2 else None
        analysis = (
            analyze(snd, rcv, receiver_series=RECEIVER_TABLES, early=early)
            if early is not None and rcv is not None
            else analyze(snd, rcv)
        )
        json.dumps(analysis.to_dict(), allow_nan=False)
        connection_metrics(analysis)
        paths_given = tuple(str(p) for p in paths)
        report = build_report(
            analysis, paths_given, ReportConfig(), deferred=early is not None, early=early
        )
        render(report, early.budget if early is not None else Budget())
    except TracekitError as exc:
        assert "\n" not in str(exc), "an error for a user is one line"


def _cut_pcap(data: bytes, records: int) -> bytes:
    """A classic pcap file's header and its first `records` records (little-endian or big)."""
    big = data[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
    order = ">" if big else "<"
    pos = PCAP_HEADER_BYTES
    for _ in range(records):
        if pos + 16 > len(data):
            break
        (caplen,) = struct.unpack(order + "I", data[pos + 8 : pos + 12])
        pos += 16 + caplen
    return data[: min(pos, len(data))]


def seeds() -> dict[str, bytes]:
    """The starting corpus: small real and crafted captures, single and paired."""
    out: dict[str, bytes] = {}
    for path in sorted((ROOT / "fixtures" / "crafted").rglob("*.pcap*")):
        if path.stat().st_size <= 64 << 10:
            out[f"crafted-{path.name}"] = path.read_bytes()
    for folder in sorted((ROOT / "fixtures" / "captures").iterdir()):
        sender, receiver = folder / "sender.pcap", folder / "receiver.pcap"
        if sender.exists() and receiver.exists():
            s = _cut_pcap(sender.read_bytes(), SEED_RECORDS)
            r = _cut_pcap(receiver.read_bytes(), SEED_RECORDS)
            out[f"lab-{folder.name}-sender"] = s
            out[f"lab-{folder.name}-pair"] = pair_input(s, r)
    for path in sorted((ROOT / "fixtures" / "kernel").glob("*.pcap")):
        out[f"kernel-{path.name}"] = _cut_pcap(path.read_bytes(), SEED_RECORDS)
    # Pairs whose path is shared or thinned: pure ACKs lost on the way back, stretch ACKs,
    # and another host's numbered UDP stream in the receiver's capture only (its first
    # records and those from the stream's start, where the two flows meet).
    sweep = ROOT / "fixtures" / "sweep"
    for name in ("ack_drops_3of4", "gro_receiver_50m", "cross_udp_tcp_20m"):
        sender = _zstd(sweep / name / "sender.pcap.zst")
        receiver = _zstd(sweep / name / "receiver.pcap.zst")
        s = _cut_pcap(sender, SEED_RECORDS)
        r = _cut_pcap(receiver, SEED_RECORDS)
        if name == "cross_udp_tcp_20m":
            r = _cut_pcap(receiver, SEED_RECORDS // 2) + _records_from(
                receiver, _first_udp(receiver), SEED_RECORDS // 2
            )
        out[f"sweep-{name}-pair"] = pair_input(s, r)
    return out


def _zstd(path: Path) -> bytes:
    import zstandard

    with path.open("rb") as stream:
        return zstandard.ZstdDecompressor().stream_reader(stream).read()


def _record_offsets(data: bytes) -> list[int]:
    """Where each record of a little-endian classic pcap starts."""
    pos, out = PCAP_HEADER_BYTES, []
    while pos + 16 <= len(data):
        out.append(pos)
        (caplen,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        pos += 16 + caplen
    return out


def _first_udp(data: bytes) -> int:
    """The index of the first record that carries UDP over IPv4 on Ethernet (protocol 17)."""
    for i, pos in enumerate(_record_offsets(data)):
        if data[pos + 16 + 23 : pos + 16 + 24] == b"\x11":
            return i
    return 0


def _records_from(data: bytes, first: int, count: int) -> bytes:
    """`count` records from record `first` on, without the file header."""
    offsets = [*_record_offsets(data), len(data)]
    first = min(first, len(offsets) - 1)
    return data[offsets[first] : offsets[min(first + count, len(offsets) - 1)]]


def write_seeds(corpus: Path) -> int:
    corpus.mkdir(parents=True, exist_ok=True)
    found = seeds()
    for name, data in found.items():
        (corpus / name).write_bytes(data)
    return len(found)


def main() -> None:
    import atheris

    # Coverage of the Python stages; the modules with compiled kernels are left as they are,
    # since numba cannot compile instrumented byte code.
    with atheris.instrument_imports(include=["tracekit"], exclude=_kernel_modules()):
        import tracekit.capture
        import tracekit.check.metrics
        import tracekit.pipeline
        import tracekit.report.build
        import tracekit.report.html  # noqa: F401

    folder = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-"))
    # numba compiles each kernel, bounds-checked, the first time an input reaches it: tens of
    # seconds in all on a busy machine. Done here on the seeds, before libFuzzer times units,
    # so that its per-input timeout measures tracekit, not the compiler.
    for data in seeds().values():
        run_pipeline(data, folder)

    def one(data: bytes) -> None:
        run_pipeline(data, folder)

    # libFuzzer's positional arguments: corpus folders to grow, or single inputs to run again.
    corpora = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    if corpora and not Path(corpora[0]).is_file():
        write_seeds(Path(corpora[0]))
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


def _kernel_modules() -> list[str]:
    """Modules whose source defines numba kernels (compiled by numba, not instrumentable)."""
    found = []
    for path in (ROOT / "tracekit").rglob("*.py"):
        text = path.read_text()
        # Kernels are marked `@jit` or handed to `bind` (tracekit.core.kernels).
        if "@jit" in text or "bind(" in text or "numba" in text:
            relative = path.relative_to(ROOT).with_suffix("")
            found.append(".".join(relative.parts).removesuffix(".__init__"))
    return found


if __name__ == "__main__":
    main()
