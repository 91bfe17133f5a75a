"""The capture lab end to end: build the namespaces, run a short scenario, check its truth.

Needs root (network namespaces, tc, nftables), like `make fixtures`; CI runs as root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.lab import SCENARIOS, LabError, run_scenario
from fixtures.lab.readings import (
    Frames,
    missing_at_receiver,
    read_frames,
    tcptrace_retransmissions,
)

TOOLS = ("ip", "tc", "nft", "ethtool", "tcpdump", "tshark", "tcptrace")
pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in TOOLS), reason=f"needs all of {TOOLS}"
    ),
]

# Both impairments at once, shortened: a bottleneck buffer of 20 kB (a tenth of the BDP) drops in
# the network while nftables drops every 40th data segment in the receiver.
SHORT = dataclasses.replace(
    SCENARIOS["receiver_drops"],
    name="lab_selftest",
    path=dataclasses.replace(SCENARIOS["receiver_drops"].path, buffer_bytes=20_000),
    transfer_bytes=800_000,
    window_clamp_bytes=None,
    receiver_drop_every=40,
    expect_network_drops=(1, None),
    expect_receiver_drops=(1, None),
    relay_max_late_ms=None,  # this test checks counters; CI may share the machine with others
)


def namespaces_of(pid: int) -> list[str]:
    """The lab's namespaces are named tklab<pid><role>: those a given process made."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    return [name for name in names if name in {f"tklab{pid}{role}" for role in "smr"}]


def test_a_short_run_agrees_with_the_kernel_and_with_tcptrace(tmp_path: Path) -> None:
    doc = run_scenario(SHORT, tmp_path)
    folder = tmp_path / SHORT.name
    assert json.loads((folder / "truth.json").read_text()) == doc
    change = doc["counters"]["change"]
    # The truth is the kernel's counters: tbf drops, nftables drops, TCP retransmissions.
    assert doc["drops"]["network"] == change["bottleneck_tbf"]["drops"] > 0
    assert doc["drops"]["receiver"] == change["receiver_nft"]["receiver_drops"] > 0
    assert doc["retransmissions"]["segments"] == change["sender_snmp"]["Tcp.RetransSegs"]
    assert doc["transfer"]["receiver"]["bytes"] == SHORT.transfer_bytes
    # ... and an independent reading of the captures agrees with it.
    assert tcptrace_retransmissions(folder / "sender.pcap") == doc["retransmissions"]["segments"]
    sent, received = read_frames(folder / "sender.pcap"), read_frames(folder / "receiver.pcap")
    assert missing_at_receiver(sent, received) == (doc["drops"]["network"], 0)
    # A clean close: no RST at either end.
    assert not (sent.flags & 0x04).any()
    assert not (received.flags & 0x04).any()
    assert namespaces_of(os.getpid()) == []


def test_a_failed_run_removes_its_namespaces(tmp_path: Path) -> None:
    broken = dataclasses.replace(SHORT, congestion="no_such_algorithm")
    with pytest.raises(LabError, match="sender failed"):
        run_scenario(broken, tmp_path, attempts=1)
    assert namespaces_of(os.getpid()) == []
    assert not any(tmp_path.rglob("*.pcap"))


