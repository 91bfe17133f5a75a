"""Read pcap and pcapng captures into columnar packet tables (issue 3)."""

from tracekit.capture.model import Capture, ReadStats
from tracekit.capture.reader import read_capture, require_tcp

__all__ = ["Capture", "ReadStats", "read_capture", "require_tcp"]
