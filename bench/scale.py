"""Scale: time and peak memory of ingest, analyze and report against packet count (not a test).

1. Records real captures of each size (default 1 M and 10 M packets; `--sizes 1,10,50` adds
   50 M): an iperf3 transfer between two network namespaces joined by a veth pair, offloads off,
   tcpdump -s 128, taken at the sender and at the receiver at once (both directions each), so
   every size gives a sender capture and a sender/receiver pair.
2. Runs, in a fresh process each, `tracekit ingest`, `analyze --json` and `report` of the sender
   capture, and `analyze --json` and `report` of the pair, turn after turn (the commands take
   turns, so that a drift in the machine's speed falls on all of them alike), and records the
   wall time, the peak RSS and the MiB read from the disk rather than the page cache (GNU time)
   of each: a pair's captures and its analysis may not all fit in memory at once, and the time
   of a run that reads from the disk is partly the disk's.
3. Prints, per size and command, the median and the range of the turns, the peak RSS against
   the budget (100 bytes per packet plus 300 MB, the packets of both captures for a pair), and
   per command the slope of time and of memory against packets (a least-squares line over the
   sizes) with how large a capture fits in this machine's memory at that slope.

Needs root (namespaces). Data goes to bench/data/scale/ (git-ignored); results also go to
bench/data/scale/results.json. Usage: python bench/scale.py [--sizes 1,10] [--turns 5] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The bench folder is not a package: its recorder is imported from beside this file.
from ingest import (
    ADDR_RECV,
    NS_RECV,
    NS_SEND,
    SNAPLEN,
    compile_installed_sources,
    measured,
    namespaces,
    spread,
    timed,
    tracekit_command,
)

DATA = Path(__file__).resolve().parent / "data" / "scale"
# The budget: bytes of peak RSS per packet analysed, plus a fixed part for the interpreter, its
# libraries and the report's page.
BUDGET_BYTES_PER_PACKET = 100
BUDGET_FIXED_MB = 300


def record_pair(sender: Path, receiver: Path, packets: int) -> None:
    """Capture one iperf3 transfer at both ends at once, each until `packets` frames."""
    with namespaces():
        server = subprocess.Popen(
            ["ip", "netns", "exec", NS_RECV, "iperf3", "-s", "-1", "-B", ADDR_RECV],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        dumps = [
            subprocess.Popen(
                [
                    *("ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-s", str(SNAPLEN)),
                    *("--immediate-mode", "-B", "65536", "-c", str(packets), "-w", str(path)),
                    "tcp",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for ns, dev, path in ((NS_SEND, "tkb0", sender), (NS_RECV, "tkb1", receiver))
        ]
        try:
            time.sleep(1.0)
            client = subprocess.Popen(
                [
                    *("ip", "netns", "exec", NS_SEND, "iperf3", "-c", ADDR_RECV),
                    *("-t", "3600", "-M", "1448"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                for dump in dumps:
                    dump.wait(timeout=3600)
            finally:
                client.terminate()
                client.wait(timeout=30)
        finally:
            for proc in (*dumps, server):
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)
        for dump, path in zip(dumps, (sender, receiver), strict=True):
            # tcpdump says on exit how many packets the kernel dropped before it could write
            # them: a capture with holes is still a capture of that size, but it is said.
            said = (dump.stderr.read() if dump.stderr else "").splitlines()
            print(f"recorded {path.name}: " + "; ".join(x for x in said if "dropped" in x))


# The commands measured, in the order they take turns.
COMMANDS = ("ingest", "analyze", "report", "analyze pair", "report pair")


def commands(size: str, out: Path) -> dict[str, tuple[list[str], int]]:
    """Each command of one size, with the packets it reads."""
    sender, receiver = DATA / f"{size}-sender.pcap", DATA / f"{size}-receiver.pcap"
    n_send, n_recv = frames(sender), frames(receiver)
    pair = ["--receiver", str(receiver)]
    tk = tracekit_command()
    return {
        "ingest": ([tk, "ingest", str(sender), "-o", str(out / "t.parquet")], n_send),
        "analyze": ([tk, "analyze", str(sender), "--json"], n_send),
        "report": ([tk, "report", str(sender), "-o", str(out / "r.html")], n_send),
        "analyze pair": ([tk, "analyze", str(sender), *pair, "--json"], n_send + n_recv),
        "report pair": (
            [tk, "report", str(sender), *pair, "-o", str(out / "rp.html")],
            n_send + n_recv,
        ),
    }


def frames(capture: Path) -> int:
    """Records in a classic pcap with snaplen 128: counted by capinfos."""
    text = subprocess.run(
        ["capinfos", "-M", "-c", str(capture)], check=True, text=True, capture_output=True
    ).stdout
    line = next(x for x in text.splitlines() if "Number of packets" in x)
    return int(line.split(":")[1].strip().replace(",", ""))


def baseline_mib() -> float:
    """Peak RSS of analysing a one-connection capture: the interpreter and its libraries."""
    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "clean" / "sender.pcap"
    return statistics.median(
        timed([tracekit_command(), "analyze", str(tiny), "--json"])[1] for _ in range(3)
    )


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a x + b: (a, b)."""
    if len(xs) < 2:
        return float("nan"), float("nan")
    a, b = statistics.linear_regression(xs, ys)
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10", help="million packets per capture, comma list")
    parser.add_argument("--turns", type=int, default=5, help="turns per command (at least 5)")
    parser.add_argument("--reuse", action="store_true", help="keep existing captures")
    parser.add_argument(
        "--commands",
        default=",".join(c.replace(" ", "-") for c in COMMANDS),
        help=f"comma list of {', '.join(c.replace(' ', '-') for c in COMMANDS)} (default: all)",
    )
    args = parser.parse_args()
    if args.turns < 5:
        parser.error("--turns: at least 5, for a median and a range")
    chosen = [c.strip().replace("-", " ") for c in args.commands.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(COMMANDS))
    if unknown or not chosen:
        parser.error(f"--commands: no command {', '.join(unknown) or '(none given)'}")
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    DATA.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        sender, receiver = DATA / f"{size}-sender.pcap", DATA / f"{size}-receiver.pcap"
        if not (args.reuse and sender.exists() and receiver.exists()):
            if os.geteuid() != 0:
                sys.exit("bench/scale.py: needs root to make network namespaces")
            record_pair(sender, receiver, round(float(size) * 1e6))
    compile_installed_sources()
    base = baseline_mib()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            cmds = {k: v for k, v in commands(size, Path(tmp)).items() if k in chosen}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in cmds}
            load = os.getloadavg()[0]
            for _ in range(args.turns):
                for name, (cmd, _) in cmds.items():
                    runs[name].append(measured(cmd))
            for name, (_, packets) in cmds.items():
                rss = spread([r["peak_rss_mib"] for r in runs[name]])
                budget = BUDGET_FIXED_MB * 1e6 / 2**20 + packets * BUDGET_BYTES_PER_PACKET / 2**20
                results[f"{size} {name}"] = {
                    "size": size,
                    "command": name,
                    "packets": packets,
                    "seconds": spread([r["seconds"] for r in runs[name]]),
                    "peak_rss_mib": rss,
                    "disk_read_mib": spread([r["disk_read_mib"] for r in runs[name]]),
                    "budget_mib": budget,
                    "bytes_per_packet": (rss["median"] - base) * 2**20 / packets,
                    "load_average_before": load,
                }
    names = list(dict.fromkeys(r["command"] for r in results.values()))
    total_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    slopes = {}
    for name in names:
        rows = [r for r in results.values() if r["command"] == name]
        xs = [float(r["packets"]) for r in rows]  # type: ignore[arg-type]
        t_a, _ = slope(xs, [r["seconds"]["median"] for r in rows])  # type: ignore[index]
        m_a, m_b = slope(xs, [r["peak_rss_mib"]["median"] for r in rows])  # type: ignore[index]
        fits = (total_mib - m_b) / m_a if m_a == m_a and m_a > 0 else float("nan")
        slopes[name] = {
            "us_per_packet": t_a * 1e6,
            "bytes_per_packet": m_a * 2**20,
            "fixed_mib": m_b,
            "packets_that_fit": fits,
        }
    (DATA / "results.json").write_text(
        json.dumps({"baseline_mib": base, "runs": results, "slopes": slopes}, indent=2) + "\n"
    )
    print(f"baseline (analyze of a one-connection capture): {base:.0f} MiB peak RSS")
    print(f"median (lowest-highest) of {args.turns} turns; budget 100 B/packet + 300 MB")
    header = ("size", "command", "packets", "seconds", "peak RSS MiB", "budget", "within")
    print("{:>5} {:13} {:>11} {:>26} {:>24} {:>7} {:>6} {:>20}".format(*header, "disk read MiB"))
    for r in results.values():
        s, m, d = r["seconds"], r["peak_rss_mib"], r["disk_read_mib"]
        print(
            f"{r['size']:>5} {r['command']:13} {r['packets']:>11,} "
            f"{s['median']:8.1f} ({s['low']:.1f}-{s['high']:.1f}) "  # type: ignore[index]
            f"{m['median']:10,.0f} ({m['low']:,.0f}-{m['high']:,.0f}) "  # type: ignore[index]
            f"{r['budget_mib']:7,.0f} {'yes' if m['median'] <= r['budget_mib'] else 'no':>6} "  # type: ignore[index]
            f"{d['median']:8,.0f} ({d['low']:,.0f}-{d['high']:,.0f})"  # type: ignore[index]
        )
    print(f"slopes over the sizes (this machine: {total_mib:,.0f} MiB)")
    for name, sl in slopes.items():
        print(
            f"  {name:13} {sl['us_per_packet']:6.2f} us/packet, {sl['bytes_per_packet']:5.0f} "
            f"B/packet + {sl['fixed_mib']:,.0f} MiB: about {sl['packets_that_fit'] / 1e6:,.0f} M "
            "packets fit"
        )


if __name__ == "__main__":
    main()
