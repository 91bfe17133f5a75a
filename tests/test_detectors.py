import dataclasses
import re
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from tracekit import schema
from tracekit.detectors import all_detectors, discover, run_detectors
from tracekit.detectors.base import (
    PACKET_COLUMN_NAMES,
    AnalysisContext,
    Detector,
    DetectorError,
    Evidence,
    check_detector,
)
from tracekit.errors import TracekitError
from tracekit.findings import Finding, Severity

DOC = Path(__file__).resolve().parent.parent / "docs" / "findings.md"
SUBSECTIONS = ("### What it means", "### Evidence", "### What to change")


def doc_sections(text: str) -> dict[str, str]:
    """`## kind` sections of docs/findings.md: heading -> body up to the next `## `."""
    parts = re.split(r"^## (\S+)[ \t]*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def doc_problems(cls: type[Detector], text: str) -> list[str]:
    body = doc_sections(text).get(cls.kind)
    if body is None:
        return [f"no '## {cls.kind}' section"]
    problems = [f"no '{s}'" for s in SUBSECTIONS if not re.search(f"^{s}$", body, re.MULTILINE)]
    if f"Severity: {cls.severity.value}." not in body:
        problems.append(f"no 'Severity: {cls.severity.value}.' line")
    return problems + evidence_problems(cls, body)


def evidence_problems(cls: type[Detector], body: str) -> list[str]:
    """Where a kind's `### Evidence` list and the detector's declared evidence keys differ.

    The list names each declared key in backticks; any other name in backticks there is one
    of the strings a key takes (`Evidence.values`) or a field of the detector's Config.
    """
    found = re.search(r"^### Evidence\n(.*?)(?=^### |\Z)", body, re.MULTILINE | re.DOTALL)
    if found is None:
        return []  # the missing subsection is a problem of its own
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", found.group(1)))
    declared = {e.name for e in cls.evidence}
    others = {v for e in cls.evidence for v in e.values}
    others |= {f.name for f in dataclasses.fields(cls.Config)}
    problems = [f"evidence {k} not documented" for k in sorted(declared - named)]
    undeclared = sorted(named - declared - others)
    problems += [f"evidence {k} documented, not declared" for k in undeclared]
    return problems


# --- a toy detector, to show the protocol end to end ------------------------------------------


class LongConnection(Detector):
    kind = "long_connection"
    title = "Connection lasted longer than a threshold"
    severity = Severity.INFO
    evidence = (Evidence("duration_s", "s", "how long the connection lasted"),)

    @dataclass(frozen=True)
    class Config:
        # A toy threshold: long enough that the handshake alone never fires it.
        min_duration_s: float = 10.0

    config: Config

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        rows = ctx.connections[ctx.connections["duration_s"] >= self.config.min_duration_s]
        starts = ctx.seconds(rows["start_ns"].to_numpy())
        ends = ctx.seconds(rows["end_ns"].to_numpy())
        for conn, duration, start, end in zip(
            rows["conn"], rows["duration_s"], starts, ends, strict=True
        ):
            yield self.finding(
                conn=conn,
                direction=None,
                start_s=start,
                end_s=end,
                evidence={"duration_s": duration},
                summary=f"Connection {conn} lasted {duration:g} s",
                explanation="It stayed open for longer than the threshold.",
                advice="Nothing to change; this is a demonstration.",
            )


def _zero(arrow_type: pa.DataType) -> object:
    if pa.types.is_boolean(arrow_type):
        return False
    return "" if pa.types.is_string(arrow_type) else 0


def context(durations_s: list[float]) -> AnalysisContext:
    base_ns = 1_700_000_000_000_000_000
    rows = []
    for conn, duration in enumerate(durations_s):
        start = base_ns + conn * 1_000_000_000
        rows.append(
            {c.name: _zero(c.type) for c in schema.CONNECTION_COLUMNS}
            | {"conn": conn, "start_ns": start, "end_ns": start + int(duration * 1e9),
               "duration_s": duration}
        )  # fmt: skip
    connections = pd.DataFrame(rows, columns=[c.name for c in schema.CONNECTION_COLUMNS])
    fields = [
        pa.field(c.name, c.type)
        for c in schema.PACKET_COLUMNS + schema.CONNECTION_PACKET_COLUMNS
        if c.name in PACKET_COLUMN_NAMES
    ]
    ts = [base_ns, base_ns + 5]
    packets = pa.table(
        {f.name: pa.array(ts if f.name == "ts_ns" else [0, 0], f.type) for f in fields}
    )
    return AnalysisContext(connections=connections, packets=packets)


def test_toy_detector_fires_with_times_from_the_first_packet() -> None:
    ctx = context([3.0, 12.5])
    findings = run_detectors(ctx, [LongConnection])
    assert len(findings) == 1
    f = findings[0]
    # Connection 1 starts 1 s after the first packet and lasts 12.5 s.
    assert (f.kind, f.conn, f.start_s, f.end_s) == ("long_connection", 1, 1.0, 13.5)
    assert f.severity is Severity.INFO
    assert f.evidence["duration_s"] == 12.5
    assert type(f.to_dict()["conn"]) is int


def test_toy_detector_is_quiet_below_its_threshold() -> None:
    assert run_detectors(context([3.0, 9.9]), [LongConnection]) == []


def test_config_changes_what_fires() -> None:
    configs = {"long_connection": LongConnection.Config(min_duration_s=1.0)}
    findings = run_detectors(context([3.0, 12.5]), [LongConnection], configs)
    assert [f.conn for f in findings] == [0, 1]


def test_unknown_kind_in_configs_is_a_user_error() -> None:
    with pytest.raises(TracekitError, match="no_such_kind"):
        run_detectors(context([1.0]), [LongConnection], {"no_such_kind": object()})


def test_wrong_config_type_is_refused() -> None:
    with pytest.raises(TypeError):
        LongConnection(Detector.Config())


def test_toy_detector_passes_the_checks_and_its_doc_check_bites() -> None:
    check_detector(LongConnection)
    good = textwrap.dedent("""\
        # Findings

        ## long_connection

        Connection lasted longer than a threshold. Severity: info.

        ### What it means
        Long.

        ### Evidence
        - `duration_s`: how long.

        ### What to change
        Nothing.
        """)
    assert doc_problems(LongConnection, good) == []
    assert doc_problems(LongConnection, good.replace("## long_connection", "## other")) == [
        "no '## long_connection' section"
    ]
    assert doc_problems(LongConnection, good.replace("### Evidence", "Evidence")) == [
        "no '### Evidence'"
    ]
    assert doc_problems(LongConnection, good.replace("Severity: info.", "Severity: error.")) == [
        "no 'Severity: info.' line"
    ]
    assert doc_problems(LongConnection, good.replace("`duration_s`", "`lasted_s`")) == [
        "evidence duration_s not documented",
        "evidence lasted_s documented, not declared",
    ]
    # A Config field may be named in the list: it says how a number was measured.
    assert doc_problems(LongConnection, good.replace("how long.", "at `min_duration_s`.")) == []


def test_a_finding_with_an_undeclared_evidence_key_is_a_detector_bug() -> None:
    class Talker(LongConnection):
        def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
            for f in super().detect(ctx):
                yield self.finding(
                    conn=f.conn,
                    direction=None,
                    start_s=f.start_s,
                    end_s=f.end_s,
                    evidence={**f.evidence, "chatter_count": 1},
                    summary=f.summary,
                    explanation=f.explanation,
                    advice=f.advice,
                )

    with pytest.raises(DetectorError, match="chatter_count not declared"):
        run_detectors(context([12.0]), [Talker])


def test_a_finding_of_another_kind_is_a_detector_bug() -> None:
    class Liar(LongConnection):
        def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
            for f in super().detect(ctx):
                yield dataclasses.replace(f, kind="other_kind")

    with pytest.raises(DetectorError, match="other_kind"):
        run_detectors(context([12.0]), [Liar])


def test_findings_come_sorted_by_connection_then_time() -> None:
    class Backwards(LongConnection):
        def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
            yield from reversed(list(super().detect(ctx)))

    findings = run_detectors(context([11.0, 12.0, 13.0]), [Backwards])
    assert [f.conn for f in findings] == [0, 1, 2]


def test_context_columns_are_some_the_connections_stage_produces() -> None:
    from tracekit.connections import packet_schema

    assert set(packet_schema().names) > PACKET_COLUMN_NAMES


def test_context_refuses_tables_without_the_declared_columns() -> None:
    ctx = context([1.0])
    with pytest.raises(ValueError, match="duration_s"):
        AnalysisContext(ctx.connections.drop(columns="duration_s"), ctx.packets)
    with pytest.raises(ValueError, match="tsecr"):
        AnalysisContext(ctx.connections, ctx.packets.drop_columns(["tsecr"]))


# --- discovery over a temporary package ------------------------------------------------------

HEADER = """\
from collections.abc import Iterator
from dataclasses import dataclass

from tracekit.detectors.base import AnalysisContext, Detector, Evidence
from tracekit.findings import Finding, Severity
"""


def detector_source(cls_name: str, kind: str, config: str = "") -> str:
    return (
        f"\n\nclass {cls_name}(Detector):\n"
        f'    kind = "{kind}"\n'
        f'    title = "{cls_name}"\n'
        "    severity = Severity.WARNING\n"
        + textwrap.indent(config, "    ")
        + "\n    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:\n"
        "        yield from ()\n"
    )


@pytest.fixture
def make_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[dict[str, str]], str]]:
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def make(modules: dict[str, str]) -> str:
        name = f"toydetectors_{uuid.uuid4().hex}"
        names.append(name)
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("")
        for module, source in modules.items():
            (package / f"{module}.py").write_text(source)
        return name

    yield make
    for name in names:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def test_discover_finds_one_detector_per_module_sorted_by_kind(
    make_package: Callable[[dict[str, str]], str],
) -> None:
    package = make_package(
        {
            "zeta": HEADER + detector_source("Zeta", "a_first"),
            # Importing another module's detector does not make it this module's.
            "alpha": HEADER + "from .zeta import Zeta\n" + detector_source("Alpha", "b_second"),
            "_shared": "HELPER = 1\n",
        }
    )
    found = discover(package)
    assert [cls.kind for cls in found] == ["a_first", "b_second"]
    assert [cls.__name__ for cls in found] == ["Zeta", "Alpha"]


