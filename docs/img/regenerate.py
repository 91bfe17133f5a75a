"""Regenerate the report screenshots in docs/img.

report.png is the report of the bundled lab capture that `make demo` analyses (a real Linux
transfer whose slow start overran a 75 kB bottleneck buffer); tsg.png and tsg-overrun.png are
from the synthetic transatlantic transfer of tracekit.report.synthetic.
Run from the repository root: python docs/img/regenerate.py (needs /usr/bin/chromium).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))

from browser import Browser  # noqa: E402

from tracekit.pipeline import analyze_paths  # noqa: E402
from tracekit.report.build import build_report  # noqa: E402
from tracekit.report.html import write  # noqa: E402
from tracekit.report.synthetic import synthetic_report  # noqa: E402

DEMO = HERE.parent.parent / "fixtures" / "captures" / "slow_start_overrun"

READY = "window.tracekitStatus && window.tracekitStatus.ready"
ZOOM = """Plotly.relayout(document.getElementById('plot-0-0-sender'),
  {'xaxis.range': [%s, %s], 'yaxis.range': [%s, %s]}).then(() =>
  new Promise(done => setTimeout(() => done(true), 300)))"""


def real_report(tmp: Path) -> None:
    """report.png: the demo capture's report, every plot drawn (a tall window)."""
    inputs = ("sender.pcap", "receiver.pcap")
    analysis = analyze_paths(*(DEMO / name for name in inputs))
    page = write(build_report(analysis, inputs), tmp / "demo.html")
    with Browser(height=3400) as browser:
        result = browser.open(page, READY, "true", full_page=True, scale=0.75)
    (HERE / "report.png").write_bytes(result.screenshot_png)
    print(f"report.png: {len(result.screenshot_png):,} bytes")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, Browser(height=1800) as browser:
        real_report(Path(tmp))
        page = write(synthetic_report(3_000), Path(tmp) / "report.html")
        shots = {
            "tsg.png": dict(clip_selector="#conn-0 .plot-row"),
            "tsg-overrun.png": dict(
                value=ZOOM % (0.3, 0.74, 0, 2.6e6), clip_selector="#conn-0 figure.chart"
            ),
        }
        for name, how in shots.items():
            value = str(how.pop("value", "true"))
            result = browser.open(page, READY, value, **how)  # type: ignore[arg-type]
            (HERE / name).write_bytes(result.screenshot_png)
            print(f"{name}: {len(result.screenshot_png):,} bytes")


if __name__ == "__main__":
    main()
