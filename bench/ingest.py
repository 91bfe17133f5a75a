"""Ingest speed: tracekit against `tcptrace -l -r -n` and a `tshark -T fields` export (not a test).

1. Records two real captures of about 5 M packets each: iperf3 transfers between two network
   namespaces joined by a veth pair, offloads off (so every packet is on the wire as itself),
   tcpdump -s 128; one taken at the receiver, one at the sender (both directions, as a user's
   sender-side capture holds them).
2. Writes a pcapng copy of the receiver's capture (editcap), and another with a section per
   packet (fixtures/crafted/sections.py), as some capture tools and file splitters write them.
3. On each file, times `tracekit ingest` (reader, connections and Parquet), read_capture alone in
   a fresh interpreter (the reader's share), `tcptrace -l -r -n`, and tshark exporting the same
   fields. The tools take turns, turn after turn (at least 5), so that a drift in the machine's
   speed falls on all of them alike; it prints the median and the range of packets/s for each,
   the median and range of the per-turn ratio to tcptrace, and tracekit's peak RSS against the
   budget of 64 bytes per packet + 200 MB. Results also go to bench/data/results.json.

Needs root (namespaces). Data goes to bench/data/ (git-ignored); the namespaces are removed on the
way out, failure included. Usage: python bench/ingest.py [--packets N] [--reuse] [--turns N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
NS_SEND, NS_RECV = "tkbench-send", "tkbench-recv"
# Documentation addresses that exist only inside the two namespaces this script makes.
ADDR_SEND, ADDR_RECV = "192.0.2.1", "192.0.2.2"  # TEST-NET-1, RFC 5737
SNAPLEN = 128


def run(*cmd: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kw)  # type: ignore[call-overload, no-any-return]


@contextlib.contextmanager
def namespaces() -> Iterator[None]:
    """Two namespaces joined by a veth pair with every offload off; removed on exit."""
    for ns in (NS_SEND, NS_RECV):
        run("ip", "netns", "del", ns, check=False)
    try:
        run("ip", "netns", "add", NS_SEND)
        run("ip", "netns", "add", NS_RECV)
        veth = ("tkb0", "netns", NS_SEND, "type", "veth", "peer", "tkb1", "netns", NS_RECV)
        run("ip", "link", "add", *veth)
        for ns, dev, addr in ((NS_SEND, "tkb0", ADDR_SEND), (NS_RECV, "tkb1", ADDR_RECV)):
            run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
            # Segmentation and receive offloads off: each captured frame is one wire packet.
            offloads = [
                arg for name in ("tso", "gso", "gro", "lro", "tx", "rx") for arg in (name, "off")
            ]
            run("ip", "netns", "exec", ns, "ethtool", "-K", dev, *offloads, check=False)
        yield
    finally:
        for ns in (NS_SEND, NS_RECV):
            run("ip", "netns", "del", ns, check=False)


def record(path: Path, packets: int, at_sender: bool = False, streams: int = 1) -> None:
    """Capture an iperf3 transfer of `streams` parallel connections (iperf3 -P) at the
    receiver (or the sender) until about `packets` frames are written."""
    ns, dev = (NS_SEND, "tkb0") if at_sender else (NS_RECV, "tkb1")
    with namespaces():
        server = subprocess.Popen(
            ["ip", "netns", "exec", NS_RECV, "iperf3", "-s", "-1", "-B", ADDR_RECV],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        dump = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "tcpdump",
                "-i",
                dev,
                "-s",
                str(SNAPLEN),
                "--immediate-mode",
                "-c",
                str(packets),
                "-w",
                str(path),
                "tcp",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(1.0)
            client = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    NS_SEND,
                    "iperf3",
                    "-c",
                    ADDR_RECV,
                    "-t",
                    "120",
                    "-M",
                    "1448",
                    "-P",
                    str(streams),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                dump.wait(timeout=300)
            finally:
                client.terminate()
                client.wait(timeout=30)
        finally:
            for proc in (dump, server):
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB, from GNU time) of one command, output discarded."""
    run = measured(cmd)
    return run["seconds"], run["peak_rss_mib"]


