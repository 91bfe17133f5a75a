"""The detectors on one core and on every core: `analyze` and `report` with -j 1 and -j 2; not
a test.

A capture's connections are judged apart after the merge, so their detectors can share the
cores (`run_detectors(jobs=...)`). This script times both commands with `-j 1` and `-j 2`,
taking turns, on captures of many connections:
1. 3,000 short connections (bench/connections.py's recording; made here unless --reuse finds it);
2. iperf3 -P 16 over a veth pair, taken at the sender with both directions, snaplen 128
   (bench/ingest.py's recording, 16 streams; about --packets frames);
and, where a capture holds one big connection, that it is never split: bench/ingest.py's
sender capture when it is there.
It prints per capture and command the median and range of wall seconds and peak RSS of each
setting and the per-turn ratio. Results also go to bench/data/cores-results.json.

Needs root to record (network namespaces). Usage:
python bench/cores.py [--reuse] [--turns N] [--packets N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
sys.path[:0] = [str(ROOT / "bench")]

import connections  # noqa: E402
import ingest  # noqa: E402
from ingest import spread, tracekit_command, turns  # noqa: E402


def captures(reuse: bool, packets: int) -> list[Path]:
    """The many-connection captures, recorded where missing (or always without --reuse), and
    bench/ingest.py's one-connection sender capture if it is there."""
    short = DATA / "short-connections.pcap"
    parallel = DATA / "iperf3-P16-sender-s128.pcap"
    for path, make in (
        (short, lambda p: connections.record(p, 3000)),
        (parallel, lambda p: ingest.record(p, packets, at_sender=True, streams=16)),
    ):
        if reuse and path.exists():
            continue
        if os.geteuid() != 0:
            sys.exit("bench/cores.py: needs root to record a capture (network namespaces)")
        make(path)
    single = DATA / "iperf3-sender-s128.pcap"
    return [short, parallel] + ([single] if single.exists() else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="keep existing captures")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--packets", type=int, default=2_000_000, help="iperf3 -P 16 frames")
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    tracekit = tracekit_command()
    results: dict[str, object] = {"turns": args.turns, "cores": len(os.sched_getaffinity(0))}
    for capture in captures(args.reuse, args.packets):
        report = str(DATA / "cores-report.html")
        cmds = {
            f"{command} -j {jobs}": [tracekit, command, "-j", str(jobs), str(capture)]
            + (["-o", report] if command == "report" else [])
            for command in ("analyze", "report")
            for jobs in (1, 2)
        }
        got = turns(cmds, args.turns)
        print(f"{capture.name}: median (range) of {args.turns} turns")
        mine: dict[str, object] = {}
        for command in ("analyze", "report"):
            one, two = got[f"{command} -j 1"], got[f"{command} -j 2"]
            ratio = spread([a[0] / b[0] for a, b in zip(one, two, strict=True)])
            measured: dict[str, object] = {
                f"-j {j}": {
                    "seconds": spread([s for s, _ in runs]),
                    "peak_rss_mib": spread([m for _, m in runs]),
                }
                for j, runs in ((1, one), (2, two))
            }
            measured["speed_up"] = ratio
            mine[command] = measured
            for j, runs in ((1, one), (2, two)):
                s = spread([x for x, _ in runs])
                m = spread([x for _, x in runs])
                print(
                    f"  {command} -j {j}: {s['median']:6.2f} s ({s['low']:.2f}-{s['high']:.2f}),"
                    f" {m['median']:,.0f} MiB ({m['low']:,.0f}-{m['high']:,.0f})"
                )
            print(
                f"  {command}: -j 2 {ratio['median']:.2f}x as fast as -j 1 per turn"
                f" ({ratio['low']:.2f}-{ratio['high']:.2f})"
            )
        results[capture.name] = mine
    (DATA / "cores-results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
