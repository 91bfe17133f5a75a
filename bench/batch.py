"""Batch speed: `tracekit batch` on 1 and on 2 cores over copies of the lab captures (not a test).

Copies every TCP scenario of fixtures/captures (sender.pcap, receiver.pcap) COPIES times into a
temporary folder, runs `tracekit batch DIR -o OUT --jobs N` for N = 1 and 2 in a fresh process
(startup and worker start included, as a user sees it), the two taking turns REPEAT times, each
into a fresh output folder, and prints the median and range of the captures/s of each, the
cores the runs got (CPU seconds over wall seconds), and the per-turn ratio; the goal is at least
1.7 at the median. Before and after, two processes that
only spin measure how many cores the machine gives this session: on a machine shared with other
work, the ratio means something only when that is near 2.

Usage: python bench/batch.py [--copies 24] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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
LAB = ROOT / "fixtures" / "captures"
MAIN = "from tracekit.cli.main import main; main()"


def make_corpus(folder: Path, copies: int) -> int:
    """Copy the lab's TCP scenarios `copies` times under folder; the number of inputs."""
    scenarios = [
        d
        for d in sorted(LAB.iterdir())
        if (d / "truth.json").is_file()
        and json.loads((d / "truth.json").read_text())["flow"]["protocol"] == "tcp"
    ]
    if not scenarios:
        sys.exit(f"no lab captures in {LAB}: run `make fixtures` first")
    for i in range(copies):
        for scenario in scenarios:
            target = folder / f"copy{i:02}" / scenario.name
            target.mkdir(parents=True)
            for name in ("sender.pcap", "receiver.pcap"):
                shutil.copy(scenario / name, target / name)
    return copies * len(scenarios)


def timed_run(corpus: Path, out: Path, jobs: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all processes of the run) of one `tracekit batch`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", MAIN, "batch", str(corpus), "-o", str(out), "--jobs", str(jobs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def cores_available(seconds: float = 3.0) -> float:
    """CPU seconds over wall seconds of two processes that only spin: what the machine gives
    this run now. Linux shares the cores between sessions (autogroup), so while another
    session keeps a core busy, two workers get about one core, and no ratio near 2 can show."""
    context = multiprocessing.get_context("fork")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    workers = [context.Process(target=_spin, args=(seconds,)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as tmp:
        corpus = Path(tmp) / "corpus"
        n = make_corpus(corpus, args.copies)
        print(f"{n} inputs (sender + receiver pairs), {os.cpu_count()} cores")
        print(f"cores two spinning processes got, before the runs: {cores_available():.2f}")
        walls: dict[int, list[float]] = {1: [], 2: []}
        cpus: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.repeat):
            for jobs in (1, 2):
                wall, cpu = timed_run(corpus, Path(tmp) / f"out-{jobs}-{r}", jobs)
                walls[jobs].append(wall)
                cpus[jobs].append(cpu)
        for jobs in (1, 2):
            rates = [n / w for w in walls[jobs]]
            # Cores used = CPU over wall: well under `jobs` means other work had the cores.
            used = [c / w for c, w in zip(cpus[jobs], walls[jobs], strict=True)]
            print(
                f"--jobs {jobs}: {statistics.median(rates):5.2f} captures/s "
                f"({min(rates):.2f}-{max(rates):.2f}), {statistics.median(used):.2f} cores used"
            )
        ratios = [w1 / w2 for w1, w2 in zip(walls[1], walls[2], strict=True)]
        print(
            f"ratio 2 cores / 1 core, per turn: {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) (goal: >= 1.7 at the median)"
        )
        print(f"cores two spinning processes got, after the runs: {cores_available():.2f}")


if __name__ == "__main__":
    main()
