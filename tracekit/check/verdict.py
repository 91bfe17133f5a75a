"""Judging: an analysed input against its rules and baseline run, and a whole check.

A connection fails on a finding the rules fail, a threshold its data direction misses, or a
regression against the baseline run. An input that cannot be read fails the check with exit 2,
or, when the policy says `on_bad_input = "report"`, is kept as an errored input.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.analysis import Analysis
from tracekit.check.baseline import Baseline, BaselineRun
from tracekit.check.metrics import ConnectionMetrics, connection_metrics
from tracekit.check.policy import Policy, Rules
from tracekit.errors import CaptureError
from tracekit.findings import Finding
from tracekit.inputs import CaptureInput, analyze_input
from tracekit.merge import same_file

CHECK_FORMAT = 1  # the version of the `check --json` document
# What a baseline compares (tracekit.check.baseline) and what names a connection: all that a
# connection without findings or failures keeps in `check --json`. A load test's capture of
# 100,000 quiet connections then writes a few hundred bytes for each instead of their whole
# rows and metrics.
_QUIET_KEYS = (
    "conn",
    "a",
    "b",
    "bytes_a2b",
    "bytes_b2a",
    "throughput_a2b_bps",
    "throughput_b2a_bps",
)


@dataclass(frozen=True)
class Failure:
    """Why a connection failed: the rule (`finding`, `threshold`, `regression`, `receiver`) and
    one line."""

    rule: str
    name: str  # the finding kind or the policy key
    message: str


@dataclass(frozen=True)
class ConnectionVerdict:
    """One connection: its numbers, its findings and what failed."""

    metrics: ConnectionMetrics
    findings: tuple[Finding, ...]
    failures: tuple[Failure, ...]

    @property
    def passed(self) -> bool:
        """No failure."""
        return not self.failures


@dataclass(frozen=True)
class CaptureVerdict:
    """One input: its connections judged, or the error that kept it from being read."""

    input: CaptureInput
    time_s: float
    connections: tuple[ConnectionVerdict, ...] = ()
    document: dict[str, Any] | None = None  # the `analyze --json` document of the input
    error: str | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Read, and no connection failed."""
        return self.error is None and all(c.passed for c in self.connections)

    def to_dict(self) -> dict[str, Any]:
        """The input's entry in the `check --json` document."""
        doc = self.document or {"connections": [], "findings": []}
        noted = {c.metrics.conn for c in self.connections if c.findings or c.failures}
        connections = [
            row if row.get("conn") in noted else {k: row[k] for k in _QUIET_KEYS if k in row}
            for row in doc["connections"]
        ]
        return {
            "name": self.input.name,
            "sender": str(self.input.sender),
            "receiver": None if self.input.receiver is None else str(self.input.receiver),
            "passed": self.passed,
            "error": self.error,
            "time_s": self.time_s,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "connections": connections,
            "findings": doc["findings"],
            "metrics": [c.metrics.to_dict() for c in self.connections if c.metrics.conn in noted],
            "failures": [
                {"conn": c.metrics.conn, "rule": f.rule, "name": f.name, "message": f.message}
                for c in self.connections
                for f in c.failures
            ],
        }


@dataclass(frozen=True)
class CheckResult:
    """Every input's verdict and where the rules came from."""

    captures: tuple[CaptureVerdict, ...]
    policy_source: str
    baseline_source: str | None = None

    @property
    def passed(self) -> bool:
        """Every input passed."""
        return all(c.passed for c in self.captures)

    def to_dict(self) -> dict[str, Any]:
        """The `tracekit check --json` document; also what `--baseline` reads back."""
        return {
            "tracekit_check": CHECK_FORMAT,
            "passed": self.passed,
            "policy": self.policy_source,
            "baseline": self.baseline_source,
            "captures": [c.to_dict() for c in self.captures],
        }


def _mbps(bps: float) -> str:
    return f"{bps / 1e6:.2f} Mbit/s"


