"""The lab's captures for the detector tests: each analysed once per process, and its truth.

Most detector tests read the same few captures of fixtures/captures, and running the detectors
(or tshark) costs far more than reading a capture; so each capture is analysed once per test
process (per worker under pytest-xdist) and kept for the rest of the run. What comes back is
shared: read it, do not change it. Crafted captures go through `context`, which keeps nothing.
"""

from __future__ import annotations

import json
import struct
import subprocess
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tracekit.analysis import Analysis
from tracekit.capture import read_capture
from tracekit.detectors import run_detectors
from tracekit.detectors.base import AnalysisContext, Detector
from tracekit.findings import Finding
from tracekit.pipeline import analyze_files, vantage

if TYPE_CHECKING:
    from fixtures.lab.readings import Frames

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"


def truth(name: str) -> dict[str, Any]:
    """What the lab recorded about how it made the capture (fixtures/captures/NAME/truth.json)."""
    return json.loads((CAPTURES / name / "truth.json").read_text())


def context(path: Path) -> AnalysisContext:
    """The detectors' context of one capture on its own, as `tracekit analyze` builds it."""
    v = vantage(read_capture(path))
    return AnalysisContext(
        connections=v.connections.frame(), packets=v.connections.packets, series=v.series
    )


@cache
def lab_context(name: str) -> AnalysisContext:
    """The context of a lab capture's sender side alone."""
    return context(CAPTURES / name / "sender.pcap")


@cache
def lab_findings(name: str, detector: type[Detector]) -> list[Finding]:
    """What one detector finds in a lab capture's sender side alone."""
    return run_detectors(lab_context(name), [detector])


@cache
def lab_analysis(name: str) -> Analysis:
    """The whole analysis of a lab capture from both sides, sender's and receiver's merged.

    Skips the test when the lab has not made that capture yet.
    """
    lab = CAPTURES / name
    if not (lab / "truth.json").is_file():
        pytest.skip(f"lab capture {name} not made yet")
    return analyze_files(lab / "sender.pcap", lab / "receiver.pcap")


@cache
def lab_frames(name: str, side: str) -> Frames:
    """tshark's reading of a lab capture's "sender" or "receiver" side: a reader not tracekit's."""
    from fixtures.lab.readings import read_frames  # needs tshark; only the tests that check

    return read_frames(CAPTURES / name / f"{side}.pcap")


def lab_kind(name: str, kind: str) -> list[Finding]:
    """The findings of one kind in the two-sided analysis of a lab capture."""
    return [f for f in lab_analysis(name).findings if f.kind == kind]


def side_by_side(captures: list[Path], out: Path) -> Path:
    """One capture of several transfers at once: each shifted (editcap) to start 10 ms after
    the one before, then merged in time order (mergecap), as parallel streams would be."""
    shifted = []
    for i, capture in enumerate(captures):
        # A classic little-endian microsecond pcap (tcpdump's): the first record's time.
        seconds, micros = struct.unpack_from("<II", capture.read_bytes(), 24)
        shift = 1_000_000_000.0 + 0.01 * i - (seconds + micros * 1e-6)
        moved = out.parent / f"{i}.pcap"
        subprocess.run(["editcap", "-t", f"{shift:.6f}", str(capture), str(moved)], check=True)
        shifted.append(str(moved))
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(out), *shifted], check=True)
    return out
