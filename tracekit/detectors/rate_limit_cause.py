"""rate_limit_cause: what held each direction back, for how long: one verdict and its phases.

The verdict follows the account Linux keeps of every socket (tcp_chrono; TCP_INFO's
tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited), read off the sender's capture by
`_limits`: the time the application gave the sender nothing to send, the time the receive
window held it, and the time it was busy otherwise. The lab scores these shares against the
kernel's own (bench/accuracy.py). Busy time that neither window explains is the path's or the
congestion controller's, and is told apart per phase, in the classes of T-RAT (Zhang, Breslau,
Paxson and Shenker, "On the characteristics and origins of internet flow rates", SIGCOMM 2002):

- `slow_start`: the flight passes its highest so far by half or more per phase, before any loss.
- `congestion`: the sender retransmitted (it met loss and cut its window), or its congestion
  window held the flight below the advertised window and the path (congestion avoidance).
- `bandwidth`: the ACKs came back at the path's rate: the bottleneck was busy.
- `pacing`: departures evenly spaced below the path's rate, with room under every window: a
  pacing rate (SO_MAX_PACING_RATE, fq's maxrate, BBR) set the rate.
- `sender_buffer`: the flight pinned at a constant cap below the advertised window, or
  drained by a third and refilled by a writer each ACK woke, without loss: the sender's
  socket buffer. The kernel counts that time as busy (a writer blocked on
  a full send buffer leaves tcpi_sndbuf_limited at 0 in the lab's runs), so it is network time.
- `host`: no loss and no window at its cap, and the sending host answered its ACKs later than
  a round trip lasts: its own pace set the rate, its processing's or a pacer's timer's, which
  the capture cannot tell apart there (a LAN, a datacenter, a pacer on a path of a few ms).
- `receive_window`: the window left less room than the sender would use (`_limits`).
- `application`: nothing in flight and nothing sent: the application had no data.

Phases are measured in round trips of the transfer itself: windows of `phase_rtts` smallest
RTTs label the busy time, and a phase shorter than `min_phase_rtts` joins its neighbours, so a
LAN transfer of 50 us round trips and a satellite one of 600 ms get the same few phases.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

from tracekit import units
from tracekit.core.kernels import jit
from tracekit.core.quantile import percentile
from tracekit.core.search import search_sorted
from tracekit.detectors._limits import (
    ANSWER_SPREAD,
    APPLICATION,
    BURST_S,
    HOST_FLOOR_QUANTILE,
    NETWORK,
    RECEIVE_WINDOW,
    bit_at,
    from_empty_queue,
    least_shift,
    limit_states,
    pacer_held,
    queued_pauses,
    shut_below,
    smoothed_rtt_at,
    state_seconds,
    timer_waits,
    turnaround_s,
    wire_segment_bytes,
)
from tracekit.detectors._measure import (
    CAPTURE_END_SHARE,
    CaptureSplit,
    Competition,
    RttPhases,
    ack_answers,
    answer_bytes,
    answered_share_at,
    capture_splits,
    competition,
    data_directions,
    flight_levels,
    path_rate_bps,
    rtt_phases,
    segment_size_bytes,
    serialisation_s,
)
from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import DIRECTIONS, Finding, Severity
from tracekit.physics import bdp_bytes
from tracekit.series import kind_mask

LABELS = (
    "slow_start",
    "congestion",
    "receive_window",
    "sender_buffer",
    "application",
    "bandwidth",
    "pacing",
    "host",
)
L_SLOW, L_CONG, L_RWND, L_SNDBUF, L_APP, L_BW, L_PACE, L_HOST = range(8)
# The kernel's classes each label belongs to (tcp_chrono): the shares scored against it.
KERNEL_CLASS = {
    L_SLOW: "network",
    L_CONG: "network",
    L_BW: "network",
    L_PACE: "network",
    L_SNDBUF: "network",
    L_HOST: "network",
    L_RWND: "receive_window",
    L_APP: "application",
}
KERNEL_CLASSES = ("application", "receive_window", "network")

WHY = {
    L_SLOW: "the sender was still in slow start, doubling its flight each round trip: the "
    "transfer had not yet had the opportunity to reach the path's rate",
    L_CONG: "the congestion window held the flight: the sender met loss (or was growing its "
    "window in congestion avoidance) below both the advertised window and the path's capacity",
    L_RWND: "the receiver's advertised window left the sender less room than it would use: "
    "the receiver's buffer set the rate",
    L_SNDBUF: "the flight was held below the advertised window by the sender's socket buffer "
    "(pinned at a constant cap, or drained by a third and refilled each time an ACK freed "
    "the buffer): the sender's socket buffer set the rate",
    L_APP: "nothing was in flight and nothing was sent: the application gave the sender no data",
    L_BW: "the ACKs came back at the path's rate: the bottleneck link was busy, the transfer "
    "ran as fast as the path allows",
    L_PACE: "segments left evenly spaced below the path's rate with room under every window: "
    "a pacing rate set the rate",
    L_HOST: "where no loss and no window at its cap held it, the sending host answered its ACKs "
    "later than a round trip lasts: its own pace set the rate, not the path or a window. That "
    "pace is its processing's (interrupts, copies, scheduling) or a pacer's timer's; with "
    "every answer later than the round trip the capture cannot tell the two apart",
}
ADVICE = {
    L_SLOW: "Nothing to change for a short transfer; for a long one, slow start ends by itself. "
    "A larger initial window (ip route ... initcwnd) shortens it on paths that can take it.",
    L_CONG: "Find where packets are lost (the retransmissions and drop findings say where, "
    "when there were losses); pace the sender (fq qdisc) or give the bottleneck a buffer near "
    "one bandwidth-delay product.",
    L_RWND: "Raise the receiver's SO_RCVBUF or net.ipv4.tcp_rmem's maximum to about twice the "
    "bandwidth-delay product, with window scaling on, and let the receiving application read "
    "promptly (a window_limited finding, where there is one, gives the window the path needs).",
    L_SNDBUF: "Raise the sender's SO_SNDBUF or net.ipv4.tcp_wmem's maximum to about twice the "
    "bandwidth-delay product.",
    L_APP: "Have the application write more, sooner: larger writes, no pauses between them, "
    "or read the source (disk, pipe) faster.",
    L_BW: "Nothing to change in TCP: a faster path (or less competing traffic) is the only way "
    "to go faster.",
    L_PACE: "Raise the pacing rate (SO_MAX_PACING_RATE, tc fq maxrate) if the path can carry "
    "more; with BBR the pacing rate follows its estimate of the path.",
    L_HOST: "A larger window or buffer changes nothing here. If the sender is paced "
    "(SO_MAX_PACING_RATE, tc fq maxrate, BBR), its pacing rate is the limit. Otherwise give the "
    "hosts less work per byte: turn on segmentation and receive offloads (TSO/GSO, GRO: "
    "ethtool -K), write in larger chunks or send without copying (sendfile, MSG_ZEROCOPY), and "
    "spread the load over cores (several streams, RSS/RPS, IRQ affinity).",
}


@jit
def _window(t: float, t0: float, length: float, n: int) -> np.int64:  # pragma: no cover - compiled
    """The window a time falls in: windows of `length` from t0, the first and last open."""
    return min(max(np.int64((t - t0) / length), np.int64(0)), np.int64(n - 1))


@jit
def _window_sums(
    t: np.ndarray, values: np.ndarray, t0: float, length: float, n: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per window: how many events, and the sum of their values (in event order)."""
    count = np.zeros(n)
    total = np.zeros(n)
    for i in range(t.size):
        w = _window(t[i], t0, length, n)
        count[w] += 1
        total[w] += values[i]
    return count, total


