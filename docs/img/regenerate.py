"""Regenerate the report screenshots in docs/img, every one from the real report of the bundled
lab capture that `make demo` analyses (fixtures/captures/slow_start_overrun: a real Linux
transfer whose slow start overran a 75 kB bottleneck buffer, sender's and receiver's captures),
drawn in headless Chromium:

- report.png: the whole page;
- tsg.png: the sender's and the receiver's time-sequence graphs;
- tsg-overrun.png: the same, zoomed on the round that overran the buffer and its recovery;
- merged-overrun.png: the merged departures-and-arrivals graph, zoomed there too.

Run from the repository root: python docs/img/regenerate.py (needs /usr/bin/chromium).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from tests.helpers.browser import Browser  # noqa: E402
from tracekit.pipeline import analyze_files  # noqa: E402
from tracekit.report.build import build_report  # noqa: E402
from tracekit.report.html import write  # noqa: E402

DEMO = HERE.parent.parent / "fixtures" / "captures" / "slow_start_overrun"

READY = "window.tracekitStatus && window.tracekitStatus.ready"
# Zoom the plots named by id (x is linked across the connection), then let them redraw.
ZOOM = """Promise.all(%s.map(id => Plotly.relayout(document.getElementById(id),
  {'xaxis.range': [%s, %s], 'yaxis.range': [%s, %s]}))).then(() =>
  new Promise(done => setTimeout(() => done(true), 300)))"""
# The overrun: slow start's round 4 leaves at 0.25-0.30 s, the bottleneck drops segments sent
# from 0.27 to 0.34 s (bytes 360,553-737,033), and the resends follow, until 0.41 s.
OVERRUN = (0.24, 0.5, 2.0e5, 8.2e5)
TSGS = ["plot-0-0-sender", "plot-0-0-receiver"]
MERGED = "plot-0-4-sender"


def main() -> None:
    inputs = ("sender.pcap", "receiver.pcap")
    analysis = analyze_files(*(DEMO / name for name in inputs))
    with tempfile.TemporaryDirectory() as tmp:
        page = write(build_report(analysis, inputs), Path(tmp) / "demo.html")
        # A tall window: every plot of the connection is drawn at load.
        with Browser(height=3400) as browser:
            result = browser.open(page, READY, "true", full_page=True, scale=0.75)
            save("report.png", result.screenshot_png)
            shots = {
                "tsg.png": ("true", "#conn-0 .plot-row"),
                "tsg-overrun.png": (ZOOM % (TSGS, *OVERRUN), "#conn-0 .plot-row"),
                "merged-overrun.png": (
                    ZOOM % ([MERGED], *OVERRUN),
                    f"figure:has(#{MERGED})",
                ),
            }
            for name, (value, clip) in shots.items():
                save(name, browser.open(page, READY, value, clip_selector=clip).screenshot_png)


def save(name: str, png: bytes) -> None:
    (HERE / name).write_bytes(png)
    print(f"{name}: {len(png):,} bytes")


if __name__ == "__main__":
    main()
