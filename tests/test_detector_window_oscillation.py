"""window_oscillation: start/stop mode on the lab's slow reader; crafted zero windows unscaled."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tests.helpers.lab_captures import CAPTURES, context, lab_findings, truth
from tracekit.capture import read_capture
from tracekit.detectors import run_detectors
from tracekit.detectors.window_oscillation import WindowOscillation, _in_recovery, _owed_at_once
from tracekit.pipeline import analyze


def test_fires_on_the_slow_reader() -> None:
    t = truth("window_oscillation")
    (f,) = lab_findings("window_oscillation", WindowOscillation)
    ev = f.evidence
    assert (f.conn, f.direction) == (0, "a2b")
    # The reader empties the buffer every read_interval_ms: that is the period.
    period_s = t["receiver"]["read_interval_ms"] / 1000
    assert ev["period_s"] == pytest.approx(period_s, rel=0.05)
    # One cycle per read while data remained: the transfer lasted about cycles x period.
    duration_s = f.end_s - f.start_s
    assert ev["cycles_count"] == pytest.approx(duration_s / period_s, abs=2)
    assert ev["cycles_count"] >= 10
    # The window offered never exceeds the buffer the kernel granted.
    assert 0 < ev["largest_window_bytes"] <= t["receiver"]["so_rcvbuf_effective"]
    # Nearly all the time is spent waiting for the reader (one burst per 200 ms).
    assert ev["stopped_fraction"] > 0.8
    # All 400 kB went out in those bursts: at most one window per period.
    assert ev["rate_bps"] <= ev["largest_window_bytes"] * 8 / period_s * 1.1
    assert "SO_RCVBUF" in f.advice


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
def test_zero_windows_agree_with_tshark() -> None:
    out = subprocess.run(
        ["tshark", "-r", str(CAPTURES / "window_oscillation" / "sender.pcap"), "-Y",
         "tcp.analysis.zero_window", "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (f,) = lab_findings("window_oscillation", WindowOscillation)
    assert f.evidence["zero_window_count"] == len(out.split()) > 0


@pytest.mark.parametrize(
    "name", ["clean", "window_limited", "slow_start_overrun", "network_drops", "paced_sender"]
)
def test_quiet_where_the_window_never_swings(name: str) -> None:
    assert "window_oscillation" in truth(name)["absent_labels"]
    assert lab_findings(name, WindowOscillation) == []


def test_a_reader_that_squeezed_its_buffer_swings_what_is_left() -> None:
    # A reader taking 8 kB every 10 ms from a 64 kB buffer: unread data leaves a window of
    # about 16 kB, and each read reopens half of it, far from the 64 kB first offered. The
    # window reopens once per read: the period is the reader's (the sweep's configuration).
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "reader_8k_10ms_10ms"
    config = json.loads((folder / "truth.json").read_text())["scenario_config"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (f,) = [x for x in doc["findings"] if x["kind"] == "window_oscillation"]
    assert f["evidence"]["period_s"] == pytest.approx(config["read_interval_ms"] / 1e3, rel=0.1)


@pytest.mark.parametrize("name", ["reader_6k_2ms_100m", "reader_8k_10ms_10ms"])
def test_a_reader_that_holds_the_acks_back_reopens_the_window(name: str) -> None:
    # A reader taking 6 or 8 kB at a time from a 64 kB buffer: the receiver holds its ACKs
    # until each read (its window cannot advance before), so each read reopens the window,
    # by a few segments of a window of dozens. At most one cycle per read. (Required where the
    # reader is surely slower than one window per round trip; open where it reads about as
    # fast, 6 kB every 2 ms against some 60 kB per 20 ms: never ruled out.)
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    t = json.loads((folder / "truth.json").read_text())
    assert "window_oscillation" not in t["absent_labels"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    (f,) = [x for x in doc["findings"] if x["kind"] == "window_oscillation"]
    read_s = t["scenario_config"]["read_interval_ms"] / 1e3
    assert f["evidence"]["period_s"] >= 0.9 * read_s
    assert f["evidence"]["cycles_count"] <= (f["end_s"] - f["start_s"]) / read_s * 1.1 + 1


@pytest.mark.parametrize(
    "name", ["window_64k_10ms", "rcvbuf_16k", "wscale_off_100m_20ms", "ack_drops_3of4"]
)
def test_quiet_on_a_window_limited_ack_clock(name: str) -> None:
    # A reader that keeps up behind a small window: each ACK frees a segment or two (or,
    # when the way back drops three ACKs in four, the stretch the survivors cover).
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    assert "window_oscillation" in json.loads((folder / "truth.json").read_text())["absent_labels"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    assert not [x for x in doc["findings"] if x["kind"] == "window_oscillation"]


# --- crafted without a handshake: the window scale is unknown, only zeros count -------------


def flow(zero: bool, cycles: int = 5) -> list[object]:
    """A capture from mid-transfer: bursts of 8 segments, each ACKed with a closed window
    (zero=True) or an open one, reopened 200 ms later."""
    packets: list[object] = []
    seq = 1
    for c in range(cycles):
        t = c * 0.3
        for i in range(8):
            packets.append(
                tcp(t + i * 1e-4, CLIENT, SERVER, 40000, 80, "A", seq, 7, 1000)
            )  # fmt: skip
            seq += 1000
        packets.append(tcp(t + 0.05, SERVER, CLIENT, 80, 40000, "A", 7, seq, 0, None,
                           0 if zero else 8000))  # fmt: skip
        packets.append(tcp(t + 0.25, SERVER, CLIENT, 80, 40000, "A", 7, seq, 0, None, 8000))
    return packets


def test_crafted_zero_windows_without_handshake(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "zero.pcap", flow(zero=True)))
    assert ctx.series.window_known[(0, 0)] is False
    (f,) = run_detectors(ctx, [WindowOscillation])
    ev = f.evidence
    # Built with 5 zero windows, each reopened 200 ms later, 300 ms apart.
    assert ev["window_scale_known"] is False
    assert ev["zero_window_count"] == 5
    assert ev["cycles_count"] == 5
    assert ev["period_s"] == pytest.approx(0.3)
    assert ev["stopped_s"] == pytest.approx(5 * 0.2)


def test_crafted_open_windows_without_handshake_are_quiet(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "open.pcap", flow(zero=False)))
    assert run_detectors(ctx, [WindowOscillation]) == []


def test_fewer_cycles_than_the_threshold_are_quiet(tmp_path: Path) -> None:
    ctx = context(write(tmp_path / "two.pcap", flow(zero=True, cycles=2)))
    assert run_detectors(ctx, [WindowOscillation]) == []


def test_an_ack_is_owed_at_once_for_two_segments_that_arrived_after_the_ack_before_it() -> None:
    # First ACK: its segments arrived at 0.4 and 0.6 s, the ACK before it left at 0.5 s: one
    # came after, so it may wait for the delayed-ACK timer. Second: 11 and 12 s after 10 s
    # (9 s did not): two, owed at once. The last arrival of each is its latest segment's.
    owed, latest = _owed_at_once(
        np.array([0, 2]),
        np.array([2, 5]),
        np.array([0.5, 10.0]),
        np.array([0.4, 0.6, 11.0, 12.0, 9.0]),
    )
    assert owed.tolist() == [False, True]
    assert latest.tolist() == [0.6, 12.0]


def _window_cycles(tmp_path: Path, read_between: bool) -> Path:
    """Eight rounds, 50 ms apart, of a flight of ten 1000-byte segments that fills a
    10,000-byte window, then one ACK of all ten 20 ms later. With `read_between` the receiver
    first offers what its unread data left (500 bytes, under a segment) and reopens the window
    10 ms later (a read); without it every ACK offers the whole 10,000 bytes (a reader that
    keeps up, its ACKs stretched)."""
    c, s = 1000, 5000
    opts = [("MSS", 1000)]
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", c, options=opts),
        tcp(0.01, SERVER, CLIENT, 80, 40000, "SA", s, c + 1, options=opts, window=10_000),
        tcp(0.02, CLIENT, SERVER, 40000, 80, "A", c + 1, s + 1),
    ]
    for r in range(8):
        t0 = 0.03 + r * 0.05
        base = c + 1 + r * 10_000
        for i in range(10):
            pkts.append(
                tcp(t0 + i * 1e-4, CLIENT, SERVER, 40000, 80, "A", base + i * 1000, s + 1, 1000)
            )
        ack = base + 10_000
        if read_between:
            pkts.append(tcp(t0 + 0.02, SERVER, CLIENT, 80, 40000, "A", s + 1, ack, window=500))
            pkts.append(tcp(t0 + 0.03, SERVER, CLIENT, 80, 40000, "A", s + 1, ack, window=10_000))
        else:
            pkts.append(tcp(t0 + 0.02, SERVER, CLIENT, 80, 40000, "A", s + 1, ack, window=10_000))
    return write(tmp_path / "cycles.pcap", pkts)


def test_a_read_that_frees_the_buffer_reopens_the_window(tmp_path: Path) -> None:
    (f,) = run_detectors(context(_window_cycles(tmp_path, read_between=True)), [WindowOscillation])
    # Each of the eight reads reopened the window by the 9,500 bytes it freed.
    assert f.evidence["cycles_count"] == 8
    assert f.evidence["period_s"] == pytest.approx(0.05, rel=1e-6)


def test_quiet_when_the_window_stays_whole_and_only_the_ack_line_moves(tmp_path: Path) -> None:
    # The flight fills the window and waits for a stretched ACK: the receiver's buffer never
    # held unread data (every ACK offers the whole window), so no reader stopped the sender.
    ctx = context(_window_cycles(tmp_path, read_between=False))
    assert run_detectors(ctx, [WindowOscillation]) == []


def _recovery_cycles(tmp_path: Path) -> Path:
    """Eight rounds, 100 ms apart, each losing its first segment of a 10,000-byte window: the
    receiver answers the others with duplicate ACKs (SACK, RFC 2018) that leave the window's
    right edge where it was, the sender fills the window up to it and stops, resends the lost
    segment, and its ACK offers what the data released above the hole left of the buffer (500
    bytes, under a segment) until the reader takes that data 10 ms later and the window is
    whole again. A window closed by loss recovery, reopened by a read of what the hole held."""
    c, s = 1000, 5000
    opts = [("MSS", 1000), ("SAckOK", b"")]
    pkts = [
        tcp(0.00, CLIENT, SERVER, 40000, 80, "S", c, options=opts),
        tcp(0.01, SERVER, CLIENT, 80, 40000, "SA", s, c + 1, options=opts, window=10_000),
        tcp(0.02, CLIENT, SERVER, 40000, 80, "A", c + 1, s + 1),
    ]

    def ack(t: float, line: int, window: int, sacked: int = 0) -> None:
        sack = [("SAck", (line + 1000, line + sacked))] if sacked else []
        pkts.append(tcp(t, SERVER, CLIENT, 80, 40000, "A", s + 1, line, 0, sack, window))

    for r in range(8):
        t0 = 0.03 + r * 0.1
        base = c + 1 + r * 10_000
        for i in range(10):
            # The first half leaves at once; the second when the duplicates of the first came.
            t = t0 + i * 1e-4 + (0.021 if i >= 5 else 0.0)
            pkts.append(tcp(t, CLIENT, SERVER, 40000, 80, "A", base + i * 1000, s + 1, 1000))
            if i:
                ack(t + 0.02, base, 10_000, (i + 1) * 1000)
        pkts.append(tcp(t0 + 0.0215, CLIENT, SERVER, 40000, 80, "A", base, s + 1, 1000))
        ack(t0 + 0.0425, base + 10_000, 500)
        ack(t0 + 0.0525, base + 10_000, 10_000)
    pkts.sort(key=lambda p: p.time)  # type: ignore[attr-defined]
    return write(tmp_path / "recovery.pcap", pkts)


def test_quiet_when_loss_recovery_closes_the_window(tmp_path: Path) -> None:
    # Every closing came while the ACK line stood at the hole: the data filling the window sat
    # above it in the receiver, and no reader held the sender back.
    ctx = context(_recovery_cycles(tmp_path))
    acks = ctx.series.of(0, 0).acks
    assert int(acks["dupack"].sum()) >= 8 * 8
    assert run_detectors(ctx, [WindowOscillation]) == []


def _quiet_behind_losses(name: str, drop_kind: str, counter: str) -> None:
    """The sweep row `name`, where the lab rules start/stop out: no window_oscillation finding,
    and the losses' finding counts what the lab's `counter` counted."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / name
    truth_doc = json.loads((folder / "truth.json").read_text())
    assert "window_oscillation" in truth_doc["absent_labels"]
    doc = analyze(
        read_capture(folder / "sender.pcap.zst"), read_capture(folder / "receiver.pcap.zst")
    ).to_dict()
    assert not [f for f in doc["findings"] if f["kind"] == "window_oscillation"]
    dropped = [f for f in doc["findings"] if f["kind"] == drop_kind]
    assert dropped
    assert dropped[0]["evidence"][f"{counter}_drops_packets"] == truth_doc["drops"][counter]