@jit
def _flight_windows(
    t: np.ndarray,
    known: np.ndarray,
    top: np.ndarray,
    rwnd: np.ndarray,
    t0: float,
    length: float,
    n: int,
    mss: int,
    cap: float,
    scale_known: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Per window, over the segments sent with a known window (flight_levels' top, rwnd):

    how many; how many had the window full (less than a segment of room; never when the
    window scale is unknown); how many sat at the flight's cap (within a segment of its 95th
    percentile) with two segments of room under the window; the highest flight and window.
    """
    counted = np.zeros(n)
    pinned = np.zeros(n)
    capped = np.zeros(n)
    flight_max = np.zeros(n)
    rwnd_max = np.zeros(n)
    j = 0
    for i in range(t.size):
        if not known[i]:
            continue
        w = _window(t[i], t0, length, n)
        level, window = top[j], rwnd[j]
        j += 1
        counted[w] += 1
        if scale_known and window - level < mss:
            pinned[w] += 1
        if scale_known and level >= cap - mss and window - level >= 2 * mss:
            capped[w] += 1
        flight_max[w] = max(flight_max[w], level)
        rwnd_max[w] = max(rwnd_max[w], window)
    return counted, pinned, capped, flight_max, rwnd_max


@jit
def _room_answered(
    ack_frame: np.ndarray,
    ack_t: np.ndarray,
    advance: np.ndarray,
    edge: np.ndarray,
    data_frame: np.ndarray,
    data_end: np.ndarray,
    mss: int,
    t0: float,
    length: float,
    n: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per window, ACKs that freed room for a segment and those not answered at once.

    The ACKs and data segments of one direction, merged in capture order (frame numbers): an
    ACK that advances the line frees room when the window's right edge (the highest so far) is
    a segment or more past the highest byte sent; the next packet answers it if it is data.
    """
    room = np.zeros(n)
    unanswered = np.zeros(n)
    n_ack, n_data = ack_frame.size, data_frame.size
    i = j = 0
    edge_high = high = -1
    while i < n_ack:
        if j < n_data and data_frame[j] < ack_frame[i]:
            high = max(high, data_end[j])
            j += 1
            continue
        edge_high = max(edge_high, edge[i])
        # ACKs after the last data segment (the transfer is over) do not count.
        if advance[i] and edge_high - high >= mss and j < n_data:
            w = min(max(np.int64((ack_t[i] - t0) / length), np.int64(0)), np.int64(n - 1))
            room[w] += 1
            answered = i + 1 >= n_ack or data_frame[j] < ack_frame[i + 1]
            if not answered:
                unanswered[w] += 1
        i += 1
    return room, unanswered


class RateLimitCause(Detector):
    kind = "rate_limit_cause"
    per_connection = True
    title = "What limited the transfer's rate, and for how long"
    severity = Severity.INFO
    evidence = (
        Evidence(
            "window_scale_least",
            "",
            "window scale unknown: the least shift the flight allows",
        ),
        Evidence("receive_window_fraction_most", "", "the receive window's share at that shift"),
        Evidence(
            "application_fraction_most",
            "",
            "the application's share had every pause the capture cannot tell been its own",
        ),
        Evidence("cause", "", "the label the verdict names"),
        Evidence(
            "limit_class",
            "",
            "its class",
            values=("application", "receive_window", "network"),
        ),
        Evidence("cause_fraction", "", "its share of the time"),
        Evidence("application_fraction", "", "share of the time the application held the rate"),
        Evidence("receive_window_fraction", "", "share of the time the receive window held it"),
        Evidence("network_fraction", "", "share of the time the network held it"),
        Evidence("slow_start_fraction", "", "part of the network share in slow start"),
        Evidence("congestion_fraction", "", "part of the network share in congestion avoidance"),
        Evidence("bandwidth_fraction", "", "part of the network share at the path's rate"),
        Evidence("pacing_fraction", "", "part of the network share held by a pacer"),
        Evidence(
            "sender_buffer_fraction",
            "",
            "part of the network share held by the sender's buffer",
        ),
        Evidence("host_fraction", "", "part of the network share the sending host's own pace held"),
        Evidence(
            "paced_departures_fraction",
            "",
            "of the busy time, the share whose segments left on a pacer's timer",
        ),
        Evidence(
            "paced_untold_fraction",
            "",
            "of the busy time, the share where whose clock the segments kept could not be told",
        ),
        Evidence("phase_starts_s", "s", "starts of the phases"),
        Evidence("phase_ends_s", "s", "ends of the phases"),
        Evidence(
            "phase_cause_codes",
            "",
            "each phase's label, as an index in (slow_start, congestion, receive_window, "
            "sender_buffer, application, bandwidth, pacing, host)",
        ),
        Evidence(
            "phase_other_codes",
            "",
            "each phase's second label, where two took turns through it (-1: none)",
        ),
        Evidence("rate_bps", "bit/s", "the ACK line's advance over the direction's time (goodput)"),
        Evidence(
            "rtt_s",
            "s",
            "smallest RTT sample, of the path phase holding most of the transfer",
        ),
        Evidence("path_rate_bps", "bit/s", "the path's rate from ACK dispersion (when measured)"),
        Evidence("bdp_bytes", "bytes", "its bandwidth-delay product at rtt_s"),
        Evidence("path_share_ratio", "", "the share of the path's rate achieved"),
        Evidence("window_scale_known", "", "whether advertised windows are byte counts"),
        Evidence(
            "path_phase_starts_s",
            "s",
            "with both captures, when the path changed (absent when it held)",
        ),
        Evidence("path_phase_rtts_s", "s", "each path phase's RTT"),
        Evidence(
            "competing_share_fraction",
            "",
            "with both captures, the share other flows took of a busy bottleneck",
        ),
        Evidence(
            "capture_end",
            "",
            "the end of the direction the capture was taken at, told by the handshake or the "
            "timestamps (absent where they do not tell: a LAN, a tap mid-path, neither in the "
            "capture)",
            values=("sender", "receiver"),
        ),
        Evidence(
            "capture_end_from",
            "",
            "what told the end: the handshake, or the timestamps' echoes",
            values=("handshake", "timestamps"),
        ),
        Evidence(
            "round_trip_s",
            "s",
            "the path's round trip as the capture point splits it (from any capture point)",
        ),
        Evidence(
            "receiver_side_s",
            "s",
            "of it, the part between the capture point and the direction's receiver",
        ),
    )

    measures = frozenset({"ack_answers", "flight_levels", "path_rate", "rtt_steps"})

    @dataclass(frozen=True)
    class Config:
        # Windows of a few round trips label the busy time: enough ACKs to measure a rate,
        # short enough to see slow start (which doubles every RTT) as its own phase.
        phase_rtts: float = 4.0
        # A phase is at least this many round trips: one or two RTTs of another label are the
        # ACK clock's noise (a delayed ACK, a pause of the writer), not a change of regime.
        min_phase_rtts: float = 3.0
        # ACKs at 80% or more of the path's rate mean the bottleneck was busy (the dispersion
        # estimate is good to a few percent; delayed ACKs and gaps cost some more).
        bandwidth_fraction: float = 0.8
        # The flight passing its highest so far by half in a phase of four RTTs or more is slow
        # start (which would multiply it by 16); congestion avoidance adds one segment per RTT.
        slow_start_growth_factor: float = 1.5
        # A flight up by less than 10% per phase is flat: congestion avoidance adds a segment
        # per RTT, which over four RTTs of a flight of a few dozen segments is more than that.
        growing_factor: float = 1.1
        # Half the sends at the flight's cap, two segments below the window: a sender cap.
        min_pinned_fraction: float = 0.5
        # A cap of at least this many of the sender's segments (as it hands them to the
        # capture: super-segments under TSO). A flight of c segments takes c levels, and the
        # band within a segment of its highest holds two of them: a LAN's three or four 64 kB
        # super-segments in flight sit in it half their sends or more by granularity alone,
        # held by nothing. From eight the band is a quarter of the levels or less, and only a
        # flight held there fills half its sends with it, whatever the segment or the path.
        min_cap_segments: float = 8.0
        # A writer blocked on a full send buffer sleeps until the ACKs free part of it: Linux
        # wakes it once the free space is half of what is queued (sk_stream_write_space,
        # sk_stream_min_wspace), when a third of the buffer has been acknowledged. The flight
        # then drains by a third or more of itself, the sender silent under open windows, and
        # the writer refills it in answer to the ACK that crossed that mark. An ACK-clocked
        # window sender answers every ACK (RFC 5681 3), so its silences, ACK-order noise and
        # waits for a full segment's room, drain a few segments of the flight, not a third.
        refill_drain_fraction: float = 1 / 3
        # At least this many such refills in a window of `phase_rtts` RTTs: one is an accident
        # of timing; a buffer that holds the flight refills each time a third of it is
        # acknowledged, once a round trip or more at any path scale, four times a window.
        min_refills_count: int = 2
        # Paced departures: fewer than this share of the bursts that start after an ACK start
        # in answer to it. An ACK-clocked sender answers every ACK at once (RFC 5681 3: ACKs
        # clock out data), a pacer starts each burst on its own timer, in step with no ACK; a
        # burst answers an ACK when it starts within a quarter of the ACKs' spacing (or two
        # serialisation times). A timer's starts fall anywhere between two ACKs, a quarter of
        # them that soon by chance: half is halfway between a timer and an ACK clock.
        paced_answered_fraction: float = 0.5
        # Paced too: the pacer's timer, told between two ACKs, or its holds after its bursts,
        # wait at least this share of a window's time. More than half of the time waiting on
        # the timer is the time the pacer held the sender more than anything else did, as the
        # kernel's samples tell a pacer (next data waiting under open windows in more than half
        # of them), at any RTT.
        paced_timer_fraction: float = 0.5
        # Fewer data segments than this in a direction say nothing about its limits.
        min_data_segments: int = 20
        # At most this many windows per direction: a long transfer over a short-RTT path (a
        # LAN's 100 us) would otherwise be cut into thousands; the windows then widen to
        # duration / this. At least one: the duration is divided by it.
        max_windows_count: int = field(default=200, metadata={"min": 1})

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        # Where the capture was taken is asked of the directions judged below only.
        judged = [
            c
            for c, direction in ctx.series.with_data()
            if ctx.series.data_segments(c, direction) >= self.config.min_data_segments
        ]
        splits = capture_splits(ctx, judged) if judged else {}
        for conn, direction, d in data_directions(ctx):
            found = self._direction(ctx, conn, direction, d, splits.get(conn))
            if found is not None:
                yield found

    def _direction(
        self,
        ctx: AnalysisContext,
        conn: int,
        direction: int,
        d: Any,
        split: CaptureSplit | None = None,
    ) -> Finding | None:
        cfg = self.config
        # Counted before any table is sliced (captures of thousands of short connections).
        series = ctx.series
        if series.data_segments(conn, direction) < cfg.min_data_segments or not series.rows(
            "acks", conn, direction
        ):
            return None
        end = split.end(direction) if split is not None else None
        if end == "receiver" and split is not None and split.source == "timestamps":
            # A sender whose writes come far apart answers the ACKs late too, and its capture
            # splits the echoes as a receiver's would. At the sender the flight is what the
            # transfer's rate keeps in the round trip (Little's law); at the receiver, whose
            # ACKs leave as the data arrives, it is a segment or two. The receiver's end is
            # taken only where the flight stays below the share of rate x round trip that the
            # split asks of the receiver's side.
            rate = _delivery_rate(d)
            flight = float(d.flight["flight_bytes"].median()) if len(d.flight) else 0.0
            if flight > CAPTURE_END_SHARE * rate * split.sides(direction)[0]:
                end = None
        if end == "receiver" and split is not None:
            return self._at_receiver(conn, direction, d, split)
        phases = rtt_phases(ctx, d)
        mss = segment_size_bytes(d.segments)
        if phases is None or mss == 0:
            return None
        # The smallest RTT of any phase scales the limit rules; the first phase's is the unit
        # of the windows, which `phases.warp` stretches to the RTT of each later phase.
        rtt, rtt0 = float(phases.rtt_s.min()), float(phases.rtt_s[0])
        known = bool(ctx.series.window_known.get((conn, direction), False))
        run_start, run_end, run_state = limit_states(d, mss, known, rtt, tell_queued=False)
        if run_start.size == 0:
            return None
        # Pauses the capture cannot tell from a queue with data in it count as busy, as the
        # kernel counts a queue not empty; had they all been the application's, its share
        # would be the most it can be.
        untold_app = float(state_seconds(run_start, run_end, run_state)[APPLICATION])
        run_state[queued_pauses(d, run_start, run_end, run_state)] = NETWORK
        t0, t_end = float(run_start[0]), float(run_end[-1])
        if t_end <= t0:
            return None
        path = path_rate_bps(d)
        tau0, tau_end = (float(x) for x in phases.warp(np.array([t0, t_end])))
        length = max(cfg.phase_rtts * rtt0, (tau_end - tau0) / cfg.max_windows_count)
        if phases.count > 1:
            # Each path phase starts on a window edge: no window mixes two phases' RTTs.
            phases = phases.aligned(tau0, length)
            tau_end = float(phases.warp(np.array([t_end]))[0])
        n = int(np.floor((tau_end - tau0) / length)) + 1
        window, paced, judged, held_share, window_held = self._busy_labels(
            d, (tau0, tau_end), length, n, phases, mss, path, known
        )
        # Each window's share of each state (the runs cut at the window edges), and its label:
        # the state with the most time; busy (network) time takes the window's busy label.
        edges = phases.unwarp(tau0 + length * np.arange(n + 1, dtype=np.float64))
        edges[-1] = max(edges[-1], t_end)
        seconds = _state_seconds_per_window(run_start, run_end, run_state, edges)
        top = np.argmax(seconds, axis=1)
        label = np.where(top == APPLICATION, L_APP, np.where(top == RECEIVE_WINDOW, L_RWND, window))
        # A phase lasts min_phase_rtts round trips of its own path phase: each window counts
        # for the share of it that real time filled (the last one, and the one before each
        # path phase's start, only partly; the padding between phases not at all).
        if phases.count < 2:
            weight = np.ones(n)
            weight[-1] = min(max((tau_end - (tau0 + (n - 1) * length)) / length, 0.0), 1.0)
        else:
            full = length * phases.at(edges[:-1]) / rtt0
            # Real time filled each window, the last only up to the transfer's end.
            filled = np.diff(np.minimum(edges, t_end))
            weight = np.clip(filled / full, 0.0, 1.0)
        label = _merge_short(label, cfg.min_phase_rtts * rtt0 / length, weight)
        # Shares of the whole time: the runs' exact durations for the kernel's classes, and
        # the busy (network) time split by the labels of the windows it fell in.
        total = t_end - t0
        net_seconds = seconds[:, NETWORK]
        label_seconds = np.zeros(len(LABELS))
        label_seconds[L_APP] = seconds[:, APPLICATION].sum()
        label_seconds[L_RWND] = seconds[:, RECEIVE_WINDOW].sum()
        np.add.at(label_seconds, window, net_seconds)
        shares = label_seconds / total
        # Of the busy time, the share the pacer's timer held the sender, whatever held the rate
        # there (a paced sender at the path's rate is busy with bandwidth): in each paced
        # window, its share of that window's busy time (`held_share`). Busy as the kernel
        # counts it (tcp_chrono): the receive window's time too, when the window, not the
        # pacer, held the sender however its segments were spaced.
        busy_total = float(net_seconds.sum() + seconds[:, RECEIVE_WINDOW].sum())
        # Where the timer held all the busy time but what a full window held (NaN), that
        # window's time beyond the receive window's own state is taken from the busy time.
        whole = np.isnan(held_share)
        held_seconds = net_seconds * np.where(whole, 1.0, held_share)
        lo, hi = (phases.unwarp(x) for x in window_held[:2])
        beyond = _overlap_per_window(lo, hi, run_start, run_end, run_state == NETWORK, edges)
        held_seconds[whole] -= np.clip(beyond, 0.0, net_seconds)[whole]
        paced_held = float(held_seconds[paced].sum())
        paced_share = paced_held / busy_total if busy_total > 0 else 0.0
        # And the share in windows where whose clock the departures kept could not be told.
        untold_pace = float(net_seconds[~judged].sum()) / busy_total if busy_total > 0 else 0.0
        # Without the handshake's window scale, the flight bounds the shift from below: at
        # that shift the windows are the smallest the capture allows, and the receive window's
        # time the most it can have been.
        least: int | None = None
        most_rwnd = float(shares[L_RWND])
        if not known:
            least = least_shift(d, mss)
            bound = limit_states(d, mss, False, rtt, least)
            most_rwnd = max(most_rwnd, float(state_seconds(*bound)[RECEIVE_WINDOW]) / total)
        most_app = max(float(shares[L_APP]), untold_app / total)
        told: dict[str, Any] | None = None if split is None else {}
        if end is not None and split is not None:
            told = {
                "capture_end": end,
                "capture_end_from": split.source,
                "round_trip_s": split.rtt_s,
                "receiver_side_s": split.sides(direction)[1],
            }
        return self._verdict(
            conn,
            direction,
            d,
            t0,
            t_end,
            edges,
            label,
            shares,
            phases,
            path,
            (paced_share, untold_pace),
            (least, min(most_rwnd, 1.0)),
            competition(ctx, conn, direction, d),
            min(most_app, 1.0),
            told,
        )

    def _at_receiver(self, conn: int, direction: int, d: Any, split: CaptureSplit) -> Finding:
        """The verdict of a direction captured at its receiver: what the capture can say.

        There the ACKs leave as the data arrives: the bytes in flight look near nothing, the
        RTT samples (data to ACK) are the receiving host's own answer, and the sender's answers
        to its ACKs arrive a round trip after them. The kernel's account of the sender's time
        cannot be read from here, and the verdict says so instead of guessing."""
        name = DIRECTIONS[direction]
        to_sender, to_receiver = split.sides(direction)
        data, acks = d.data, d.acks
        t0 = float(data["t_s"].iloc[0])
        t_end = max(float(acks["t_s"].iloc[-1]), float(data["t_s"].iloc[-1]))
        achieved = _delivery_rate(d) * 8
        rtt = split.rtt_s
        what = "the handshake" if split.source == "handshake" else "the sender's timestamps"
        summary = (
            f"{name} captured at its receiver, which answered {what} in "
            f"{units.duration(to_receiver)} of its {units.duration(rtt)} round trip: what held "
            f"the sender back is told from the sender's end, not here; {units.rate(achieved)} "
            "received"
        )
        how = (
            "The handshake's round trip"
            if split.source == "handshake"
            else "The round trip its timestamps show (each end's quickest echo of the other's "
            "timestamp values, RFC 7323)"
        )
        explanation = (
            f"{how}, {units.duration(rtt)}, splits at the capture point "
            f"into {units.duration(to_sender)} toward the sender and "
            f"{units.duration(to_receiver)} toward the receiver: the capture was taken at the "
            "receiving host (or a hop from it). There the ACKs leave as the data arrives, so "
            "the bytes in flight, the sender's answers to its ACKs (a round trip late here) "
            "and the RTT samples (the receiving host's own answer, not the path's) are not "
            "what the sender saw, and the account of what held it back (the kernel's "
            "tcp_chrono: application, receive window, network) cannot be read from them. "
            "What the receiver alone shows still holds: its window (zero_window_stall, "
            "window_oscillation), the resends that reached it, its ACKs."
        )
        advice = (
            "Capture at the sending host too (tcpdump -s 128 on its interface) and run "
            "tracekit analyze SENDER.pcap --receiver THIS.pcap: the sender's capture tells "
            "what held the transfer back, and the two together where packets were lost."
        )
        return self.finding(
            conn=conn,
            direction=name,
            start_s=t0,
            end_s=max(t_end, t0),
            evidence={
                "capture_end": "receiver",
                "capture_end_from": split.source,
                "rate_bps": achieved,
                "rtt_s": rtt,
                "round_trip_s": rtt,
                "receiver_side_s": to_receiver,
            },
            summary=summary,
            explanation=explanation,
            advice=advice,
        )

    def _busy_labels(
        self,
        d: Any,
        span: tuple[float, float],
        length: float,
        n: int,
        phases: RttPhases,
        mss: int,
        path: float | None,
        known: bool,
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        npt.NDArray[np.float64],
        tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]],
    ]:
        """Per window, what held the busy time (slow start, congestion, bandwidth, pacing or
        the sender's buffer), whether its segments left paced, whether that could be told, and
        the share of its time the pacer held the sender (`_paced_windows`; NaN, all of it but
        the times something else did, where its starts keep a timer's interval or its timer's
        waits or holds fill half of what no full window held); and those times, in warped
        time, as `_paced_windows` gives them.

        Windows are `length` long in warped time (`RttPhases.warp`), `span` its first and last.
        """
        cfg = self.config
        t0, t_end = span
        warp = phases.warp
        data = d.data
        dt = warp(data["t_s"].to_numpy())
        resent = kind_mask(data, "retransmission", "partial_retransmission")
        sent, retrans = _window_sums(dt, resent, t0, length, n)
        # A byte a segment, let go before the flight levels are made beside it.
        lossless = not resent.any()
        del resent
        any_loss_before = np.cumsum(retrans) - retrans > 0
        top, rwnd, has_rwnd = flight_levels(d)
        # Not a copy of the column to partition: only its largest twentieth is held.
        cap = percentile(top, 95)
        counted, _, capped, flight_max, _ = _flight_windows(
            warp(d.flight["t_s"].to_numpy()), has_rwnd, top, rwnd, t0, length, n, mss, cap, known
        )
        at_cap = capped / np.maximum(counted, 1)
        ack_t = warp(d.acks["t_s"].to_numpy())
        # The ACK line's column alone, not a copy of every column of the ACKs from t0 on.
        from_t0 = ack_t >= t0
        line = np.maximum.accumulate(d.acks["ack_rel"].to_numpy()[from_t0])
        gain = np.diff(line, prepend=line[0]) if line.size else line
        _, delivered = _window_sums(ack_t[from_t0], gain, t0, length, n)
        del from_t0, line, gain
        # Rates need each window's seconds; the last window lasts at least one RTT.
        if phases.count < 2:
            width = np.full(n, length)
            width[-1] = max(t_end - (t0 + (n - 1) * length), float(phases.rtt_s[0]))
        else:
            bounds = phases.unwarp(np.r_[t0 + length * np.arange(n), t_end])
            width = np.diff(bounds)
            width[-1] = max(width[-1], float(phases.rtt_s[-1]))
        # The padding between path phases is a window of no time, and carries nothing.
        rate = np.divide(delivered * 8, width, out=np.zeros(n), where=width > 0)
        growth = np.r_[np.inf, flight_max[1:] / np.maximum(flight_max[:-1], 1)]
        # The window's room is read shut as `limit_states` reads it: at the smoothed RTT.
        least = float(phases.rtt_s.min())
        edges = (
            _window_edges(data, d.acks, mss, smoothed_rtt_at(d, d.acks["t_s"].to_numpy(), least))
            if known
            else None
        )
        paced, judged, held_share, window_held = _paced_windows(
            dt,
            ack_t,
            t0,
            length,
            n,
            (float(phases.rtt_s[0]), least),
            turnaround_s(d),
            cfg.paced_answered_fraction,
            from_empty_queue(d),
            (delivered / length, float(mss)),
            edges,
        )
        # Each window's time no full receive window held the sender (`_paced_windows`), nor
        # the end of the data: the time a pacer can have held it at all.
        lo, hi, full_window = window_held
        tiles = t0 + length * np.arange(n + 1, dtype=np.float64)
        whole_span = (np.array([t0]), np.array([tiles[-1]]), np.ones(1, dtype=bool))
        full_s = _overlap_per_window(lo[full_window], hi[full_window], *whole_span, tiles)
        could = cfg.paced_timer_fraction * np.maximum(width - full_s * (width / length), 0.0)
        # Or the timer shows itself between two ACKs (`timer_waits`): where its waits fill at
        # least half that time, it held the sender for most of it, whatever the ACKs let it
        # send; the bursts after ACKs may not say so (a receiver that acknowledges once per
        # read, whose window the pacer then spreads over the cycle).
        wait_at, wait_s = timer_waits(d, mss, float(phases.rtt_s.min()))
        w = np.clip(((warp(wait_at) - t0) / length).astype(np.int64), 0, n - 1)
        waits = np.bincount(w, weights=wait_s, minlength=n)
        timed = (waits >= could) & (waits > 0)
        paced |= timed
        judged |= timed
        # Or the pacer's holds (`pacer_held`: read where its timer released a burst, expected
        # below their bound where an ACK did) fill at least half the window's time: the pacer,
        # not the ACKs, kept the sender waiting most of that window, as the kernel's samples
        # tell a pacer, even where the window's last moments before each ACK leave every burst
        # answering one (a pacer near the rate a receive window allows).
        held_at, held_s = pacer_held(d, mss, float(phases.rtt_s.min()))
        w = np.clip(((warp(held_at) - t0) / length).astype(np.int64), 0, n - 1)
        holds = np.bincount(w, weights=held_s, minlength=n)
        held = (holds >= could) & (holds > 0)
        paced |= held
        judged |= held
        # Those windows are the timer's but for the time a window held the sender.
        held_share[timed | held] = np.nan
        # A sending host whose answer to an ACK (`turnaround_s`) outlasts the round trip set
        # the rate itself: the ACKs come back sooner than it sends on, so the flight is what
        # it gets through, and a congestion window that no loss cut is never filled (Linux
        # grows it only while it limits the flight: tcp_is_cwnd_limited, RFC 7661). Its pace
        # is its processing's (interrupt, socket lock, copy, scheduling: a LAN's or a
        # datacenter's round trip of microseconds against tens of them) or a pacer's timer's
        # (a pacer on a path of a few ms), and `_paced_windows` cannot tell the two there. A
        # host's own time is microseconds: over a WAN the round trip is hundreds of them and
        # more, and only a pacer's interval outlasts it. A loss, a pacer told by its timer, a
        # window at its cap or the path's rate in a window still name the window.
        lossfree = L_HOST if turnaround_s(d) > float(phases.rtt_s.min()) else L_CONG
        label = np.full(n, lossfree, dtype=np.int64)
        busy = rate >= cfg.bandwidth_fraction * path if path is not None else np.zeros(n, bool)
        # Slow start only ever raises the congestion window (no loss came before it), so the
        # flight it lets out reaches new heights: a window is slow start where its flight passes
        # the highest of every window before it by the factor, not where it regains a height it
        # had held (a host's or an application's pace dipping and coming back, as a LAN's does
        # every few windows). A window with nothing sent or acknowledged idled a whole window:
        # Linux restarts slow start after an idle longer than its RTO (tcp_cwnd_restart, RFC
        # 5681 4.1), and the heights start over after one.
        empty = (sent == 0) & (delivered == 0)
        rise = flight_max / np.maximum(_highest_before(flight_max, empty), 1.0)
        slow = (rise >= cfg.slow_start_growth_factor) & ~any_loss_before & (retrans == 0)
        below_path = rate < cfg.bandwidth_fraction * path if path is not None else np.ones(n, bool)
        # Precedence, last assignment wins: the weakest evidence first.
        # A cap the sender's buffer holds: each ACK at it is answered at once, within the
        # sender's turnaround (the next data is ready). An application's write leaves those
        # ACKs unanswered; a pacer answers them on its own timer, later.
        ready = (
            lossless
            and answered_share_at(d, cap - mss, turnaround_s(d), mss) >= cfg.min_pinned_fraction
        )
        pinned = (at_cap >= cfg.min_pinned_fraction) & ready & (cap >= cfg.min_cap_segments * mss)
        # Or a writer that sleeps on the full buffer: deep drains, each ended by an ACK. Not
        # where the sender hands its capture super-segments (TSO, GSO): Linux then defers a
        # send until a third of its congestion window fits (tcp_tso_should_defer,
        # tcp_tso_win_divisor), and a drain by a third refilled at once is that deferral, as
        # like a woken writer's (which wakes when a third of its buffer is acknowledged) as
        # can be; the cap alone tells the buffer there.
        if lossless and known and not _offloaded(d):
            refill_t, triggered = _buffer_refills(d, mss, cfg.refill_drain_fraction)
            w = np.clip(((warp(refill_t) - t0) / length).astype(np.int64), 0, n - 1)
            deep = np.bincount(w, minlength=n)
            woken = np.bincount(w[triggered], minlength=n)
            pinned |= (woken >= cfg.min_refills_count) & (2 * woken >= deep)
        label[pinned & (growth < cfg.growing_factor)] = L_SNDBUF
        # A window is the pacer's where its timer held the sender at least half its busy time
        # (`held_share`, NaN: all of it), as the kernel's samples tell a pacer (the `paced`
        # label's own measure): a window whose bursts kept no ACK's time but whose waits were
        # the windows' (a long path's slow start, each round waiting on its ACKs, its answers
        # delayed past the host's turnaround by a device's shaper) is not.
        timer = paced & ~(held_share < 0.5)
        label[timer & below_path & (retrans == 0)] = L_PACE
        label[slow & ~timer] = L_SLOW
        label[busy] = L_BW
        label[retrans > 0] = L_CONG
        # Windows with nothing sent or acknowledged carry no evidence: they take the label
        # before them (the first keeps its own).
        empty[0] = False
        filled: npt.NDArray[np.int64] = label[
            np.maximum.accumulate(np.where(empty, 0, np.arange(n)))
        ]
        return filled, paced, judged, held_share, window_held

    def _verdict(
        self,
        conn: int,
        direction: int,
        d: Any,
        t0: float,
        t_end: float,
        edges: npt.NDArray[np.float64],
        label: npt.NDArray[np.int64],
        shares: npt.NDArray[np.float64],
        phases: RttPhases,
        path: float | None,
        pacing: tuple[float, float],
        scale: tuple[int | None, float],
        competing: Competition | None = None,
        most_app: float = 0.0,
        told: dict[str, Any] | None = None,
    ) -> Finding:
        """The finding. `pacing`: the share of the busy time whose segments left on a pacer's
        timer, and the share where that could not be told; `scale`: the least window scale
        shift the capture allows (None when the handshake gave it) and the most time the
        receive window can have held the sender; `most_app`: the most time the application can
        have held it; `told`: where the capture point lies (None: nothing in the capture tells)."""
        least, most_rwnd = scale
        paced_share, untold_pace = pacing
        known = least is None
        # The RTT quoted is that of the path phase holding most of the transfer; a path that
        # changed lists each phase's.
        rtt = phases.over(t0, t_end)
        rtt_text = units.duration(rtt)
        if phases.count > 1:
            rtt_text = ", then ".join(
                [units.duration(float(phases.rtt_s[0]))]
                + [
                    f"{units.duration(float(r))} from {units.duration(float(a) - t0)}"
                    for a, r in zip(phases.starts_s, phases.rtt_s[1:], strict=True)
                ]
            )
        name = DIRECTIONS[direction]
        kernel = {c: 0.0 for c in KERNEL_CLASSES}
        for code, share in enumerate(shares):
            kernel[KERNEL_CLASS[code]] += float(share)
        top_class = max(KERNEL_CLASSES, key=lambda c: kernel[c])
        members = [c for c in range(len(LABELS)) if KERNEL_CLASS[c] == top_class]
        cause = max(members, key=lambda c: shares[c])
        starts = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
        phase_start = np.maximum(edges[starts], t0)
        phase_end = np.r_[edges[starts[1:]], t_end]
        phase_label = label[starts]
        phase_start, phase_end, phase_label, phase_other = _merge_alternations(
            phase_start, phase_end, phase_label
        )
        acks = d.acks
        line = acks["ack_rel"].to_numpy()
        first = float(d.data["seq_rel"].min())
        achieved = float(max(line.max() - first, 0) * 8 / (t_end - t0)) if line.size else 0.0
        others = ", ".join(
            f"{c.replace('_', ' ')} {kernel[c]:.0%}"
            for c in KERNEL_CLASSES
            if c != top_class and kernel[c] >= 0.005
        )
        cause_name = "the sending host" if cause == L_HOST else LABELS[cause].replace("_", " ")
        share_text = f"{shares[cause]:.0%}"
        if top_class == "network" and cause_name != "network":
            share_text += f" (network {kernel['network']:.0%})"
        path_text = f" of a {units.rate(path)} path" if path is not None else ""
        # A network-limited transfer whose bottleneck other flows kept busy was limited by
        # the traffic it competed with: the verdict names it (competing_traffic has more).
        shared = competing is not None and competing.busy and top_class == "network"
        rivals = ""
        if shared and competing is not None:
            rivals = ", ".join(
                f"{n} ({x:.0%})" for n, x in zip(competing.names, competing.shares, strict=True)
            )
        summary = (
            f"{name} limited by {cause_name} {share_text} of the transfer"
            + (f"; {others}" if others else "")
            + f": {units.rate(achieved)}{path_text}, RTT {rtt_text}"
            + (f"; competing with {rivals}" if rivals else "")
        )
        phases_text = "; ".join(
            f"{LABELS[int(lab)].replace('_', ' ')}"
            + (f" taking turns with {LABELS[int(o)].replace('_', ' ')}" if o >= 0 else "")
            + f" {units.duration(a - t0)}-{units.duration(b - t0)}"
            for a, b, lab, o in zip(phase_start, phase_end, phase_label, phase_other, strict=True)
        )
        explanation = (
            f"Over {units.duration(t_end - t0)} from the first data segment to the last ACK, "
            f"{WHY[cause]}"
            + (
                f" (it answered its ACKs within {units.duration(turnaround_s(d))}, nine times "
                f"in ten, against a round trip of {units.duration(float(phases.rtt_s.min()))})"
                if cause == L_HOST
                else ""
            )
            + f". As the kernel accounts a sender's time (tcp_chrono): application "
            f"{kernel['application']:.0%} (nothing in flight), receive window "
            f"{kernel['receive_window']:.0%}, network {kernel['network']:.0%} (busy "
            f"otherwise: slow start {shares[L_SLOW]:.0%}, congestion {shares[L_CONG]:.0%}, "
            f"bandwidth {shares[L_BW]:.0%}, pacing {shares[L_PACE]:.0%}, sender buffer "
            f"{shares[L_SNDBUF]:.0%}, host {shares[L_HOST]:.0%}). Phases, in round trips of "
            f"{rtt_text}, from the first data segment: {phases_text}."
            + (
                f" Other traffic shared the bottleneck and kept it busy: {rivals} of the bytes "
                f"that reached the receiving host, the transfer {competing.own_share:.0%} (see "
                "competing_traffic)."
                if rivals and competing is not None
                else ""
            )
            + (
                " Pauses the capture cannot tell from a sender with data queued (a pacer's "
                "timer, a write still being copied in) count as busy; had they all been the "
                f"application's, its share would be {most_app:.0%}."
                if most_app >= kernel["application"] + 0.005
                else ""
            )
            + (
                " Whose clock the departures kept (a pacer's timer or the ACKs) could not be "
                f"told for {untold_pace:.0%} of the busy time: fewer than 8 bursts started after "
                "an ACK, or the sender answered its ACKs later than they came (a LAN host's own "
                "turnaround) while its bursts kept no timer's interval."
                if untold_pace >= 0.5
                else ""
            )
            + (
                " Neither a handshake nor timestamps' echoes in the capture tell which end of "
                "the path it was taken at: this account reads it as the sender's. Taken at the "
                "receiver, its RTT samples would be the receiving host's own answer "
                "(microseconds, whatever the path) and this account would not hold."
                if told is None
                else ""
            )
            + (
                ""
                if known
                else " The window scale is unknown (the handshake is not in the capture): only "
                "zero windows count as the receive window's doing above. The flight shows a "
                f"shift of at least {least}; at that shift the receive window would have held "
                f"the sender {most_rwnd:.0%} of the time, the most it can have."
            )
        )
        evidence: dict[str, Any] = {
            "cause": LABELS[cause],
            "limit_class": top_class,
            "cause_fraction": float(shares[cause]),
            "application_fraction": kernel["application"],
            "receive_window_fraction": kernel["receive_window"],
            "network_fraction": kernel["network"],
            "application_fraction_most": max(most_app, kernel["application"]),
            "slow_start_fraction": float(shares[L_SLOW]),
            "congestion_fraction": float(shares[L_CONG]),
            "bandwidth_fraction": float(shares[L_BW]),
            "pacing_fraction": float(shares[L_PACE]),
            "sender_buffer_fraction": float(shares[L_SNDBUF]),
            "host_fraction": float(shares[L_HOST]),
            "paced_departures_fraction": paced_share,
            "paced_untold_fraction": untold_pace,
            "phase_starts_s": tuple(float(x) for x in phase_start),
            "phase_ends_s": tuple(float(x) for x in phase_end),
            "phase_cause_codes": tuple(int(x) for x in phase_label),
            "phase_other_codes": tuple(int(x) for x in phase_other),
            "rate_bps": achieved,
            "rtt_s": rtt,
            "window_scale_known": known,
        }
        if phases.count > 1:
            evidence["path_phase_starts_s"] = tuple(float(x) for x in phases.starts_s)
            evidence["path_phase_rtts_s"] = tuple(float(x) for x in phases.rtt_s)
        if shared and competing is not None:
            evidence["competing_share_fraction"] = 1.0 - competing.own_share
        if not known:
            evidence["window_scale_least"] = least
            evidence["receive_window_fraction_most"] = most_rwnd
        if path is not None:
            evidence["path_rate_bps"] = path
            evidence["bdp_bytes"] = float(bdp_bytes(path, rtt))
            evidence["path_share_ratio"] = achieved / path
        evidence.update(told or {})
        return self.finding(
            conn=conn,
            direction=name,
            start_s=t0,
            end_s=max(t_end, t0),
            evidence=evidence,
            summary=summary,
            explanation=explanation,
            advice=ADVICE[cause],
        )


