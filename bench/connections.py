"""Many short connections: `tracekit analyze` and `report` against `tcptrace -n -G`; not a test.

A load test leaves a capture of thousands of short connections, where what costs is the work
per connection, not per packet. This script:
1. records one (unless --reuse finds it): N connections, each sending 20 kB, one after another
   over the loopback of a network namespace of its own, tcpdump -s 128 on it;
2. times `tracekit analyze`, `tracekit report` and `tcptrace -n -G` (all xplot graphs) on it,
   taking turns --runs times, and prints the median and range of each one's seconds and of its
   per-turn ratio to tcptrace -G.
Results also go to bench/data/connections-results.json.

Needs root (the namespace, removed on the way out). Usage:
python bench/connections.py [--connections N] [--reuse] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
sys.path[:0] = [str(ROOT / "bench")]

import statistics  # noqa: E402

from ingest import tracekit_command  # noqa: E402
from report import spread, turns  # noqa: E402

NS = "tkbench-conns"
PORT = 5201
# Server and client inside the namespace: the server reads each connection to its end; the
# client opens N connections one after another and sends 20 kB on each.
PEERS = f"""
import socket, sys, threading
srv = socket.socket()
srv.bind(("127.0.0.1", {PORT}))
srv.listen(512)
def serve():
    while True:
        conn, _ = srv.accept()
        while conn.recv(65536):
            pass
        conn.close()
threading.Thread(target=serve, daemon=True).start()
for _ in range(int(sys.argv[1])):
    with socket.create_connection(("127.0.0.1", {PORT})) as s:
        s.sendall(b"x" * 20000)
"""


def record(path: Path, connections: int) -> None:
    """Capture `connections` short transfers over the namespace's loopback."""
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
        dump = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                NS,
                "tcpdump",
                "-i",
                "lo",
                "-s",
                "128",
                "-U",
                "-w",
                str(path),
                f"tcp port {PORT}",
            ],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # tcpdump is listening
        subprocess.run(
            ["ip", "netns", "exec", NS, sys.executable, "-c", PEERS, str(connections)], check=True
        )
        time.sleep(1.0)  # the last FINs are written
        dump.terminate()
        dump.wait()
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--reuse", action="store_true", help="keep an existing capture")
    parser.add_argument("--runs", type=int, default=5, help="turns of the three tools")
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    capture = DATA / "short-connections.pcap"
    if not (args.reuse and capture.exists()):
        if os.geteuid() != 0:
            sys.exit("bench/connections.py: needs root to make a network namespace")
        record(capture, args.connections)
    tracekit = tracekit_command()
    flows = subprocess.run(
        [tracekit, "flows", "--json", str(capture)], check=True, capture_output=True, text=True
    )
    n = len(json.loads(flows.stdout))
    seconds, _cpu = turns(
        {
            "tracekit analyze": [tracekit, "analyze", str(capture)],
            "tracekit report": [tracekit, "report", str(capture), "-o", "report.html"],
            "tcptrace -n -G": ["tcptrace", "-n", "-G", str(capture)],
        },
        args.runs,
    )
    peer = seconds["tcptrace -n -G"]
    results = {
        "connections": n,
        "turns": args.runs,
        "seconds": {tool: spread(s) for tool, s in seconds.items()},
        "ratio_to_tcptrace_G": {
            tool: spread([p / t for t, p in zip(s, peer, strict=True)])
            for tool, s in seconds.items()
        },
    }
    (DATA / "connections-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{capture.name}: {n} connections, {args.runs} turns (median, range)")
    for tool, s in seconds.items():
        mid = statistics.median(s)
        ratio = results["ratio_to_tcptrace_G"][tool]
        print(
            f"{tool:18} {mid:8.2f} s ({min(s):.2f}-{max(s):.2f}) {n / mid:10,.0f} connections/s"
            f" {ratio['median']:6.1f}x tcptrace -G ({ratio['range'][0]}-{ratio['range'][1]})"
        )


if __name__ == "__main__":
    main()
