"""How fast the HTML report draws in headless Chromium, on three big captures; not a test.

The captures (made once under bench/data/, reused after):
- `lossy`: a real CUBIC transfer through the capture lab (fixtures/lab, needs root): a
  50 Mbit/s bottleneck tbf with a 40 kB queue (a fifth of the 250 kB BDP), 50 ms RTT, 960 MB
  sent, so about a million frames in each of the sender's and the receiver's captures, and
  losses all along (the bottleneck drops a burst every few seconds);
- `5m`: the simulated 5 M-packet transfer of bench/report.py --simulated (losses, SACK, a zero
  window; no root needed);
- `conns`: 1,500 short connections over a namespace's loopback, recorded as bench/connections.py
  records its 3,000 (needs root).

`--write LABEL` writes each capture's report with the tracekit installed now, as
bench/data/load-CAPTURE-LABEL.html, and prints how long `tracekit report` took. `--measure
LABEL...` opens each of those reports --loads times, the labels and captures taking turns
within each turn (a drift in the machine's speed falls on all alike), each load in a fresh
browser at 1400 x 900 CSS pixels, a laptop's screen. The page is scrolled from the top to the
bottom a screen at a time as a reader would, each step once the screen's plots are drawn; closed
sections stay closed. For each load it reads when each plot was first painted (the page's own
mark, `tracekitStatus.paintedMs`, in ms since navigation started) and prints per capture and
label the median and range of the first plot's time and of the last (every plot of the open
sections painted), the plots painted against those in the open sections, and the report's size.
Results also go to bench/data/report-load-results.json.

To compare two versions: `--write before` on the one, `--write after` on the other, then
`--measure before after`.

Usage: python bench/report_load.py [--write LABEL] [--measure LABEL...] [--loads N]
       [--only lossy,5m,conns]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from report import simulated_capture, spread  # noqa: E402

from tests.helpers.browser import Browser, chromium_available  # noqa: E402

WIDTH, HEIGHT = 1400, 900
SHORT_CONNECTIONS = 1500

# Scroll from the top to the bottom a screen at a time: at each step, once the plots the page
# queued have drawn and painted, the next screen. Then the page's status and what it holds.
SCROLL_THE_PAGE = """(async () => {
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const pause = ms => new Promise(r => setTimeout(r, ms));
  while (!window.tracekitStatus) await pause(10);
  const s = window.tracekitStatus;
  let steps = 0;
  for (;;) {
    await pause(50);  // the intersection observer reports the new screen's plots
    await s.idle();
    await frame();
    const bottom = scrollY + innerHeight >= document.documentElement.scrollHeight - 1;
    if (bottom || steps > 2000) break;
    scrollBy(0, Math.round(innerHeight * 0.9));
    steps++;
  }
  const nav = performance.getEntriesByType('navigation')[0];
  return JSON.stringify({
    painted: s.paintedMs, timings: s.timings, plots: s.plots, errors: s.errors, steps: steps,
    open: Array.from(document.querySelectorAll('details[open] .plot'), d => d.id),
    all: document.querySelectorAll('.plot').length,
    dom_interactive_ms: nav ? nav.domInteractive : null,
    parsed_ms: s.parsedMs === undefined ? null : s.parsedMs,
  });
})()"""


def lossy_pair(folder: Path) -> tuple[Path, Path]:
    """Record the lossy pair with the capture lab (root); its truth.json goes beside it."""
    import fixtures.lab.lab as lab
    import fixtures.lab.truth as truth
    from fixtures.lab.scenarios import Path as LabPath
    from fixtures.lab.scenarios import Scenario

    # 960 MB at 50 Mbit/s is about 160 s; the lab's own transfers are far shorter.
    lab.TRANSFER_TIMEOUT_S = 900.0
    truth.MAX_CAPTURE_BYTES = 1 << 30  # the lab's cap keeps its fixtures small; not these
    scenario = Scenario(
        name=folder.name,
        shows="CUBIC through a 40 kB bottleneck queue at 50 Mbit/s: about a million frames",
        path=LabPath(buffer_bytes=40_000, rate_bps=50_000_000),
        labels=("network_drops",),
        absent_labels=(),
        transfer_bytes=960_000_000,
        rcvbuf_bytes=4 << 20,
        expect_network_drops=(10, None),
        # A busy machine delays the user-space relay now and then: the RTTs wobble, which
        # changes nothing the report's speed depends on.
        relay_max_late_ms=None,
    )
    lab.run_scenario(scenario, folder.parent, attempts=2, prefix="tkload")
    return folder / "sender.pcap", folder / "receiver.pcap"


def captures(only: set[str]) -> dict[str, list[str]]:
    """Each capture's `tracekit report` arguments, making the capture first if missing."""
    DATA.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[str]] = {}
    if "lossy" in only:
        folder = DATA / "lossy-1m"
        sender, receiver = folder / "sender.pcap", folder / "receiver.pcap"
        if not receiver.exists():
            if os.geteuid() != 0:
                sys.exit("bench/report_load.py: recording the lossy pair needs root")
            lossy_pair(folder)
        out["lossy"] = [str(sender), "--receiver", str(receiver)]
    if "5m" in only:
        capture = DATA / "simulated-5m.pcap"
        if not capture.exists():
            simulated_capture(capture)
        out["5m"] = [str(capture)]
    if "conns" in only:
        capture = DATA / f"short-connections-{SHORT_CONNECTIONS}.pcap"
        if not capture.exists():
            if os.geteuid() != 0:
                sys.exit("bench/report_load.py: recording the connections needs root")
            from connections import record

            record(capture, SHORT_CONNECTIONS)
        out["conns"] = [str(capture)]
    return out


