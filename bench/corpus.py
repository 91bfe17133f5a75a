"""Run tracekit over a folder of captures and check its per-connection counts against tshark.

    python bench/corpus.py DIR [--jobs 2] [--timeout 60] [--json out.json]
    python bench/corpus.py out.json --recheck [--json new.json]   # the files that did not pass
    python bench/corpus.py out.json --summary
    python bench/corpus.py extract --out bench/data/corpus NAME=GITDIR [NAME=GITDIR ...]
    PYTHONPATH=TREE python bench/corpus.py readings OUT.jsonl DIR [DIR ...]
    python bench/corpus.py changed BEFORE.jsonl AFTER.jsonl

The first form checks every capture under DIR the way a user would: `tracekit flows --json`
against a tshark fields export (packets and payload bytes per direction per connection), then
`tracekit analyze --json` and `tracekit report` on every file with TCP, each in a child process
with a time limit and a memory cap whose peak RSS is recorded. Every file gets a verdict and,
when the counts differ, the cause the script can tell from tshark's dissection.

The second form copies the captures out of bare git directories (public projects' test
captures) into OUT/NAME/<path with / replaced by __>.

The last two tell which files a change to the reader touches: `readings` reads every capture
under the folders in process with the tracekit it imports (choose the tree with PYTHONPATH) and
writes one line per file: its connections' counts and its skipped frames by reason, or the
error; `changed` prints the files whose lines differ between two such runs. Only those can
change verdict, so only those (and a sample of the rest) need the first form again.
"""

from __future__ import annotations

