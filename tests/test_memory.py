"""The memory a process can still take, and the refusal of a capture that cannot fit in it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.simulated_capture import write_pcap
from tests.helpers.simulated_series import Scenario, simulate, view
from tracekit import pipeline
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.core.memory import available_bytes
from tracekit.errors import CaptureError
from tracekit.pipeline import ANALYSIS_BYTES_PER_PACKET, analyze_files, require_room

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
MiB = 1 << 20


def _tree(tmp_path: Path, meminfo_kib: int, cgroup_line: str) -> tuple[Path, Path, Path]:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {meminfo_kib} kB\n")
    self_cgroup = tmp_path / "cgroup"
    self_cgroup.write_text(cgroup_line)
    return meminfo, self_cgroup, tmp_path / "fs"


def test_without_a_limit_the_machines_available_memory_is_the_room(tmp_path: Path) -> None:
    meminfo, self_cgroup, root = _tree(tmp_path, 2048, "0::/\n")
    assert available_bytes(meminfo, self_cgroup, root) == 2048 * 1024


def test_a_v1_limit_up_the_tree_binds_and_file_pages_count_as_room(tmp_path: Path) -> None:
    meminfo, self_cgroup, root = _tree(tmp_path, 8 << 20, "4:memory:/jobs/one\n0::/\n")
    outer = root / "memory" / "jobs"
    inner = outer / "one"
    inner.mkdir(parents=True)
    # The inner group has no limit of its own (v1 shows PAGE_COUNTER_MAX pages); the outer
    # one has 300 MiB, 250 used, of which 30 MiB are file pages it can drop.
    (inner / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (inner / "memory.usage_in_bytes").write_text(f"{200 * MiB}\n")
    (outer / "memory.limit_in_bytes").write_text(f"{300 * MiB}\n")
    (outer / "memory.usage_in_bytes").write_text(f"{250 * MiB}\n")
    (outer / "memory.stat").write_text(
        f"cache {40 * MiB}\ntotal_active_file {10 * MiB}\ntotal_inactive_file {20 * MiB}\n"
    )
    assert available_bytes(meminfo, self_cgroup, root) == 80 * MiB


def test_a_v2_limit_binds(tmp_path: Path) -> None:
    meminfo, self_cgroup, root = _tree(tmp_path, 8 << 20, "0::/user/job\n")
    group = root / "user" / "job"
    group.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (group / "memory.max").write_text(f"{100 * MiB}\n")
    (group / "memory.current").write_text(f"{90 * MiB}\n")
    (group / "memory.stat").write_text(f"active_file {1 * MiB}\ninactive_file {2 * MiB}\n")
    (root / "user" / "memory.max").write_text("max\n")
    assert available_bytes(meminfo, self_cgroup, root) == 13 * MiB


def test_nothing_readable_says_nothing(tmp_path: Path) -> None:
    assert available_bytes(tmp_path / "none", tmp_path / "none", tmp_path) is None


def test_a_capture_is_refused_only_where_its_analysis_cannot_fit() -> None:
    conns = build_connections(read_capture(LAB / "slow_start_overrun" / "sender.pcap"))
    packets = conns.packets.num_rows
    need = packets * ANALYSIS_BYTES_PER_PACKET
    require_room(conns, packets, room=need)  # fits exactly: no error
    with pytest.raises(CaptureError) as refused:
        require_room(conns, packets, room=need - 1)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(str(LAB / "slow_start_overrun" / "sender.pcap"))
    assert f"{packets:,} TCP packets" in message and "--connection" in message


def test_a_read_is_told_its_tcp_packets_chunk_by_chunk() -> None:
    path = LAB / "slow_start_overrun" / "sender.pcap"
    told: list[int] = []
    capture = read_capture(path, records_per_call=1000, tcp_read=told.append)
    proto = capture.packets.column("proto").to_numpy()
    assert len(told) > 1 and told == sorted(told)
    assert told[-1] == int((proto == 6).sum()) == capture.packets.num_rows


def test_a_capture_that_cannot_fit_is_refused_while_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reader's table grows as it reads: once the packets read so far already need more than
    # is left, the read stops there, before the rest of the file and before the connections.
    def never(*_: object) -> None:
        raise AssertionError("the connections were built")

    monkeypatch.setattr(pipeline, "available_bytes", lambda: ANALYSIS_BYTES_PER_PACKET * 1500)
    monkeypatch.setattr(pipeline, "build_connections", never)
    monkeypatch.setattr(pipeline, "read_capture", _small_chunks(pipeline.read_capture))
    path = LAB / "slow_start_overrun" / "sender.pcap"
    with pytest.raises(CaptureError) as refused:
        analyze_files(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(str(path))
    assert "its first 2,000 TCP packets already need at least" in message


def test_a_selection_is_not_refused_for_the_whole_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    # One connection or a time window is what a capture too big for memory is cut down to:
    # while it is read, the packets outside it do not count.
    from tracekit.analysis import Selection

    path = LAB / "slow_start_overrun" / "sender.pcap"
    whole = analyze_files(path)
    monkeypatch.setattr(pipeline, "available_bytes", lambda: ANALYSIS_BYTES_PER_PACKET * 1500)
    window = analyze_files(path, selection=Selection(to_s=0.001))
    assert window.sender.connections.packets.num_rows < 1500
    assert whole.sender.connections.packets.num_rows > 2000


def _small_chunks(read: Callable[..., object]) -> Callable[..., object]:
    def reading(*args: object, **kwargs: object) -> object:
        return read(*args, records_per_call=1000, **kwargs)

    return reading


MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not (MEMORY_CGROUP / "memory.limit_in_bytes").exists(),
    reason="needs root and the cgroup v1 memory controller",
)
def test_a_memory_limit_too_small_is_one_line_and_exit_2_not_a_kill(tmp_path: Path) -> None:
    # A million-packet capture under a memory control group that holds the read but not the
    # series: tracekit says so in one line, where without the check the kernel kills it.
    scenario = Scenario()
    capture = tmp_path / "big.pcap"
    frames = write_pcap(view(simulate(700_000, scenario), scenario), capture, scenario)
    assert frames > 1_000_000
    group = MEMORY_CGROUP / f"tracekit-test-{os.getpid()}"
    group.mkdir()
    try:
        tracekit = str(Path(sys.executable).parent / "tracekit")

        def run(limit_mib: int) -> subprocess.CompletedProcess[str]:
            (group / "memory.limit_in_bytes").write_text(f"{limit_mib * MiB}\n")
            return subprocess.run(
                [
                    "sh",
                    "-c",
                    f'echo $$ > "{group}/cgroup.procs" && exec "$0" analyze "$1"',
                    tracekit,
                    str(capture),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )

        small = run(230)
        assert small.returncode == 2, small.stderr[-500:]
        (line,) = small.stderr.splitlines()
        # Refused once its packets so far could not fit, or after its connections.
        assert f"{capture}: its " in line and "TCP packets" in line
        assert "need at least" in line
        assert small.stdout == ""
        roomy = run(4096)
        assert roomy.returncode == 0, roomy.stderr[-500:]
        assert "connection 0" in roomy.stdout
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (MEMORY_CGROUP / "cgroup.procs").write_text(pid)
        group.rmdir()
