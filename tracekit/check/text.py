"""A check result for a terminal: one line per input, then the failures in detail."""

from __future__ import annotations

from tracekit.check.verdict import CaptureVerdict, CheckResult


def _status(capture: CaptureVerdict) -> str:
    if capture.error is not None:
        return "ERROR"
    return "ok" if capture.passed else "FAIL"


def _line(capture: CaptureVerdict, width: int) -> str:
    name = capture.input.name.ljust(width)
    if capture.error is not None:
        return f"{_status(capture):5}  {name}  cannot be read"
    conns = capture.connections
    best = max((c.metrics.throughput_bps for c in conns), default=0.0)
    findings = sum(len(c.findings) for c in conns)
    failures = sum(len(c.failures) for c in conns)
    return (
        f"{_status(capture):5}  {name}  {len(conns):3} conn  {best / 1e6:9.2f} Mbit/s  "
        f"{findings:3} findings  {failures:3} failures"
    )


def render_text(result: CheckResult) -> str:
    """The short table, the failures in detail, and a closing count."""
    width = max((len(c.input.name) for c in result.captures), default=0)
    lines = [f"{'':5}  {'input'.ljust(width)}  {'':3} conn  {'best':>9} Mbit/s"]
    lines += [_line(c, width) for c in result.captures]
    for capture in result.captures:
        if capture.passed and not capture.notes:
            continue
        lines.append("")
        lines.append(f"{capture.input.name}:")
        if capture.error is not None:
            lines.append(f"  error: {capture.error}")
        lines += [f"  note: {note}" for note in capture.notes]
        for verdict in capture.connections:
            if verdict.failures:
                lines.append(f"  {verdict.metrics.label}")
                lines += [f"    {f.rule}: {f.message}" for f in verdict.failures]
    failed = sum(not c.passed for c in result.captures)
    total = len(result.captures)
    lines.append("")
    lines.append(
        f"{failed} of {total} inputs failed ({result.policy_source})"
        if failed
        else f"all {total} inputs passed ({result.policy_source})"
    )
    return "\n".join(lines)