def measured(cmd: list[str]) -> dict[str, float]:
    """One command's wall seconds, peak RSS (MiB) and MiB read from the disk rather than the
    page cache (GNU time's file system inputs, 512-byte blocks), output discarded."""
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *cmd],
        check=False,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {proc.stderr[-500:]}")
    said = dict(line.strip().rsplit(": ", 1) for line in proc.stderr.splitlines() if ": " in line)
    if "Maximum resident set size (kbytes)" not in said:
        raise RuntimeError("no peak RSS in /usr/bin/time output")
    return {
        "seconds": seconds,
        "peak_rss_mib": int(said["Maximum resident set size (kbytes)"]) / 1024,
        "disk_read_mib": int(said.get("File system inputs", "0")) * 512 / 2**20,
    }


def turns(cmds: dict[str, list[str]], count: int) -> dict[str, list[tuple[float, float]]]:
    """Per command, (seconds, peak RSS MiB) of each of `count` turns. The commands take turns,
    turn after turn, so that a change in the machine's speed (it drifts by up to 2x within
    minutes here) falls on all of them alike."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(count):
        for name, cmd in cmds.items():
            results[name].append(timed(cmd))
    return results


def spread(values: list[float]) -> dict[str, float]:
    """Median, lowest and highest: a result is the middle and the range, never the best."""
    ordered = sorted(values)
    return {"median": float(statistics.median(ordered)), "low": ordered[0], "high": ordered[-1]}


READ_ONLY = (
    "import sys\n"
    "from tracekit.capture import read_capture\n"
    "print(read_capture(sys.argv[1]).stats.frames)\n"
)

TSHARK_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.id",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "tcp.window_size_value",
    "tcp.flags",
    "tcp.options.timestamp.tsval",
)


def tracekit_command() -> str:
    """The `tracekit` console script pip installed for this interpreter, as a user's venv runs
    it; a version manager's shim found first in PATH runs a shell and the manager before it
    (pyenv's costs 50-90 ms a run on this machine, a tenth of a 5 M-packet ingest), which no
    peer's binary pays."""
    beside = Path(sys.executable).parent / "tracekit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("tracekit") or "tracekit"


def compile_installed_sources() -> None:
    """Write the byte-code of the tracekit package (and its CLI) the `tracekit` command runs."""
    code = "import tracekit.cli as c, tracekit as t; print(c.__path__[0]); print(t.__path__[0])"
    folders = run(sys.executable, "-c", code).stdout.split()
    run(sys.executable, "-m", "compileall", "-q", *folders)


def bench_file(capture: Path, count: int, tshark: bool = True) -> dict[str, object]:
    """packets/s of each tool on one capture (median and range of `count` turns), the per-turn
    ratios to tcptrace, and tracekit's peak RSS against the budget."""
    load = os.getloadavg()[0]
    # pip writes the byte-code of what it installs; an editable install (or a shell with
    # PYTHONDONTWRITEBYTECODE, as here) may have none, and every run would compile tracekit's
    # sources again (40 ms). Then: warms the page cache and numba's compiled-kernel cache, so
    # no run pays for them.
    compile_installed_sources()
    frames = int(run(sys.executable, "-c", READ_ONLY, str(capture)).stdout)
    out = DATA / (capture.stem + ".parquet")
    tracekit = tracekit_command()
    timings = turns(
        {
            "ingest": [tracekit, "ingest", str(capture), "-o", str(out)],
            "tcptrace": ["tcptrace", "-l", "-r", "-n", str(capture)],
            "read": [sys.executable, "-c", READ_ONLY, str(capture)],
        },
        count,
    )
    # tshark takes minutes per 5 M packets: one run, and on the first file only.
    fields = [arg for f in TSHARK_FIELDS for arg in ("-e", f)]
    tshark_cmd = ["tshark", "-n", "-r", str(capture), "-T", "fields", *fields]
    tshark_s = turns({"tshark": tshark_cmd}, 1)["tshark"][0][0] if tshark else float("nan")
    peer = [s for s, _ in timings["tcptrace"]]

    def pps(name: str) -> dict[str, float]:
        return spread([frames / s for s, _ in timings[name]])

    def ratio(name: str) -> dict[str, float]:
        # Per turn: the two ran back to back, on the machine as it was then.
        return spread([p / s for p, (s, _) in zip(peer, timings[name], strict=True)])

    return {
        "load_average_before": load,
        "frames": frames,
        "turns": count,
        "ingest_pps": pps("ingest"),
        "read_capture_pps": pps("read"),
        "tcptrace_pps": pps("tcptrace"),
        "tshark_pps": frames / tshark_s,
        "ingest_x_tcptrace": ratio("ingest"),
        "read_capture_x_tcptrace": ratio("read"),
        "ingest_peak_rss_mib": max(r for _, r in timings["ingest"]),
        "read_capture_peak_rss_mib": max(r for _, r in timings["read"]),
        "rss_budget_mib": 64 * frames / 2**20 + 200,
    }


def _range(r: dict[str, float], fmt: str) -> str:
    return f"{r['median']:{fmt}} ({r['low']:{fmt}}-{r['high']:{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=5_000_000)
    parser.add_argument("--reuse", action="store_true", help="keep existing bench captures")
    parser.add_argument("--turns", type=int, default=7, help="turns per tool (at least 5)")
    args = parser.parse_args()
    if args.turns < 5:
        parser.error("--turns: at least 5, for a median and a range")
    DATA.mkdir(parents=True, exist_ok=True)
    pcap, pcapng = DATA / "iperf3-s128.pcap", DATA / "iperf3-s128.pcapng"
    sender = DATA / "iperf3-sender-s128.pcap"
    for path, at_sender in ((pcap, False), (sender, True)):
        if not (args.reuse and path.exists()):
            if os.geteuid() != 0:
                sys.exit("bench/ingest.py: needs root to make network namespaces")
            record(path, args.packets, at_sender)
            if path == pcap:
                pcapng.unlink(missing_ok=True)
    if not pcapng.exists():
        run("editcap", "-F", "pcapng", str(pcap), str(pcapng))
    sections_file = DATA / "iperf3-s128-sections.pcapng"
    if not sections_file.exists() or sections_file.stat().st_mtime < pcap.stat().st_mtime:
        sys.path.insert(0, str(ROOT))
        from fixtures.crafted.sections import section_blocks

        with sections_file.open("wb") as out:
            out.writelines(section_blocks(pcap.read_bytes()))
    files = {
        "receiver pcap": pcap,
        "receiver pcapng": pcapng,
        "pcapng, sections": sections_file,
        "sender pcap": sender,
    }
    results = {
        name: bench_file(path, args.turns, tshark=i == 0)
        for i, (name, path) in enumerate(files.items())
    }
    (DATA / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    loads = ", ".join(f"{name} {r['load_average_before']:.1f}" for name, r in results.items())
    print(f"1-minute load average before each file's turns ({os.cpu_count()} cores): {loads}")
    print(f"median (lowest-highest) of {args.turns} turns; x tcptrace per turn")
    header = ("file", "frames", "tool", "packets/s", "x tcptrace", "peak RSS MiB")
    print("{:16} {:>9} {:18} {:>32} {:>18} {:>12}".format(*header))
    for name, r in results.items():
        rows = (
            ("tracekit ingest", r["ingest_pps"], r["ingest_x_tcptrace"], r["ingest_peak_rss_mib"]),
            (
                "read_capture",
                r["read_capture_pps"],
                r["read_capture_x_tcptrace"],
                r["read_capture_peak_rss_mib"],
            ),
            ("tcptrace -l -r -n", r["tcptrace_pps"], None, None),
        )
        for tool, pps, ratio, rss in rows:
            ratio_text = _range(ratio, ".2f") if ratio else ""
            rss_text = f"{rss:.0f} / {r['rss_budget_mib']:.0f}" if rss else ""
            print(
                f"{name:16} {r['frames']:9.0f} {tool:18} {_range(pps, ',.0f'):>32} "
                f"{ratio_text:>18} {rss_text:>12}"
            )
        if r["tshark_pps"] == r["tshark_pps"]:  # measured (not NaN)
            tshark_pps = r["tshark_pps"]
            print(f"{name:16} {r['frames']:9.0f} {'tshark -T fields':18} {tshark_pps:>32,.0f}")


if __name__ == "__main__":
    main()
