"""Connections: incarnations, orientation, relative numbers, handshake facts, counts.

Crafted captures carry their truth in how they were built; real captures are checked against
tshark (packets and payload bytes per direction) and tcptrace (retransmitted segments).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether

from tests.helpers.crafting import CLIENT, SERVER
from tests.helpers.crafting import tcp as _tcp
from tests.helpers.crafting import write as _write
from tests.helpers.independent import (
    LINKTYPE_LINUX_SLL2,
    conversations,
    real_captures,
    tcptrace_rexmt,
    tshark_directions,
)
from tracekit.capture import read_capture
from tracekit.connections import build_connections, records


def _handshake_transfer(
    t0: float, cport: int, c_isn: int, s_isn: int, segments: int, mss: int = 1000
) -> list[Ether]:
    """Client connects, sends `segments` segments of `mss` bytes, resends the 2nd one."""
    syn_opts = [("MSS", 1460), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (1, 0))]
    out = [
        _tcp(t0, CLIENT, SERVER, cport, 80, "S", c_isn, options=syn_opts),
        _tcp(t0 + 0.01, SERVER, CLIENT, 80, cport, "SA", s_isn, c_isn + 1, options=syn_opts),
        _tcp(t0 + 0.02, CLIENT, SERVER, cport, 80, "A", c_isn + 1, s_isn + 1),
    ]
    for i in range(segments):
        seq = c_isn + 1 + i * mss
        out.append(_tcp(t0 + 0.03 + i * 1e-3, CLIENT, SERVER, cport, 80, "A", seq, s_isn + 1, mss))
    out.append(_tcp(t0 + 0.05, CLIENT, SERVER, cport, 80, "A", c_isn + 1 + mss, s_isn + 1, mss))
    end = c_isn + 1 + segments * mss
    out.append(_tcp(t0 + 0.06, SERVER, CLIENT, 80, cport, "A", s_isn + 1, end))
    out.append(_tcp(t0 + 0.07, CLIENT, SERVER, cport, 80, "FA", end, s_isn + 1))
    out.append(_tcp(t0 + 0.08, SERVER, CLIENT, 80, cport, "FA", s_isn + 1, end + 1))
    out.append(_tcp(t0 + 0.09, CLIENT, SERVER, cport, 80, "A", end + 1, s_isn + 2))
    return out


def test_handshake_orientation_relative_numbers_and_retransmission(tmp_path: Path) -> None:
    # The server's SYN-ACK and data come first in the file only after the client's SYN.
    pcap = _write(tmp_path / "one.pcap", _handshake_transfer(100.0, 40000, 5000, 90000, 4))
    conns = build_connections(read_capture(pcap))
    (row,) = records(conns.table)
    assert (row["a"], row["b"]) == (f"{CLIENT}:40000", f"{SERVER}:80")
    assert (row["packets_a2b"], row["packets_b2a"]) == (9, 3)
    assert (row["bytes_a2b"], row["bytes_b2a"]) == (5000, 0)
    assert (row["retrans_a2b"], row["retrans_b2a"]) == (1, 0)
    assert (row["mss_a"], row["mss_b"]) == (1460, 1460)
    assert (row["ws_a"], row["ws_b"], row["ws_state"]) == (7, 7, "known")
    assert row["sack_ok"] and row["ts_ok"] and row["syn_seen"] and row["synack_seen"]
    assert (row["isn_a"], row["isn_b"]) == (5000, 90000)
    assert not row["tso"]
    pk = conns.packets.to_pandas()
    data = pk[(pk.dir == 0) & (pk.payload_bytes > 0)]
    assert data.seq_rel.tolist() == [1, 1001, 2001, 3001, 1001]
    # The server's last ACK covers 4000 bytes plus the SYN; its FIN acknowledges the client FIN.
    assert pk[pk.dir == 1].ack_rel.tolist() == [1, 4001, 4002]
    assert abs(row["duration_s"] - 0.09) < 1e-6


def test_sequence_numbers_unwrap_across_4gib(tmp_path: Path) -> None:
    isn = 2**32 - 2500  # the third segment crosses the wrap
    pcap = _write(tmp_path / "wrap.pcap", _handshake_transfer(1.0, 40001, isn, 7, 5))
    conns = build_connections(read_capture(pcap))
    pk = conns.packets.to_pandas()
    data = pk[(pk.dir == 0) & (pk.payload_bytes > 0)]
    assert data.seq_rel.tolist() == [1, 1001, 2001, 3001, 4001, 1001]
    (row,) = records(conns.table)
    assert row["retrans_a2b"] == 1
    assert row["isn_a"] == isn


def test_port_reuse_gives_two_connections(tmp_path: Path) -> None:
    first = _handshake_transfer(1.0, 40002, 1000, 2000, 3)
    # The same 4-tuple again, new ISNs; its SYN is sent twice (a SYN retransmission).
    second = _handshake_transfer(5.0, 40002, 777777, 888888, 2)
    second.insert(1, second[0].copy())
    second[1].time = 5.001
    pcap = _write(tmp_path / "reuse.pcap", first + second)
    rows = records(build_connections(read_capture(pcap)).table)
    assert len(rows) == 2
    assert [r["isn_a"] for r in rows] == [1000, 777777]
    assert [r["packets_a2b"] for r in rows] == [8, 8]
    assert [r["bytes_a2b"] for r in rows] == [4000, 3000]
    assert rows[1]["start_s"] == pytest.approx(4.0)


def test_missing_handshake_leaves_window_scale_unknown(tmp_path: Path) -> None:
    full = _handshake_transfer(1.0, 40003, 1000, 2000, 4)
    # The capture starts after the handshake: the server's ACK comes first.
    mid = [full[8], *full[3:8], *full[9:]]
    rows = records(build_connections(read_capture(_write(tmp_path / "mid.pcap", mid))).table)
    (row,) = rows
    assert row["ws_state"] == "unknown" and row["ws_a"] is None
    assert not row["syn_seen"]
    # Without a SYN, side a is the first packet's source: here the server.
    assert row["a"] == f"{SERVER}:80"
    assert row["mss_a"] == 0 and row["mss_b"] == 0


def test_handshake_without_window_scale_is_absent(tmp_path: Path) -> None:
    pkts = [
        _tcp(0.0, CLIENT, SERVER, 40004, 80, "S", 10, options=[("MSS", 1460)]),
        _tcp(0.1, SERVER, CLIENT, 80, 40004, "SA", 20, 11, options=[("MSS", 1400)]),
        _tcp(0.2, CLIENT, SERVER, 40004, 80, "A", 11, 21, 1400),
        _tcp(0.3, CLIENT, SERVER, 40004, 80, "A", 1411, 21, 2800),  # larger than the MSS: GRO/TSO
    ]
    (row,) = records(build_connections(read_capture(_write(tmp_path / "nows.pcap", pkts))).table)
    assert row["ws_state"] == "absent"
    assert (row["mss_a"], row["mss_b"]) == (1460, 1400)
    assert row["tso"]
    assert not row["sack_ok"]


def test_ipv6_endpoints_are_bracketed(tmp_path: Path) -> None:
    pkts = [
        _tcp(0.0, "2001:db8::1", "2001:db8::2", 5555, 443, "S", 1),
        _tcp(0.1, "2001:db8::2", "2001:db8::1", 443, 5555, "SA", 9, 2),
    ]
    (row,) = records(build_connections(read_capture(_write(tmp_path / "v6.pcap", pkts))).table)
    assert (row["a"], row["b"]) == ("[2001:db8::1]:5555", "[2001:db8::2]:443")
    assert row["ip_version"] == 6


# --- real kernel captures, against independent tools -------------------------------------------


def test_real_captures_exist() -> None:
    assert real_captures(), "no real kernel captures under fixtures/"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("path", real_captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_counts_agree_with_tshark(path: Path) -> None:
    rows = [r for r in records(build_connections(read_capture(path)).table) if r["proto"] == "tcp"]
    theirs = tshark_directions(path)
    assert len(rows) == theirs.index.get_level_values("stream").nunique()
    ours = {}
    for r in rows:
        ours[(r["a"], r["b"])] = (r["packets_a2b"], r["bytes_a2b"])
        ours[(r["b"], r["a"])] = (r["packets_b2a"], r["bytes_b2a"])
    # One incarnation per 4-tuple in these captures, so (source, destination) names a direction.
    for (_, src, dst), t in theirs.iterrows():
        assert ours[(src, dst)] == (t.packets, t.bytes), (src, dst)


@pytest.mark.skipif(shutil.which("tcptrace") is None, reason="tcptrace is not installed")
@pytest.mark.parametrize("path", real_captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_retransmissions_agree_with_tcptrace(path: Path) -> None:
    capture = read_capture(path)
    if LINKTYPE_LINUX_SLL2 in capture.link_types:
        pytest.skip("tcptrace 6.6.7 (2004) cannot read Linux cooked v2 captures")
    theirs = tcptrace_rexmt(path)
    rows = [r for r in records(build_connections(capture).table) if r["proto"] == "tcp"]
    assert len(rows) == len(theirs)
    for r in rows:
        if (r["a"], r["b"]) in theirs:
            assert (r["retrans_a2b"], r["retrans_b2a"]) == theirs[(r["a"], r["b"])]
        else:
            assert (r["retrans_b2a"], r["retrans_a2b"]) == theirs[(r["b"], r["a"])]


def test_ranked_puts_the_first_then_the_busiest_in_connection_order(tmp_path: Path) -> None:
    from tracekit.connections import ranked

    packets = []
    for i, size in enumerate((100, 5000, 0, 3000, 200)):
        port, t = 40000 + i, 1.0 + i
        packets += [
            _tcp(t, CLIENT, SERVER, port, 80, "S", 0),
            _tcp(t + 0.1, SERVER, CLIENT, 80, port, "SA", 0, 1),
            _tcp(t + 0.2, CLIENT, SERVER, port, 80, "A", 1, 1, size),
        ]
    table = build_connections(read_capture(_write(tmp_path / "five.pcap", packets))).table
    assert ranked(table, set(), 2) == [1, 3]
    assert ranked(table, {2}, 2) == [1, 2]
    assert ranked(table, {2, 0}, 3) == [0, 1, 2]
    assert ranked(table, set(), 10) == [0, 1, 2, 3, 4]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_a_syn_ack_captured_before_its_syn_is_one_connection(tmp_path: Path) -> None:
    # Two interfaces' packets merged by a coarse clock: the SYN-ACK is written first. It
    # answers the SYN (ack = ISN + 1), so the client is side a all the same (RFC 9293 3.5).
    pkts = _handshake_transfer(100.0, 40000, 5000, 90000, 4)
    pkts[0].time, pkts[1].time = pkts[1].time, pkts[0].time
    pkts[0], pkts[1] = pkts[1], pkts[0]
    pcap = _write(tmp_path / "synack_first.pcap", pkts)
    conns = build_connections(read_capture(pcap))
    (row,) = records(conns.table)
    assert (row["a"], row["b"]) == (f"{CLIENT}:40000", f"{SERVER}:80")
    assert (row["packets_a2b"], row["packets_b2a"]) == (9, 3)
    assert (row["isn_a"], row["isn_b"]) == (5000, 90000)
    assert row["syn_seen"] and row["synack_seen"]
    assert len(conversations(pcap)) == 1


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_a_simultaneous_open_is_one_connection(tmp_path: Path) -> None:
    # RFC 9293 3.5 figure 8: both ends send a SYN, each answers the other's with a SYN-ACK.
    opts = [("MSS", 1460), ("SAckOK", b"")]
    a_isn, b_isn = 100, 300
    pkts = [
        _tcp(1.00, CLIENT, SERVER, 7000, 7001, "S", a_isn, options=opts),
        _tcp(1.01, SERVER, CLIENT, 7001, 7000, "S", b_isn, options=opts),
        _tcp(1.02, CLIENT, SERVER, 7000, 7001, "SA", a_isn, b_isn + 1, options=opts),
        _tcp(1.03, SERVER, CLIENT, 7001, 7000, "SA", b_isn, a_isn + 1, options=opts),
        _tcp(1.04, CLIENT, SERVER, 7000, 7001, "A", a_isn + 1, b_isn + 1, payload=500),
        _tcp(1.05, SERVER, CLIENT, 7001, 7000, "A", b_isn + 1, a_isn + 501),
        # The same 4-tuple later: the server end opens a new incarnation (port reuse).
        _tcp(9.00, SERVER, CLIENT, 7001, 7000, "S", 7777, options=opts),
    ]
    pcap = _write(tmp_path / "simultaneous.pcap", pkts)
    conns = build_connections(read_capture(pcap))
    first, second = records(conns.table)
    assert (first["a"], first["b"]) == (f"{CLIENT}:7000", f"{SERVER}:7001")
    assert (first["packets_a2b"], first["packets_b2a"]) == (3, 3)
    assert (first["isn_a"], first["isn_b"]) == (a_isn, b_isn)
    assert first["bytes_a2b"] == 500
    assert (second["a"], second["packets_a2b"], second["isn_a"]) == (f"{SERVER}:7001", 1, 7777)


def test_a_capture_that_starts_mid_connection_numbers_from_its_earliest_byte(
    tmp_path: Path,
) -> None:
    # The capture starts with the server's ACK of bytes sent before it (the client's in-flight
    # data of the last round trip), then the client's next segment. The direction's line
    # starts at the earlier of the two (RFC 9293 3.4): no number falls before it.
    c_isn, s_isn = 7000, 90000
    pkts = [
        _tcp(1.00, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 1 + 500_000),
        _tcp(1.01, CLIENT, SERVER, 40000, 80, "A", c_isn + 1 + 740_000, s_isn + 1, 1000),
        _tcp(1.02, SERVER, CLIENT, 80, 40000, "A", s_isn + 1, c_isn + 1 + 502_000),
        _tcp(1.03, CLIENT, SERVER, 40000, 80, "A", c_isn + 1 + 741_000, s_isn + 1, 1000),
    ]
    conns = build_connections(read_capture(_write(tmp_path / "mid.pcap", pkts)))
    pk = conns.packets.to_pandas()
    client = pk[pk.payload_bytes > 0]
    acks = pk[pk.payload_bytes == 0]
    assert (acks.ack_rel.to_numpy() == [1, 2001]).all()
    assert (client.seq_rel.to_numpy() == [240_001, 241_001]).all()
    (row,) = records(conns.table)
    assert row["ws_state"] == "unknown"