def test_ctrl_c_removes_the_namespaces(tmp_path: Path) -> None:
    lab = subprocess.Popen(
        [sys.executable, "-m", "fixtures.lab", "clean", "--out", str(tmp_path)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while len(namespaces_of(lab.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(namespaces_of(lab.pid)) == 3, "the lab never built its namespaces"
        lab.send_signal(signal.SIGINT)
        lab.wait(timeout=30)
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode != 0
    assert namespaces_of(lab.pid) == []


def test_a_sweep_point_is_stored_compressed_with_its_kernel_account(tmp_path: Path) -> None:
    from fixtures.lab.sweep import GRID, count_transfer, decompress, run_point

    # The LAN point: no relay and no delay, so it takes a few seconds even on a busy machine.
    point = dataclasses.replace(GRID["lan_offloads_off"], transfer_bytes=2_000_000)
    doc = run_point(point, tmp_path)
    folder = tmp_path / point.name
    assert sorted(f.name for f in folder.iterdir()) == [
        "receiver.pcap.zst",
        "sender.pcap.zst",
        "truth.json",
    ]
    assert json.loads((folder / "truth.json").read_text()) == doc
    sent = count_transfer(decompress(folder / "sender.pcap.zst"))
    assert sent["a2b_payload_bytes"] == doc["kernel_limits"]["bytes_sent"] >= 2_000_000
    assert sent["a2b_segments"] == doc["kernel_limits"]["segs_out"]
    assert doc["tcp_info_samples"]["rows"]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert f"tksw{os.getpid()}" not in listed.stdout


def test_receiver_gro_with_the_capture_on_the_last_hop(tmp_path: Path) -> None:
    from fixtures.lab.sweep import GRID

    # GRO on the receiver's veth, the receiver capture on the middle's veth toward it.
    point = dataclasses.replace(
        GRID["gro_receiver_50m"], transfer_bytes=1_500_000, relay_max_late_ms=None
    )
    doc = run_scenario(point, tmp_path)
    assert doc["capture"]["receiver_device"] == "m1"
    receiver = doc["receiver"]
    assert receiver["gro"]["generic-receive-offload"] == "on"
    assert receiver["gro"]["gro_flush_timeout"] == point.receiver_gro_flush_us * 1000
    # The last hop holds the wire's frames; r0 saw GRO's merged packets of the same bytes.
    received = read_frames(tmp_path / point.name / "receiver.pcap")
    data = received.from_sender & (received.payload_bytes > 0)
    assert received.payload_bytes[data].max() <= 1448
    host = receiver["host_capture"]
    assert host["payload_bytes"] == int(received.payload_bytes[data].sum())
    assert host["records_above_mss"] > 0 and host["data_records"] < int(data.sum())
    # One ACK per merged packet: more than the two segments an ACK covers without GRO.
    assert receiver["segments_per_ack"] > 2
    assert namespaces_of(os.getpid()) == []


def test_data_both_ways_with_acks_and_data_dropped_on_the_way_back(tmp_path: Path) -> None:
    from fixtures.lab.sweep import GRID

    # Both of the middle's rules toward the sender at once: one pure ACK kept in 4, and every
    # 40th of the receiver's data segments dropped; each must count only its own kind.
    point = dataclasses.replace(
        GRID["bidir_reverse_drops"],
        transfer_bytes=800_000,
        reverse_bytes=800_000,
        reverse_ack_keep_every=4,
        reverse_data_drop_every=40,
        relay_max_late_ms=None,
    )
    doc = run_scenario(point, tmp_path)
    sent = read_frames(tmp_path / point.name / "sender.pcap")
    received = read_frames(tmp_path / point.name / "receiver.pcap")

    def back(frames: Frames) -> tuple[int, int]:
        """The receiver's data segments and pure ACKs (no SYN, FIN or RST) in a capture."""
        mine = ~frames.from_sender
        pure = mine & (frames.payload_bytes == 0) & (frames.flags & 0x07 == 0)
        return int((mine & (frames.payload_bytes > 0)).sum()), int(pure.sum())

    (data_went, acks_went), (data_came, acks_came) = back(received), back(sent)
    dropped = doc["drops"]["reverse_data"]
    assert data_went - data_came == dropped == data_went // 40 > 0
    assert doc["reverse_data"]["data_segments_seen"] == data_went
    assert acks_went - acks_came == doc["drops"]["reverse_acks"] > 0
    assert doc["reverse_acks"]["pure_acks_seen"] == acks_went
    refused = doc["relay"]["m1->m0"]["send_errors"]["ENOBUFS"]
    assert refused == dropped + doc["drops"]["reverse_acks"]
    # Both ways delivered whole; each drop of the data going back was resent.
    assert doc["receiver"]["bytes_read"] == doc["reverse"]["bytes_read_by_sender"] == 800_000
    assert doc["reverse"]["retransmissions"]["segments"] >= dropped
    assert doc["reverse"]["congestion_control"] == point.congestion
    assert namespaces_of(os.getpid()) == []
