"""Matching connections and transmissions across a sender and a receiver capture."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.errors import TracekitError
from tracekit.merge import merge, parse_map
from tracekit.merge.match import map_endpoint

CLIENT, SERVER, NAT = "10.1.0.1", "10.1.0.2", "192.0.2.7"
DELAY_S = 0.025


@dataclass(frozen=True)
class Seg:
    """A data segment the client sends at t (sender clock), and where it was captured."""

    t: float
    seq: int  # relative: first data byte is 1
    length: int
    ip_id: int
    at_sender: bool = True
    at_receiver: bool = True
    pieces: int = 1  # > 1: the receiver's capture shows it split (TSO at the sender)
    late: float = 0.0  # extra seconds on the way: arrives after later segments (reordering)


@dataclass(frozen=True)
class Ack:
    """An ACK the server sends at t (sender clock), with SACK blocks (relative numbers)."""

    t: float
    ack: int
    ip_id: int
    sack: tuple[tuple[int, int], ...] = ()


ISN_C, ISN_S = 1000, 50000


def _tcp(
    t: float,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    flags: str,
    seq: int,
    ack: int,
    ip_id: int,
    payload: int = 0,
    sack: tuple[tuple[int, int], ...] = (),
    sent: float = 0.0,
) -> Ether:
    # TSval is the sending host's millisecond clock (RFC 7323 5.4), the same in both captures.
    opts: list[tuple[str, object]] = [("Timestamp", (int(sent * 1000) + 1, 0))]
    if "S" in flags:
        opts = [("MSS", 1460), ("SAckOK", b""), *opts]
    if sack:
        opts.append(("SAck", tuple(x for block in sack for x in block)))
    pkt = (
        Ether()
        / IP(src=src, dst=dst, id=ip_id)
        / TCP(sport=sport, dport=dport, flags=flags, seq=seq % 2**32, ack=ack % 2**32, options=opts)
        / (b"x" * payload)
    )
    pkt.time = t
    return pkt


def exchange(
    tmp: Path,
    segs: list[Seg],
    acks: list[Ack],
    *,
    offset_s: float = 2.0,
    skew_ppm: float = 0.0,
    client_at_receiver: str = CLIENT,
) -> tuple[Path, Path]:
    """Write sender.pcap (at the client) and receiver.pcap (at the server, its own clock).

    Every packet takes DELAY_S one way; the server's clock reads t + offset + skew * t. The
    handshake and the ACKs are seen at both ends.
    """

    def rclock(t: float) -> float:
        return t + offset_s + skew_ppm * 1e-6 * t

    snd: list[Ether] = []
    rcv: list[Ether] = []
    cport, sport = 40000, 5001
    rc = client_at_receiver

    def c2s(
        t: float,
        flags: str,
        seq: int,
        ack: int,
        ip_id: int,
        n: int = 0,
        sender: bool = True,
        receiver: bool = True,
        pieces: int = 1,
        late: float = 0.0,
    ) -> None:
        if sender:
            snd.append(_tcp(t, CLIENT, SERVER, cport, sport, flags, seq, ack, ip_id, n, sent=t))
        if receiver:
            step = n // pieces
            for k in range(pieces):
                size = step if k < pieces - 1 else n - step * (pieces - 1)
                rcv.append(
                    _tcp(
                        rclock(t + DELAY_S + late) + k * 1e-5,
                        rc,
                        SERVER,
                        cport,
                        sport,
                        flags,
                        seq + k * step,
                        ack,
                        ip_id,
                        size,
                        sent=t,
                    )
                )

    def s2c(t: float, flags: str, seq: int, ack: int, ip_id: int, sack=()) -> None:  # type: ignore[no-untyped-def]
        rcv.append(_tcp(rclock(t), SERVER, rc, sport, cport, flags, seq, ack, ip_id, 0, sack, t))
        snd.append(
            _tcp(t + DELAY_S, SERVER, CLIENT, sport, cport, flags, seq, ack, ip_id, 0, sack, t)
        )

    c2s(0.0, "S", ISN_C, 0, 1)
    s2c(DELAY_S, "SA", ISN_S, ISN_C + 1, 1)
    c2s(2 * DELAY_S, "A", ISN_C + 1, ISN_S + 1, 2)
    for s in segs:
        c2s(
            s.t,
            "A",
            ISN_C + s.seq,
            ISN_S + 1,
            s.ip_id,
            s.length,
            s.at_sender,
            s.at_receiver,
            s.pieces,
            s.late,
        )
    for a in acks:
        sack = tuple((ISN_C + lo, ISN_C + hi) for lo, hi in a.sack)
        s2c(a.t, "A", ISN_S + 1, ISN_C + a.ack, a.ip_id, sack)
    snd.sort(key=lambda p: float(p.time))
    rcv.sort(key=lambda p: float(p.time))
    sp, rp = tmp / "sender.pcap", tmp / "receiver.pcap"
    wrpcap(str(sp), snd)
    wrpcap(str(rp), rcv)
    return sp, rp


def _merge(sp: Path, rp: Path, addr_map: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return merge(build_connections(read_capture(sp)), build_connections(read_capture(rp)), addr_map)


def _clean(n: int = 6) -> tuple[list[Seg], list[Ack]]:
    segs = [Seg(0.1 + 0.001 * i, 1 + 1000 * i, 1000, 10 + i) for i in range(n)]
    acks = [Ack(0.1 + 0.001 * i + DELAY_S + 0.0005, 1001 + 1000 * i, 100 + i) for i in range(n)]
    return segs, acks


def test_every_transmission_pairs_with_its_arrival(tmp_path: Path) -> None:
    segs, acks = _clean()
    m = _merge(*exchange(tmp_path, segs, acks))
    assert len(m.connections.pairs) == 1
    tx = m.transmissions
    assert len(tx) == 6
    assert (tx["fate"] == "delivered").all()
    assert tx["sender_frame"].tolist() == [4, 5, 6, 7, 8, 9]  # after SYN, SYN-ACK, ACK
    # Every packet was captured at both ends: the receiver's fate column is filled for data.
    assert (m.receiver_fate[m.receiver_fate != 255] == 0).sum() == 6


def test_retransmission_is_a_new_transmission(tmp_path: Path) -> None:
    # The first copy of bytes 1001-2000 is lost; the copy resent later (new IP ID) arrives.
    segs, acks = _clean(3)
    segs[1] = Seg(segs[1].t, 1001, 1000, 11, at_receiver=False)
    segs.append(Seg(0.3, 1001, 1000, 20))
    acks = [Ack(0.1 + DELAY_S + 0.0005, 1001, 100), Ack(0.3 + DELAY_S + 0.0005, 3001, 101)]
    m = _merge(*exchange(tmp_path, segs, acks))
    tx = m.transmissions.sort_values("sender_t_s")
    assert tx["fate"].tolist() == ["delivered", "network_drop", "delivered", "delivered"]
    assert tx["seq_rel"].tolist() == [1, 1001, 2001, 1001]


def test_nat_needs_a_map(tmp_path: Path) -> None:
    segs, acks = _clean(2)
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    alone = _merge(sp, rp)
    assert alone.connections.pairs.empty
    assert (alone.connections.sender_only, alone.connections.receiver_only) == ((0,), (0,))
    mapped = _merge(sp, rp, parse_map([f"{CLIENT}={NAT}"]))
    assert len(mapped.connections.pairs) == 1
    assert (mapped.transmissions["fate"] == "delivered").sum() == 2


def test_tso_segment_matches_by_byte_range(tmp_path: Path) -> None:
    # One 2,896-byte segment leaves the sender; the receiver's capture shows two halves.
    segs = [Seg(0.1, 1, 2896, 10, pieces=2), Seg(0.101, 2897, 1000, 11)]
    acks = [Ack(0.1 + DELAY_S + 0.001, 3897, 100)]
    m = _merge(*exchange(tmp_path, segs, acks))
    assert m.transmissions["fate"].tolist() == ["delivered", "delivered"]
    assert m.transmissions["len"].tolist() == [2896, 1000]


def test_parse_map_and_endpoints() -> None:
    assert parse_map(["10.0.0.1=192.0.2.1", "10.0.0.2:80=192.0.2.2:8080"]) == {
        "10.0.0.1": "192.0.2.1",
        "10.0.0.2:80": "192.0.2.2:8080",
    }
    rules = {"10.0.0.1": "192.0.2.1", "10.0.0.2:80": "192.0.2.2:8080", "2001:db8::1": "2001:db8::9"}
    assert map_endpoint("10.0.0.1:5000", rules) == "192.0.2.1:5000"
    assert map_endpoint("10.0.0.2:80", rules) == "192.0.2.2:8080"
    assert map_endpoint("10.0.0.2:81", rules) == "10.0.0.2:81"
    assert map_endpoint("[2001:db8::1]:443", rules) == "[2001:db8::9]:443"
    with pytest.raises(TracekitError):
        parse_map(["10.0.0.1"])


def test_offset_and_skew_of_crafted_clocks(tmp_path: Path) -> None:
    segs, acks = _clean(40)
    m = _merge(*exchange(tmp_path, segs, acks, offset_s=3.7, skew_ppm=50.0))
    assert m.clock is not None
    # Microsecond pcap timestamps: the constructed offset and skew, to a few microseconds.
    assert m.clock.offset_s == pytest.approx(3.7, abs=5e-6)
    assert m.clock.skew_ppm == pytest.approx(50.0, abs=1.0)
    assert np.allclose(m.delay["owd_s"], DELAY_S, atol=5e-6)


def test_ingest_takes_the_nat_map_and_refuses_it_alone(tmp_path: Path) -> None:
    import pandas as pd
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    from tracekit.schema import FATE_NONE, FATES

    segs, acks = _clean(2)
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    out = tmp_path / "t.parquet"
    base = ["ingest", str(sp), "-o", str(out)]
    unmapped = CliRunner().invoke(cli, [*base, "--receiver", str(rp)])
    assert unmapped.exit_code == 0, unmapped.output
    # Without the map the receiver's connection is another one: nothing is judged.
    assert (pd.read_parquet(out)["fate"] == FATE_NONE).all()
    mapped = CliRunner().invoke(cli, [*base, "--receiver", str(rp), "--map", f"{CLIENT}={NAT}"])
    assert mapped.exit_code == 0, mapped.output
    assert (pd.read_parquet(out)["fate"] == FATES.index("delivered")).sum() == 2
    alone = CliRunner().invoke(cli, [*base, "--map", f"{CLIENT}={NAT}"])
    assert alone.exit_code == 2
    assert "--receiver" in alone.output
    bad = CliRunner().invoke(cli, [*base, "--receiver", str(rp), "--map", "nonsense"])
    assert bad.exit_code == 2
    assert "SENDER_ADDR=RECEIVER_ADDR" in bad.output


def test_check_takes_the_nat_map_from_a_manifest(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner
    from tracekit.cli.main import cli

    # Bytes 2001-3000 are resent at 0.3 s and the receiver captures both copies: a receiver
    # drop, which check can count only once it has matched the receiver's connection.
    segs, acks = _clean(4)
    segs.append(Seg(0.3, 2001, 1000, 30))
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    manifest = tmp_path / "pairs.toml"
    drops = {}
    for rules in ("", f'map = ["{CLIENT}={NAT}"]\n'):
        manifest.write_text(
            f'[[capture]]\nname = "nat"\nsender = "{sp.name}"\nreceiver = "{rp.name}"\n{rules}'
        )
        out = tmp_path / "check.json"
        result = CliRunner().invoke(cli, ["check", str(manifest), "--json", str(out)])
        assert result.exit_code in (0, 1), result.output
        (entry,) = json.loads(out.read_text())["captures"]
        (metrics,) = entry["metrics"]
        assert metrics["retrans_segments"] == 1
        drops[bool(rules)] = metrics["receiver_drops"]
    assert drops == {False: None, True: 1}


def test_batch_applies_the_nat_map_to_every_pair_and_redoes_pairs_for_new_rules(
    tmp_path: Path,
) -> None:
    import shutil

    import pandas as pd
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    # The first copy of bytes 1001-2000 is lost between the capture points: a network drop,
    # which only the merge of the two captures can tell.
    segs, acks = _clean(3)
    segs[1] = Seg(segs[1].t, 1001, 1000, 11, at_receiver=False)
    segs.append(Seg(0.3, 1001, 1000, 20))
    acks = [Ack(0.1 + DELAY_S + 0.0005, 1001, 100), Ack(0.3 + DELAY_S + 0.0005, 3001, 101)]
    sp, rp = exchange(tmp_path, segs, acks, client_at_receiver=NAT)
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(sp, runs / "nat.sender.pcap")
    shutil.copy(rp, runs / "nat.receiver.pcap")
    out = tmp_path / "out"
    kinds = {}
    for maps in ([], ["--map", f"{CLIENT}={NAT}"]):
        result = CliRunner().invoke(cli, ["batch", str(runs), "-o", str(out), "-j", "1", *maps])
        assert result.exit_code == 0, result.output
        # The second run is not skipped as finished: its rules differ from the first's.
        assert "already done" not in result.output
        findings = pd.read_parquet(out / "findings")
        kinds[bool(maps)] = set(findings["kind"])
    assert "network_drop" not in kinds[False]
    assert "network_drop" in kinds[True]
    again = CliRunner().invoke(
        cli, ["batch", str(runs), "-o", str(out), "--map", f"{CLIENT}={NAT}"]
    )
    assert "1 inputs already done" in again.output
    bad = CliRunner().invoke(cli, ["batch", str(runs), "-o", str(out), "--map", "nonsense"])
    assert bad.exit_code == 2
    assert "SENDER_ADDR=RECEIVER_ADDR" in bad.output
