"""retransmissions: counts against truth.json and tcptrace on the lab, classes on crafted cases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scapy.layers.inet import IP

from fixtures.crafted import amsdu
from fixtures.lab.readings import tcptrace_retransmissions
from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.lab_captures import CAPTURES, context, lab_findings, truth
from tracekit.detectors import run_detectors
from tracekit.detectors.retransmissions import CLASSES, REASONS, Retransmissions
from tracekit.findings import Finding

LOSSY = ("slow_start_overrun", "network_drops", "receiver_drops", "bursty_sender")


@pytest.mark.parametrize("name", LOSSY)
def test_lab_count_and_classes_match_the_kernel(name: str) -> None:
    findings = lab_findings(name, Retransmissions)
    assert [(f.conn, f.direction) for f in findings] == [(0, "a2b")]
    ev = findings[0].evidence
    resent = truth(name)["retransmissions"]
    # tcpi_total_retrans counts every resent segment, probes included.
    assert ev["retransmitted_segments"] == resent["segments"]
    # Linux counted no timeout and no probe in these runs: every resend was ACK-triggered.
    assert resent["rto_timeouts"] == 0 and resent["tail_loss_probes"] == 0
    assert ev["rto_count"] == 0 and ev["tail_loss_probe_count"] == 0
    # Every drop was a real loss (tbf or nftables counted it), so none was needless.
    assert ev["spurious_count"] == 0 and ev["reordering_count"] == 0
    assert ev["fast_retransmit_count"] == resent["segments"]
    assert ev["listed_count"] == resent["segments"]
    assert len(ev["listed_t_s"]) == len(ev["listed_reason_code"]) == resent["segments"]


@pytest.mark.skipif(not shutil.which("tcptrace"), reason="tcptrace not installed")
@pytest.mark.parametrize("name", LOSSY)
def test_lab_count_matches_tcptrace(name: str) -> None:
    ev = lab_findings(name, Retransmissions)[0].evidence
    assert ev["retransmitted_segments"] == tcptrace_retransmissions(CAPTURES / name / "sender.pcap")


@pytest.mark.parametrize("name", ["clean", "window_limited", "paced_sender"])
def test_lab_quiet_without_retransmissions(name: str) -> None:
    assert truth(name)["retransmissions"]["segments"] == 0
    assert lab_findings(name, Retransmissions) == []


# --- crafted cases: one connection per behaviour, its class known by construction -----------

C_ISN, S_ISN = 1000, 5000
OPTS = [("MSS", 1000), ("WScale", 0), ("SAckOK", b""), ("Timestamp", (1, 0))]


class Conn:
    """One crafted connection on its own client port; times are offsets from `t0`."""

    def __init__(self, port: int, t0: float) -> None:
        self.port, self.t0, self.packets = port, t0, []
        self.packets.append(tcp(t0, CLIENT, SERVER, port, 80, "S", C_ISN, 0, 0, OPTS))
        self.packets.append(
            tcp(t0 + 0.1, SERVER, CLIENT, 80, port, "SA", S_ISN, C_ISN + 1, 0, OPTS)
        )

    def data(self, t: float, rel: int, tsval: int) -> Conn:
        opts: list[tuple[str, object]] = [("Timestamp", (tsval, 0))]
        self.packets.append(
            tcp(self.t0 + t, CLIENT, SERVER, self.port, 80, "A", C_ISN + rel, S_ISN + 1, 1000, opts)
        )
        return self

    def ack(self, t: float, rel: int, tsecr: int, sack: tuple[tuple[int, int], ...] = ()) -> Conn:
        opts: list[tuple[str, object]] = [("Timestamp", (9, tsecr))]
        if sack:
            opts.append(("SAck", tuple(C_ISN + e for block in sack for e in block)))
        self.packets.append(
            tcp(self.t0 + t, SERVER, CLIENT, 80, self.port, "A", S_ISN + 1, C_ISN + rel, 0, opts)
        )
        return self


def five(c: Conn) -> Conn:
    """Five segments 1..5001 at 1.000-1.004 s with TSvals 10..14."""
    for i in range(5):
        c.data(1.0 + i * 0.001, 1 + 1000 * i, 10 + i)
    return c


def crafted() -> list[Conn]:
    rto = five(Conn(40001, 0.0))
    # The first two are ACKed after 100 ms, then silence: the timer resends the head (2001),
    # then the ACKs clock out the rest in slow start below what was outstanding (5001).
    rto.ack(1.100, 1001, 10).ack(1.101, 2001, 11)
    rto.data(1.500, 2001, 50).ack(1.600, 3001, 50).data(1.60001, 3001, 60)
    rto.ack(1.700, 6001, 60)

    tlp = five(Conn(40002, 10.0))
    # All but the last two are ACKed; after 250 ms of silence the last segment is resent.
    tlp.ack(1.100, 1001, 10).ack(1.101, 2001, 11).ack(1.102, 3001, 12)
    tlp.data(1.350, 4001, 40).ack(1.450, 6001, 40)

    dupacks = five(Conn(40003, 20.0))
    # 2001 is lost; three duplicate ACKs (no SACK) trigger its resend 10 us later.
    dupacks.ack(1.100, 1001, 10).ack(1.101, 2001, 11)
    dupacks.ack(1.103, 2001, 11).ack(1.104, 2001, 11).ack(1.105, 2001, 11)
    dupacks.data(1.10501, 2001, 20).ack(1.205, 5001, 20)

    acked = five(Conn(40004, 30.0))
    # The ACK of everything arrives, then the sender resends the first segment anyway.
    acked.ack(1.100, 5001, 14).data(1.10001, 1, 20)

    reorder = five(Conn(40005, 40.0))
    # SACKs of 3001-5001 make the sender resend 2001, then a D-SACK says 2001 arrived twice:
    # the first copy was only late.
    reorder.ack(1.100, 1001, 10).ack(1.101, 2001, 11)
    reorder.ack(1.103, 2001, 11, ((3001, 4001),)).ack(1.104, 2001, 11, ((3001, 5001),))
    reorder.data(1.10401, 2001, 20).ack(1.105, 5001, 12)
    reorder.ack(1.205, 5001, 20, ((2001, 3001),))

    eifel = five(Conn(40006, 50.0))
    # The timer resends 1 (TSval 50), and the ACK covering it echoes TSval 10, the first
    # copy's: the delay spiked, nothing was lost.
    eifel.data(1.500, 1, 50).ack(1.501, 1001, 10).ack(1.600, 5001, 14)
    return [rto, tlp, dupacks, acked, reorder, eifel]


@pytest.fixture(scope="module")
def crafted_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Finding]:
    conns = crafted()
    packets = sorted((p for c in conns for p in c.packets), key=lambda p: float(p.time))
    path = write(tmp_path_factory.mktemp("retrans") / "classes.pcap", packets)
    findings = run_detectors(context(path), [Retransmissions])
    return {f.conn: f for f in findings}


def listed(f: Finding) -> list[tuple[int, str, str]]:
    ev = f.evidence
    return [
        (int(seq), CLASSES[int(c)], REASONS[int(r)])
        for seq, c, r in zip(
            ev["listed_seq_rel_bytes"],
            ev["listed_class_code"],
            ev["listed_reason_code"],
            strict=True,
        )
    ]


def test_crafted_timeout_then_slow_start(crafted_findings: dict[int, Finding]) -> None:
    rows = listed(crafted_findings[0])
    assert [(seq, cls) for seq, cls, _ in rows] == [(2001, "rto"), (3001, "rto")]
    assert "RFC 6298" in rows[0][2] and "slow start after a timeout" in rows[1][2]
    assert crafted_findings[0].evidence["listed_silence_s"][0] == pytest.approx(0.399, abs=1e-6)


def test_crafted_tail_loss_probe(crafted_findings: dict[int, Finding]) -> None:
    assert [(s, c) for s, c, _ in listed(crafted_findings[1])] == [(4001, "tail_loss_probe")]


def test_crafted_three_duplicate_acks(crafted_findings: dict[int, Finding]) -> None:
    ((seq, cls, reason),) = listed(crafted_findings[2])
    assert (seq, cls) == (2001, "fast_retransmit") and "three or more duplicate" in reason
    assert crafted_findings[2].evidence["listed_dupacks_count"] == (3,)


def test_crafted_resend_of_acknowledged_data_is_spurious(
    crafted_findings: dict[int, Finding],
) -> None:
    ((seq, cls, reason),) = listed(crafted_findings[3])
    assert (seq, cls, reason) == (1, "spurious", "already acknowledged when it was resent")


def test_crafted_dsack_after_sack_triggered_resend_is_reordering(
    crafted_findings: dict[int, Finding],
) -> None:
    ((seq, cls, reason),) = listed(crafted_findings[4])
    assert (seq, cls) == (2001, "reordering") and "D-SACK" in reason


def test_crafted_timestamp_echo_of_first_copy_is_spurious_timeout(
    crafted_findings: dict[int, Finding],
) -> None:
    ((seq, cls, reason),) = listed(crafted_findings[5])
    assert (seq, cls) == (1, "spurious") and "Eifel" in reason
    f = crafted_findings[5]
    assert f.evidence["spurious_count"] == 1 and f.evidence["retransmitted_segments"] == 1


def test_lists_are_bounded_per_class(crafted_findings: dict[int, Finding], tmp_path: Path) -> None:
    conns = crafted()
    packets = sorted((p for c in conns for p in c.packets), key=lambda p: float(p.time))
    ctx = context(write(tmp_path / "c.pcap", packets))
    (f,) = (
        f
        for f in run_detectors(ctx, [Retransmissions], {"retransmissions": Retransmissions.Config(
            max_listed_per_class_count=1)})
        if f.conn == 0
    )  # fmt: skip
    # Two rto resends, one listed; the count still covers both.
    assert f.evidence["rto_count"] == 2 and f.evidence["listed_count"] == 1
    assert f.evidence["listed_seq_rel_bytes"] == (2001,)


def test_an_echo_is_read_from_its_own_packet_in_an_amsdu(tmp_path: Path) -> None:
    # The Eifel case again, its ACK of the resend in one 802.11 A-MSDU after another
    # connection's ACK (an access point aggregates what it sends a station): the echo is the
    # ACK's own, the first copy's TSval, not the other packet's, which shares its frame number.
    eifel = five(Conn(40006, 0.0))
    eifel.data(1.500, 1, 50).ack(1.501, 1001, 10).ack(1.600, 5001, 14)
    other = Conn(40007, 0.01).ack(1.491, 1, 99)
    packets = sorted(eifel.packets + other.packets, key=lambda p: float(p.time))
    frames: list[tuple[float, list[bytes]]] = []
    for p in packets:
        t = round(float(p.time), 6)
        if frames and frames[-1][0] == t:
            frames[-1][1].insert(0, bytes(p[IP]))  # the other connection's first
        else:
            frames.append((t, [bytes(p[IP])]))
    assert [len(f[1]) for f in frames].count(2) == 1
    path = tmp_path / "amsdu.pcap"
    path.write_bytes(amsdu.timed_pcap(frames))
    findings = {f.conn: f for f in run_detectors(context(path), [Retransmissions])}
    (conn,) = findings
    ((seq, cls, reason),) = listed(findings[conn])
    assert (seq, cls) == (1, "spurious") and "Eifel" in reason