def test_duplicate_kinds_fail(make_package: Callable[[dict[str, str]], str]) -> None:
    package = make_package(
        {
            "one": HEADER + detector_source("One", "same_kind"),
            "two": HEADER + detector_source("Two", "same_kind"),
        }
    )
    with pytest.raises(DetectorError, match=r"same_kind.*\.one and .*\.two"):
        discover(package)


def test_import_errors_propagate(make_package: Callable[[dict[str, str]], str]) -> None:
    package = make_package({"broken": HEADER + "import no_such_module_for_tracekit\n"})
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_tracekit"):
        discover(package)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("HELPER = 1\n", "found none"),
        (detector_source("A", "a_kind") + detector_source("B", "b_kind"), "found A, B"),
        (detector_source("A", "CamelKind"), "snake_case"),
        (detector_source("A", "a_kind").replace('title = "A"', 'title = ""'), "title"),
        (
            detector_source("A", "a_kind").replace("Severity.WARNING", '"warning"'),
            "severity must be a Severity",
        ),
        (
            detector_source("A", "a_kind", "@dataclass\nclass Config:\n    gap_s: float = 1.0\n"),
            "frozen dataclass",
        ),
        (
            detector_source(
                "A", "a_kind", "@dataclass(frozen=True)\nclass Config:\n    gap_s: float\n"
            ),
            "needs a default",
        ),
        (
            detector_source(
                "A", "a_kind", "@dataclass(frozen=True)\nclass Config:\n    gap: float = 1.0\n"
            ),
            "ends with its unit",
        ),
        (
            detector_source(
                "A", "a_kind", "@dataclass(frozen=True)\nclass Config:\n    gap_s: float = 1.0\n"
            ),
            "say why this default",
        ),
        (detector_source("A", "a_kind", "evidence = ['gap_s']\n"), "tuple of Evidence"),
        (
            detector_source("A", "a_kind", 'evidence = (Evidence("Gap", "", "a gap"),)\n'),
            "snake_case",
        ),
        (
            detector_source("A", "a_kind", 'evidence = (Evidence("gap_s", "ms", "a gap"),)\n'),
            "its unit is 's'",
        ),
        (
            detector_source(
                "A", "a_kind", 'evidence = (Evidence("rate_per_s", "bytes", "a rate"),)\n'
            ),
            "its unit is '/s'",
        ),
        (
            detector_source("A", "a_kind", 'evidence = (Evidence("gap_s", "s", " "),)\n'),
            "needs a meaning",
        ),
        (
            detector_source(
                "A",
                "a_kind",
                'evidence = (Evidence("gap_s", "s", "a gap"), Evidence("gap_s", "s", "again"))\n',
            ),
            "declared twice",
        ),
    ],
)
def test_protocol_violations_fail(
    make_package: Callable[[dict[str, str]], str], source: str, message: str
) -> None:
    package = make_package({"bad": HEADER + source})
    with pytest.raises(DetectorError, match=message):
        discover(package)


