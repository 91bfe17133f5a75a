"""Find the same connections and the same transmissions in a sender and a receiver capture.

Connections are matched by their endpoints (after mapping NAT'd sender addresses to what the
receiver sees) and, for a 4-tuple used several times, by incarnation order. Transmissions are
matched, not sequence ranges: a retransmission is a new packet with its own IP ID and TCP
timestamp, so the key is (direction, sequence and acknowledgment numbers, length, flags, IP ID,
TSval, first UDP payload bytes) plus the arrival order among packets with equal keys. Passes
relax the key for rewriting middleboxes (NAT rewrites IP IDs), then match by byte range for
segments the sender's NIC split (TSO) or the receiver's merged (GRO).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.core.band import band
from tracekit.errors import TracekitError
from tracekit.schema import PROTO_TCP, WRAP

_ENDPOINT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<v4>[^:\[\]]+)):(?P<port>\d+)$")
_HALF = np.int64(1 << 31)

# Key columns of the matching passes, strictest first. IP ID and TSval tell a retransmission
# from the original (Linux gives each packet of a socket the next IP ID, RFC 6864 4.2, and
# each millisecond a new TSval, RFC 7323 5.4); NAT may rewrite the IP ID; a middlebox that
# rewrites TCP options or numbers leaves only (sequence, length) and the arrival order.
_PASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("exact", ("cd", "seq", "ack", "len", "flags", "ip_id", "tsval", "head")),
    ("no_ip_id", ("cd", "seq", "ack", "len", "flags", "tsval", "head")),
    ("range", ("cd", "seq", "len")),
)


def parse_map(items: Iterable[str], label: str = "--map") -> dict[str, str]:
    """`SENDER_ADDR=RECEIVER_ADDR` strings (an address or ip:port on each side) as a dict.

    `label` names where the rules came from in an error (the option, or a manifest's key).
    """
    out: dict[str, str] = {}
    for item in items:
        left, sep, right = item.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise TracekitError(f"{label} {item!r}: expected SENDER_ADDR=RECEIVER_ADDR")
        out[left.strip()] = right.strip()
    return out


def _split(endpoint: str) -> tuple[str, str]:
    m = _ENDPOINT.match(endpoint)
    if m is None:
        return endpoint, ""
    return m.group("v6") or m.group("v4"), m.group("port")


def _join(addr: str, port: str) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def map_endpoint(endpoint: str, addr_map: Mapping[str, str]) -> str:
    """A sender-side endpoint as the receiver sees it: a whole ip:port rule wins over an address."""
    if endpoint in addr_map:
        return addr_map[endpoint]
    addr, port = _split(endpoint)
    if addr in addr_map:
        target = addr_map[addr]
        t_addr, t_port = _split(target)
        return _join(t_addr, t_port) if t_port else _join(target.strip("[]"), port)
    return endpoint


@dataclass(frozen=True)
class ConnectionMatch:
    """Connections seen in both captures, and the ones seen in one only.

    `pairs` has one row per connection in both: conn_s (sender capture's connection), conn_r
    (the receiver capture's), flip (the receiver capture calls a what the sender's calls b).
    """

    pairs: pd.DataFrame
    sender_only: tuple[int, ...]
    receiver_only: tuple[int, ...]


def match_connections(
    sender: pa.Table, receiver: pa.Table, addr_map: Mapping[str, str] | None = None
) -> ConnectionMatch:
    """Match the rows of two connections tables by protocol, endpoints and incarnation order."""
    addr_map = addr_map or {}
    s = sender.select(["conn", "proto", "a", "b", "start_ns"]).to_pandas()
    r = receiver.select(["conn", "proto", "a", "b", "start_ns"]).to_pandas()
    s["a"] = [map_endpoint(e, addr_map) for e in s["a"]]
    s["b"] = [map_endpoint(e, addr_map) for e in s["b"]]
    for df in (s, r):
        lo = np.minimum(df["a"].to_numpy(dtype=object), df["b"].to_numpy(dtype=object))
        hi = np.maximum(df["a"].to_numpy(dtype=object), df["b"].to_numpy(dtype=object))
        df["lo"], df["hi"] = lo, hi
    s, r = (df.sort_values(["start_ns", "conn"]) for df in (s, r))
    for df in (s, r):
        # Reused 4-tuples: the n-th incarnation in one capture is the n-th in the other.
        df["nth"] = df.groupby(["proto", "lo", "hi"]).cumcount()
    both = s.merge(r, on=["proto", "lo", "hi", "nth"], suffixes=("_s", "_r"))
    pairs = pd.DataFrame(
        {
            "conn_s": both["conn_s"].to_numpy(np.int64),
            "conn_r": both["conn_r"].to_numpy(np.int64),
            "flip": (both["a_s"] != both["a_r"]).to_numpy(bool),
        }
    ).sort_values("conn_s", ignore_index=True)
    return ConnectionMatch(
        pairs=pairs,
        sender_only=tuple(sorted(set(s["conn"].tolist()) - set(pairs["conn_s"].tolist()))),
        receiver_only=tuple(sorted(set(r["conn"].tolist()) - set(pairs["conn_r"].tolist()))),
    )


def _signed(delta: np.ndarray) -> np.ndarray:
    return (delta + _HALF) % WRAP - _HALF


def packet_frame(packets: pa.Table, udp: pa.Table) -> pd.DataFrame:
    """The columns matching reads, one row per packet (its row number in `row`)."""
    n = packets.num_rows
    head = np.zeros(n, dtype=np.uint64)
    if udp.num_rows:
        head[udp.column("row").to_numpy().astype(np.int64)] = udp.column("head").to_numpy()
    return pd.DataFrame(
        {
            "row": np.arange(n, dtype=np.int64),
            "ts_ns": packets.column("ts_ns").to_numpy(),
            "conn": packets.column("conn").to_numpy().astype(np.int64),
            "dir": packets.column("dir").to_numpy().astype(np.int64),
            "tcp": packets.column("proto").to_numpy() == PROTO_TCP,
            "seq": packets.column("seq_rel").to_numpy(),
            "ack": packets.column("ack_rel").to_numpy(),
            "len": packets.column("payload_bytes").to_numpy().astype(np.int64),
            "flags": packets.column("tcp_flags").to_numpy().astype(np.int64),
            "ip_id": packets.column("ip_id").to_numpy().astype(np.int64),
            "tsval": packets.column("tsval").to_numpy().astype(np.int64),
            "head": head.view(np.int64),
        }
    )


def receiver_in_sender_terms(
    rcv: pd.DataFrame, pairs: pd.DataFrame, sender_isn: np.ndarray, receiver_isn: np.ndarray
) -> pd.DataFrame:
    """Receiver packets of matched connections, renamed to the sender's conn, dir and seq base.

    `*_isn` are (n_conn, 2) arrays of the ISN per connection and direction (a2b, b2a). Sequence
    numbers are relative to each capture's own view of the ISN; the raw numbers are the same on
    the wire, so the receiver's are moved by the signed difference of the two bases.
    """
    conn_s = np.full(receiver_isn.shape[0], -1, dtype=np.int64)
    flip = np.zeros(receiver_isn.shape[0], dtype=np.int64)
    conn_s[pairs["conn_r"].to_numpy()] = pairs["conn_s"].to_numpy()
    flip[pairs["conn_r"].to_numpy()] = pairs["flip"].to_numpy()
    out = rcv[conn_s[rcv["conn"].to_numpy()] >= 0].copy()
    c_r = out["conn"].to_numpy()
    d_r = out["dir"].to_numpy()
    c_s = conn_s[c_r]
    d_s = d_r ^ flip[c_r]
    shift_seq = _signed(receiver_isn[c_r, d_r] - sender_isn[c_s, d_s])
    shift_ack = _signed(receiver_isn[c_r, 1 - d_r] - sender_isn[c_s, 1 - d_s])
    tcp = out["tcp"].to_numpy()
    out["conn"], out["dir"] = c_s, d_s
    out["seq"] = np.where(tcp, out["seq"].to_numpy() + shift_seq, 0)
    out["ack"] = np.where(tcp, out["ack"].to_numpy() + shift_ack, 0)
    return out


def match_packets(snd: pd.DataFrame, rcv: pd.DataFrame) -> pd.DataFrame:
    """Pairs (s_row, r_row, how) of the same packet in both captures.

    `snd` and `rcv` are `packet_frame`s, rcv already in sender terms. Each pass matches what
    the stricter ones left; the k-th unmatched packet with a key at the sender is the k-th with
    that key at the receiver. The last pass, "bytes", pairs what is left by byte range: a
    receiver segment inside a larger sender one (TSO) or a sender segment inside a larger
    receiver one (GRO); one packet may then pair with several.
    """
    snd = snd.assign(cd=snd["conn"] * 2 + snd["dir"]).sort_values("ts_ns", kind="stable")
    rcv = rcv.assign(cd=rcv["conn"] * 2 + rcv["dir"]).sort_values("ts_ns", kind="stable")
    s_left = np.ones(len(snd), dtype=bool)
    r_left = np.ones(len(rcv), dtype=bool)
    s_pos = pd.Series(np.arange(len(snd)), index=snd["row"].to_numpy())
    r_pos = pd.Series(np.arange(len(rcv)), index=rcv["row"].to_numpy())
    found: list[pd.DataFrame] = []
    for how, keys in _PASSES:
        s_sub = snd[s_left]
        r_sub = rcv[r_left]
        if how == "range":  # only data: pure ACKs are too alike to pair without IP ID or TSval
            s_sub = s_sub[s_sub["len"] > 0]
            r_sub = r_sub[r_sub["len"] > 0]
        if s_sub.empty or r_sub.empty:
            continue
        cols = [*keys, "row"]
        a = s_sub[cols].assign(nth=s_sub.groupby(list(keys), sort=False).cumcount())
        b = r_sub[cols].assign(nth=r_sub.groupby(list(keys), sort=False).cumcount())
        m = a.merge(b, on=[*keys, "nth"], suffixes=("_s", "_r"))
        if m.empty:
            continue
        found.append(pd.DataFrame({"s_row": m["row_s"], "r_row": m["row_r"], "how": how}))
        s_left[s_pos[m["row_s"].to_numpy()].to_numpy()] = False
        r_left[r_pos[m["row_r"].to_numpy()].to_numpy()] = False
    found += _by_byte_range(
        snd[s_left & (snd["len"] > 0).to_numpy()], rcv[r_left & (rcv["len"] > 0).to_numpy()]
    )
    if not found:
        return pd.DataFrame(
            {"s_row": np.zeros(0, np.int64), "r_row": np.zeros(0, np.int64), "how": []}
        )
    return pd.concat(found, ignore_index=True)


def _inside(inner: pd.DataFrame, outer: pd.DataFrame) -> pd.DataFrame:
    """Each inner segment with the outer segment of its direction that starts at or before it
    and ends at or after it (the latest-starting such one), where there is one."""
    if inner.empty or outer.empty:
        return pd.DataFrame({"row_in": [], "row_out": []}, dtype=np.int64)
    # Band by direction so one sorted search respects directions.
    i_key = band(inner["cd"].to_numpy(), inner["seq"].to_numpy())
    o_order = np.lexsort((outer["seq"].to_numpy(), outer["cd"].to_numpy()))
    o_key = band(outer["cd"].to_numpy(), outer["seq"].to_numpy())[o_order]
    o_end = (outer["seq"].to_numpy() + outer["len"].to_numpy())[o_order]
    o_cd = outer["cd"].to_numpy()[o_order]
    o_row = outer["row"].to_numpy()[o_order]
    pos = np.searchsorted(o_key, i_key, side="right") - 1
    ok = pos >= 0
    p = np.maximum(pos, 0)
    i_end = inner["seq"].to_numpy() + inner["len"].to_numpy()
    ok &= (o_cd[p] == inner["cd"].to_numpy()) & (o_end[p] >= i_end)
    return pd.DataFrame({"row_in": inner["row"].to_numpy()[ok], "row_out": o_row[p[ok]]})


def _by_byte_range(snd: pd.DataFrame, rcv: pd.DataFrame) -> list[pd.DataFrame]:
    out = []
    tso = _inside(rcv, snd)  # receiver pieces of a sender super-segment
    if len(tso):
        out.append(pd.DataFrame({"s_row": tso["row_out"], "r_row": tso["row_in"], "how": "bytes"}))
    gro = _inside(snd, rcv[~rcv["row"].isin(tso["row_in"])])  # sender segments merged on arrival
    if len(gro):
        out.append(pd.DataFrame({"s_row": gro["row_in"], "r_row": gro["row_out"], "how": "bytes"}))
    return out