def finding_fails(finding: Finding, rules: Rules) -> bool:
    """Whether the rules fail this finding: ignored kinds never, listed kinds always, else by
    severity."""
    if finding.kind in rules.ignore_kinds:
        return False
    if finding.kind in rules.fail_kinds:
        return True
    return rules.fail_severity is not None and finding.severity.rank >= rules.fail_severity.rank


def _threshold_failures(m: ConnectionMetrics, rules: Rules) -> Iterable[Failure]:
    if m.bytes < rules.min_transfer_bytes:
        return
    if rules.min_throughput_bps is not None and m.throughput_bps < rules.min_throughput_bps:
        yield Failure(
            "threshold",
            "min_throughput_bps",
            f"throughput {_mbps(m.throughput_bps)} {m.direction} is below "
            f"min_throughput_bps {_mbps(rules.min_throughput_bps)}",
        )
    if rules.max_retrans_ratio is not None and m.retrans_ratio > rules.max_retrans_ratio:
        yield Failure(
            "threshold",
            "max_retrans_ratio",
            f"{m.retrans_segments} of {m.data_segments} data segments resent "
            f"({m.retrans_ratio:.2%}), above max_retrans_ratio {rules.max_retrans_ratio:.2%}",
        )
    if rules.max_retrans_segments is not None and m.retrans_segments > rules.max_retrans_segments:
        yield Failure(
            "threshold",
            "max_retrans_segments",
            f"{m.retrans_segments} segments resent, above max_retrans_segments "
            f"{rules.max_retrans_segments}",
        )
    drops = m.receiver_drops
    if (
        rules.max_receiver_drops is not None
        and drops is not None
        and drops > rules.max_receiver_drops
    ):
        yield Failure(
            "threshold",
            "max_receiver_drops",
            f"{drops} data segments reached the receiver's capture point and were dropped in "
            f"its host, above max_receiver_drops {rules.max_receiver_drops}",
        )
    if rules.max_duration_s is not None and m.duration_s > rules.max_duration_s:
        yield Failure(
            "threshold",
            "max_duration_s",
            f"lasted {m.duration_s:.3f} s, above max_duration_s {rules.max_duration_s:g} s",
        )


def _regressions(
    m: ConnectionMetrics, findings: Sequence[Finding], rules: Rules, run: BaselineRun
) -> Iterable[Failure]:
    before = run.connection(m.conn)
    if before is not None and m.bytes >= rules.min_transfer_bytes:
        base_bytes = before.get(f"bytes_{m.direction}", 0)
        base_bps = before.get(f"throughput_{m.direction}_bps", 0.0)
        if base_bytes >= rules.min_transfer_bytes and isinstance(base_bps, int | float):
            floor = base_bps * (1 - rules.max_throughput_drop_ratio)
            if m.throughput_bps < floor:
                drop = 1 - m.throughput_bps / base_bps
                yield Failure(
                    "regression",
                    "max_throughput_drop_ratio",
                    f"throughput {_mbps(m.throughput_bps)} {m.direction} is {drop:.1%} below "
                    f"the baseline's {_mbps(base_bps)} (max_throughput_drop_ratio "
                    f"{rules.max_throughput_drop_ratio:.0%})",
                )
    if rules.fail_on_new_kinds:
        new = sorted(
            {
                f.kind
                for f in findings
                if f.kind not in run.kinds and f.kind not in rules.ignore_kinds
            }
        )
        for kind in new:
            yield Failure("regression", kind, f"new finding kind {kind}: not in the baseline")


def _receiver_failures(inp: CaptureInput, analysis: Analysis) -> list[Failure]:
    """A receiver capture that matched no connection of the sender's: without this failure the
    receiver-drop threshold would pass unjudged, a verdict silently about nothing."""
    if analysis.merge is None or analysis.merge.matched:
        return []
    return [
        Failure(
            "receiver",
            "receiver_match",
            f"the receiver's capture {inp.receiver} holds none of the sender's connections: the "
            "wrong capture, or a NAT between the capture points (give the pair a manifest entry "
            'with map = ["SENDER_ADDR=RECEIVER_ADDR"], as --map SENDER_ADDR=RECEIVER_ADDR)',
        )
    ]


