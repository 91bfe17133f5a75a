"""A simulated transfer written as a classic pcap file, bytes laid out with numpy.

Every frame is Ethernet, IPv4 and a 32-byte TCP header (12 bytes of options: MSS, SACK-permitted
and window scale on the handshake, a SACK block or padding on the rest), cut after the headers
as `tcpdump -s 66` would cut it: the IP total length still counts the payload, so the reader
finds each segment's length as in any snaplen-truncated capture. The file is then read by the
real reader and analysed by the real pipeline; nothing of tracekit writes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.simulated_series import Scenario, View

CLIENT, SERVER = (192, 0, 2, 1), (198, 51, 100, 7)  # RFC 5737 documentation addresses
CLIENT_PORT, SERVER_PORT = 40000, 5001
CLIENT_ISN, SERVER_ISN = 0xFFFF0000, 0x10000000  # the client's wraps early on
WSCALE = 7  # RFC 7323 2: windows in bytes >> 7 on the wire
EPOCH_S = 1_700_000_000.0
SNAPLEN = 66  # Ethernet 14 + IPv4 20 + TCP 32: headers only

TH_SYN, TH_ACK = 0x02, 0x10

RECORD = np.dtype(
    [
        ("ts_sec", "<u4"),
        ("ts_usec", "<u4"),
        ("incl_len", "<u4"),
        ("orig_len", "<u4"),
        ("eth_dst", "u1", 6),
        ("eth_src", "u1", 6),
        ("eth_type", ">u2"),
        ("ip_vhl", "u1"),
        ("ip_tos", "u1"),
        ("ip_len", ">u2"),
        ("ip_id", ">u2"),
        ("ip_frag", ">u2"),
        ("ip_ttl", "u1"),
        ("ip_proto", "u1"),
        ("ip_sum", ">u2"),
        ("ip_src", "u1", 4),
        ("ip_dst", "u1", 4),
        ("sport", ">u2"),
        ("dport", ">u2"),
        ("seq", ">u4"),
        ("ack", ">u4"),
        ("off", "u1"),
        ("flags", "u1"),
        ("win", ">u2"),
        ("tcp_sum", ">u2"),
        ("urg", ">u2"),
        ("opts", "u1", 12),
    ]
)
assert RECORD.itemsize == 16 + SNAPLEN

# RFC 9293 3.2: MSS (kind 2), SACK-permitted (4), NOP (1), window scale (3), two NOPs.
SYN_OPTIONS = [2, 4, 0, 0, 4, 2, 1, 3, 3, WSCALE, 1, 1]
NOPS = [1] * 12


def write_pcap(v: View, path: Path, scenario: Scenario, chunk: int = 1 << 20) -> int:
    """Write the sender's capture of a view (handshake, data and the receiver's ACKs) to `path`,
    in time order; returns the number of frames written."""
    mss = scenario.mss_bytes
    first = (scenario.rtt_s, 0.0, 0.0)  # SYN one RTT before the SYN-ACK, ACK with the first data
    # Every packet after the handshake, in time order (an ACK before data at a tie); the view's
    # first ACK is the SYN-ACK's, written with the handshake.
    t = np.r_[v.ack_t[1:], v.data_t]
    from_client = np.r_[np.zeros(len(v.ack_t) - 1, bool), np.ones(len(v.data_t), bool)]
    rel = np.r_[v.ack_rel[1:], v.seq_rel]
    payload = np.r_[np.zeros(len(v.ack_t) - 1, np.int64), v.len_bytes]
    win = np.r_[v.win_bytes[1:], np.full(len(v.data_t), 65535 << WSCALE)]
    left, right = np.r_[v.sack_left[1:], 0 * v.seq_rel], np.r_[v.sack_right[1:], 0 * v.seq_rel]
    order = np.argsort(t, kind="stable")
    total = 3 + len(order)
    with path.open("wb") as out:
        # Classic pcap, microseconds, little-endian; link type 1 (Ethernet).
        out.write(np.array([0xA1B2C3D4], "<u4").tobytes())
        out.write(np.array([2, 4], "<u2").tobytes())
        out.write(np.array([0, 0, SNAPLEN, 1], "<u4").tobytes())
        handshake = np.zeros(3, RECORD)
        hs_t = np.array([-first[0], 0.0, 0.0])
        _fill(handshake, hs_t, np.array([True, False, True]), np.zeros(3, np.int64), 0)
        handshake["seq"] = [CLIENT_ISN, SERVER_ISN, CLIENT_ISN + 1]
        handshake["ack"] = [0, CLIENT_ISN + 1, SERVER_ISN + 1]
        handshake["flags"] = [TH_SYN, TH_SYN | TH_ACK, TH_ACK]
        handshake["win"] = [65535, min(int(v.win_bytes[0]), 65535), 65535 >> WSCALE]
        handshake["opts"][:2] = SYN_OPTIONS
        handshake["opts"][:2, 2:4] = [[mss >> 8, mss & 0xFF]] * 2
        handshake["opts"][2] = NOPS
        out.write(handshake.tobytes())
        for lo in range(0, len(order), chunk):
            rows = order[lo : lo + chunk]
            rec = np.zeros(len(rows), RECORD)
            client = from_client[rows]
            _fill(rec, t[rows], client, payload[rows], 3 + lo)
            isn = np.where(client, CLIENT_ISN, SERVER_ISN)
            peer_isn = np.where(client, SERVER_ISN, CLIENT_ISN)
            # Data carries the client's sequence and acknowledges the server's SYN; an ACK
            # carries the server's next sequence and acknowledges the client's bytes.
            rec["seq"] = np.where(client, isn + rel[rows], peer_isn + 1) % (1 << 32)
            rec["ack"] = np.where(client, peer_isn + 1, CLIENT_ISN + rel[rows]) % (1 << 32)
            rec["flags"] = TH_ACK
            rec["win"] = np.minimum(win[rows] >> WSCALE, 65535)
            opts = np.tile(np.array(NOPS, np.uint8), (len(rows), 1))
            block = right[rows] > 0
            # RFC 2018 3: two NOPs, then kind 5, length 10, left and right edge.
            opts[block, 2:4] = [5, 10]
            edges = np.stack([left[rows][block], right[rows][block]], axis=1)
            raw = ((CLIENT_ISN + edges) % (1 << 32)).astype(">u4")
            opts[block, 4:12] = raw.view(np.uint8).reshape(-1, 8)
            rec["opts"] = opts
            out.write(rec.tobytes())
    return total


def _fill(
    rec: np.ndarray, t: np.ndarray, client: np.ndarray, payload: np.ndarray, first_id: int
) -> None:
    """The fields every frame sets alike: times, lengths, addresses, ports, header sizes."""
    stamp = np.rint((EPOCH_S + t) * 1e6).astype(np.int64)
    rec["ts_sec"] = stamp // 1_000_000
    rec["ts_usec"] = stamp % 1_000_000
    rec["incl_len"] = SNAPLEN
    rec["orig_len"] = SNAPLEN + payload
    rec["eth_dst"] = np.where(client[:, None], 2, 1) * np.ones(6, np.uint8)
    rec["eth_src"] = np.where(client[:, None], 1, 2) * np.ones(6, np.uint8)
    rec["eth_type"] = 0x0800
    rec["ip_vhl"] = 0x45
    rec["ip_len"] = 20 + 32 + payload
    rec["ip_id"] = (first_id + np.arange(len(rec))) % (1 << 16)
    rec["ip_frag"] = 0x4000  # don't fragment
    rec["ip_ttl"] = 64
    rec["ip_proto"] = 6
    rec["ip_src"] = np.where(client[:, None], CLIENT, SERVER)
    rec["ip_dst"] = np.where(client[:, None], SERVER, CLIENT)
    rec["sport"] = np.where(client, CLIENT_PORT, SERVER_PORT)
    rec["dport"] = np.where(client, SERVER_PORT, CLIENT_PORT)
    rec["off"] = (32 // 4) << 4
