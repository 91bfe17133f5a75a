"""A check result as JUnit XML, the de-facto schema Jenkins, GitLab and GitHub reporters read.

testsuites > testsuite (one per input) > testcase (one per connection) > failure | error.
A testcase's `classname` is the input's name with dots made underscores (Jenkins reads dots
as a package tree, and `run.sender` is no package); its `name` is `conn N a -> b`. A failure
carries `message` (the failures, one line) and `type` (the first rule), and the findings and
numbers in its text. An input that could not be read is one testcase `read` with an error.
The counts add up: a suite's `tests` is its testcases, `failures` and `errors` count them.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from tracekit.check.verdict import CaptureVerdict, CheckResult, ConnectionVerdict

# Characters XML 1.0 allows nowhere, not even escaped: C0 controls but tab, newline and carriage
# return, lone surrogates (a file name's undecodable bytes, as Python keeps them), U+FFFE/U+FFFF.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    """Text every XML parser reads: each forbidden character written out as `\\xNN`/`\\uNNNN`."""
    return _NOT_XML.sub(lambda m: repr(m.group())[1:-1], text)


def _make_safe(root: ET.Element) -> None:
    """Make every name, attribute and text in the tree XML 1.0 (file names and findings come
    from the input, which may hold any character)."""
    for element in root.iter():
        if element.text:
            element.text = _xml_safe(element.text)
        for key, value in element.attrib.items():
            element.set(key, _xml_safe(value))


def _classname(name: str) -> str:
    return name.replace(".", "_")


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _failure_text(verdict: ConnectionVerdict) -> str:
    m = verdict.metrics
    lines = [f.message for f in verdict.failures]
    lines.append("")
    lines.append(
        f"{m.direction}: {m.bytes} bytes in {m.duration_s:.3f} s, "
        f"{m.throughput_bps / 1e6:.2f} Mbit/s, {m.retrans_segments} of {m.data_segments} "
        f"data segments resent"
        + ("" if m.receiver_drops is None else f", {m.receiver_drops} receiver drops")
    )
    for f in verdict.findings:
        lines += [
            "",
            f"[{f.severity.value}] {f.kind} ({f.direction or 'both'}, "
            f"{f.start_s:.3f}-{f.end_s:.3f} s): {f.summary}",
            f.explanation,
            f"What to change: {f.advice}",
        ]
        lines += [f"  {key} = {value}" for key, value in f.evidence.items()]
    return "\n".join(lines)


def _suite(capture: CaptureVerdict) -> ET.Element:
    suite = ET.Element("testsuite", name=capture.input.name)
    props = ET.SubElement(suite, "properties")
    for key, path in (("sender", capture.input.sender), ("receiver", capture.input.receiver)):
        if path is not None:
            ET.SubElement(props, "property", name=key, value=str(path))
    failures = errors = 0
    classname = _classname(capture.input.name)
    if capture.error is not None:
        case = ET.SubElement(
            suite, "testcase", classname=classname, name="read", time=_seconds(capture.time_s)
        )
        ET.SubElement(
            case, "error", message=capture.error, type="CaptureError"
        ).text = capture.error
        errors = 1
    # The input's analysis time, shared out, so the cases add up to the suite.
    share = capture.time_s / max(len(capture.connections), 1)
    for verdict in capture.connections:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=verdict.metrics.label,
            time=_seconds(share),
        )
        if verdict.failures:
            failures += 1
            ET.SubElement(
                case,
                "failure",
                message="; ".join(f.message for f in verdict.failures),
                type=f"tracekit.{verdict.failures[0].rule}",
            ).text = _failure_text(verdict)
    notes = [*capture.notes, *capture.warnings]
    if notes:
        ET.SubElement(suite, "system-out").text = "\n".join(notes)
    tests = len(capture.connections) + (capture.error is not None)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    suite.set("time", _seconds(capture.time_s))
    return suite


def render_junit(result: CheckResult) -> str:
    """The JUnit XML document of a check, as text."""
    root = ET.Element("testsuites", name="tracekit check")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for capture in result.captures:
        suite = _suite(capture)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        root.append(suite)
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(sum(float(s.get("time", "0")) for s in root)))
    _make_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
