"""Report speed: `tracekit report` against `tcptrace -n -G` (all xplot graphs); not a test.

On the 5 M-packet benchmark capture of bench/ingest.py (recorded if missing; needs root then),
or with --simulated on the capture of a simulated 5 M-packet transfer with losses, SACK and a
zero window (tests/helpers/simulated_capture.py, the one the report's budget test renders;
written if missing, no root needed):
1. times `tracekit report CAPTURE -o report.html` and `tcptrace -n -G CAPTURE` on the same file,
   taking turns --runs times (a drift in the machine's speed falls on both alike), and prints
   the median and range of each one's seconds and of the per-turn ratio (target: tracekit at
   least 10x faster than tcptrace -G at the median);
2. prints the report's size (target: under 25 MB);
3. opens the report in headless Chromium (tests/helpers/browser.py) --loads times and prints the
   median and range of the time until the first screen's plots have rendered (target: under
   3 s), and of the time until every plot of the open sections is painted (each scrolled onto
   the screen in turn, as a reader would), with console errors if any.
Results also go to bench/data/report-results.json.

Usage: python bench/report.py [--capture FILE | --simulated] [--runs N] [--loads N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from ingest import record  # noqa: E402

from tests.helpers.browser import Browser, chromium_available  # noqa: E402

DEFAULT_PACKETS = 5_000_000

# Scroll every plot of the open sections onto the screen in turn, as a reader would, and give
# the page's status once each has painted (paintedMs: when each plot was first on screen).
EVERY_PLOT_PAINTED = """(async () => {
  const s = window.tracekitStatus;
  const ids = Array.from(document.querySelectorAll('details[open] .plot'), d => d.id);
  for (const id of ids) {
    document.getElementById(id).scrollIntoView();
    await new Promise(r => setTimeout(r, 50));
    await s.idle();
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  }
  return JSON.stringify(s);
})()"""
# Data segments of the simulated transfer whose capture holds just over 5 M frames.
SIMULATED_SEGMENTS = 3_400_000


def simulated_capture(path: Path) -> None:
    """Write the simulated transfer's sender capture (as the budget test makes it)."""
    from tests.helpers.simulated_capture import write_pcap
    from tests.helpers.simulated_series import Scenario, simulate, view

    scenario = Scenario()
    write_pcap(view(simulate(SIMULATED_SEGMENTS, scenario), scenario), path, scenario)


def timed(cmd: list[str], cwd: Path) -> float:
    """Wall-clock seconds of one run of cmd in cwd (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def turns(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Seconds of each command over `runs` turns, the commands taking turns within each turn,
    each run in a fresh scratch folder (tcptrace writes its graphs there)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            with tempfile.TemporaryDirectory(dir=DATA) as scratch:
                times[name].append(timed(cmd, Path(scratch)))
    return times


def spread(values: list[float], digits: int = 2) -> dict[str, object]:
    """The median and the range of a measurement: never the best alone."""
    return {
        "median": round(statistics.median(values), digits),
        "range": [round(min(values), digits), round(max(values), digits)],
    }


def packets_in(capture: Path) -> int:
    """Frames in the capture, as capinfos counts them (an independent count)."""
    out = subprocess.run(
        ["capinfos", "-c", "-M", str(capture)], check=True, capture_output=True, text=True
    ).stdout
    return int(out.strip().splitlines()[-1].split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, default=None)
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    default = "simulated-5m.pcap" if args.simulated else "iperf3-s128.pcap"
    capture = (args.capture or DATA / default).resolve()
    if not capture.exists():
        if args.simulated:
            simulated_capture(capture)
        else:
            record(capture, DEFAULT_PACKETS)
    packets = packets_in(capture)
    out = DATA / "bench-report.html"
    if shutil.which("tracekit") is None:
        sys.exit("bench/report.py: install tracekit first (make install)")
    tracekit = ["tracekit", "report", str(capture), "-o", str(out)]
    times = turns({"ours": tracekit, "tcptrace": ["tcptrace", "-n", "-G", str(capture)]}, args.runs)
    size_mb = out.stat().st_size / 1e6
    ratios = [t / o for o, t in zip(times["ours"], times["tcptrace"], strict=True)]
    result: dict[str, object] = {
        "capture": str(capture),
        "packets": packets,
        "turns": args.runs,
        "tracekit_report_s": spread(times["ours"]),
        "tcptrace_G_s": spread(times["tcptrace"]),
        "tracekit_pps_median": round(packets / statistics.median(times["ours"])),
        "tcptrace_pps_median": round(packets / statistics.median(times["tcptrace"])),
        "speedup_per_turn": spread(ratios),
        "report_mb": round(size_mb, 2),
    }
    if chromium_available():
        ready_ms, painted_ms, walls, errors = [], [], [], []
        # A fresh browser each load: a second load in the same one would find plotly.js
        # compiled already.
        for _ in range(args.loads):
            with Browser() as browser:
                start = time.perf_counter()
                page = browser.open(
                    out,
                    "window.tracekitStatus && window.tracekitStatus.ready",
                    EVERY_PLOT_PAINTED,
                    timeout=60,
                )
                walls.append(time.perf_counter() - start)
            status = json.loads(page.value)
            ready_ms.append(status["readyMs"])
            painted_ms.append(max(status["paintedMs"].values()))
            errors += page.console_errors + page.exceptions + status["errors"]
        result["chromium_ready_ms_median"] = round(statistics.median(ready_ms))
        result["chromium_ready_ms_range"] = [round(min(ready_ms)), round(max(ready_ms))]
        result["chromium_all_painted_ms"] = spread(painted_ms, 0)
        result["chromium_wall_s_median"] = round(statistics.median(walls), 2)
        result["plots_painted"] = len(status["plots"])
        result["console_errors"] = errors
    (DATA / "report-results.json").write_text(json.dumps(result, indent=2) + "\n")
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
