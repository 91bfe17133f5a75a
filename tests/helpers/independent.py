"""Independent readings of real captures: tshark and tcptrace, the tools we check against."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import zstandard

ROOT = Path(__file__).resolve().parents[2]
LINKTYPE_LINUX_SLL2 = 276


def real_captures() -> list[Path]:
    found = sorted((ROOT / "fixtures" / "captures").glob("*/*.pcap"))
    found += sorted((ROOT / "fixtures" / "kernel").glob("*.pcap*"))
    # A lab run writes into a hidden folder and renames it into place when done.
    return [p for p in found if "udp" not in p.parent.name and not p.parent.name.startswith(".")]


def tshark_directions(path: Path) -> pd.DataFrame:
    """Packets and payload bytes per (tcp.stream, source, destination), as tshark reads them."""
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(path),
            "-Y",
            "tcp",
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "tcp.stream",
            "-e",
            "ip.src",
            "-e",
            "ipv6.src",
            "-e",
            "tcp.srcport",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.dst",
            "-e",
            "tcp.dstport",
            "-e",
            "tcp.len",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        stream, v4, v6, sport, dv4, dv6, dport, length = line.split(",")
        src = f"{v4}:{sport}" if v4 else f"[{v6}]:{sport}"
        dst = f"{dv4}:{dport}" if dv4 else f"[{dv6}]:{dport}"
        rows.append((int(stream), src, dst, int(length or 0)))
    df = pd.DataFrame(rows, columns=["stream", "src", "dst", "len"])
    return df.groupby(["stream", "src", "dst"]).agg(packets=("len", "size"), bytes=("len", "sum"))


def endpoint(host: str) -> str:
    """tcptrace's `2001:0db8::0001:5201` as tracekit's `[2001:db8::1]:5201`."""
    addr, port = host.rsplit(":", 1)
    ip = ipaddress.ip_address(addr)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


@contextmanager
def plain_capture(path: Path) -> Iterator[Path]:
    """The capture as a plain file: itself, or a zstd-compressed one decompressed to a
    temporary file (tcptrace and tshark read gzip and plain files only)."""
    if path.suffix != ".zst":
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(
            zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
        )
        yield plain


def tcptrace_rexmt(path: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with plain_capture(path) as plain:
        out = subprocess.run(
            ["tcptrace", "-l", "-n", str(plain)], check=True, capture_output=True, text=True
        ).stdout
    result = {}
    for block in re.split(r"^TCP connection \d+:$", out, flags=re.MULTILINE)[1:]:
        hosts = [endpoint(h) for h in re.findall(r"host \w+:\s+(\S+)", block)]
        rexmt = re.search(r"rexmt data pkts:\s+(\d+)\s+rexmt data pkts:\s+(\d+)", block)
        assert rexmt and len(hosts) >= 2, block[:400]
        result[(hosts[0], hosts[1])] = (int(rexmt.group(1)), int(rexmt.group(2)))
    return result


def conversations(path: Path) -> dict[frozenset[str], int]:
    """Frames per TCP conversation from `tshark -z conv,tcp`."""
    out = subprocess.run(
        ["tshark", "-n", "-q", "-r", str(path), "-z", "conv,tcp"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    convs = {}
    line_re = re.compile(r"^(\S+:\d+)\s+<->\s+(\S+:\d+)\s+(\d+)\s+\S+\s+\S*\s*(\d+)")
    for line in out.splitlines():
        m = line_re.match(line)
        if m:
            convs[frozenset((m[1], m[2]))] = int(m[3]) + int(m[4])
    return convs


def tshark_initial_rtt_s(path: Path) -> float:
    """tshark's round trip of the first connection's handshake (tcp.analysis.initial_rtt: SYN
    to the ACK of the SYN-ACK), from a pcap or a zstd-compressed one."""
    with plain_capture(path) as plain:
        out = subprocess.run(
            ["tshark", "-r", str(plain), "-T", "fields", "-e", "tcp.analysis.initial_rtt"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return float(next(line for line in out.splitlines() if line.strip()))