def judge(
    inp: CaptureInput,
    analysis: Analysis,
    rules: Rules,
    run: BaselineRun | None = None,
    *,
    time_s: float = 0.0,
    warnings: tuple[str, ...] = (),
    has_baseline: bool = False,
) -> CaptureVerdict:
    """Judge one analysed input."""
    notes = []
    if has_baseline and run is None:
        notes.append("not in the baseline: not compared")
    if analysis.merge is not None:
        warnings += tuple(
            f"{inp.receiver}: map rule {rule} rewrote no connection found in both captures"
            for rule in analysis.merge.unused_map_rules
        )
    unmatched = _receiver_failures(inp, analysis)
    metrics = connection_metrics(analysis)
    if rules.max_receiver_drops is not None and any(m.receiver_drops is None for m in metrics):
        notes.append("max_receiver_drops not judged on UDP or without the receiver's capture")
    by_conn: dict[int, list[Finding]] = {}
    for f in analysis.findings:
        by_conn.setdefault(f.conn, []).append(f)
    verdicts = []
    for m in metrics:
        findings = tuple(by_conn.get(m.conn, ()))
        failures = [
            Failure("finding", f.kind, f"[{f.severity.value}] {f.kind}: {f.summary}")
            for f in findings
            if finding_fails(f, rules)
        ]
        failures += unmatched
        failures += _threshold_failures(m, rules)
        if run is not None:
            failures += _regressions(m, findings, rules, run)
        verdicts.append(ConnectionVerdict(m, findings, tuple(failures)))
    return CaptureVerdict(
        input=inp,
        time_s=time_s,
        connections=tuple(verdicts),
        document=analysis.to_dict(),
        warnings=warnings,
        notes=tuple(notes),
    )


def check_one(
    inp: CaptureInput,
    policy: Policy,
    baseline: Baseline | None = None,
    after_stage: Callable[[], None] | None = None,
) -> CaptureVerdict:
    """Analyse and judge one input; a bad input raises CaptureError unless the policy reports it.
    `after_stage` is called between the analysis's stages (`analyze_files`)."""
    start = time.perf_counter()
    try:
        analysis, warnings = analyze_input(inp, policy.detector_configs, after_stage)
    except CaptureError as exc:
        if policy.on_bad_input == "fail":
            raise
        return CaptureVerdict(input=inp, time_s=time.perf_counter() - start, error=str(exc))
    return judge(
        inp,
        analysis,
        policy.rules_for(inp.name),
        baseline.run_for(inp.name) if baseline is not None else None,
        time_s=time.perf_counter() - start,
        warnings=warnings,
        has_baseline=baseline is not None,
    )


def run_check(
    inputs: Sequence[CaptureInput],
    policy: Policy,
    baseline: Baseline | None = None,
    on_done: Callable[[CaptureVerdict], None] | None = None,
    after_stage: Callable[[], None] | None = None,
) -> CheckResult:
    """Check every input in order; `on_done` hears of each verdict (for a progress bar), and
    `after_stage` is called between each analysis's stages (`analyze_files`).

    When bad input fails the check, a missing file fails it before any analysis is spent.
    """
    if policy.on_bad_input == "fail":
        for inp in inputs:
            if inp.problem is not None:
                raise CaptureError(inp.sender, inp.problem)
            for path in inp.paths:
                if not path.exists():
                    raise CaptureError(path, "no such file")
            if inp.receiver is not None and same_file(inp.sender, inp.receiver):
                raise CaptureError(
                    inp.receiver,
                    f"is the sender's capture ({inp.sender}) too: give the receiver's capture",
                )
    verdicts = []
    for inp in inputs:
        verdict = check_one(inp, policy, baseline, after_stage)
        verdicts.append(verdict)
        if on_done is not None:
            on_done(verdict)
    return CheckResult(
        captures=tuple(verdicts),
        policy_source=policy.source,
        baseline_source=baseline.source if baseline is not None else None,
    )