def test_quiet_when_data_above_a_receiver_drop_fills_a_small_buffer() -> None:
    # The lab's receiver drops 1 in 55 segments into a 21 kB buffer: the data above each hole
    # waits in the buffer and shuts the window until the resend fills it, and the window
    # reopens just after the ACK that passes the hole. Loss recovery, not a reader: the lab
    # rules start/stop out, and the receiver's drops equal its nftables counter.
    _quiet_behind_losses("receiver_drops_rcvbuf_21k", "receiver_drop", "receiver")


def test_quiet_where_the_ack_that_ends_a_recovery_squeezes_a_fast_readers_window() -> None:
    # BBR over 6 ms into a buffer of 0.3 BDP loses in every gain cycle; the 16 kB receive
    # buffer holds the data above each hole, and the ACKs of the recovery, the last of them
    # above all, hand it to the reader's queue at once, shutting the window for a moment
    # after the duplicates have ended. The reader reads as soon as data comes (the lab's
    # configuration): no start/stop, and the lab rules it out. The network's drops equal the
    # bottleneck's counter.
    truth_doc = json.loads(
        (
            Path(__file__).resolve().parents[1] / "fixtures/sweep/bbr_10m_6ms_rcvbuf_16k/truth.json"
        ).read_text()
    )
    assert truth_doc["receiver"]["read_interval_ms"] == 0.0
    _quiet_behind_losses("bbr_10m_6ms_rcvbuf_16k", "network_drop", "network")


