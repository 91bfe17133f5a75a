"""The values read_capture returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa


@dataclass(frozen=True)
class ReadStats:
    """What the reader saw besides the packets it kept."""

    frames: int  # records in the file
    skipped: dict[str, int]  # frames not kept, by reason: "non_ip", "short_frame", ...
    truncated_tail: bool  # the file ends inside a record (its writer was killed)
    warnings: tuple[str, ...]  # one line each, for the CLI to show


@dataclass(frozen=True)
class Capture:
    """A capture file read into tables of the schemas declared in tracekit.schema."""

    path: Path
    file_format: str  # "pcap" or "pcapng"
    compression: str | None  # "gzip", "xz", "zstd" or None
    link_types: tuple[int, ...]  # link types of its interfaces, in order of appearance
    packets: pa.Table  # schema.PACKET_COLUMNS
    flows: pa.Table  # schema.FLOW_COLUMNS
    sack: pa.Table  # schema.SACK_COLUMNS
    udp: pa.Table  # schema.UDP_COLUMNS
    stats: ReadStats
