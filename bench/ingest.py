"""Ingest speed: tracekit against `tcptrace -l -r -n` and a `tshark -T fields` export (not a test).

1. Records a real capture of about 5 M packets: an iperf3 transfer between two network namespaces
   joined by a veth pair, offloads off (so every packet is on the wire as itself), tcpdump -s 128.
2. Writes a pcapng copy of it (editcap).
3. On each file, times `tracekit ingest` (reader, connections and Parquet), read_capture alone in
   a fresh interpreter (the reader's share), `tcptrace -l -r -n`, and tshark exporting the same
   fields; prints packets/s for each, the ratio to tcptrace, and tracekit's peak RSS against the
   budget of 64 bytes per packet + 200 MB. Results also go to bench/data/results.json.

Needs root (namespaces). Data goes to bench/data/ (git-ignored); the namespaces are removed on the
way out, failure included. Usage: python bench/ingest.py [--packets N] [--reuse] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
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


def record(path: Path, packets: int) -> None:
    """Capture an iperf3 transfer at the receiver until about `packets` frames are written."""
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
                NS_RECV,
                "tcpdump",
                "-i",
                "tkb1",
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
    for line in proc.stderr.splitlines():
        if "Maximum resident set size" in line:
            return seconds, int(line.split(":")[1]) / 1024
    raise RuntimeError("no peak RSS in /usr/bin/time output")


def best(cmds: dict[str, list[str]], runs: int) -> dict[str, tuple[float, float]]:
    """Per command, the fastest of `runs` runs and the largest peak RSS seen. The commands
    take turns, run after run, so that a change in the machine's speed (it drifts by up to
    2x within minutes here) falls on all of them alike."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            results[name].append(timed(cmd))
    return {name: (min(s for s, _ in got), max(r for _, r in got)) for name, got in results.items()}


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


def compile_installed_sources() -> None:
    """Write the byte-code of the tracekit and cli packages the `tracekit` command runs."""
    code = "import cli, tracekit; print(cli.__path__[0]); print(tracekit.__path__[0])"
    folders = run(sys.executable, "-c", code).stdout.split()
    run(sys.executable, "-m", "compileall", "-q", *folders)


def bench_file(capture: Path, runs: int) -> dict[str, float]:
    """packets/s of each tool on one capture, and tracekit's peak RSS against the budget."""
    load = os.getloadavg()[0]
    # pip writes the byte-code of what it installs; an editable install (or a shell with
    # PYTHONDONTWRITEBYTECODE, as here) may have none, and every run would compile tracekit's
    # sources again (40 ms). Then: warms the page cache and numba's compiled-kernel cache, so
    # no run pays for them.
    compile_installed_sources()
    frames = int(run(sys.executable, "-c", READ_ONLY, str(capture)).stdout)
    out = DATA / (capture.stem + ".parquet")
    tracekit = shutil.which("tracekit") or "tracekit"
    timings = best(
        {
            "ingest": [tracekit, "ingest", str(capture), "-o", str(out)],
            "tcptrace": ["tcptrace", "-l", "-r", "-n", str(capture)],
            "read": [sys.executable, "-c", READ_ONLY, str(capture)],
        },
        runs,
    )
    (ingest_s, ingest_rss), (read_s, read_rss) = timings["ingest"], timings["read"]
    tcptrace_s = timings["tcptrace"][0]
    fields = [arg for f in TSHARK_FIELDS for arg in ("-e", f)]
    tshark_cmd = ["tshark", "-n", "-r", str(capture), "-T", "fields", *fields]
    tshark_s = best({"tshark": tshark_cmd}, 1)["tshark"][0]
    return {
        "load_average_before": load,
        "frames": frames,
        "ingest_pps": frames / ingest_s,
        "read_capture_pps": frames / read_s,
        "tcptrace_pps": frames / tcptrace_s,
        "tshark_pps": frames / tshark_s,
        "ingest_x_tcptrace": tcptrace_s / ingest_s,
        "read_capture_x_tcptrace": tcptrace_s / read_s,
        "ingest_peak_rss_mib": ingest_rss,
        "read_capture_peak_rss_mib": read_rss,
        "rss_budget_mib": 64 * frames / 2**20 + 200,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=5_000_000)
    parser.add_argument("--reuse", action="store_true", help="keep an existing bench capture")
    parser.add_argument("--runs", type=int, default=7, help="runs per tool; the fastest counts")
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    pcap, pcapng = DATA / "iperf3-s128.pcap", DATA / "iperf3-s128.pcapng"
    if not (args.reuse and pcap.exists()):
        if os.geteuid() != 0:
            sys.exit("bench/ingest.py: needs root to make network namespaces")
        record(pcap, args.packets)
        pcapng.unlink(missing_ok=True)
    if not pcapng.exists():
        run("editcap", "-F", "pcapng", str(pcap), str(pcapng))
    results = {path.suffix.lstrip("."): bench_file(path, args.runs) for path in (pcap, pcapng)}
    (DATA / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    loads = ", ".join(f"{name} {r['load_average_before']:.1f}" for name, r in results.items())
    print(f"1-minute load average before each file's runs ({os.cpu_count()} cores): {loads}")
    header = ("file", "frames", "tool", "packets/s", "x tcptrace", "peak RSS MiB", "budget MiB")
    print("{:7} {:>9} {:22} {:>12} {:>10} {:>12} {:>10}".format(*header))
    for name, r in results.items():
        rows = (
            ("tracekit ingest", r["ingest_pps"], r["ingest_peak_rss_mib"]),
            ("read_capture", r["read_capture_pps"], r["read_capture_peak_rss_mib"]),
            ("tcptrace -l -r -n", r["tcptrace_pps"], float("nan")),
            ("tshark -T fields", r["tshark_pps"], float("nan")),
        )
        for tool, pps, rss in rows:
            ratio = pps / r["tcptrace_pps"]
            print(
                f"{name:7} {r['frames']:9.0f} {tool:22} {pps:12,.0f} {ratio:10.2f} "
                f"{rss:12.0f} {r['rss_budget_mib']:10.0f}"
            )


if __name__ == "__main__":
    main()