def test_a_detector_without_detect_is_refused(
    make_package: Callable[[dict[str, str]], str],
) -> None:
    source = detector_source("A", "a_kind").replace("def detect", "def not_detect")
    package = make_package({"bad": HEADER + source})
    with pytest.raises(DetectorError, match="found none"):
        discover(package)
    with pytest.raises(DetectorError, match="detect"):
        check_detector(Detector)


# --- the real package -------------------------------------------------------------------------


def test_the_real_package_loads_and_every_detector_passes_the_checks() -> None:
    # Discovery runs check_detector on each class, reading its source, and fails on duplicate
    # kinds; a run's discovery leaves the source alone and finds the same classes.
    detectors = discover("tracekit.detectors")
    assert len({cls.kind for cls in detectors}) == len(detectors)
    assert all_detectors() == detectors


@pytest.mark.parametrize("cls", all_detectors(), ids=lambda cls: cls.kind)
def test_every_kind_is_documented(cls: type[Detector]) -> None:
    assert doc_problems(cls, DOC.read_text()) == []


def test_every_documented_kind_exists() -> None:
    kinds = {cls.kind for cls in all_detectors()}
    documented = {k for k in doc_sections(DOC.read_text()) if re.fullmatch(r"[a-z0-9_]+", k)}
    assert documented <= kinds


