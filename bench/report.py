"""Report speed: `tracekit report` against `tcptrace -n -G` (all xplot graphs); not a test.

On the 5 M-packet benchmark capture of bench/ingest.py (recorded if missing; needs root then):
1. times `tracekit report CAPTURE -o report.html` and `tcptrace -n -G CAPTURE` on the same file,
   best of --runs, and prints packets/s for each and the ratio (target: tracekit at least 10x
   faster than tcptrace -G);
2. prints the report's size (target: under 25 MB);
3. opens the report in headless Chromium (tests/browser.py) and prints the time until every plot
   has rendered (target: under 3 s), with console errors if any.
Results also go to bench/data/report-results.json.

Usage: python bench/report.py [--capture FILE] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from browser import Browser, chromium_available  # noqa: E402
from ingest import record  # noqa: E402

DEFAULT_PACKETS = 5_000_000


def timed(cmd: list[str], cwd: Path) -> float:
    """Wall-clock seconds of one run of cmd in cwd (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def best(cmd: list[str], runs: int) -> float:
    """The fastest of `runs` runs, each in a fresh scratch folder (tcptrace writes its graphs)."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(dir=DATA) as scratch:
            times.append(timed(cmd, Path(scratch)))
    return min(times)


def packets_in(capture: Path) -> int:
    """Frames in the capture, as capinfos counts them (an independent count)."""
    out = subprocess.run(
        ["capinfos", "-c", "-M", str(capture)], check=True, capture_output=True, text=True
    ).stdout
    return int(out.strip().splitlines()[-1].split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, default=DATA / "iperf3-s128.pcap")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    capture = args.capture.resolve()
    if not capture.exists():
        record(capture, DEFAULT_PACKETS)
    packets = packets_in(capture)
    out = DATA / "bench-report.html"
    if shutil.which("tracekit") is None:
        sys.exit("bench/report.py: install tracekit first (make install)")
    tracekit = ["tracekit", "report", str(capture), "-o", str(out)]
    t_ours = best(tracekit, args.runs)
    t_tcptrace = best(["tcptrace", "-n", "-G", str(capture)], args.runs)
    size_mb = out.stat().st_size / 1e6
    result: dict[str, object] = {
        "capture": str(capture),
        "packets": packets,
        "tracekit_report_s": round(t_ours, 2),
        "tcptrace_G_s": round(t_tcptrace, 2),
        "tracekit_pps": round(packets / t_ours),
        "tcptrace_pps": round(packets / t_tcptrace),
        "speedup": round(t_tcptrace / t_ours, 2),
        "report_mb": round(size_mb, 2),
    }
    if chromium_available():
        with Browser() as browser:
            start = time.perf_counter()
            page = browser.open(
                out,
                "window.tracekitStatus && window.tracekitStatus.ready",
                "JSON.stringify(window.tracekitStatus)",
                timeout=60,
            )
            wall = time.perf_counter() - start
        status = json.loads(page.value)
        result["chromium_ready_ms"] = round(status["readyMs"])
        result["chromium_wall_s"] = round(wall, 2)
        result["console_errors"] = page.console_errors + page.exceptions + status["errors"]
    (DATA / "report-results.json").write_text(json.dumps(result, indent=2) + "\n")
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