def _delivery_rate(d: Any) -> float:
    """Bytes per second the ACK line advanced over the direction's time, first data segment to
    last ACK (or last segment)."""
    data, acks = d.data, d.acks
    t0 = float(data["t_s"].iloc[0])
    t_end = max(float(acks["t_s"].iloc[-1]), float(data["t_s"].iloc[-1])) if len(acks) else t0
    line = acks["ack_rel"].to_numpy()
    first = float(data["seq_rel"].min())
    span = t_end - t0
    return float(max(line.max() - first, 0) / span) if line.size and span > 0 else 0.0


def _highest_before(
    level: npt.NDArray[np.float64], restart: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Per window, the highest `level` of the windows before it since the last `restart`
    (a restart window starts over: 0 for it)."""
    run_id = np.cumsum(restart)
    # Levels are at least 0: lifting each run above every run before it keeps the running
    # maximum within the run (integers of bytes, exact in float64 far past any flight).
    lift = run_id * (float(level.max(initial=0.0)) + 1.0)
    highest = np.maximum.accumulate(level + lift) - lift
    before = np.zeros_like(level)
    before[1:] = np.where(run_id[1:] == run_id[:-1], highest[:-1], 0.0)
    return before


def _state_seconds_per_window(
    start: npt.NDArray[np.float64],
    end: npt.NDArray[np.float64],
    state: npt.NDArray[np.int8],
    edges: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Seconds of each state within each window [edges[w], edges[w + 1]): (windows, 3)."""
    out = np.zeros((edges.size - 1, 3))
    for s in range(3):
        mine = state == s
        out[:, s] = np.diff(_seconds_upto(start[mine], end[mine], edges))
    return out


def _seconds_upto(
    start: npt.NDArray[np.float64], end: npt.NDArray[np.float64], x: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The seconds runs [start, end) (in time order, not overlapping) cover up to each time
    of `x`: the runs that began before it, the last one cut."""
    if start.size == 0:
        return np.zeros(x.size)
    cum = np.r_[0.0, np.cumsum(end - start)]
    k = np.searchsorted(start, x, side="right")
    last = np.maximum(k - 1, 0)
    inside = np.clip(x - start[last], 0.0, (end - start)[last])
    return np.where(k > 0, cum[last] + inside, 0.0)


def _overlap_per_window(
    lo: npt.NDArray[np.float64],
    hi: npt.NDArray[np.float64],
    run_start: npt.NDArray[np.float64],
    run_end: npt.NDArray[np.float64],
    counted: npt.NDArray[np.bool_],
    edges: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Seconds within each window [edges[w], edges[w + 1]) that lie both in one of the
    intervals [lo, hi) (in time order, not overlapping) and in a run that is `counted`."""
    start, end = run_start[counted], run_end[counted]

    def counted_upto(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return _seconds_upto(start, end, x)

    if lo.size == 0 or run_start.size == 0:
        return np.zeros(edges.size - 1)
    each = np.r_[0.0, np.cumsum(np.maximum(counted_upto(hi) - counted_upto(lo), 0.0))]
    j = np.searchsorted(lo, edges, side="right") - 1
    at = np.maximum(j, 0)
    part = np.maximum(counted_upto(np.minimum(edges, hi[at])) - counted_upto(lo[at]), 0.0)
    upto = np.where(j >= 0, each[at] + part, 0.0)
    return np.maximum(np.diff(upto), 0.0)


# Two labels taking turns for this many phases or more (two whole cycles) are one regime.
ALTERNATION_PHASES = 4


def _merge_alternations(
    start: npt.NDArray[np.float64],
    end: npt.NDArray[np.float64],
    label: npt.NDArray[np.int64],
) -> tuple[
    npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int64]
]:
    """Phases whose labels take turns between two (A, B, A, B, ...) for ALTERNATION_PHASES or
    more, as one phase: its start, end, the label with more of its time, and the other (-1 for
    a phase that took no turns).

    A regime that cycles is one phase of the transfer however its halves are labelled: AIMD's
    sawtooth (a loss every few round trips, the window regrown to the path's rate between),
    BBR's gain cycle (a pacer below the path, then at it), a slow reader's window shutting and
    reopening, a host's pace and a loss at its backlog. Each half lasts at least
    `min_phase_rtts`, and the verdict's shares keep their split; the timeline names the
    regime once, not every turn of it. Phases are at most a few hundred (`max_windows_count`):
    the loop runs over phases, not packets."""
    m = label.size
    other = np.full(m, -1, dtype=np.int64)
    if m < ALTERNATION_PHASES:
        return start, end, label, other
    keep: list[int] = []
    ends: list[float] = []
    labels: list[int] = []
    others: list[int] = []
    k = 0
    while k < m:
        j = k + 2
        # Neighbouring phases differ (repeats were merged): a label that returns two phases on
        # continues the turns.
        while j < m and label[j] == label[j - 2]:
            j += 1
        j = min(j, m)
        if j - k >= ALTERNATION_PHASES:
            seconds = end[k:j] - start[k:j]
            a, b = int(label[k]), int(label[k + 1])
            a_s = float(seconds[label[k:j] == a].sum())
            b_s = float(seconds[label[k:j] == b].sum())
            keep.append(k)
            ends.append(float(end[j - 1]))
            labels.append(a if a_s >= b_s else b)
            others.append(b if a_s >= b_s else a)
            k = j
        else:
            keep.append(k)
            ends.append(float(end[k]))
            labels.append(int(label[k]))
            others.append(-1)
            k += 1
    return (
        start[np.array(keep)],
        np.array(ends),
        np.array(labels, dtype=np.int64),
        np.array(others, dtype=np.int64),
    )


def _merge_short(
    label: npt.NDArray[np.int64], min_windows: float, weight: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """Phases shorter than `min_windows` windows join a neighbour: the one before, or the one
    after for the first phase; repeated until every phase is long enough or one is left. Each
    window counts for its `weight` of one (the share of it the transfer filled)."""
    label = label.copy()
    ends = np.cumsum(weight)
    while True:
        starts = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
        stops = np.r_[starts[1:], label.size]
        lengths = ends[stops - 1] - np.r_[0.0, ends][starts]
        short = np.flatnonzero(lengths < min_windows)
        if short.size == 0 or starts.size == 1:
            return label
        # The shortest phase goes first; ties to the earliest.
        p = int(short[np.argmin(lengths[short])])
        lo, hi = starts[p], stops[p]
        if p > 0 and (p == starts.size - 1 or lengths[p - 1] >= lengths[p + 1]):
            label[lo:hi] = label[lo - 1]
        else:
            label[lo:hi] = label[hi]


def _offloaded(d: Any) -> bool:
    """Whether the sender handed its capture super-segments: a data segment longer than the
    size it cuts its data at on the wire (`wire_segment_bytes`)."""
    length = d.segments["len"].to_numpy()
    wire = wire_segment_bytes(length, d.peer_mss)
    return bool(wire > 0 and length.size and int(length.max()) > wire)


def _buffer_refills(
    d: Any, mss: int, drain_fraction: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The sender's deep silences and how each ended: per silence, the time of the ACK that
    ended it and whether that ACK woke a writer blocked on the send buffer.

    A silence is a run of ACKs that advanced the line, with data still in flight and a
    segment of room under the advertised window, that the sender left unanswered; it is deep
    when those ACKs (and the one that ended it) acknowledged `drain_fraction` or more of the
    flight it began with. The ACK that ends it woke the writer when the sender answered it at
    once with a full segment: within a quarter of the ACKs' median spacing (or two
    serialisation times), the latency of a wake-up, where a writer on its own clock lands
    anywhere in the gap. The window scale must be known (the room is a byte count).
    """
    answers = ack_answers(d)
    acks = d.acks
    none = (np.zeros(0), np.zeros(0, dtype=bool))
    if answers.line.size < 3:
        return none
    t = acks["t_s"].to_numpy()
    edge = np.maximum.accumulate(acks["edge_rel"].to_numpy().astype(np.int64))
    line, sent = answers.line, answers.sent
    before = np.r_[line[:1], line[:-1]]  # the line as each ACK arrived
    flight = sent - line
    room = edge - sent >= mss
    # ACKs that moved the line with data to come after them (the transfer is not over).
    moved = acks["advance"].to_numpy().astype(bool) & np.isfinite(answers.delay_s)
    idx = np.flatnonzero(moved)
    if idx.size < 3:
        return none
    silent = room[idx] & ~answers.answered[idx] & (flight[idx] > 0)
    resumed = room[idx] & answers.answered[idx]
    pos = np.arange(idx.size)
    ends = np.flatnonzero(resumed[1:] & silent[:-1]) + 1  # the ACK that ended a silence
    if ends.size == 0:
        return none
    last_loud = np.maximum.accumulate(np.where(silent, -1, pos))
    first = idx[last_loud[ends - 1] + 1]  # the silence's first ACK
    end = idx[ends]
    peak = sent[first] - before[first]
    deep = line[end] - before[first] >= drain_fraction * peak
    # The segment that answered: a woken writer's data leaves in full segments; a sub-MSS
    # tail released by the ACK (Nagle, RFC 896) is an old write's remainder, not a refill.
    full = answer_bytes(d)[end] >= mss
    data_t = d.data["t_s"].to_numpy()
    serialisation = serialisation_s(data_t) or 0.0
    soon = max(2 * serialisation, 0.25 * float(np.median(np.diff(t))))
    woke = (answers.delay_s[end] <= soon) & full
    return t[end][deep], woke[deep]


class WindowEdges(NamedTuple):
    """What tells a start its own ACK let out (`_window_edges`, `_opened_by_ack`): per data
    segment its sequence end and length; per ACK the farthest right edge of the receive window
    offered up to it and the window it offered (bytes); the segment size and the least RTT,
    which scale the room below which a window is shut (`shut_below`)."""

    end: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    edge: npt.NDArray[np.int64]
    window: npt.NDArray[np.int64]
    mss: float
    rtt: npt.NDArray[np.float64]


# Bursts that start after an ACK that a judgment of the sender's clock rests on: a share
# and the quartiles of their spacing rest on a few of each.
PACED_MIN_STARTS = 8
# How many of the host's turnarounds a timer's regular interval must pass (`_paced_windows`).
HOST_PACE_TURNAROUNDS = 2.0


def _paced_windows(
    t: npt.NDArray[np.float64],
    ack_t: npt.NDArray[np.float64],
    t0: float,
    length: float,
    n: int,
    rtts: tuple[float, float],
    turnaround: float,
    fraction: float,
    emptied: npt.NDArray[np.uint8] | None = None,
    pace: tuple[npt.NDArray[np.float64], float] | None = None,
    edges: WindowEdges | None = None,
) -> tuple[
    npt.NDArray[np.bool_],
    npt.NDArray[np.bool_],
    npt.NDArray[np.float64],
    tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]],
]:
    """Per window: whether its segments left on a timer of their own rather than in answer to
    ACKs, whether that could be told (the second array; False: "cannot tell"), and the share
    of its time the timer held the sender (the third; NaN where its starts keep a timer's
    interval: all of it but the times below). Then the times something other than the timer
    held the sender, in time order: their starts, ends, and whether a full receive window (or
    the end of the data) was what held it. Judged on the bursts that start after an ACK, at
    least 8 of them, two ways; either shows the timer:

    - fewer than `fraction` of them start at once after their ACK;
    - they keep their own time better than their ACKs': the spread of the times between
      starts is smaller than the spread of the delays from the ACKs. An ACK-clocked start
      moves with its ACK (its delay is the host's, however the ACKs jitter); a timer's keeps
      its spacing, and its delay from the ACKs absorbs their jitter. This holds where a
      pacer sets the path's rate and its ACKs come back in step with its timer.

    Only a burst's first segment can answer an ACK: the rest follow it back to back, however
    they were released. Linux sends a paced burst of max(2 segments, 1 ms of the pacing rate)
    at once (tcp_tso_autosize), and an ACK that lands inside such a burst says nothing of what
    started it. A burst counts when an ACK arrived since the segment before it (something new
    the sender could answer); one that starts with no ACK since is the timer's or the
    application's, and is left out rather than called either. False ("cannot tell") when the
    sender's answers come later than the ACKs come: then ACKs wait on the host in batches (a
    LAN's microseconds of ACK spacing against tens of microseconds of host time) and no burst
    can be paired with the ACK that released it. So too where the host's own answer to an ACK
    (`turnaround`: interrupt, socket lock, scheduling) outlasts the round trip (the least of
    `rtts`, the first path phase's and the least): it gets the next ACKs before it has
    answered the first, and its departures keep the host's pace, on a LAN of microseconds as
    on any path (over a WAN the round trip is thousands of turnarounds long). Neither holds
    where the starts keep a timer's interval: a pacer whose interval outlasts the ACKs'
    spacing or the round trip (a pacing rate of a few segments per round trip) answers no ACK,
    and its departures are told by their regularity.

    The timer's share of a window's time is what the kernel's samples count as the pacer's
    hold: the time before each burst the timer released, over the time before every burst.
    The wait before a burst that answers an ACK at once was the window's (it had no room until
    that ACK), as where a pacer near the rate its window allows, or its cwnd in start-up,
    fills the window part of each round trip and waits for the ACKs the rest; in a window
    whose starts keep the timer's interval (the second way) every start is the timer's, its
    ACKs in step with it, but for the time a full window held it (below).

    `pace`, per window the bytes acknowledged per second (of `t`'s time) and the segment size,
    bounds a pacer's wait: Linux's pacer lets out at most two segments, or 2**-10 s of its
    rate, at once (tcp_tso_autosize), and waits that burst's time at its rate before the next;
    its rate is at least the rate the window delivered. A wait after an ACK more than twice
    that long (two segments at the window's rate, or 2**-10 s) is no pacer's: an application
    that writes on a clock of its own released the burst (a chunk every so many milliseconds,
    written while the last one is still in flight), and the burst is left out, as one from
    an empty queue is.

    `edges`, per segment its sequence end and length and per ACK the receive window's right
    edge so far and the room below which it is shut (`_window_edges`), tells a start its own
    ACK let out: one with too little room under every edge the ACKs before its own had offered
    (`_opened_by_ack`) and that left at once after it did not fit the window until that ACK
    came. The time before such an ACK was the receive window's (the flight filled it), and
    the pacer held the start only from the ACK on (its delay), however regular the starts: a
    pacer faster than the window's rate fills the window early in each round trip, and the
    ACKs, returning in the pacer's spacing, then release the departures in it. One that left
    later than at once after its ACK was held by the timer from the start before it: a timer
    that had let go before the ACK would have had the start leave at once on it. A timer's
    hold is also at most twice a Linux pacer's wait (as `pace` bounds it): a longer pause in
    a window whose starts keep a timer's interval is a window's (the congestion window's
    first round trip, with the initial window out), not the timer's. After the last segment
    nothing waits to be sent, and no timer holds anything.
    """
    rtt, least_rtt = rtts
    out = np.zeros(n, dtype=bool)
    untold = (
        out,
        np.zeros(n, dtype=bool),
        np.zeros(n),
        (np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool)),
    )
    if t.size < 3 or ack_t.size < 2:
        return untold
    # One serialisation time: the closest two segments ever left (back to back at line rate),
    # and at most one RTT (`rtt`, in the warped time of `t`): a segment's serialisation is
    # part of its own round trip. A sender that never sends two segments closer than an RTT
    # apart (a pacer on a LAN) shows no back-to-back pair, only its pacing interval.
    least = serialisation_s(t)
    line = min(least, rtt) if least is not None else 0.0
    spacing = float(np.median(np.diff(ack_t)))
    soon = max(2 * line, 0.25 * spacing)
    # A burst starts where a segment does not follow the one before back to back (a gap of
    # more than two serialisation times: one for the NIC's queue ahead of the capture). The
    # first segment has none before it (a time of -inf). `after_ack`: the indices of the
    # segments that start a burst after an ACK.
    after_ack, delay, between = _burst_starts(t, ack_t, 2 * line)
    if after_ack.size == 0:
        return untold
    known = np.isfinite(between)
    opened = _opened_by_ack(t, ack_t, after_ack, edges)
    # Half the answers later than the ACKs' spacing, or a host whose turnaround outlasts the
    # round trip: the host, not the ACK, set the time, unless the starts keep a timer's
    # interval. A pacer releases each burst its interval after the last (B/P, an hrtimer), so
    # the intervals between its starts spread no wider than the NIC's queue ahead of the
    # capture spaces segments (two serialisation times), whatever the interval; a host that
    # answers ACKs as it gets to them spreads its starts as widely as their mean, a LAN's as
    # a WAN's.
    # Where the host answers more slowly than the round trip, a host that is never idle spaces
    # its bursts as regularly as a timer does, by its own time per burst, which its answers to
    # ACKs also wait behind (a LAN's CPU-bound sender at 14 Gbit/s started a burst every 20 us,
    # its turnaround 15 us against a 4 us round trip): there a timer is told by its regularity
    # only where its interval is more than twice the host's turnaround. Where the round trip is
    # longer, the turnaround is no host's pace (a pacer's waits after ACKs are in it).
    hosts_pace = turnaround > least_rtt
    intervals = between[known]
    regular = (
        intervals.size >= PACED_MIN_STARTS
        and float(np.subtract(*np.percentile(intervals, [75, 25]))) <= 2 * line
        and not (hosts_pace and float(np.median(intervals)) <= HOST_PACE_TURNAROUNDS * turnaround)
    )
    if (float(np.median(delay)) >= spacing or hosts_pace) and not regular:
        return untold
    idle = np.zeros(0, dtype=np.int64)
    if emptied is not None:
        # A burst sent from an empty queue (`from_empty_queue`): the application's write
        # released it, neither a pacer's timer nor the ACK.
        keep = ~bit_at(emptied, after_ack)
        idle = after_ack[~keep & (after_ack > 0)]
        after_ack, delay, between = after_ack[keep], delay[keep], between[keep]
        known, opened = known[keep], opened[keep]
    if delay.size >= PACED_MIN_STARTS:
        # At once is also as soon as this host answers. An ACK-clocked start waits the host's
        # own answer time (interrupt, socket lock, scheduling: microseconds to hundreds, on any
        # path), never less than its floor, which the fastest tenth of the starts reads, and
        # its turn behind other work stretches that by as much again. A pacer's starts fall
        # at random against the ACKs, their delays spread from nothing to the ACKs' spacing:
        # twice their tenth percentile is a fifth of the spacing, under the quarter above, and
        # the bound stays where it was. Where the host's floor is near the ACKs' spacing (a
        # fast path's ACKs, tens of microseconds apart), a quarter of the spacing would call
        # every answer of the host late, and the host a pacer. A host that keeps up answers
        # each ACK before the next one comes: a floor as long as the ACKs' spacing is no
        # host's answer but another clock's (an application's writes, a pacer locked to its
        # ACKs' phase), and at once stays within the spacing. A pacer locked to its ACKs'
        # phase at a delay under their spacing reads as answering them at once here; the
        # second way below tells it, its starts keeping their spacing better than their delays.
        floor = float(np.quantile(delay, HOST_FLOOR_QUANTILE))
        if floor < spacing:
            soon = max(soon, min(ANSWER_SPREAD * floor, spacing))
    # In place: each step a column as long as the bursts, made once.
    w_s = t[after_ack]
    w_s -= t0
    w_s /= length
    w = w_s.astype(np.int64)
    del w_s
    np.clip(w, 0, n - 1, out=w)
    wait_most = np.full(n, np.inf)
    if pace is not None:
        per_s, mss = pace
        wait_most = 2 * np.maximum(
            np.divide(2 * mss, per_s, out=np.full(n, np.inf), where=per_s > 0), BURST_S
        )
        writer = known & (delay > soon) & (between > wait_most[w])
        if writer.any():
            keep = ~writer
            after_ack, delay, between = after_ack[keep], delay[keep], between[keep]
            known, w = known[keep], w[keep]
            opened = opened[keep]
    # A start that left later than at once after the ACK which opened its window was the
    # timer's all along: had the timer let go before that ACK came, the sender would have
    # sent on the ACK at once (Linux asks its pacer first, tcp_pacing_check, and then the
    # window), so the timer still held it when the ACK came, and the window did not.
    opened &= delay <= soon
    # The part of each start's wait the pacer can have held it (see `edges` above), and per
    # window the time it cannot have: before an ACK that opened a full window, and past the
    # longest wait a pacer keeps.
    timer_part = np.minimum(np.where(opened, delay, between), wait_most[w])
    # When: a full window held the sender first, from the start before until the ACK that
    # opened it; a pause longer than a pacer's wait came after the pacer's part.
    start_t = t[after_ack]
    other = known & (between > timer_part)
    # Before a burst from an empty queue nothing waited from the segment before it (the end of
    # what the application had written) until the application's next write. A pacer holds
    # that write at most until its next release, its longest wait after the segment before:
    # a burst that left later than that left when the write came, and nothing waited for a
    # timer in all the gap. A shorter gap may hold a pacer's wait, and is left to the rules
    # above.
    wi = np.clip(((t[idle] - t0) / length).astype(np.int64), 0, n - 1)
    idle = idle[t[idle] - t[idle - 1] > wait_most[wi]]
    idle_lo, idle_hi = t[idle - 1], t[idle]
    before = (start_t - between)[other]
    lo = np.r_[np.where(opened[other], before, before + timer_part[other]), idle_lo]
    hi = np.r_[np.where(opened[other], start_t[other] - timer_part[other], start_t[other]), idle_hi]
    full = np.r_[opened[other], np.zeros(idle_lo.size, dtype=bool)]
    # In time order: each gap lies between its start and the burst start before it.
    order = np.argsort(lo, kind="stable")
    last = float(t.max())
    not_timer = (np.r_[lo[order], last], np.r_[hi[order], np.inf], np.r_[full[order], True])
    del lo, hi, full, order
    # Eight starts at least: a share and the quartiles rest on a few of each. Where a window
    # of a few round trips holds fewer (a path of a few segments per round trip, as a slow
    # link's or a LAN's), it is judged with the windows after it until eight have started:
    # a sender keeps its clock across round trips, a pacer its timer and an ACK clock its ACKs.
    group = _pooled(np.bincount(w, minlength=n), PACED_MIN_STARTS)
    g = group[w]
    del w
    m = int(group[-1]) + 1
    first = np.bincount(g, minlength=m)
    at_once = delay <= soon
    answered = np.bincount(g[at_once], minlength=m)
    enough = first >= PACED_MIN_STARTS
    paced = np.zeros(m, dtype=bool)
    paced[enough] = answered[enough] < fraction * first[enough]
    spread_between = _window_iqr(g[known], between[known], m)
    spread_delay = _window_iqr(g[known], delay[known], m)
    # Under an ACK clock a start's interval since the last is the ACKs' interval plus the
    # change of the host's delay, so it spreads at least as wide as the delays do, at any
    # scale; only a timer keeps its intervals tighter than its delays. (A NIC's queue spaces
    # segments back to back; these starts each follow a gap of more than two serialisation
    # times, which no queue ahead of the capture left.)
    timed = spread_between < spread_delay
    paced |= enough & timed
    # The time before each start (since the start before it), and of it the timer's: in a
    # window whose starts keep a timer's interval, every start's (its ACKs in step with the
    # timer), elsewhere only the starts that did not answer their ACK at once.
    waited = np.bincount(g[known], weights=between[known], minlength=m)
    timer = known & ~at_once
    by_timer = np.bincount(g[timer], weights=timer_part[timer], minlength=m)
    held = np.divide(by_timer, waited, out=np.ones(m), where=waited > 0)
    # A window whose starts keep a timer's interval is the timer's but for that time: NaN.
    held[enough & timed] = np.nan
    return paced[group], enough[group], held[group], not_timer


def _window_edges(
    data: pd.DataFrame, acks: pd.DataFrame, mss: int, rtt: npt.NDArray[np.float64]
) -> WindowEdges:
    """The columns `_opened_by_ack` reads: the farthest right edge offered up to each ACK (a
    window's edge does not move back, RFC 9293 3.8.6), the rest as the tables hold them."""
    edge = acks["edge_rel"].to_numpy()
    return WindowEdges(
        data["end_rel"].to_numpy(),
        data["len"].to_numpy(),
        np.maximum.accumulate(edge) if edge.size else edge,
        acks["win_bytes"].to_numpy(),
        float(mss),
        rtt,
    )


def _opened_by_ack(
    t: npt.NDArray[np.float64],
    ack_t: npt.NDArray[np.float64],
    at: npt.NDArray[np.int64],
    edges: WindowEdges | None,
) -> npt.NDArray[np.bool_]:
    """Per burst start after an ACK (`at`, the starts' segments), whether the receive window
    held it until that ACK: the room under every edge offered before the ACK, above the
    start's first byte, was too small for its segment, or shut as `limit_states` reads a
    window shut (less than the burst Linux waits for before it sends into a window,
    `shut_below`). The capture is taken after the sending host's queue: what TCP small queues
    let wait there (the same 2**-10 s of the pacing rate) was sent as the kernel counts it,
    and a window full at the kernel shows that much room at the capture."""
    if edges is None or at.size == 0:
        return np.zeros(at.size, dtype=bool)
    # The ACK that came last before the start, and the edge the ACKs before it had offered:
    # read for the starts alone (a few per round trip), not for every ACK.
    k = search_sorted(ack_t, t[at], side="right") - 2
    first = k >= 0
    k = np.maximum(k, 0)
    length = edges.length[at]
    room = edges.edge[k] - (edges.end[at] - length)
    shut = shut_below(edges.window[k].astype(np.float64), edges.mss, edges.rtt[k])
    return np.asarray(first & (room < np.maximum(length, shut)))


# Segments taken at once by the per-segment steps of `_paced_windows`: a few megabytes of
# temporaries, however long the transfer.
_BLOCK_ROWS = 1 << 18


def _burst_starts(
    t: npt.NDArray[np.float64], ack_t: npt.NDArray[np.float64], gap: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The segments (their indices, in order) that start a burst (more than `gap` after the
    segment before it; the first, after none, does) that follows an ACK come since the segment
    before it; and, for those starts, the time since that ACK and the time since the burst
    start before it (NaN for the first start). A block of segments at a time: the last ACK
    before each, and the starts' times, are never held for the whole transfer, nor a flag per
    segment."""
    # A start counts only with an ACK later than the segment before it and no later than
    # itself: in time order those spans never overlap, so no ACK counts twice, and there are
    # at most as many such starts as ACKs (a few per round trip on a bulk transfer, not one per
    # segment). Times that run backwards (a capture's clock stepped) can break the bound: then
    # the columns grow to one row per segment, the most there can be.
    room = min(t.size, ack_t.size)
    where = np.empty(room, dtype=np.int64)
    delay = np.empty(room)
    between = np.empty(room)
    count = 0
    previous = np.nan  # the last burst start so far: none
    for at in range(0, t.size, _BLOCK_ROWS):
        block = t[at : at + _BLOCK_ROWS]
        before = t[at - 1 : at - 1 + block.size] if at else np.r_[-np.inf, block[:-1]]
        k = search_sorted(ack_t, block, side="right")
        k -= 1
        acked = k >= 0
        last_ack = ack_t[np.maximum(k, 0, out=k)]
        del k
        starts = np.flatnonzero(block - before > gap)
        answers = np.zeros(block.size, dtype=bool)
        answers[starts] = True
        answers &= acked
        answers &= last_ack > before
        found = np.flatnonzero(answers)
        if count + found.size > delay.size:
            where = np.resize(where, t.size)
            delay, between = np.resize(delay, t.size), np.resize(between, t.size)
        where[count : count + found.size] = found + at
        delay[count : count + found.size] = block[found] - last_ack[found]
        start_t = block[starts]
        since = np.empty(start_t.size)
        if start_t.size:
            since[0] = start_t[0] - previous
            np.subtract(start_t[1:], start_t[:-1], out=since[1:])
            previous = start_t[-1]
        between[count : count + found.size] = since[answers[starts]]
        count += found.size
    return where[:count], delay[:count], between[:count]


def _pooled(count: npt.NDArray[np.int64], least: int) -> npt.NDArray[np.int64]:
    """Per window, its group: consecutive windows taken together until their `count`s reach
    `least` (a window that reaches it alone is a group of its own); a last group short of it
    joins the one before. One step per window, not per packet."""
    group = np.zeros(count.size, dtype=np.int64)
    k = total = 0
    for i, c in enumerate(count.tolist()):
        group[i] = k
        total += c
        if total >= least:
            k += 1
            total = 0
    if k > 0:
        # The windows after the last full group (numbered k) join it.
        np.minimum(group, k - 1, out=group)
    return group


@jit
def _sorted_in_runs(w: np.ndarray, x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """x with each run of equal `w` sorted (NaN last, as np.sort and np.lexsort place it)."""
    out = x.copy()
    i = 0
    while i < w.size:
        j = i + 1
        while j < w.size and w[j] == w[i]:
            j += 1
        out[i:j] = np.sort(x[i:j])
        i = j
    return out


def _window_iqr(
    w: npt.NDArray[np.int64], x: npt.NDArray[np.float64], n: int
) -> npt.NDArray[np.float64]:
    """The interquartile range of `x` within each of `n` windows (`w` the window of each value,
    linear interpolation as np.percentile); NaN for a window with fewer than two values."""
    out = np.full(n, np.nan)
    count = np.bincount(w, minlength=n)
    have = count >= 2
    if not have.any():
        return out
    # Windows come in time order: each window's values are sorted where they lie, not the
    # whole column by window and value (a lexsort of every value).
    in_order = bool(np.all(w[1:] >= w[:-1]))
    ordered = _sorted_in_runs(w, x) if in_order else x[np.lexsort((x, w))]
    first = np.r_[0, np.cumsum(count)[:-1]]

    def quantile(q: float) -> npt.NDArray[np.float64]:
        pos = (count[have] - 1) * q
        low = np.floor(pos).astype(np.int64)
        high = np.minimum(low + 1, count[have] - 1)
        frac = pos - low
        base = first[have]
        return ordered[base + low] * (1 - frac) + ordered[base + high] * frac

    out[have] = quantile(0.75) - quantile(0.25)
    return out