def report_path(name: str, label: str) -> Path:
    return DATA / f"load-{name}-{label}.html"


def write_reports(label: str, only: set[str]) -> None:
    tracekit = shutil.which("tracekit")
    if tracekit is None:
        sys.exit("bench/report_load.py: install tracekit first (make install)")
    for name, args in captures(only).items():
        out = report_path(name, label)
        start = time.perf_counter()
        subprocess.run([tracekit, "report", *args, "-o", str(out)], check=True)
        seconds = time.perf_counter() - start
        print(f"{name} ({label}): {out.stat().st_size / 1e6:.1f} MB in {seconds:.1f} s")


def load_once(path: Path, priority: int) -> dict[str, Any]:
    """One load in a fresh browser (a second load in the same one would find plotly.js
    compiled already): the scroll's findings."""
    with Browser(width=WIDTH, height=HEIGHT, priority=priority) as browser:
        page = browser.open(path, "!!window.tracekitStatus", SCROLL_THE_PAGE, timeout=180)
    result: dict[str, Any] = json.loads(page.value)
    result["errors"] += page.console_errors + page.exceptions
    return result


def measure(labels: list[str], only: set[str], loads: int, priority: int) -> dict[str, Any]:
    names = [n for n in ("lossy", "5m", "conns") if n in only]
    paths = {(n, lab): report_path(n, lab) for n in names for lab in labels}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        sys.exit(f"bench/report_load.py: write these first (--write): {', '.join(missing)}")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in paths}
    for turn in range(loads):
        for key, path in paths.items():
            runs[key].append(load_once(path, priority))
            print(f"turn {turn + 1}/{loads} {key[0]} {key[1]} done", file=sys.stderr)
    results: dict[str, Any] = {}
    for (name, label), loaded in runs.items():
        firsts = [min(r["painted"].values()) for r in loaded if r["painted"]]
        lasts = [max(r["painted"].get(i, float("inf")) for i in r["open"]) for r in loaded]
        results[f"{name} {label}"] = {
            "report_mb": round(paths[(name, label)].stat().st_size / 1e6, 2),
            "loads": len(loaded),
            "first_plot_ms": spread(firsts, 0) if firsts else None,
            "every_plot_ms": spread(lasts, 0),
            # Per plot: the median of its [decode, draw] ms (the page's own timings).
            "plot_ms": {
                i: [statistics.median(r["timings"][i][k] for r in loaded) for k in (0, 1)]
                for i in loaded[0]["timings"]
            },
            "dom_interactive_ms": spread([r["dom_interactive_ms"] for r in loaded], 0),
            "plots_painted": sorted({len(r["painted"]) for r in loaded}),
            "plots_in_open_sections": sorted({len(r["open"]) for r in loaded}),
            "plots_on_page": loaded[0]["all"],
            "scroll_steps": loaded[0]["steps"],
            "errors": sorted({e for r in loaded for e in r["errors"]}),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="LABEL", help="write the reports under this label")
    parser.add_argument("--measure", metavar="LABEL", nargs="*", default=[])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--only", default="lossy,5m,conns")
    parser.add_argument(
        "--priority",
        type=int,
        default=0,
        help="the browser's nice value (below 0 needs root): less noise from other work",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if args.write:
        write_reports(args.write, only)
    if not args.measure:
        return
    if not chromium_available():
        sys.exit("bench/report_load.py: needs Debian's chromium")
    results = measure(args.measure, only, args.loads, args.priority)
    (DATA / "report-load-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{args.loads} loads each, {WIDTH}x{HEIGHT}; ms since navigation: median (range)")
    print(f"{'report':16} {'MB':>6} {'first plot':>22} {'every plot':>22} {'painted/open':>13}")

    def cell(s: dict[str, Any] | None) -> str:
        return "-" if s is None else f"{s['median']:.0f} ({s['range'][0]:.0f}-{s['range'][1]:.0f})"

    for key, r in results.items():
        counts = f"{'/'.join(map(str, r['plots_painted']))}/{r['plots_in_open_sections'][0]}"
        print(
            f"{key:16} {r['report_mb']:6.1f} {cell(r['first_plot_ms']):>22}"
            f" {cell(r['every_plot_ms']):>22} {counts:>13}"
        )
        per_plot = (f"{k[5:]}={v[0]:.0f}/{v[1]:.0f}" for k, v in r["plot_ms"].items())
        print("  decode/draw ms:", " ".join(per_plot))
        if r["errors"]:
            print(f"  errors: {r['errors']}")


if __name__ == "__main__":
    main()
