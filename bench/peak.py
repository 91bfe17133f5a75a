"""Where a tracekit command's peak memory goes (not a test).

Runs one `tracekit` command in this process with tracemalloc on, polls the resident set every
5 ms, and takes a snapshot each time it rises 8 MiB past its highest so far, once above
`--above` MiB. At the end it prints the peak and, from the last snapshot (the one nearest the
peak), each allocation of tracekit's code still alive then: its size, where it was made and
the stage that called for it.

tracemalloc counts what was asked for, not what is resident: an array reserved as address space
and written only in part (the reader's columns) counts whole. The resident peak is read from
/proc; the list says which arrays sat beside each other at that moment. Tracing slows the run
by about half.

    python bench/peak.py --above 4500 -- analyze bench/data/scale/50-sender.pcap --json
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
import tracemalloc
from pathlib import Path

_RISE = 8 * 2**20
_POLL_S = 0.005


def _resident() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def _where(frame: tracemalloc.Frame) -> str:
    return f"{frame.filename.split('/tracekit/')[-1]}:{frame.lineno}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--above", type=float, default=0.0, help="MiB before snapshots start")
    parser.add_argument("--min", type=float, default=0.5, help="MiB below which to leave out")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="tracekit's arguments")
    args = parser.parse_args()
    command = [a for a in args.command if a != "--"] if args.command[:1] == ["--"] else args.command
    tracemalloc.start(8)
    done = threading.Event()
    peak = [0]
    snapped = [int(args.above * 2**20)]
    last: list[tracemalloc.Snapshot] = []

    def poll() -> None:
        while not done.is_set():
            rss = _resident()
            peak[0] = max(peak[0], rss)
            if rss > snapped[0] + _RISE:
                snapped[0] = rss
                last[:] = [tracemalloc.take_snapshot()]
            time.sleep(_POLL_S)

    threading.Thread(target=poll, daemon=True).start()
    sys.argv = ["tracekit", *command]
    from tracekit.cli.main import main as tracekit_main

    started = time.perf_counter()
    with contextlib.suppress(SystemExit):
        tracekit_main()
    done.set()
    print(f"peak resident {peak[0] / 2**20:.1f} MiB after {time.perf_counter() - started:.1f} s")
    if not last:
        print("no snapshot: the resident set never rose past --above")
        return
    print(f"last snapshot at {snapped[0] / 2**20:.1f} MiB resident; allocations alive then:")
    total = 0
    for stat in last[0].statistics("traceback"):
        ours = [f for f in stat.traceback if "/tracekit/" in f.filename]
        if stat.size < args.min * 2**20 or not ours:
            continue
        total += stat.size
        print(f"{stat.size / 2**20:9.1f} MiB  {_where(ours[-1])}  <- {_where(ours[0])}")
    print(f"{total / 2**20:9.1f} MiB  in all (asked for, not all resident)")


if __name__ == "__main__":
    if not Path("/proc/self/statm").exists():
        sys.exit("bench/peak.py reads /proc: Linux only")
    main()
