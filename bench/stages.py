"""Stages: where analyze's time goes on a pair, and how much of it is the kernel's (not a test).

Runs the analysis stages of `tracekit analyze --receiver` (read, connections, merge, series,
detectors) on each pair of captures given, in a fresh process a turn, with the allocator setting
the command makes (`cli/memory.py`), the pairs taking turns. Per stage it records the wall time,
the CPU time in user space and in the kernel, and the memory the stage touched for the first time
(minor page faults, 4 KiB each). Prints per pair and stage the median and the range of the turns,
and, between the first pair and each other, the ratio of the medians against the ratio of their
packets.

User time is the stages' own work; kernel time is mostly the first touch of fresh memory, which
the kernel zeroes and a virtual machine's host may have to back first, at a cost per page that
the host sets. Reading the two apart says whether a stage grows faster than its captures do, or
only the kernel's price of the memory it touches.

Usage: python bench/stages.py [--turns 5] SENDER:RECEIVER SENDER:RECEIVER ...
(bench/scale.py records such pairs in bench/data/scale/.)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import spread

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("read", "connections", "merge", "series", "detectors")
PAGE_MIB = resource.getpagesize() / 2**20


def _usage() -> tuple[float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def worker(sender: str, receiver: str) -> dict[str, dict[str, float]]:
    """One turn, in this process: each stage's wall, user and system seconds and the MiB it
    touched first, summed over its calls (connections run once per capture)."""
    sys.path.insert(0, str(ROOT))
    from cli.memory import give_back, retain_freed_memory

    retain_freed_memory()
    import tracekit.pipeline as pipeline
    from tracekit.capture import read_capture

    out = {
        name: {"wall_s": 0.0, "user_s": 0.0, "system_s": 0.0, "touched_mib": 0.0} for name in STAGES
    }

    def timing(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            u0, s0, f0 = _usage()
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            wall = time.perf_counter() - t0
            u1, s1, f1 = _usage()
            row = out[stage]
            row["wall_s"] += wall
            row["user_s"] += u1 - u0
            row["system_s"] += s1 - s0
            row["touched_mib"] += (f1 - f0) * PAGE_MIB
            return result

        return run

    # The pipeline's own names for its stages, wrapped where it looks them up.
    pipeline.connections = timing("connections", pipeline.connections)
    pipeline.merge = timing("merge", pipeline.merge)
    pipeline.walk_series = timing("series", pipeline.walk_series)
    pipeline.run_detectors = timing("detectors", pipeline.run_detectors)
    read = timing("read", read_capture)
    captures = read(sender), read(receiver)
    # As `tracekit analyze --json` runs them: no receiver series, no delay table.
    pipeline.analyze(*captures, receiver_series=False, merge_delay=False, after_stage=give_back)
    return out


def turn(sender: str, receiver: str) -> dict[str, dict[str, float]]:
    """One turn in a fresh process."""
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", sender, receiver],
        check=True,
        text=True,
        capture_output=True,
        cwd="/tmp",
    )
    result: dict[str, dict[str, float]] = json.loads(proc.stdout.splitlines()[-1])
    return result


def frames(capture: str) -> int:
    from tracekit.capture import read_capture

    return read_capture(capture).stats.frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="*", help="SENDER:RECEIVER capture pairs")
    parser.add_argument("--turns", type=int, default=5, help="turns per pair (at least 5)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    if len(args.pairs) < 1 or args.turns < 5:
        parser.error("give at least one SENDER:RECEIVER pair and at least 5 turns")
    pairs = [tuple(p.split(":", 1)) for p in args.pairs]
    packets = [frames(s) + frames(r) for s, r in pairs]
    runs: list[list[dict[str, dict[str, float]]]] = [[] for _ in pairs]
    for k in range(args.turns):
        for i, (s, r) in enumerate(pairs):
            runs[i].append(turn(s, r))
        print(f"turn {k + 1} of {args.turns} done", file=sys.stderr)
    medians: list[dict[str, dict[str, float]]] = []
    for (s, _), n, rows in zip(pairs, packets, runs, strict=True):
        print(f"\n{Path(s).name} and its receiver: {n:,} packets")
        print("| stage | wall s | user s | system s | first touched MiB |")
        print("| --- | --- | --- | --- | --- |")
        med: dict[str, dict[str, float]] = {}
        for stage in STAGES:
            cells = []
            med[stage] = {}
            for key in ("wall_s", "user_s", "system_s", "touched_mib"):
                sp = spread([row[stage][key] for row in rows])
                med[stage][key] = sp["median"]
                fmt = "{:.0f}" if key == "touched_mib" else "{:.2f}"
                cells.append(
                    f"{fmt.format(sp['median'])} ({fmt.format(sp['low'])}-{fmt.format(sp['high'])})"
                )
            print(f"| {stage} | " + " | ".join(cells) + " |")
        medians.append(med)
    for i in range(1, len(pairs)):
        print(f"\nratio of medians, pair {i + 1} / pair 1, packets {packets[i] / packets[0]:.2f}x:")
        for stage in STAGES:
            a, b = medians[0][stage], medians[i][stage]
            parts = [
                f"{key.split('_')[0]} {b[key] / a[key]:.2f}x" if a[key] > 0 else f"{key} -"
                for key in ("wall_s", "user_s", "system_s", "touched_mib")
            ]
            print(f"  {stage}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
