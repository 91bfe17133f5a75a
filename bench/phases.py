"""Phases against the kernel: what the verdict names each phase, and what the sender's own
TCP_INFO samples say held it there; not a test, a scorecard.

bench/accuracy.py scores the verdict's shares of the whole transfer and the `paced` label; this
script scores the verdict's timeline. For each scenario of the sweep folders given (default
fixtures/sweep) it analyses the sender's capture and takes the busiest connection's data
direction. Each TCP_INFO sample the lab took (every 50 ms or so) is placed on the capture's
time line where the capture's ACK line first reached the sample's `bytes_acked`: the same
event in both accounts, with no clock to align. A sample counts for the phase it falls in
when the sender was busy (something unacknowledged or unsent), and as held by its pacer when
data waited under both windows' room (`fixtures.lab.sweep.sample_held_by_pacer`, the rule the
sweep's `paced` label is settled by).

It prints, per phase cause, how many phases were named so and in how many of them the
kernel's pacer held most of the busy samples, and lists each phase named `pacing` where it
held half or fewer: a verdict that says "limited by pacing" of what the kernel's account
gives to the windows (an ACK-clocked slow start, say). Phases with fewer than MIN_SAMPLES busy
samples are counted apart (too few to say).

Usage: python bench/phases.py [--sweep DIR ...] [--jobs N] [--only GLOB]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures.lab.sweep import sample_held_by_pacer  # noqa: E402

# A phase's share is judged on this many busy samples at least (2.5 s at the lab's 50 ms).
MIN_SAMPLES = 8


def phases_of(folder: Path) -> list[tuple[str, float, int, int]] | None:
    """Each phase of the busiest direction's verdict: (cause, seconds, held, busy samples);
    None without samples or a verdict."""
    from tracekit.capture import read_capture
    from tracekit.connections import build_connections
    from tracekit.detectors import run_detectors
    from tracekit.detectors.base import AnalysisContext
    from tracekit.detectors.rate_limit_cause import LABELS, RateLimitCause
    from tracekit.series import build_series

    truth = json.loads((folder / "truth.json").read_text())
    samples = truth.get("tcp_info_samples") or {}
    if not samples.get("rows"):
        return None
    conns = build_connections(read_capture(next(folder.glob("sender.pcap*"))))
    series = build_series(conns)
    with_data = list(series.with_data())
    if not with_data:
        return None
    conn, direction = max(with_data, key=lambda cd: series.data_segments(*cd))
    ctx = AnalysisContext(connections=conns.frame(), packets=conns.packets, series=series)
    verdicts = [
        f
        for f in run_detectors(ctx, [RateLimitCause])
        if f.conn == conn and f.evidence.get("phase_cause_codes")
    ]
    if not verdicts:
        return None
    evidence = max(verdicts, key=lambda f: f.end_s - f.start_s).evidence
    acks = series.of(conn, direction).acks
    ack_t = acks["t_s"].to_numpy()
    line = np.maximum.accumulate(acks["ack_rel"].to_numpy())
    col = {name: k for k, name in enumerate(samples["fields"])}
    # Each busy sample's place on the capture's time line, and whether the pacer held it.
    at, held = [], []
    for row in samples["rows"]:
        pacer = sample_held_by_pacer(row, col)
        k = int(np.searchsorted(line, row[col["bytes_acked"]], side="left"))
        if pacer is None or k >= line.size:
            continue
        at.append(ack_t[k])
        held.append(pacer)
    t, h = np.array(at), np.array(held, dtype=bool)
    out = []
    starts = np.asarray(evidence["phase_starts_s"], dtype=np.float64)
    ends = np.asarray(evidence["phase_ends_s"], dtype=np.float64)
    codes = np.asarray(evidence["phase_cause_codes"], dtype=np.int64)
    for start, end, code in zip(starts, ends, codes, strict=True):
        inside = (t >= start) & (t < end)
        out.append((LABELS[int(code)], float(end - start), int(h[inside].sum()), int(inside.sum())))
    return out


def scored(folder: Path) -> tuple[str, list[tuple[str, float, int, int]] | None]:
    return folder.name, phases_of(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="append", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="*")
    args = parser.parse_args()
    sweeps = args.sweep or [ROOT / "fixtures" / "sweep"]
    folders = sorted(
        f
        for sweep in sweeps
        for f in sweep.iterdir()
        if (f / "truth.json").exists() and fnmatch.fnmatch(f.name, args.only)
    )
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(scored, folders))
    named: Counter[str] = Counter()
    pacer_most: Counter[str] = Counter()
    few: Counter[str] = Counter()
    wrong: list[str] = []
    for name, phases in results:
        for cause, seconds, held, busy in phases or []:
            if busy < MIN_SAMPLES:
                few[cause] += 1
                continue
            named[cause] += 1
            most = 2 * held > busy
            pacer_most[cause] += most
            if cause == "pacing" and not most:
                wrong.append(
                    f"  {name}: pacing for {seconds:.2f} s, the kernel's pacer held "
                    f"{held} of {busy} busy samples"
                )
    scenarios = sum(1 for _, phases in results if phases)
    print(f"{scenarios} scenarios with a verdict and TCP_INFO samples, of {len(folders)}")
    print(f"phases of {MIN_SAMPLES} busy samples or more, per cause: in how many the kernel's")
    print("pacer held most of them (a pacer at the path's rate is named bandwidth, and one in")
    print("loss recovery congestion, whatever spaced their departures)")
    for cause in sorted(set(named) | set(few)):
        print(
            f"  {cause:15s} pacer held most in {pacer_most[cause]} of {named[cause]}"
            f"  ({few[cause]} too short)"
        )
    if wrong:
        print("phases named pacing where the kernel's pacer held half or fewer:")
        print("\n".join(wrong))


if __name__ == "__main__":
    main()
