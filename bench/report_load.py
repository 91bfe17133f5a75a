"""How fast the HTML report draws in headless Chromium, on three big captures; not a test.

The captures (made once under bench/data/, reused after):
- `lossy`: a real CUBIC transfer through the capture lab (fixtures/lab, needs root): a
  50 Mbit/s bottleneck tbf with a 40 kB queue (a fifth of the 250 kB BDP), 50 ms RTT, 960 MB
  sent, so about a million frames in each of the sender's and the receiver's captures, and
  losses all along (the bottleneck drops a burst every few seconds);
- `5m`: the simulated 5 M-packet transfer of bench/report.py --simulated (losses, SACK, a zero
  window; no root needed);
- `conns`: 1,500 short connections over a namespace's loopback, recorded as bench/connections.py
  records its 3,000 (needs root);
- `bundled`: the bundled slow_start_overrun pair (fixtures/captures);
- `streams`: iperf3 with 5 parallel streams (and its control connection) through the capture
  lab's path (needs root): a 50 Mbit/s bottleneck with a 60 kB queue, 40 ms RTT, 15 s, captured
  at the sender and at the receiver, so the streams share the bottleneck and lose to its queue.

`--write LABEL` writes each capture's report with the tracekit installed now, as
bench/data/load-CAPTURE-LABEL.html, and prints how long `tracekit report` took. `--measure
LABEL...` opens each of those reports --loads times, the labels and captures taking turns
within each turn (a drift in the machine's speed falls on all alike), each load in a fresh
browser at 1400 x 900 CSS pixels, a laptop's screen. The page is scrolled from the top to the
bottom a screen at a time as a reader would, each step once the plots the page has started
are drawn; closed sections stay closed. The page draws a plot only once it comes near the
screen (within the screen below the one shown), so "every plot" is every plot painted by the
time this reader has scrolled to it: the reader's own pace is in it, the time a plot that was
never near the screen would take is not. For each load it reads when each plot was first
painted (the page's own mark, `tracekitStatus.paintedMs`, in ms since navigation started) and
prints per capture and label the median and range of the first plot's time and of the last
(every plot of the open sections painted), the plots painted against those in the open
sections, and the report's size, with the 1-minute load average before and after the loads.
Results also go to bench/data/report-load-results.json.

To compare two versions: `--write before` on the one, `--write after` on the other, then
`--measure before after`.

`--check LABEL` walks each report as a reader would, in one browser at 1400 x 900, and prints
what it finds: the first screen (does it hold a verdict for every drawn connection, and, when
not every connection is drawn, the causes of all of them: each cause's connections and its
troubled ones, and where the table ends against the screen's height); a click,
with the mouse, on the first finding the page shows, a verdict's worst finding or the findings
list's first (is the link on the first screen? then each
plot of its connection: its x range against the finding's range with the page's margin, and its
y range against the extent of the points drawn in view); and a 10 ms zoom of the first drawn
connection's sender TSG at the middle of its transfer (the data segments the TSG draws there
against those tshark counts in the same window, by the section's Wireshark filter).

Usage: python bench/report_load.py [--write LABEL] [--measure LABEL...] [--check LABEL] [--loads N]
       [--only lossy,5m,conns,streams,bundled]
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
from collections.abc import Callable
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


STREAMS = 5
STREAMS_SECONDS = 15


def streams_pair(folder: Path) -> tuple[Path, Path]:
    """Record an iperf3 run of STREAMS parallel streams through the lab's path (root)."""
    import signal

    import fixtures.lab.lab as lab
    from fixtures.lab.scenarios import Path as LabPath
    from fixtures.lab.scenarios import Scenario
    from fixtures.lab.topology import RECEIVER_ADDR, Lab, stop, wait_for_line

    scenario = Scenario(
        name=folder.name,
        shows="iperf3 -P 5 through a 50 Mbit/s bottleneck",
        path=LabPath(buffer_bytes=60_000, rate_bps=50_000_000, delay_fwd_ms=20, delay_rev_ms=20),
        labels=(),
        absent_labels=(),
        transfer_bytes=1,  # iperf3 sends here, not the lab's transfer
    )
    work = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with Lab(scenario, prefix="tkstreams") as path:
        assert path.middle is not None
        relay = path.python(path.middle, "fixtures.lab.relay", "m0", "m1", "--delay-ms", "20", "20")
        wait_for_line(relay.stdout, "ready", lab.STARTUP_TIMEOUT_S, "relay")
        dumps = {}
        for role, netns, dev in (("sender", path.sender, "s0"), ("receiver", path.receiver, "r0")):
            dumps[role] = path.start(
                netns, "tcpdump", "-i", dev, "-n", "-s", "128", "--immediate-mode", "-U",
                "-B", str(lab.CAPTURE_BUFFER_KIB), "-Z", "root", "-w", str(work / f"{role}.pcap"),
                "ip",
            )  # fmt: skip
            wait_for_line(dumps[role].stderr, "listening on", lab.STARTUP_TIMEOUT_S, role)
        server = path.start(path.receiver, "iperf3", "-s", "-1", "-B", RECEIVER_ADDR)
        time.sleep(1)
        client = path.start(
            path.sender, "iperf3", "-c", RECEIVER_ADDR, "-P", str(STREAMS), "-t",
            str(STREAMS_SECONDS),
        )  # fmt: skip
        finish_s = STREAMS_SECONDS + 30
        for process, what in ((client, "iperf3 client"), (server, "iperf3 server")):
            process.wait(timeout=finish_s)
            if process.returncode:
                sys.exit(f"bench/report_load.py: {what} failed: {process.stderr.read()}")
        time.sleep(0.5)  # the last ACKs cross the delay line
        for role, process in dumps.items():
            stop(process, signal.SIGINT, f"{role} tcpdump")
        stop(relay, signal.SIGTERM, "relay")
    shutil.rmtree(folder, ignore_errors=True)
    work.rename(folder)
    return folder / "sender.pcap", folder / "receiver.pcap"