SCORED_HEADING = "## Where each finding is scored, and where tracekit cannot tell"


def scored_table_kinds(text: str) -> list[str]:
    """The first column of the table under SCORED_HEADING in docs/findings.md, in order."""
    body = text.split(f"\n{SCORED_HEADING}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    # The header row and the row of dashes under it come first.
    return [row.split("|")[1].strip().strip("`") for row in rows[2:]]


def test_the_scored_table_has_one_row_per_kind() -> None:
    text = DOC.read_text()
    kinds = [cls.kind for cls in all_detectors()]  # sorted by kind, as the table is
    assert scored_table_kinds(text) == kinds
    # The check bites: a row left out, or a row twice, fails it.
    row = next(line for line in text.splitlines() if line.startswith(f"| `{kinds[0]}` |"))
    assert scored_table_kinds(text.replace(row + "\n", "")) != kinds
    assert scored_table_kinds(text.replace(row, f"{row}\n{row}")) != kinds


CAPTURES = sorted((DOC.parent.parent / "fixtures" / "captures").glob("*/sender.pcap"))


@pytest.mark.parametrize("sender", CAPTURES, ids=lambda p: p.parent.name)
def test_findings_of_the_bundled_captures_hold_declared_evidence_only(sender: Path) -> None:
    from tracekit.pipeline import analyze_files

    analysis = analyze_files(sender, sender.with_name("receiver.pcap"))
    declared = {cls.kind: {e.name for e in cls.evidence} for cls in all_detectors()}
    for finding in analysis.findings:
        assert set(finding.evidence) <= declared[finding.kind], finding.kind
