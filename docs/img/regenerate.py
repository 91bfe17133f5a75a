"""Regenerate the report screenshots in docs/img from the synthetic transfer.

Run from the repository root: python docs/img/regenerate.py (needs /usr/bin/chromium).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))

from browser import Browser  # noqa: E402

from tracekit.report.html import write  # noqa: E402
from tracekit.report.synthetic import synthetic_report  # noqa: E402

READY = "window.tracekitStatus && window.tracekitStatus.ready"
ZOOM = """Plotly.relayout(document.getElementById('plot-0-0-sender'),
  {'xaxis.range': [%s, %s], 'yaxis.range': [%s, %s]}).then(() =>
  new Promise(done => setTimeout(() => done(true), 300)))"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, Browser(height=1800) as browser:
        page = write(synthetic_report(3_000), Path(tmp) / "report.html")
        shots = {
            "report.png": dict(full_page=True),
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