def recorded_pair(folder: Path, what: str, record: Callable[[Path], object]) -> list[str]:
    """A sender/receiver pair's `tracekit report` arguments, recorded first (as root) if missing."""
    sender, receiver = folder / "sender.pcap", folder / "receiver.pcap"
    if not receiver.exists():
        if os.geteuid() != 0:
            sys.exit(f"bench/report_load.py: recording the {what} needs root")
        record(folder)
    return [str(sender), "--receiver", str(receiver)]


def captures(only: set[str]) -> dict[str, list[str]]:
    """Each capture's `tracekit report` arguments, making the capture first if missing."""
    DATA.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[str]] = {}
    if "lossy" in only:
        out["lossy"] = recorded_pair(DATA / "lossy-1m", "lossy pair", lossy_pair)
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
    if "bundled" in only:
        folder = ROOT / "fixtures" / "captures" / "slow_start_overrun"
        out["bundled"] = [str(folder / "sender.pcap"), "--receiver", str(folder / "receiver.pcap")]
    if "streams" in only:
        out["streams"] = recorded_pair(DATA / f"iperf3-{STREAMS}-streams", "streams", streams_pair)
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
    names = [n for n in ("lossy", "5m", "conns", "streams", "bundled") if n in only]
    paths = {(n, lab): report_path(n, lab) for n in names for lab in labels}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        sys.exit(f"bench/report_load.py: write these first (--write): {', '.join(missing)}")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in paths}
    load_before = os.getloadavg()[0]
    for turn in range(loads):
        for key, path in paths.items():
            runs[key].append(load_once(path, priority))
            print(f"turn {turn + 1}/{loads} {key[0]} {key[1]} done", file=sys.stderr)
    results: dict[str, Any] = {
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]
    }
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


# The first screen: the verdicts' section, what of it is on screen, and the drawn connections.
FIRST_SCREEN = """(() => {
  const v = document.querySelector('section.verdicts');
  const r = v ? v.getBoundingClientRect() : null;
  const cards = v ? v.querySelectorAll('.verdict').length : 0;
  const unjudged = v ? v.querySelectorAll('.unjudged a').length : 0;
  // Every connection by what held it back, when not every one is drawn.
  const causes = Array.from(document.querySelectorAll('table.causes tbody tr'),
    row => [row.cells[0].innerText, +row.cells[1].innerText.replace(/,/g, ''),
            +row.cells[2].innerText.replace(/,/g, '')]);
  const table = document.querySelector('table.causes');
  // The first finding the page shows: a verdict's worst finding, else the findings list's first.
  const link = document.querySelector('.verdict .worst a[data-range], .finding a[data-range]');
  const lr = link ? link.getBoundingClientRect() : null;
  return JSON.stringify({
    verdicts_top: r && r.top, verdicts_bottom: r && r.bottom, screen: innerHeight,
    verdict_cards: cards, unjudged_named: unjudged, causes: causes,
    causes_bottom: table && table.getBoundingClientRect().bottom,
    drawn_connections: document.querySelectorAll('details.connection:not(.overview)').length,
    text: v ? v.innerText.slice(0, 600) : null,
    link: link && [lr.left + lr.width / 2, lr.top + lr.height / 2, link.dataset.conn,
                   link.dataset.range, link.textContent],
  });
})()"""

# After the click: each plot of the section, scrolled onto the screen and drawn; its x and y
# ranges and the extent of the points it drew in its x range.
AFTER_THE_CLICK = """(async (conn) => {
  const s = window.tracekitStatus;
  await s.idle();
  const out = [];
  for (const d of document.querySelectorAll('#conn-' + conn + ' .plot')) {
    d.scrollIntoView(); await new Promise(r => setTimeout(r, 300)); await s.idle();
    if (!d._fullLayout) { out.push([d.id, null, null, null]); continue; }
    const [x0, x1] = d._fullLayout.xaxis.range.map(Number);
    let lo = Infinity, hi = -Infinity;
    for (const t of d.data) {
      // The window edge may leave the view (the TSG opens on the data).
      if (t.visible === 'legendonly' || (t.name || '').startsWith('window edge')) continue;
      const xs = t.x, ys = t.y;
      for (let i = 0; i < xs.length; i++) {
        if (xs[i] >= x0 && xs[i] <= x1 && ys[i] === ys[i]) {
          if (ys[i] < lo) lo = ys[i]; if (ys[i] > hi) hi = ys[i];
        }
      }
    }
    out.push([d.id, [x0, x1], d._fullLayout.yaxis.range.map(Number), [lo, hi]]);
  }
  return JSON.stringify(out);
})"""

