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
Run it with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE unset), as an installed
tracekit runs: with it off, an editable install that has no cached bytecode yet compiles its
modules from source on every run (68 modules for a report, half a second under cProfile), which
no user pays. The results say which it was.
With --base TRACEKIT (another install's `tracekit` executable, e.g. main's), its `report` is
timed in the same turns, and the medians and ranges of its seconds and of the per-turn ratio of
its time to this install's are printed too: a before and after in one run.
Results also go to bench/data/report-results.json.

Usage: python bench/report.py [--capture FILE | --simulated] [--runs N] [--loads N]
       [--base TRACEKIT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

from ingest import record, tracekit_command  # noqa: E402

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


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall-clock seconds and CPU seconds (user and system) of one run of cmd in cwd (its output
    discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def turns(
    commands: dict[str, list[str]], runs: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU seconds of each command over `runs` turns, the commands taking turns
    within each turn, each run in a fresh scratch folder (tcptrace writes its graphs there)."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            with tempfile.TemporaryDirectory(dir=DATA) as scratch:
                wall, cpu = timed(cmd, Path(scratch))
                walls[name].append(wall)
                cpus[name].append(cpu)
    return walls, cpus


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
    parser.add_argument("--base", type=Path, default=None, help="another tracekit to time")
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
    if shutil.which(tracekit_command()) is None:
        sys.exit("bench/report.py: install tracekit first (make install)")
    tracekit = [tracekit_command(), "report", str(capture), "-o", str(out)]
    commands = {"ours": tracekit, "tcptrace": ["tcptrace", "-n", "-G", str(capture)]}
    if args.base is not None:
        base_out = DATA / "bench-report-base.html"
        commands["base"] = [str(args.base), "report", str(capture), "-o", str(base_out)]
    load_before = os.getloadavg()
    times, cpus = turns(commands, args.runs)
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
        # CPU seconds: on a machine others share, steadier than the wall clock's.
        "tracekit_report_cpu_s": spread(cpus["ours"]),
        "tcptrace_G_cpu_s": spread(cpus["tcptrace"]),
        "cpu_speedup_per_turn": spread(
            [t / o for o, t in zip(cpus["ours"], cpus["tcptrace"], strict=True)]
        ),
    }
    if args.base is not None:
        result["base_report_s"] = spread(times["base"])
        result["base_tcptrace_speedup_per_turn"] = spread(
            [t / b for b, t in zip(times["base"], times["tcptrace"], strict=True)]
        )
        result["base_over_ours_per_turn"] = spread(
            [b / o for o, b in zip(times["ours"], times["base"], strict=True)]
        )
        result["base_report_cpu_s"] = spread(cpus["base"])
        result["base_over_ours_cpu_per_turn"] = spread(
            [b / o for o, b in zip(cpus["ours"], cpus["base"], strict=True)]
        )
    result["bytecode_cache"] = not os.environ.get("PYTHONDONTWRITEBYTECODE")
    # The 1-minute load average before the turns and after them: others' work on the machine.
    result["load_average"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    if chromium_available() and args.loads > 0:
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