import argparse
import collections
import ipaddress
import itertools
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".ntar", ".trace", ".dmp", ".pcap0", ".pcapclear")
COMPRESSED_SUFFIXES = ("", ".gz", ".xz", ".zst", ".bz2")
PCAP_MAGICS = {
    bytes.fromhex(m)
    for m in ("a1b2c3d4", "d4c3b2a1", "a1b23c4d", "4d3cb2a1", "a1b2cd34", "34cdb2a1", "0a0d0d0a")
}
# Compressed files are captures only when their name says so: gzip is everywhere in a repo.
COMPRESSED_MAGICS = (b"\x1f\x8b", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")
LFS_POINTER = b"version https://git-lfs.github.com/spec/"
GIB = 1 << 30

# Layers tracekit decodes between the frame and the IP header that carries TCP (frame.protocols
# names): anything else there is an encapsulation it does not read.
LINK_LAYERS = {"frame", "eth", "ethertype", "vlan", "sll", "null", "loop", "raw", "ip", "ipv6"}
LINK_LAYERS |= {"ipv6.hopopts", "ipv6.routing", "ipv6.dstopts", "ipv6.fraghdr", "pkt_comment"}
LINK_LAYERS |= {"ieee8021ad", "etag", "vntag", "mpls", "pwethheuristic", "pwethcw", "pwethnocw"}
LINK_LAYERS |= {"pppoes", "ppp", "chdlc", "fddi", "llc", "ah", "gre", "erspan", "udp", "vxlan"}
LINK_LAYERS |= {"geneve", "gtp", "l2tp", "cfp", "arcnet", "wlan", "wlan_radio", "radiotap", "ppi"}
LINK_LAYERS |= {"ieee8021ah", "nflog", "ipoib", "juniper", "ayiya"}
# capinfos -M -E names of the link types tracekit reads ("per-packet": pcapng with several).
TRACEKIT_ENCAPS_M = {
    "ether",
    "rawip",
    "rawip4",
    "rawip6",
    "linux-sll",
    "linux-sll2",
    "null",
    "loop",
    "ppp",
    "chdlc",
    "fddi",
    "mpls",
    "arcnet",
    "arcnet_linux",
    "ieee-802-11",
    "ieee-802-11-radiotap",
    "ppi",
    "nflog",
    "ip-ib",
    "juniper-ether",
}
TRACEKIT_ENCAPS_M.add("per-packet")


def is_capture_name(name: str) -> bool:
    low = name.lower()
    return any(low.endswith(s + c) for s in CAPTURE_SUFFIXES for c in COMPRESSED_SUFFIXES)


def is_capture(name: str, head: bytes) -> bool:
    if head[:4] in PCAP_MAGICS:
        return True
    return is_capture_name(name) and (head.startswith(COMPRESSED_MAGICS) or len(head) >= 4)


# --- extract: captures out of bare git directories ---------------------------------------------


def extract(out: Path, specs: list[str]) -> None:
    """Copy every capture of each NAME=GITDIR's HEAD into out/NAME; count what is left out."""
    for spec in specs:
        name, gitdir = spec.split("=", 1)
        dest = out / name
        dest.mkdir(parents=True, exist_ok=True)
        listing = subprocess.run(
            ["git", "--git-dir", gitdir, "ls-tree", "-r", "-z", "HEAD"],
            check=True,
            capture_output=True,
        ).stdout
        blobs = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, path = entry.split(b"\t", 1)
            _mode, kind, sha = meta.split()
            if kind == b"blob":
                blobs.append((sha.decode(), path.decode("utf-8", "surrogateescape")))
        counts = collections.Counter()
        # One cat-file process streams every blob: reading the first bytes of each is how
        # captures without a capture suffix are found.
        cat = subprocess.Popen(
            ["git", "--git-dir", gitdir, "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert cat.stdin is not None and cat.stdout is not None
        for sha, path in blobs:
            cat.stdin.write(sha.encode() + b"\n")
            cat.stdin.flush()
            header = cat.stdout.readline().split()
            if header[-1] == b"missing":
                # A snapshot leaves out files of 4 MiB and more.
                counts["missing (large)"] += is_capture_name(path)
                continue
            data = cat.stdout.read(int(header[2]))
            cat.stdout.read(1)
            if data.startswith(LFS_POINTER):
                counts["LFS pointer"] += is_capture_name(path)
                continue
            if not is_capture(path, data[:8]):
                continue
            (dest / path.replace("/", "__")).write_bytes(data)
            counts["extracted"] += 1
        cat.stdin.close()
        cat.wait()
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


# --- readings: what the reader makes of each file, to find those a change touches -------------


def readings(out: Path, folders: list[Path]) -> None:
    """One JSON line per capture under `folders`: connections' counts and skipped frames."""
    from tracekit.capture import read_capture  # the tree under test, chosen by PYTHONPATH
    from tracekit.connections import build_connections

    def overtime(*_: Any) -> None:
        raise TimeoutError("over 60 s")

    signal.signal(signal.SIGALRM, overtime)
    columns = ("proto", "a", "b", "packets_a2b", "packets_b2a", "bytes_a2b", "bytes_b2a")
    with out.open("w") as f:
        for path in sorted(p for folder in folders for p in folder.rglob("*") if p.is_file()):
            signal.alarm(60)
            try:
                capture = read_capture(path)
                table = build_connections(capture).table
                rows = sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
                line: dict[str, Any] = {"rows": rows, "skipped": capture.stats.skipped}
            except Exception as error:  # every failure is a reading to compare
                line = {"error": f"{type(error).__name__}: {error}"}
            finally:
                signal.alarm(0)
            f.write(json.dumps({"file": str(path), **line}) + "\n")


def changed(before: Path, after: Path) -> None:
    """Print the files whose readings differ between two `readings` runs."""
    old = {d["file"]: d for d in map(json.loads, before.read_text().splitlines())}
    new = {d["file"]: d for d in map(json.loads, after.read_text().splitlines())}
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) != new.get(name):
            print(name)


# --- running one command with a time limit and a memory cap -----------------------------------


@dataclass
class Run:
    argv: list[str]
    rc: int | None = None  # None when the child was killed by a signal
    signal: int | None = None
    killed: str = ""  # "timeout" or "memory" when this script stopped it
    seconds: float = 0.0
    rss_mib: float = 0.0
    stderr: list[str] = field(default_factory=list)
    stdout: str = field(default="", repr=False)


def rss_bytes(pid: int) -> int:
    try:
        with Path(f"/proc/{pid}/status").open("rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_limited(argv: list[str], timeout: float, mem_cap: int, keep_stdout: bool = True) -> Run:
    """Run argv to its end, killing it past `timeout` seconds or `mem_cap` bytes of RSS.

    The child is reaped with wait4, whose rusage is that child's own: its peak RSS, not the
    largest of every child this worker ever ran (RUSAGE_CHILDREN's maximum only grows).
    """
    run = Run(argv)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
        pause = 0.002
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if not run.killed:
                if time.monotonic() - start > timeout:
                    run.killed = "timeout"
                elif rss_bytes(proc.pid) > mem_cap:
                    run.killed = "memory"
                if run.killed:
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: Popen must not wait
        run.seconds = round(time.monotonic() - start, 3)
        run.rss_mib = round(usage.ru_maxrss / 1024, 1)
        if proc.returncode < 0:
            run.signal = -proc.returncode
        else:
            run.rc = proc.returncode
        if run.rss_mib * (1 << 20) > mem_cap and not run.killed:
            run.killed = "memory"
        err.seek(0)
        run.stderr = err.read().decode("utf-8", "replace").splitlines()
        if keep_stdout:
            out.seek(0)
            run.stdout = out.read().decode("utf-8", "replace")
    return run


# --- tshark's reading --------------------------------------------------------------------------

# TCP quoted inside an ICMP error is not a segment of the connection; tshark's `tcp` filter
# matches it all the same.
TSHARK_FILTER = "tcp and not icmp and not icmpv6"
TSHARK_FIELDS = ["tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst"]
TSHARK_FIELDS += ["tcp.dstport", "tcp.len", "frame.protocols"]


def norm_endpoint(text: str) -> str:
    """`ip:port` or `[ip6]:port` in one spelling, whichever tool wrote it."""
    host, port = text.rsplit(":", 1)
    ip = ipaddress.ip_address(host.strip("[]"))
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def inner_layers(protocols: str) -> tuple[list[str], str]:
    """The layers below TCP's IP header, and that header's family ("ip" or "ipv6")."""
    layers = protocols.split(":")
    top = layers.index("tcp") if "tcp" in layers else len(layers)
    below = layers[:top]
    family = next((p for p in reversed(below) if p in ("ip", "ipv6")), "")
    return below, family


def segment_layers(protocols: str) -> list[list[str]]:
    """The layers below each TCP segment of a frame: the first TCP header's, and in an 802.11
    A-MSDU each later subframe's (behind its own LLC), which tshark dissects one after another.
    A later TCP header that is not a subframe's (inside a TCP payload, as OpenFlow's packet-in
    quotes one) is not a segment of its own."""
    layers = protocols.split(":")
    tcps = [k for k, p in enumerate(layers) if p == "tcp"]
    if not tcps:
        return [layers]
    found = [layers[: tcps[0]]]
    if "wlan" in layers[: tcps[0]]:
        for before, at in itertools.pairwise(tcps):
            if "llc" not in layers[before:at]:
                break
            found.append(layers[:at])
    return found


def _nth(values: str, n: int) -> str:
    """The n-th of the |-joined occurrences of a field, "" when there are fewer."""
    found = values.split("|")
    return found[n] if 0 <= n < len(found) else ""


@dataclass
class Tshark:
    run: Run
    # stream -> {(src, dst): [packets, bytes]}
    streams: dict[int, dict[tuple[str, str], list[int]]]
    encapsulations: collections.Counter[str]
    malformed: int  # segments whose header tshark could not read: it gives them no tcp.len

    @property
    def tcp_packets(self) -> int:
        return sum(c[0] for d in self.streams.values() for c in d.values())


def tshark_read(path: Path, timeout: float) -> Tshark:
    """tests/independent.py's tshark_directions, tolerant of what a corpus holds.

    That function raises on a capture cut off mid-record (tshark exits 2 after printing every
    packet before the cut) and splits on commas, which a tunnelled packet's two ip.src break.
    Here the separator is a tab, and the addresses are those of the IP header right under the
    first TCP header in frame.protocols.
    """
    argv = ["tshark", "-n", "-r", str(path), "-Y", TSHARK_FILTER, "-T", "fields"]
    argv += ["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in TSHARK_FIELDS:
        argv += ["-e", f]
    run = run_limited(argv, timeout, 16 * GIB)
    streams: dict[int, dict[tuple[str, str], list[int]]] = collections.defaultdict(dict)
    encaps: collections.Counter[str] = collections.Counter()
    malformed = 0
    for line in run.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != len(TSHARK_FIELDS) or not parts[0]:
            continue
        streams_of, v4, v6, sports, dv4, dv6, dports, lengths, protocols = parts
        below, family = inner_layers(protocols)
        extra = [p for p in below if p not in LINK_LAYERS]
        if extra:
            encaps[":".join(dict.fromkeys(extra))] += 1
        for n, layers in enumerate(segment_layers(protocols)):
            # The IP header right under the n-th TCP header: not an outer tunnel's, nor one
            # that a TCP payload quotes (OpenFlow packet-in), which come before or after it.
            family = next((p for p in reversed(layers) if p in ("ip", "ipv6")), "")
            nth = layers.count(family) - 1
            src, dst = (v6, dv6) if family == "ipv6" else (v4, dv4)
            src, dst = _nth(src, nth), _nth(dst, nth)
            sport, dport, length = _nth(sports, n), _nth(dports, n), _nth(lengths, n)
            try:
                key = (norm_endpoint(f"{src}:{sport}"), norm_endpoint(f"{dst}:{dport}"))
                stream = int(_nth(streams_of, n))
            except ValueError:
                continue
            malformed += not length
            counts = streams[stream].setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += int(length or 0)
    run.stdout = ""
    return Tshark(run, dict(streams), encaps, malformed)


# --- comparing the two readings ----------------------------------------------------------------

Directions = dict[tuple[str, str], tuple[int, int]]


def flows_incarnations(rows: list[dict[str, Any]]) -> dict[frozenset[str], list[Directions]]:
    found: dict[frozenset[str], list[Directions]] = collections.defaultdict(list)
    for r in rows:
        if r.get("proto") != "tcp":
            continue
        a, b = norm_endpoint(r["a"]), norm_endpoint(r["b"])
        # summed() adds the two ways up when a connection's two ends are one endpoint.
        dirs = summed(
            [
                {(a, b): (r["packets_a2b"], r["bytes_a2b"])},
                {(b, a): (r["packets_b2a"], r["bytes_b2a"])},
            ]
        )
        found[frozenset((a, b))].append(dirs)
    return found


def tshark_incarnations(ts: Tshark) -> dict[frozenset[str], list[Directions]]:
    found: dict[frozenset[str], list[Directions]] = collections.defaultdict(list)
    for stream in sorted(ts.streams):
        dirs = {k: (v[0], v[1]) for k, v in ts.streams[stream].items()}
        found[frozenset(e for k in dirs for e in k)].append(dirs)
    return found


def summed(incarnations: list[Directions]) -> Directions:
    total: dict[tuple[str, str], tuple[int, int]] = {}
    for dirs in incarnations:
        for k, (p, b) in dirs.items():
            q, c = total.get(k, (0, 0))
            total[k] = (q + p, c + b)
    return {k: v for k, v in total.items() if v != (0, 0)}


def compare(rows: list[dict[str, Any]], ts: Tshark) -> dict[str, Any]:
    """Match connections by endpoints, then compare packets and payload bytes each way.

    tests/test_connections.py names a direction by (source, destination), which is exact when
    each 4-tuple has one incarnation. A corpus reuses 4-tuples, and the tools split them by
    different rules (tracekit at every new SYN, tshark's tcp.stream at a SYN after the close or
    with another ISN), so the directions' sums over all incarnations of a 4-tuple are compared
    first: a difference there is a miscount. Equal sums divided differently between
    incarnations are a split difference, compared incarnation by incarnation in order.
    """
    ours, theirs = flows_incarnations(rows), tshark_incarnations(ts)
    counts, splits = [], []
    for pair in sorted(set(ours) | set(theirs), key=sorted):
        mine, other = ours.get(pair, []), theirs.get(pair, [])
        if summed(mine) != summed(other):
            counts.append(
                {"endpoints": sorted(pair), "tracekit": _show(mine), "tshark": _show(other)}
            )
        elif [summed([d]) for d in mine] != [summed([d]) for d in other]:
            splits.append(
                {"endpoints": sorted(pair), "tracekit": _show(mine), "tshark": _show(other)}
            )
    return {
        "tuples": len(set(ours) | set(theirs)),
        "connections_tracekit": sum(map(len, ours.values())),
        "streams_tshark": sum(map(len, theirs.values())),
        "count_differences": counts,
        "split_differences": splits,
    }


def _show(incarnations: list[Directions]) -> list[dict[str, list[int]]]:
    return [{f"{s}>{d}": list(v) for (s, d), v in summed([i]).items()} for i in incarnations]


# --- why the counts differ ---------------------------------------------------------------------

DIAG_FIELDS = ["frame.protocols", "frame.len", "frame.cap_len", "ip.len", "ip.flags.mf"]
DIAG_FIELDS += ["ip.frag_offset", "ip.opt.type", "ipv6.plen", "ipv6.opt.jumbo"]
DIAG_FIELDS += ["ipv6.fraghdr.offset", "tcp.srcport", "tcp.dstport", "tcp.flags.syn"]
DIAG_FIELDS += ["tcp.flags.ack", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "tcp.stream"]
DIAG_FIELDS += ["_ws.malformed", "tcp.hdr_len"]
# Bytes before the IP header for the first layer frame.protocols names.
LINK_HEADER = {"eth": 14, "sll": 16, "null": 4, "loop": 4, "raw": 0}
SOURCE_ROUTE = {"131", "137", "0x83", "0x89"}  # IPv4 LSRR and SSRR option types


def capinfos(path: Path) -> dict[str, str]:
    out = subprocess.run(
        ["capinfos", "-T", "-M", "-t", "-E", "-l", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    if len(out) < 2:
        return {}
    return dict(zip(out[0].split("\t"), out[1].split("\t"), strict=False))


def diagnose(path: Path, result: dict[str, Any], ts: Tshark, timeout: float) -> list[str]:
    """Every cause of a count difference this file shows, the likeliest first."""
    causes: list[str] = []
    if ts.encapsulations:
        # The commonest one names the class; the row keeps them all.
        top = ts.encapsulations.most_common(1)[0][0]
        causes.append(f"TCP inside an encapsulation tracekit does not read: {top}")
        result["encapsulations"] = dict(ts.encapsulations)
    argv = ["tshark", "-n", "-r", str(path), "-T", "fields"]
    argv += ["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in DIAG_FIELDS:
        argv += ["-e", f]
    run = run_limited(argv, timeout, 16 * GIB)
    info = capinfos(path)
    split_tuples = {tuple(d["endpoints"]) for d in result.get("split_differences", [])}
    flags: collections.Counter[str] = collections.Counter()
    first_syn: dict[tuple[str, ...], str] = {}
    syns: dict[tuple[str, ...], set[str]] = collections.defaultdict(set)
    # tcp.stream numbers whose first packet was a SYN, and the 4-tuples for which tshark
    # started another stream on a packet without one.
    stream_opened: dict[str, bool] = {}
    tuple_streams: set[tuple[str, ...]] = set()
    restarts: set[tuple[str, ...]] = set()
    short_offsets = 0
    for line in run.stdout.splitlines():
        v = dict(zip(DIAG_FIELDS, [c.split("|") for c in line.split("\t")], strict=False))

        def last(name: str, v: dict[str, list[str]] = v) -> str:
            return v.get(name, [""])[-1]

        if "1" in v.get("ip.flags.mf", []) or any(x not in ("", "0") for x in v["ip.frag_offset"]):
            flags["IP fragments"] += 1
        if any(
            x not in ("", "0") for x in v.get("ipv6.fraghdr.offset", [""])
        ) or "ipv6.fraghdr" in (last("frame.protocols")):
            flags["IP fragments"] += 1
        is_tcp = bool(last("tcp.srcport"))
        if last("ip.len") == "0" or last("ipv6.plen") == "0" or last("ipv6.opt.jumbo"):
            flags["BIG TCP (IP length 0 or jumbo payload)"] += 1
        proto = last("frame.protocols").split(":")
        link = LINK_HEADER.get(proto[0] if proto else "", 0) + 4 * proto.count("vlan")
        ip_len = v.get("ip.len", [""])[0]
        frame_len = last("frame.len")
        if ip_len.isdigit() and frame_len.isdigit() and int(ip_len) + link > int(frame_len):
            flags["IP total length above the frame"] += 1
        if last("_ws.malformed") and "tcp" not in proto and proto[-1:] in (["ip"], ["ipv6"]):
            # tshark gave up inside the IP header (bad options), so it never reached TCP.
            flags["IP headers tshark finds malformed, so it dissects no TCP"] += 1
        if SOURCE_ROUTE & set(v.get("ip.opt.type", [])):
            flags["IPv4 source route option"] += 1
        if not is_tcp:
            continue
        hdr_len = last("tcp.hdr_len")
        if hdr_len.isdigit() and int(hdr_len) < 20:
            # RFC 9293 3.1: the data offset counts the 20-byte fixed header. tshark reports the
            # segment with the IP payload less the offset as its length; tracekit drops it.
            short_offsets += 1
        src = f"{last('ip.src') or last('ipv6.src')}:{last('tcp.srcport')}"
        dst = f"{last('ip.dst') or last('ipv6.dst')}:{last('tcp.dstport')}"
        try:
            key = tuple(sorted((norm_endpoint(src), norm_endpoint(dst))))
        except ValueError:
            continue
        syn = last("tcp.flags.syn") in ("1", "True")
        if last("tcp.stream") not in stream_opened:
            stream_opened[last("tcp.stream")] = syn
            if not syn and key in tuple_streams:
                restarts.add(key)
            tuple_streams.add(key)
        if syn:
            synack = last("tcp.flags.ack") in ("1", "True")
            first_syn.setdefault(key, "SYN-ACK" if synack else "SYN")
            if not synack:
                syns[key].add(src)
    snaplen = info.get("Packet size limit", "")
    if snaplen.isdigit() and int(snaplen) > 0:
        cap_lens = [
            int(c.split("\t")[2])
            for c in run.stdout.splitlines()
            if c.count("\t") >= 2 and c.split("\t")[2].isdigit()
        ]
        if cap_lens and max(cap_lens) > int(snaplen):
            flags["snaplen shorter than a record"] += 1
    encap = info.get("File encapsulation", "")
    if encap and encap not in TRACEKIT_ENCAPS_M:
        flags[f"link type tracekit does not read ({encap})"] += 1
    if ts.malformed:
        # First among the flags: such a segment (often one whose IP length is above the frame)
        # is the very packet tshark counts and tracekit does not.
        causes.append("TCP headers tshark marks malformed (no tcp.len) but counts")
    if short_offsets:
        # Before the fragments: such a segment is often the last piece of a datagram.
        causes.append("TCP data offset under 20 bytes: tshark counts the segment")
    causes += list(flags)
    for key in split_tuples:
        if key in restarts:
            causes.append("tshark splits a connection at a packet without SYN")
        elif first_syn.get(key) == "SYN-ACK":
            causes.append("SYN-ACK before SYN splits a connection")
        elif len(syns.get(key, ())) > 1:
            causes.append("simultaneous open splits a connection")
    if split_tuples and not any("splits" in c for c in causes):
        causes.append("connections split differently at a reused 4-tuple")
    return list(dict.fromkeys(causes))


# --- one file ----------------------------------------------------------------------------------


@dataclass
class Limits:
    timeout: float
    mem_cap: int
    tshark_timeout: float


def tracekit_problem(name: str, run: Run, limits: Limits) -> str:
    """Why a tracekit run is a failure whatever tshark says, or "" when it is not."""
    if run.killed == "timeout":
        return f"{name}: over {limits.timeout:g} s"
    if run.killed == "memory":
        return f"{name}: over {limits.mem_cap / GIB:g} GiB"
    if run.signal is not None:
        return f"{name}: killed by signal {signal.Signals(run.signal).name}"
    if run.rc == 3:
        return f"{name}: exit 3 (a bug in tracekit)"
    if run.rc not in (0, 2):
        return f"{name}: exit {run.rc}"
    if run.rc == 2 and (len(run.stderr) != 1 or any("Traceback" in x for x in run.stderr)):
        return f"{name}: exit 2 without a one-line message"
    return ""


def summary_of(run: Run) -> dict[str, Any]:
    return {
        "rc": run.rc,
        "signal": run.signal,
        "killed": run.killed,
        "seconds": run.seconds,
        "rss_mib": run.rss_mib,
        "stderr": run.stderr[:20],
    }


def skipped_warnings(run: Run) -> list[str]:
    """tracekit's warnings about frames it left out, without the file name and the counts."""
    found = []
    for line in run.stderr:
        if "warning" in line and "skipped" in line:
            text = line.split(": ", 3)[-1]
            found.append("tracekit skips frames: " + re.sub(r"^\d+ ", "", text))
    return found


def check_flows(path: Path, limits: Limits) -> dict[str, Any]:
    """Phase one: `tracekit flows` against tshark, and a verdict."""
    row: dict[str, Any] = {"file": str(path), "bytes": path.stat().st_size}
    flows = run_limited(["tracekit", "flows", str(path), "--json"], limits.timeout, limits.mem_cap)
    ts = tshark_read(path, limits.tshark_timeout)
    row["flows"] = summary_of(flows)
    row["tshark"] = summary_of(ts.run) | {"tcp_packets": ts.tcp_packets}
    tshark_reads = ts.run.rc == 0 or ts.tcp_packets > 0
    row["tshark"]["reads"] = tshark_reads
    row["tcp_connections"] = 0
    if ts.run.killed:
        return row | {"verdict": "unchecked", "cause": f"tshark over {limits.tshark_timeout:g} s"}
    problem = tracekit_problem("flows", flows, limits)
    if problem:
        return row | {"verdict": "fail", "cause": problem}
    if flows.rc == 2:
        if ts.tcp_packets == 0:
            why = "tshark reads no TCP" if tshark_reads else "tshark cannot read it either"
            return row | {"verdict": "pass", "cause": f"rejected, {why}"}
        info = capinfos(path)
        encap, kind = info.get("File encapsulation", ""), info.get("File type", "")
        row["encapsulations"] = dict(ts.encapsulations)
        if sum(ts.encapsulations.values()) == ts.tcp_packets:
            # Every TCP segment tshark finds is tunnelled: tracekit sees a capture without TCP.
            top = ts.encapsulations.most_common(1)[0][0]
            cause = f"rejected: TCP only inside an encapsulation tracekit does not read: {top}"
        elif encap and encap not in TRACEKIT_ENCAPS_M:
            cause = f"rejected: link type tracekit does not read ({encap})"
        elif kind and kind not in ("pcap", "pcapng", "nsecpcap"):
            cause = f"rejected: file format tracekit does not read ({kind})"
        elif any("is over" in line and "captured length" in line for line in flows.stderr):
            # tracekit refuses the whole file; tshark reads the records before the long one.
            cause = "rejected: a record's captured length is over the snaplen or 256 KiB"
        else:
            causes = diagnose(path, {}, ts, limits.tshark_timeout)
            row["causes"] = causes
            cause = f"rejected: {causes[0]}" if causes else "rejected a capture with TCP"
        return row | {"verdict": "fail", "cause": cause}
    try:
        rows = json.loads(flows.stdout)
    except json.JSONDecodeError:
        return row | {"verdict": "fail", "cause": "flows --json is not JSON"}
    row["tcp_connections"] = sum(r.get("proto") == "tcp" for r in rows)
    if not tshark_reads and ts.tcp_packets == 0 and row["tcp_connections"]:
        return row | {"verdict": "unchecked", "cause": "tshark cannot read it"}
    result = compare(rows, ts)
    row["compare"] = result
    if not result["count_differences"] and not result["split_differences"]:
        why = "counts equal" if result["tuples"] else "no TCP in either"
        return row | {"verdict": "pass", "cause": why}
    causes = skipped_warnings(flows) + diagnose(path, result, ts, limits.tshark_timeout)
    row["causes"] = causes
    if result["count_differences"]:
        cause = causes[0] if causes else "counts differ, no cause found"
    else:
        cause = next((c for c in causes if "split" in c), "connections split differently")
    return row | {"verdict": "fail", "cause": cause}


def check_pipeline(path: Path, limits: Limits) -> dict[str, Any]:
    """Phase two, on files with TCP: `tracekit analyze --json` and `tracekit report`."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        commands = {
            "analyze": ["tracekit", "analyze", str(path), "--json"],
            "report": ["tracekit", "report", str(path), "-o", str(Path(tmp) / "r.html")],
        }
        for name, argv in commands.items():
            run = run_limited(argv, limits.timeout, limits.mem_cap, keep_stdout=False)
            out[name] = summary_of(run)
            problem = tracekit_problem(name, run, limits)
            if not problem and run.rc == 2:
                problem = f"{name}: exit 2 on a capture flows reads"
            out[name]["problem"] = problem
    return out


def _phase1(job: tuple[Path, Limits]) -> dict[str, Any]:
    try:
        return check_flows(*job)
    except Exception as e:  # a bug here must not stop the other files' checks
        return {"file": str(job[0]), "verdict": "error", "cause": f"corpus.py: {e!r}"}


def _phase2(job: tuple[Path, Limits]) -> tuple[str, dict[str, Any]]:
    try:
        return str(job[0]), check_pipeline(*job)
    except Exception as e:
        return str(job[0]), {"error": f"corpus.py: {e!r}"}


# --- the run -----------------------------------------------------------------------------------


def find_captures(root: Path) -> list[Path]:
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            with p.open("rb") as f:
                head = f.read(8)
            if is_capture(p.name, head):
                found.append(p)
    return found


def content_key(path: Path) -> str:
    import hashlib

    return hashlib.sha1(path.read_bytes()).hexdigest()


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_corpus(files: list[Path], jobs: int, limits: Limits, json_out: Path | None) -> list[dict]:
    # Projects share captures: each content is checked once and its verdict given to every copy.
    first: dict[str, Path] = {}
    copy_of: dict[Path, Path] = {}
    for p in files:
        copy_of[p] = first.setdefault(content_key(p), p)
    unique = list(first.values())
    log(f"{len(files)} files, {len(unique)} distinct contents, {jobs} jobs")
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    with multiprocessing.Pool(jobs) as pool:
        jobs1 = [(p, limits) for p in unique]
        for n, row in enumerate(pool.imap_unordered(_phase1, jobs1, chunksize=1), 1):
            results[row["file"]] = row
            took = time.monotonic() - started
            verdict = f"{row['verdict']}: {row['file']}: {row['cause']}"
            log(f"[1: {n}/{len(unique)} {took:.0f} s] {verdict}")
        rows = expand(files, copy_of, results)
        if json_out:
            write_json(json_out, rows, limits, time.monotonic() - started)
        tcp = [(Path(f), limits) for f, r in sorted(results.items()) if r.get("tcp_connections")]
        # Round robin over the folders (projects), so a run stopped early has seen them all.
        tcp = round_robin(tcp)
        for n, (f, out) in enumerate(pool.imap_unordered(_phase2, tcp, chunksize=1), 1):
            row = results[f]
            row.update(out)
            problems = [
                out[k]["problem"] for k in ("analyze", "report") if out.get(k, {}).get("problem")
            ]
            if "error" in out:
                problems.append(out["error"])
            if problems and row["verdict"] == "pass":
                row["verdict"], row["cause"] = "fail", problems[0]
            elif problems:
                row["also"] = problems
            took = time.monotonic() - started
            log(f"[2: {n}/{len(tcp)} {took:.0f} s] {'; '.join(problems) or 'ok'}: {f}")
            if json_out and n % 100 == 0:  # a run stopped in phase two keeps what it did
                write_json(json_out, expand(files, copy_of, results), limits, took)
    rows = expand(files, copy_of, results)
    if json_out:
        write_json(json_out, rows, limits, time.monotonic() - started)
    return rows


def round_robin(jobs: list[tuple[Path, Limits]]) -> list[tuple[Path, Limits]]:
    by_folder: dict[Path, list[tuple[Path, Limits]]] = collections.defaultdict(list)
    for job in jobs:
        by_folder[job[0].parent].append(job)
    queues = list(by_folder.values())
    out = []
    for i in range(max(map(len, queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out


def expand(files: list[Path], copy_of: dict[Path, Path], results: dict[str, dict]) -> list[dict]:
    rows = []
    for p in files:
        row = dict(results[str(copy_of[p])])
        if copy_of[p] != p:
            row["file"], row["same_as"] = str(p), str(copy_of[p])
        rows.append(row)
    return rows


def write_json(path: Path, rows: list[dict], limits: Limits, seconds: float) -> None:
    doc = {"seconds": round(seconds, 1), "limits": asdict(limits), "rows": rows}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def cause_class(cause: str) -> str:
    """The cause without what names one instance (which link type, which encapsulation)."""
    m = re.match(r"^(.*does not read)(?:: .*| \(.*\))$", cause)
    return m.group(1) if m else cause


def print_summary(rows: list[dict]) -> None:
    verdicts = collections.Counter(r["verdict"] for r in rows)
    print(
        f"files: {len(rows)}, distinct contents: {len({r.get('same_as', r['file']) for r in rows})}"
    )
    for verdict in ("pass", "fail", "unchecked", "error"):
        group = [r for r in rows if r["verdict"] == verdict]
        if not group:
            continue
        print(f"\n{verdict}: {verdicts[verdict]}")
        by_class: dict[str, list[dict]] = collections.defaultdict(list)
        for r in group:
            by_class[cause_class(r["cause"])].append(r)
        for cls, members in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(members):5d}  {cls}")
            if verdict == "pass":
                continue
            details = collections.Counter(r["cause"] for r in members)
            if len(details) > 1 or cls not in details:
                for cause, n in details.most_common():
                    print(f"         {n:5d}  {cause[len(cls) :].lstrip(': (').rstrip(')')}")
    stages = collections.Counter()
    for r in rows:
        for stage in ("analyze", "report"):
            if stage in r:
                stages[stage] += 1
    if stages:
        print("\nanalyze / report runs: " + ", ".join(f"{k} {v}" for k, v in stages.items()))
    peaks = [
        (r[k]["rss_mib"], r[k]["seconds"], k, r["file"])
        for r in rows
        for k in ("flows", "analyze", "report")
        if k in r and "rss_mib" in r[k]
    ]
    if peaks:
        top = max(peaks)
        print(f"largest peak RSS: {top[0]:.0f} MiB ({top[2]}, {top[3]})")
        slow = max(peaks, key=lambda t: t[1])
        print(f"slowest run: {slow[1]:.1f} s ({slow[2]}, {slow[3]})")
    failing = [r for r in rows if r["verdict"] in ("fail", "unchecked", "error")]
    if failing:
        print("\nfiles that did not pass:")
        for r in sorted(failing, key=lambda r: (cause_class(r["cause"]), r["cause"], r["file"])):
            print(f"  {r['verdict']}: {r['file']}: {r['cause']}")


def main() -> None:
    if sys.argv[1:2] == ["extract"]:
        parser = argparse.ArgumentParser(prog="corpus.py extract")
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("specs", nargs="+", metavar="NAME=GITDIR")
        opts = parser.parse_args(sys.argv[2:])
        extract(opts.out, opts.specs)
        return
    if sys.argv[1:2] == ["readings"]:
        readings(Path(sys.argv[2]), [Path(a) for a in sys.argv[3:]])
        return
    if sys.argv[1:2] == ["changed"]:
        changed(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path, help="folder of captures, searched recursively")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per tracekit run")
    parser.add_argument("--mem-gib", type=float, default=4.0, help="RSS cap per tracekit run")
    parser.add_argument("--tshark-timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--summary", action="store_true", help="DIR is a --json file: summarize it")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="DIR is a --json file: check again the files that did not pass, keep the rest",
    )
    opts = parser.parse_args()
    if opts.summary:
        doc = json.loads(opts.dir.read_text())
        print_summary(doc["rows"])
        print(f"\n{doc['seconds']:.0f} s")
        return
    limits = Limits(opts.timeout, int(opts.mem_gib * GIB), opts.tshark_timeout)
    started = time.monotonic()
    if opts.recheck:
        # After a change to tracekit or to this script, only the files that did not pass are
        # run again; every other row is kept as the earlier run wrote it.
        old = json.loads(opts.dir.read_text())["rows"]
        again = [Path(r["file"]) for r in old if r["verdict"] != "pass"]
        fresh = {r["file"]: r for r in run_corpus(again, opts.jobs, limits, None)}
        rows = [fresh.get(r["file"], r) for r in old]
        if opts.json:
            write_json(opts.json, rows, limits, time.monotonic() - started)
    else:
        rows = run_corpus(find_captures(opts.dir), opts.jobs, limits, opts.json)
    print_summary(rows)
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