# A 10 ms zoom of the first section's sender TSG around the middle of its opening view: the data
# segments drawn (bars whose bottom is in the window, 2 us clear of its edges) and the window.
TEN_MS = """(async () => {
  const s = window.tracekitStatus;
  const d = document.querySelector('details.connection:not(.overview) .plot');
  d.scrollIntoView(); await new Promise(r => setTimeout(r, 300)); await s.idle();
  const [a0, a1] = d._fullLayout.xaxis.range.map(Number);
  const mid = (a0 + a1) / 2;
  await Plotly.relayout(d, {'xaxis.range': [mid - 0.005, mid + 0.005]});
  await s.idle();
  const [x0, x1] = d._fullLayout.xaxis.range.map(Number);
  const a = x0 + 2e-6, b = x1 - 2e-6;
  const drawn = d.data.filter(t => ['data', 'retransmitted', 'out of order'].includes(t.name))
    .reduce((n, t) => n + Array.from(t.x).filter(
      (x, i) => i % s.segmentStride === 0 && x >= a && x <= b).length, 0);
  const filter = d.closest('details').querySelector('code.wireshark-filter').textContent;
  return JSON.stringify({id: d.id, window: [a, b], drawn: drawn, filter: filter,
    note: document.getElementById(d.id + '-note').textContent, errors: s.errors});
})()"""


def tshark_segments(capture: str, a2b_filter: str, a: float, b: float) -> int:
    """Data segments of one direction in [a, b] s since the capture's first frame, by tshark."""
    expression = (
        f"({a2b_filter}) && tcp.len > 0 && frame.time_relative >= {a:.9f}"
        f" && frame.time_relative <= {b:.9f}"
    )
    out = subprocess.run(
        ["tshark", "-r", capture, "-Y", expression, "-T", "fields", "-e", "frame.number"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return len(out.split())


def check(label: str, only: set[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, args in captures(only).items():
        path = report_path(name, label)
        if not path.exists():
            sys.exit(f"bench/report_load.py: write it first (--write {label}): {path}")
        found: dict[str, Any] = {"load_average": os.getloadavg()[0]}

        def click_the_first_finding(page: Any, found: dict[str, Any] = found) -> None:
            first = json.loads(page.evaluate(FIRST_SCREEN))
            found["first_screen"] = first
            if first["link"] is None:
                return
            x, y, conn, rng, _text = first["link"]
            if not 0 < y < first["screen"]:
                page.evaluate("document.querySelector('.finding a[data-range]').scrollIntoView()")
                x, y = page.evaluate(
                    "(() => { const r = document.querySelector('.finding a[data-range]')"
                    ".getBoundingClientRect(); return [r.left + r.width / 2,"
                    " r.top + r.height / 2]; })()"
                )
            page.click(x, y)
            start, end = map(float, rng.split(","))
            margin = max(0.05 * (end - start), 1e-3)
            found["finding_range"] = [start - margin, end + margin]
            found["plots"] = json.loads(page.evaluate(f"{AFTER_THE_CLICK}({conn})", timeout=120))

        with Browser(width=WIDTH, height=HEIGHT) as browser:
            page = browser.open(
                path, "window.tracekitStatus && window.tracekitStatus.ready", "1", timeout=180,
                actions=click_the_first_finding,
            )  # fmt: skip
            zoom = json.loads(
                browser.open(
                    path, "window.tracekitStatus && window.tracekitStatus.ready", TEN_MS,
                    timeout=180,
                ).value
            )  # fmt: skip
        found["errors"] = page.console_errors + page.exceptions
        # "((a to b) || (b to a)) && time": the data direction, a to b.
        a2b = zoom["filter"][2 : zoom["filter"].index(") || (")]
        zoom["tshark"] = tshark_segments(args[0], a2b, *zoom["window"])
        found["ten_ms"] = zoom
        results[name] = found
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="LABEL", help="write the reports under this label")
    parser.add_argument("--measure", metavar="LABEL", nargs="*", default=[])
    parser.add_argument("--check", metavar="LABEL", help="walk these reports as a reader would")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--only", default="lossy,5m,conns,streams,bundled")
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
    if args.check:
        print(json.dumps(check(args.check, only), indent=1))
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

    print(
        f"1-minute load average: {results['load_average'][0]} before, "
        f"{results['load_average'][1]} after"
    )
    for key, r in results.items():
        if key == "load_average":
            continue
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
