"""tracekit.check.verdict: findings, thresholds and regressions against crafted transfers whose
numbers are known from how they were built (100 kB in 1 s: 0.8 Mbit/s)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers.check_crafting import transfer
from tracekit.analysis import Analysis
from tracekit.check.baseline import parse_baseline
from tracekit.check.policy import DEFAULT_POLICY, Policy, Rules, parse_policy
from tracekit.check.verdict import finding_fails, judge, run_check
from tracekit.errors import CaptureError
from tracekit.findings import Finding, Severity
from tracekit.inputs import CaptureInput, analyze_input


def finding(kind: str, severity: Severity, conn: int = 0) -> Finding:
    return Finding(
        kind=kind,
        severity=severity,
        conn=conn,
        direction="a2b",
        start_s=0.1,
        end_s=0.2,
        evidence={"lost_segments": 3},
        summary=f"{kind} happened",
        explanation="Because.",
        advice="Change it.",
    )


@pytest.fixture
def upload(tmp_path: Path) -> tuple[CaptureInput, Analysis]:
    """100 segments of 1000 bytes in 1 s, segments 5 and 6 resent: 0.8 Mbit/s, 2 of 102."""
    inp = CaptureInput("up", transfer(tmp_path / "up.pcap", resend=[5, 6]))
    analysis, _ = analyze_input(inp)
    return inp, analysis


@pytest.mark.parametrize(
    ("rules", "severity", "fails"),
    [
        (Rules(), Severity.INFO, False),
        (Rules(), Severity.WARNING, True),
        (Rules(fail_severity=Severity.ERROR), Severity.WARNING, False),
        (Rules(fail_severity=None), Severity.ERROR, False),
        (Rules(fail_severity=None, fail_kinds=frozenset({"k"})), Severity.INFO, True),
        (Rules(ignore_kinds=frozenset({"k"}), fail_kinds=frozenset({"k"})), Severity.ERROR, False),
    ],
)
def test_which_findings_fail(rules: Rules, severity: Severity, fails: bool) -> None:
    assert finding_fails(finding("k", severity), rules) is fails


def test_findings_fail_their_connection(upload: tuple[CaptureInput, Analysis]) -> None:
    inp, analysis = upload
    analysis = dataclasses.replace(
        analysis, findings=[finding("k", Severity.INFO), finding("bad", Severity.WARNING)]
    )
    (conn,) = judge(inp, analysis, Rules()).connections
    assert [f.name for f in conn.failures] == ["bad"]
    assert conn.failures[0].message == "[warning] bad: bad happened"
    assert len(conn.findings) == 2


@pytest.mark.parametrize(
    ("rules", "failed"),
    [
        (Rules(min_throughput_bps=800_001), ["min_throughput_bps"]),
        (Rules(min_throughput_bps=800_000), []),
        (Rules(max_retrans_ratio=0.019), ["max_retrans_ratio"]),  # 2/102 = 0.0196
        (Rules(max_retrans_ratio=0.02), []),
        (Rules(max_retrans_segments=1), ["max_retrans_segments"]),
        (Rules(max_retrans_segments=2), []),
        (Rules(max_duration_s=0.99), ["max_duration_s"]),
        (Rules(max_duration_s=1.0), []),
        # 102,000 bytes sent: below min_transfer_bytes the connection is not held to thresholds.
        (Rules(min_transfer_bytes=102_001, min_throughput_bps=1e9), []),
        (Rules(min_transfer_bytes=102_000, min_throughput_bps=1e9), ["min_throughput_bps"]),
    ],
)
def test_thresholds_at_their_edges(
    upload: tuple[CaptureInput, Analysis], rules: Rules, failed: list[str]
) -> None:
    inp, analysis = upload
    (conn,) = judge(inp, analysis, rules).connections
    # Only the thresholds: whatever the detectors find is judged elsewhere.
    assert [f.name for f in conn.failures if f.rule != "finding"] == failed
    assert all(f.rule == "threshold" for f in conn.failures if f.rule != "finding")


def test_receiver_drops_threshold_needs_a_receiver(tmp_path: Path) -> None:
    rules = Rules(max_receiver_drops=0, fail_severity=None)
    alone = CaptureInput("a", transfer(tmp_path / "a.pcap", resend=[4]))
    verdict = judge(alone, analyze_input(alone)[0], rules)
    assert verdict.passed
    assert any("max_receiver_drops not judged" in n for n in verdict.notes)
    # The receiver saw segment 4 twice in a row and its host dropped both: its ACK after them
    # still asks for segment 4 (RFC 5681 4.2), and its SACK blocks show the segments after
    # them held without them until the resend.
    received = transfer(tmp_path / "r.pcap", resend=[4], twice=[4], sack_acks=True, host_drops=[4])
    pair = CaptureInput("p", alone.sender, received)
    (conn,) = judge(pair, analyze_input(pair)[0], rules).connections
    assert [f.name for f in conn.failures] == ["max_receiver_drops"]
    assert conn.metrics.receiver_drops == 2


def baseline_doc(throughput_bps: float, kinds: list[str], name: str = "up") -> dict:
    return {
        "captures": [
            {
                "name": name,
                "error": None,
                "connections": [
                    {"conn": 0, "bytes_a2b": 102_000, "throughput_a2b_bps": throughput_bps}
                ],
                "findings": [{"kind": k} for k in kinds],
            }
        ]
    }


@pytest.mark.parametrize(
    ("base_bps", "base_kinds", "failed"),
    [
        (800_000 / 0.9, ["k"], []),  # exactly 10% down: allowed
        (800_000 / 0.89, ["k"], ["max_throughput_drop_ratio"]),
        (800_000, [], ["k"]),  # a new kind
        (100_000, ["k"], []),  # faster than before
    ],
)
def test_regressions_against_a_baseline(
    upload: tuple[CaptureInput, Analysis], base_bps: float, base_kinds: list[str], failed: list[str]
) -> None:
    inp, analysis = upload
    analysis = dataclasses.replace(analysis, findings=[finding("k", Severity.INFO)])
    run = parse_baseline(baseline_doc(base_bps, base_kinds), "b.json").run_for("up")
    (conn,) = judge(inp, analysis, Rules(), run).connections
    assert [f.name for f in conn.failures] == failed
    assert all(f.rule == "regression" for f in conn.failures)


def test_regression_rules_can_be_turned_off(upload: tuple[CaptureInput, Analysis]) -> None:
    inp, analysis = upload
    analysis = dataclasses.replace(analysis, findings=[finding("k", Severity.INFO)])
    run = parse_baseline(baseline_doc(10e6, []), "b.json").run_for("up")
    rules = Rules(max_throughput_drop_ratio=1.0, fail_on_new_kinds=False)
    assert judge(inp, analysis, rules, run).passed


def test_an_analyze_document_is_a_reference_for_every_input() -> None:
    doc = baseline_doc(1.0, ["k"])["captures"][0]
    baseline = parse_baseline({"connections": doc["connections"], "findings": []}, "ref.json")
    assert baseline.run_for("any") is baseline.run_for("other") is not None


def test_bad_input_fails_before_analysis_or_is_reported(tmp_path: Path) -> None:
    good = CaptureInput("good", transfer(tmp_path / "g.pcap"))
    corrupt = tmp_path / "c.pcap"
    corrupt.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 3)
    inputs = [good, CaptureInput("c", corrupt), CaptureInput("m", tmp_path / "missing.pcap")]
    with pytest.raises(CaptureError, match=r"missing\.pcap: no such file"):
        run_check(inputs, DEFAULT_POLICY)
    with pytest.raises(CaptureError, match=r"c\.pcap"):
        run_check(inputs[:2], DEFAULT_POLICY)
    report = parse_policy({"on_bad_input": "report", "fail": {"severity": "none"}}, "p.toml")
    seen: list[str] = []
    result = run_check(inputs, report, on_done=lambda v: seen.append(v.input.name))
    assert seen == ["good", "c", "m"]
    assert [c.passed for c in result.captures] == [True, False, False]
    assert result.captures[2].error == f"{tmp_path / 'missing.pcap'}: no such file"
    assert not result.passed
    doc = result.to_dict()
    assert [c["error"] is None for c in doc["captures"]] == [True, False, False]


def test_overrides_pick_rules_by_name(tmp_path: Path) -> None:
    policy = Policy(
        rules=Rules(min_throughput_bps=1e6, fail_severity=None),
        overrides=parse_policy(
            {"override": [{"paths": ["slow/*"], "thresholds": {"min_throughput_bps": 1e5}}]}, "p"
        ).overrides,
    )
    path = transfer(tmp_path / "x.pcap")
    result = run_check([CaptureInput("fast/x", path), CaptureInput("slow/x", path)], policy)
    assert [c.passed for c in result.captures] == [False, True]
