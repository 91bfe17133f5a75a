"""The wired pipeline and `tracekit analyze`: its JSON document follows the published schema."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit import pipeline
from tracekit.capture import Capture, read_capture
from tracekit.detectors import all_detectors
from tracekit.errors import CaptureError
from tracekit.pipeline import analyze_files

SCHEMA = json.loads(
    (Path(__file__).resolve().parent.parent / "docs" / "analyze.schema.json").read_text()
)


def _capture(tmp: Path) -> Path:
    opts = [("MSS", 1460), ("WScale", 2)]
    return write(
        tmp / "c.pcap",
        [
            tcp(0.0, CLIENT, SERVER, 40000, 80, "S", 1, 0, 0, opts),
            tcp(0.1, SERVER, CLIENT, 80, 40000, "SA", 1, 2, 0, opts),
            tcp(0.2, CLIENT, SERVER, 40000, 80, "A", 2, 2, 500),
            tcp(0.3, SERVER, CLIENT, 80, 40000, "A", 2, 502),
        ],
    )


def test_analysis_document_follows_the_schema(tmp_path: Path) -> None:
    doc = analyze_files(_capture(tmp_path)).to_dict()
    jsonschema.validate(doc, SCHEMA)
    (conn,) = doc["connections"]
    assert conn["wireshark_filter"].startswith(f"((ip.src == {CLIENT} && tcp.srcport == 40000")
    assert (conn["bytes_a2b"], conn["ws_a"], conn["ws_b"]) == (500, 2, 2)


def test_analyze_json_and_text(tmp_path: Path) -> None:
    path = _capture(tmp_path)
    result = CliRunner().invoke(cli, ["analyze", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["connections"][0]["a"] == f"{CLIENT}:40000"
    text = CliRunner().invoke(cli, ["analyze", str(path)])
    assert text.exit_code == 0
    assert f"{CLIENT}:40000 -> {SERVER}:80" in text.stdout


LAB = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def _lab_json(scenario: str, *options: str) -> tuple[dict, dict]:
    folder = LAB / scenario
    truth = json.loads((folder / "truth.json").read_text())
    args = ["analyze", str(folder / "sender.pcap"), "--receiver", str(folder / "receiver.pcap")]
    result = CliRunner().invoke(cli, [*args, *options, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc, truth


def test_two_vantage_fates_in_json_equal_the_kernel_counters() -> None:
    doc, truth = _lab_json("receiver_drops")
    fates = doc["two_vantage"]["fates"]
    assert fates["receiver_drop"] == truth["drops"]["receiver"]
    assert fates["network_drop"] == truth["drops"]["network"] == 0
    assert doc["two_vantage"]["clock"] is not None


def test_udp_stream_lost_numbers_equal_the_truth() -> None:
    # The lab numbers datagrams as UDPmon does (first 4 bytes, big-endian): the default.
    doc, truth = _lab_json("udp_loss")
    (stream,) = doc["udp_streams"]
    got = set()
    for first, last in truth["udp"]["received_by_application"]:
        got.update(range(first, last + 1))
    missing = set(range(truth["udp"]["datagrams_sent"])) - got
    lost = set(stream["lost_numbers"])
    # Lost between the capture points: the bottleneck's drops, all of them missed by the app;
    # the rest the app missed reached the receiver and died in nftables' block.
    assert len(lost) == stream["lost_packets"] == truth["drops"]["network"]
    assert lost <= missing
    first, last = truth["impairment"]["receiver_drop_block"]
    assert missing - lost <= set(range(first, last + 1))
    assert len(missing - lost) == truth["drops"]["receiver"]


def test_the_receiver_keeps_its_series_not_its_packets() -> None:
    # Once merged, the receiver's packet table is let go: what the report's receiver TSG reads
    # (its connections table and series, on the sender's clock) stays.
    folder = LAB / "clean"
    analysis = analyze_files(folder / "sender.pcap", folder / "receiver.pcap")
    assert analysis.receiver is not None and analysis.merge is not None
    kept = analysis.receiver.connections
    assert kept.packets.num_rows == kept.capture.packets.num_rows == 0
    assert {"ts_ns", "frame", "conn", "seq_rel"} <= set(kept.packets.schema.names)
    # The times' origin stays the receiver capture's first packet, as its series count from.
    assert kept.t0_ns == analysis.receiver.series.t0_ns > 0
    assert kept.table.num_rows == analysis.sender.connections.table.num_rows
    rc = int(analysis.merge.connections.pairs["conn_r"].iloc[0])
    assert len(analysis.receiver.series.of(rc, 0).segments) > 1000


def test_without_the_receivers_series_the_merge_and_findings_are_the_same() -> None:
    # analyze_files(receiver_series=False), as `tracekit analyze` runs: the merge and the
    # detectors read the receiver's packets, never its series. The receiver drops the lab's
    # nftables counter made are found either way.
    folder = LAB / "receiver_drops"
    truth = json.loads((folder / "truth.json").read_text())
    full = analyze_files(folder / "sender.pcap", folder / "receiver.pcap")
    lean = analyze_files(folder / "sender.pcap", folder / "receiver.pcap", receiver_series=False)
    assert lean.receiver is not None and lean.merge is not None and full.merge is not None
    assert lean.merge.counts()["receiver_drop"] == truth["drops"]["receiver"] > 0
    assert lean.merge.counts() == full.merge.counts()
    assert [f.to_dict() for f in lean.findings] == [f.to_dict() for f in full.findings]
    assert lean.receiver.series.segments.empty and lean.receiver.series.acks.empty
    assert lean.receiver.series.t0_ns == lean.receiver.connections.t0_ns > 0


def test_after_stage_runs_between_the_stages_and_changes_nothing() -> None:
    # The hook a command trims its heap with (cli/memory.py): after each capture's connections,
    # the merge, each capture's series and inside each (its walk's working memory freed), the
    # sender's packet columns only its walk read let go, each detector and the detectors; the
    # analysis is the same without it.
    steps = 9 + len(all_detectors())
    folder = LAB / "receiver_drops"
    calls: list[int] = []
    hooked = analyze_files(
        folder / "sender.pcap", folder / "receiver.pcap", after_stage=lambda: calls.append(1)
    )
    plain = analyze_files(folder / "sender.pcap", folder / "receiver.pcap")
    assert len(calls) == steps
    assert [f.to_dict() for f in hooked.findings] == [f.to_dict() for f in plain.findings]
    assert hooked.merge is not None and plain.merge is not None
    assert hooked.merge.counts() == plain.merge.counts()
    alone: list[int] = []
    analyze_files(folder / "sender.pcap", after_stage=lambda: alone.append(1))
    # The same steps, the receiver's with nothing to do: but no receiver's series to walk.
    assert len(alone) == steps - 1


def _reads_on(
    monkeypatch: pytest.MonkeyPatch,
    waits: dict[str, threading.Event],
    started: dict[str, threading.Event],
    failed: dict[str, threading.Event],
    stopped: str = "",
) -> list[tuple[str, str, str]]:
    """Each read of the pipeline, as (file name, thread name, how it ended), in the order they
    ended. A read whose file is in `started` sets that event at its first chunk; one in `waits`
    then waits for its event; one in `failed` sets that event when it raises. The read of
    `stopped` asks the pipeline after each chunk until it is told to stop (a minute at most)."""
    reads: list[tuple[str, str, str]] = []
    real = pipeline.read_capture

    def reading(path: Path, **kwargs: Any) -> Capture:
        told = kwargs.get("tcp_read")
        name = Path(path).name

        def after_chunk(packets: int) -> None:
            if name in started:
                started[name].set()
            if name in waits:
                assert waits[name].wait(timeout=60), f"{name}: the other read never came"
            deadline = time.monotonic() + 60
            while told is not None and name == stopped and time.monotonic() < deadline:
                told(packets)
                time.sleep(0.001)
            if told is not None:
                told(packets)

        kwargs["tcp_read"] = after_chunk
        thread = threading.current_thread().name
        try:
            capture = real(path, records_per_call=1000, **kwargs)
        except BaseException as exc:
            reads.append((name, thread, type(exc).__name__))
            if name in failed:
                failed[name].set()
            raise
        reads.append((name, thread, "read"))
        return capture

    monkeypatch.setattr(pipeline, "read_capture", reading)
    return reads


def test_a_pair_is_read_on_two_threads_and_analysed_as_when_read_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sender's read waits at its first chunk for the receiver's to begin: read one after
    # the other, it would wait in vain.
    folder = LAB / "receiver_drops"
    receiver_started = threading.Event()
    reads = _reads_on(
        monkeypatch, {"sender.pcap": receiver_started}, {"receiver.pcap": receiver_started}, {}
    )
    both = analyze_files(folder / "sender.pcap", folder / "receiver.pcap")
    assert sorted((f, how) for f, _, how in reads) == [
        ("receiver.pcap", "read"),
        ("sender.pcap", "read"),
    ]
    assert reads[0][1] != reads[1][1]
    monkeypatch.undo()
    alone = pipeline.analyze(
        read_capture(folder / "sender.pcap"), read_capture(folder / "receiver.pcap")
    )
    assert both.merge is not None and alone.merge is not None
    assert both.merge.counts() == alone.merge.counts()
    assert [f.to_dict() for f in both.findings] == [f.to_dict() for f in alone.findings]


def test_the_senders_error_is_raised_and_stops_the_receivers_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The receiver's read waits at its first chunk until the sender's has failed: then it stops
    # there, and the sender's error is the one told, as when the pair was read in turn.
    sender = tmp_path / "sender.pcap"
    sender.write_bytes(b"not a capture at all")
    sender_failed = threading.Event()
    reads = _reads_on(
        monkeypatch,
        {"receiver.pcap": sender_failed},
        {},
        {"sender.pcap": sender_failed},
        stopped="receiver.pcap",
    )
    with pytest.raises(CaptureError) as refused:
        analyze_files(sender, LAB / "receiver_drops" / "receiver.pcap")
    assert str(refused.value).startswith(str(sender)) and "bad magic" in str(refused.value)
    assert sorted((f, how) for f, _, how in reads) == [
        ("receiver.pcap", "_Stopped"),
        ("sender.pcap", "CaptureError"),
    ]


def test_the_receivers_error_is_raised_after_the_senders_warnings(tmp_path: Path) -> None:
    # A pair whose receiver's capture is no capture: the sender's warnings are told first (as
    # when the receiver's capture was read after them), then the receiver's error is raised.
    sender = tmp_path / "sender.pcap"
    whole = (LAB / "receiver_drops" / "sender.pcap").read_bytes()
    sender.write_bytes(whole[: len(whole) - 7])  # cut mid-record: one warning
    receiver = tmp_path / "receiver.pcap"
    receiver.write_bytes(b"not a capture at all")
    told: list[str] = []
    with pytest.raises(CaptureError) as refused:
        analyze_files(sender, receiver, on_warning=told.append)
    assert str(refused.value).startswith(str(receiver)) and "bad magic" in str(refused.value)
    assert len(told) == 1 and told[0].startswith(f"{sender}: capture cut off mid-record")
