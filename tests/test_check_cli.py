"""`tracekit check` in-process: exit statuses, the table, --junit, --json and --baseline."""

from __future__ import annotations

import gzip
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli
from tracekit.cli.status import ExitStatus

from tests.helpers.check_crafting import transfer
from tracekit import detectors
from tracekit.detectors import AnalysisContext, Detector
from tracekit.detectors.base import Evidence
from tracekit.findings import Finding, Severity


class Resent(Detector):
    """Fires on every connection that resent data: a known trigger, whatever detectors exist."""

    kind = "test_resent"
    title = "Data was resent"
    severity = Severity.WARNING
    evidence = (Evidence("retrans_segments", "segments", "segments sent twice"),)

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for row in ctx.connections.itertuples():
            if row.retrans_a2b:
                yield self.finding(
                    conn=row.conn,
                    direction="a2b",
                    start_s=0.0,
                    end_s=0.0,
                    evidence={"retrans_segments": row.retrans_a2b},
                    summary=f"{row.retrans_a2b} segments resent",
                    explanation="Data was sent twice.",
                    advice="Find the loss.",
                )


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """clean: 0.8 Mbit/s, nothing resent; lossy: 0.8 Mbit/s, two segments resent; pair: a
    sender/receiver pair by the naming rule, as clean, the receiver's gzipped. The one detector
    is Resent."""
    monkeypatch.setattr(detectors, "all_detectors", lambda: (Resent,))
    transfer(tmp_path / "runs/clean.pcap")
    transfer(tmp_path / "runs/lossy.pcap", resend=[10, 11])
    transfer(tmp_path / "runs/pair.sender.pcap")
    receiver = transfer(tmp_path / "pair.receiver.pcap")
    (tmp_path / "runs/pair.receiver.pcap.gz").write_bytes(gzip.compress(receiver.read_bytes()))
    (tmp_path / "runs/notes.txt").write_text("not a capture: a folder walk passes it by")
    return tmp_path / "runs"


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["check", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def no_fail_policy(tmp_path: Path) -> Path:
    policy = tmp_path / "none.toml"
    policy.write_text('[fail]\nseverity = "none"\n')
    return policy


def test_clean_input_passes(runs: Path) -> None:
    code, out, _ = invoke(runs / "clean.pcap")
    assert code == ExitStatus.OK
    assert out.splitlines()[1].split()[:2] == ["ok", f"{runs.as_posix()}/clean.pcap"]
    assert out.splitlines()[-1] == "all 1 inputs passed (the default policy)"


def test_a_finding_fails_by_default_and_the_table_shows_it(runs: Path, tmp_path: Path) -> None:
    junit, doc = tmp_path / "junit.xml", tmp_path / "check.json"
    code, out, _ = invoke(runs, "--junit", junit, "--json", doc)
    assert code == ExitStatus.CHECK_FAILED
    lines = out.splitlines()
    table = {line.split()[1]: line.split()[0] for line in lines[1:4]}
    expected = {"clean.pcap": "ok", "lossy.pcap": "FAIL", "pair": "ok"}
    assert table == {f"{runs.as_posix()}/{name}": s for name, s in expected.items()}
    assert "    finding: [warning] test_resent: 2 segments resent" in lines
    assert lines[-1] == "1 of 3 inputs failed (the default policy)"
    cases = ET.parse(junit).getroot().findall("testsuite/testcase")
    assert sum(c.find("failure") is not None for c in cases) == 1
    saved = json.loads(doc.read_text())
    assert saved["passed"] is False
    assert [c["passed"] for c in saved["captures"]] == [True, False, True]
    assert saved["captures"][2]["receiver"] == str(runs / "pair.receiver.pcap.gz")


def test_check_returns_freed_memory_between_the_stages(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr("tracekit.cli.check.give_back", lambda: calls.append(1))
    assert invoke(runs / "clean.pcap")[0] == ExitStatus.OK
    # Each capture's connections, the merge, each capture's series and inside the sender's
    # (its walk's working memory freed), the sender's packet columns only its walk read let
    # go, the one detector (Resent), and the detectors.
    assert len(calls) == 9


def test_the_policy_decides(runs: Path, tmp_path: Path) -> None:
    policy = tmp_path / "tracekit.toml"
    policy.write_text('[fail]\nseverity = "error"\n[thresholds]\nmin_throughput_bps = 700e3\n')
    assert invoke(runs, "--policy", policy)[0] == ExitStatus.OK
    policy.write_text('[fail]\nseverity = "error"\n[thresholds]\nmin_throughput_bps = 900e3\n')
    code, out, _ = invoke(runs, "--policy", policy)
    assert code == ExitStatus.CHECK_FAILED
    assert out.splitlines()[-1] == f"3 of 3 inputs failed ({policy})"
    policy.write_text('[fail]\nseverity = "none"\nkinds = ["test_resent"]\n')
    assert invoke(runs, "--policy", policy)[0] == ExitStatus.CHECK_FAILED
    policy.write_text('[fail]\nkinds = ["test_resnt"]\n')
    code, _, err = invoke(runs, "--policy", policy)
    assert code == ExitStatus.BAD_INPUT
    expected = f"{policy}: fail.kinds: no detector of kind 'test_resnt' (known: test_resent)"
    assert err == f"tracekit: {expected}\n"


def test_baseline_regressions(runs: Path, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier.json"
    assert invoke(runs / "clean.pcap", "--json", earlier)[0] == ExitStatus.OK
    assert invoke(runs / "clean.pcap", "--baseline", earlier)[0] == ExitStatus.OK
    doc = json.loads(earlier.read_text())
    # The earlier run was faster: 0.8 Mbit/s is now 20% down, beyond the default 10%.
    doc["captures"][0]["connections"][0]["throughput_a2b_bps"] = 1e6
    earlier.write_text(json.dumps(doc))
    code, out, _ = invoke(runs / "clean.pcap", "--baseline", earlier)
    assert code == ExitStatus.CHECK_FAILED
    assert "    regression: throughput 0.80 Mbit/s a2b is 20.0% below the baseline's" in out
    # The same run under lossy's name: lossy's finding kind is new to it.
    doc["captures"][0].update(name=f"{runs.as_posix()}/lossy.pcap", connections=[])
    earlier.write_text(json.dumps(doc))
    policy = no_fail_policy(tmp_path)
    assert invoke(runs / "lossy.pcap", "--policy", policy)[0] == ExitStatus.OK
    code, out, _ = invoke(runs / "lossy.pcap", "--baseline", earlier, "--policy", policy)
    assert code == ExitStatus.CHECK_FAILED
    assert "    regression: new finding kind test_resent: not in the baseline" in out


def test_bad_input_is_one_line_exit_2_or_reported(runs: Path, tmp_path: Path) -> None:
    broken = runs / "broken.pcap"
    broken.write_bytes(b"not a capture at all, not even close")
    junit = tmp_path / "j.xml"
    code, out, err = invoke(runs / "clean.pcap", broken, "--junit", junit)
    assert code == ExitStatus.BAD_INPUT
    assert err.startswith(f"tracekit: {broken}: ") and err.count("\n") == 1
    assert out == "" and not junit.exists()
    policy = tmp_path / "report.toml"
    policy.write_text('on_bad_input = "report"\n')
    code, out, _ = invoke(runs / "clean.pcap", broken, "--policy", policy, "--junit", junit)
    assert code == ExitStatus.CHECK_FAILED
    assert f"ERROR  {broken.as_posix()}" in out
    assert ET.parse(junit).getroot().get("errors") == "1"


@pytest.mark.parametrize(
    "args",
    [
        ["nowhere/at/all.pcap"],
        ["{runs}/clean.pcap", "--policy", "nowhere.toml"],
        ["{runs}/clean.pcap", "--baseline", "nowhere.json"],
        ["{empty}"],
    ],
)
def test_usage_errors_exit_2(runs: Path, tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    args = [a.format(runs=runs, empty=tmp_path / "empty") for a in args]
    code, out, err = invoke(*args)
    assert code == ExitStatus.BAD_INPUT
    assert err.startswith("tracekit: ") and err.count("\n") == 1
    assert out == ""


def test_no_path_is_a_usage_error() -> None:
    assert invoke()[0] == ExitStatus.BAD_INPUT


LAB = Path(__file__).parent.parent / "fixtures/captures"


def lab_truth(scenario: str) -> dict:
    return json.loads((LAB / scenario / "truth.json").read_text())


@pytest.mark.parametrize("scenario", ["slow_start_overrun", "clean"])
def test_real_detectors_on_the_lab_captures(scenario: str, tmp_path: Path) -> None:
    # The lab's truth says whether the capture shows a slow start overrun.
    truth = lab_truth(scenario)
    shows = "slow_start_overrun" in truth["labels"]
    assert shows or "slow_start_overrun" in truth["absent_labels"]
    policy = tmp_path / "p.toml"
    policy.write_text('[fail]\nseverity = "none"\nkinds = ["slow_start_overrun"]\n')
    junit = tmp_path / "j.xml"
    code, _, _ = invoke(LAB / scenario, "--policy", policy, "--junit", junit)
    assert code == (ExitStatus.CHECK_FAILED if shows else ExitStatus.OK)
    failures = ET.parse(junit).getroot().findall("testsuite/testcase/failure")
    assert [f.get("type") for f in failures] == (["tracekit.finding"] if shows else [])
    assert all("slow_start_overrun" in f.get("message") for f in failures)


def test_receiver_drops_threshold_on_the_lab_capture(tmp_path: Path) -> None:
    dropped = lab_truth("receiver_drops")["drops"]["receiver"]  # nftables' counter
    assert dropped > 0
    policy = tmp_path / "p.toml"
    for allowed, code in ((dropped, ExitStatus.OK), (dropped - 1, ExitStatus.CHECK_FAILED)):
        policy.write_text(
            f'[fail]\nseverity = "none"\n[thresholds]\nmax_receiver_drops = {allowed}\n'
        )
        assert invoke(LAB / "receiver_drops", "--policy", policy)[0] == code
