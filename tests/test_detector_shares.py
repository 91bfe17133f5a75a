"""The detectors on several cores: shares of the connections judged in forked copies of the
process give the findings one process gives, on real captures of several transfers at once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

import tracekit.detectors as detectors
from tests.helpers.lab_captures import CAPTURES, side_by_side
from tracekit.core import fork as forking
from tracekit.detectors import all_detectors, connection_shares, run_detectors
from tracekit.detectors.base import AnalysisContext
from tracekit.findings import Finding
from tracekit.pipeline import analyze_files, detector_jobs

# Transfers whose findings span the per-connection detectors: an overrun, network and
# receiver drops, a window limit, an oscillating window, bursts and a pacer.
TRANSFERS = (
    "slow_start_overrun",
    "network_drops",
    "receiver_drops",
    "window_limited",
    "window_oscillation",
    "bursty_sender",
    "paced_sender",
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The transfers side by side, at the sender and at the receiver: one pair of captures of
    several connections at once."""
    out = tmp_path_factory.mktemp("shares")
    (out / "s").mkdir()
    (out / "r").mkdir()
    sender = side_by_side([CAPTURES / n / "sender.pcap" for n in TRANSFERS], out / "s" / "m.pcap")
    receiver = side_by_side(
        [CAPTURES / n / "receiver.pcap" for n in TRANSFERS], out / "r" / "m.pcap"
    )
    return sender, receiver


def _rows(findings: list[Finding]) -> list[str]:
    return [json.dumps(f.to_dict(), sort_keys=True) for f in findings]


@pytest.fixture
def small_shares(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Shares made of any work, however small, and the pids of the copies whose result came
    back (a copy that failed leaves its share to the parent, which would hide a bug)."""
    monkeypatch.setattr(detectors, "LEAST_SHARE_SEGMENTS", 1)
    answered: list[int] = []
    result = forking.Forked.result

    def counted(self: forking.Forked) -> object:
        found = result(self)
        if found is not None:
            answered.append(self.pid)
        return found

    monkeypatch.setattr(forking.Forked, "result", counted)
    return answered


@pytest.mark.parametrize("with_receiver", [False, True])
def test_shares_on_other_cores_find_what_one_process_finds(
    pair: tuple[Path, Path], small_shares: list[int], with_receiver: bool
) -> None:
    sender, receiver = pair
    other = receiver if with_receiver else None
    one = analyze_files(sender, other, jobs=1)
    kinds = {f.kind for f in one.findings}
    # The transfers' own findings, each from its own connection: every per-connection
    # detector below has something to get right.
    assert {"slow_start_overrun", "rate_limit_cause", "retransmissions"} <= kinds
    assert len({f.conn for f in one.findings}) >= len(TRANSFERS)
    three = analyze_files(sender, other, jobs=3)
    assert len(small_shares) == 2
    assert _rows(three.findings) == _rows(one.findings)


def test_a_share_whose_copy_fails_is_judged_by_the_parent(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(detectors, "LEAST_SHARE_SEGMENTS", 1)
    sender, _ = pair
    one = analyze_files(sender, jobs=1)

    def dies(_work: object) -> forking.Forked | None:
        # A copy killed before it answers, as the out-of-memory killer would.
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the copy's side
            os._exit(137)
        os.close(write_end)
        return forking.Forked(pid, read_end)

    monkeypatch.setattr(detectors, "fork", dies)
    assert _rows(analyze_files(sender, jobs=2).findings) == _rows(one.findings)


def test_shares_split_the_connections_with_data_and_balance_their_segments(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis = analyze_files(pair[0])
    ctx = AnalysisContext(
        connections=analysis.sender.connections.frame(),
        packets=analysis.sender.connections.packets,
        series=analysis.sender.series,
    )
    series = ctx.series
    with_data = {c for c, _ in series.with_data()}
    # Fewer segments in all than a fork is worth: one process.
    assert sum(series.data_segments(c, d) for c, d in series.with_data()) < 2 * (
        detectors.LEAST_SHARE_SEGMENTS
    )
    assert connection_shares(ctx, 2) == []
    monkeypatch.setattr(detectors, "LEAST_SHARE_SEGMENTS", 1)
    shares = connection_shares(ctx, 2)
    assert len(shares) == 2
    placed = [int(c) for share in shares for c in share]
    assert sorted(placed) == sorted(with_data)
    # Each share lists its own directions alone.
    for share in shares:
        assert {c for c, _ in series.share(share).with_data()} == {int(c) for c in share}
    # Largest first, each to the lighter share: no share carries more than the other plus the
    # largest connection.
    work = {
        c: sum(
            series.data_segments(c, d) + detectors.DIRECTION_COST_SEGMENTS
            for d in (0, 1)
            if series.data_segments(c, d)
        )
        for c in with_data
    }
    loads = [sum(work[int(c)] for c in share) for share in shares]
    assert abs(loads[0] - loads[1]) <= max(work.values())
    # One core: no shares.
    assert connection_shares(ctx, 1) == []


def test_a_detector_that_judges_each_connection_apart_says_so() -> None:
    # The detectors split over shares are those that walk the directions with data; one that
    # reads the merge's rows or the packets of every connection at once runs whole.
    apart = {cls.kind for cls in all_detectors() if cls.per_connection}
    assert "rate_limit_cause" in apart and "slow_start_overrun" in apart
    assert not apart & {"receiver_drop", "network_drop", "snaplen_truncated", "capture_holes"}


def test_one_connection_is_never_forked(pair: tuple[Path, Path], small_shares: list[int]) -> None:
    single = analyze_files(CAPTURES / "slow_start_overrun" / "sender.pcap", jobs=2)
    assert small_shares == []
    assert single.findings


def test_the_cores_asked_for_shrink_to_what_memory_has_room_for() -> None:
    # 10 M packets at the analysis's bytes a packet: each extra process may take its share.
    assert detector_jobs(2, 10_000_000, room=10**12) == 2
    assert detector_jobs(4, 10_000_000, room=0) == 1
    assert detector_jobs(1, 10_000_000, room=10**12) == 1


def test_cli_jobs_option(pair: tuple[Path, Path], tmp_path: Path) -> None:
    sender, receiver = pair
    runner = CliRunner()
    outs = [
        runner.invoke(cli, ["analyze", "--json", "-j", j, str(sender), "--receiver", str(receiver)])
        for j in ("1", "2")
    ]
    assert [o.exit_code for o in outs] == [0, 0]
    assert outs[0].stdout == outs[1].stdout
    bad = runner.invoke(cli, ["analyze", "--jobs", "-1", str(sender)])
    assert bad.exit_code == 2
    assert "--jobs" in bad.output


def test_run_detectors_keeps_one_process_for_one_job(pair: tuple[Path, Path]) -> None:
    analysis = analyze_files(pair[0])
    ctx = AnalysisContext(
        connections=analysis.sender.connections.frame(),
        packets=analysis.sender.connections.packets,
        series=analysis.sender.series,
    )
    assert _rows(run_detectors(ctx, jobs=1)) == _rows(analysis.findings)
