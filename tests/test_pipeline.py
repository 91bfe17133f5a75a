"""The wired pipeline and `tracekit analyze`: its JSON document follows the published schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.crafting import CLIENT, SERVER, tcp, write
from tracekit.detectors import all_detectors
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
    # the merge, each capture's series and inside each (its walk's working memory freed), each
    # detector and the detectors; the analysis is the same without it.
    steps = 8 + len(all_detectors())
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