def test_recovery_lasts_until_the_ack_line_passes_the_data_sent_before_the_first_duplicate() -> (
    None
):
    # RFC 6582's "recover": the highest byte sent when the first duplicate ACK came. Ten
    # segments of 1000 bytes left (rows 0-9); the ACK of the first (row 10), three duplicates
    # (rows 11-13), a resend and more data (rows 14-15, up to 12000), partial ACKs up to 9000
    # (rows 16-17), the ACK of 10000 that passes the recovery point (row 18), one more.
    data = pd.DataFrame(
        {
            "row": [*range(10), 14, 15],
            "end_rel": [1000 * (i + 1) for i in range(10)] + [2000, 12000],
        }
    )
    acks = pd.DataFrame(
        {
            "row": [10, 11, 12, 13, 16, 17, 18, 19],
            "ack_rel": [1000, 1000, 1000, 1000, 5000, 9000, 10000, 12000],
            "dupack": [False, True, True, True, False, False, False, False],
        }
    )
    got = _in_recovery(_direction(acks, data))
    assert got.tolist() == [False, True, True, True, True, True, False, False]
    # No duplicate, or no data: no recovery.
    calm = _direction(acks.assign(dupack=False), data)
    assert not _in_recovery(calm).any()
    assert not _in_recovery(_direction(acks, data.iloc[:0])).any()


def _direction(acks: pd.DataFrame, data: pd.DataFrame) -> SimpleNamespace:
    """A direction's ACK and data tables as `_in_recovery` reads them: frame numbers and times
    in capture order (one per row here), and measures computed as asked."""

    def frames(t: pd.DataFrame) -> pd.DataFrame:
        return t.assign(frame=t["row"] + 1, t_s=t["row"] * 1e-3)

    return SimpleNamespace(
        acks=frames(acks), data=frames(data), memo=lambda _name, compute: compute()
    )
