"""tracekit.check.junit: the XML read back with xml.etree and held against what the captures
hold (their SYNs, read with scapy) and the de-facto schema CI reporters read."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.utils import rdpcap

from tests.helpers.check_crafting import transfer
from tests.helpers.crafting import write
from tracekit.check.junit import render_junit
from tracekit.check.policy import parse_policy
from tracekit.check.verdict import run_check
from tracekit.inputs import CaptureInput


def syn_endpoints(path: Path) -> list[str]:
    """`a -> b` of every SYN (without ACK) in the file, in capture order."""
    return [
        f"{p[IP].src}:{p[TCP].sport} -> {p[IP].dst}:{p[TCP].dport}"
        for p in rdpcap(str(path))
        if TCP in p and p[TCP].flags == "S"
    ]


def test_one_case_per_connection_and_counts_that_add_up(tmp_path: Path) -> None:
    fast = transfer(tmp_path / "fast.pcap", duration_s=0.1)  # 8 Mbit/s
    slow_a = transfer(tmp_path / "a.pcap", sport=40001, duration_s=1.0)  # 0.8 Mbit/s
    slow_b = transfer(tmp_path / "b.pcap", sport=40002, t0=1.5, duration_s=0.5)  # 1.6 Mbit/s
    both = write(tmp_path / "two.pcap", sorted([*rdpcap(str(slow_a)), *rdpcap(str(slow_b))],
                                               key=lambda p: p.time))  # fmt: skip
    policy = parse_policy(
        {
            "on_bad_input": "report",
            "fail": {"severity": "none"},
            "thresholds": {"min_throughput_bps": 1e6},
        },
        "p.toml",
    )
    inputs = [
        CaptureInput("runs/fast.v1", fast),
        CaptureInput("runs/two", both),
        CaptureInput("runs/gone", tmp_path / "gone.pcap"),
    ]
    root = ET.fromstring(render_junit(run_check(inputs, policy)))

    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["runs/fast.v1", "runs/two", "runs/gone"]
    for suite in suites:
        # The order the de-facto schema (Jenkins' junit XSD) lays down.
        letters = {"properties": "p", "testcase": "t", "system-out": "o"}
        tags = "".join(letters[child.tag] for child in suite)
        assert re.fullmatch("p?t+o?", tags), tags
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("errors")) == sum(c.find("error") is not None for c in cases)
        assert suite.get("skipped") == "0"
        assert float(suite.get("time")) >= 0
        for case in cases:
            assert case.get("classname") == suite.get("name").replace(".", "_")
            assert float(case.get("time")) >= 0
    for key in ("tests", "failures", "errors"):
        assert int(root.get(key)) == sum(int(s.get(key)) for s in suites)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")

    fast_suite, two_suite, gone_suite = suites
    names = [c.get("name") for c in two_suite.findall("testcase")]
    assert names == [f"conn {i} {ends}" for i, ends in enumerate(syn_endpoints(both))]
    failed_case, ok_case = two_suite.findall("testcase")
    assert ok_case.find("failure") is None  # 1.6 Mbit/s
    failure = failed_case.find("failure")
    assert failure.get("type") == "tracekit.threshold"
    assert failure.get("message").startswith("throughput 0.80 Mbit/s a2b is below")
    assert "min_throughput_bps" in failure.text
    assert [c.get("name") for c in fast_suite.findall("testcase")] == [
        f"conn 0 {syn_endpoints(fast)[0]}"
    ]
    error = gone_suite.find("testcase/error")
    assert error.get("message") == f"{tmp_path / 'gone.pcap'}: no such file"
    props = {p.get("name"): p.get("value") for p in fast_suite.findall("properties/property")}
    assert props == {"sender": str(fast)}
