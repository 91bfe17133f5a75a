"""`tracekit check` (and analyze/report) on hostile input: wrong shapes, nan, deep nesting,
control characters, a receiver capture that matches nothing.

Bad input is exit 2 and one stderr line naming the file and the problem; a CI verdict is never
silently wrong."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli
from tracekit.cli.status import ExitStatus

from tests.helpers.check_crafting import transfer
from tests.helpers.exchange import CLIENT, NAT, exchange
from tests.helpers.exchange import clean as _clean
from tracekit.check import verdict

TRACEKIT = str(Path(sys.executable).parent / "tracekit")
DEEP = 5000  # nesting levels: far past the interpreter's recursion limit


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def one_line(stderr: str, *parts: str) -> str:
    """The single stderr line of a bad-input exit, holding every part."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tracekit: "), lines[0]
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    return transfer(tmp_path / "run.pcap")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("override = [1]\n", "override 1"),
        ('override = ["wan/*"]\n', "override 1"),
        ("[[override]]\npaths = 5\n", "override 1: needs paths"),
        ("fail = 5\n", "fail must be a table"),
        ("[thresholds]\nmax_retrans_ratio = nan\n", "thresholds.max_retrans_ratio"),
        ("[thresholds]\nmin_throughput_bps = nan\n", "thresholds.min_throughput_bps"),
        ("[thresholds]\nmax_duration_s = inf\n", "thresholds.max_duration_s"),
        ("[baseline]\nmax_throughput_drop_ratio = nan\n", "baseline.max_throughput_drop_ratio"),
        (
            '[[override]]\npaths = ["*"]\n[override.thresholds]\nmin_throughput_bps = nan\n',
            "override 1: thresholds.min_throughput_bps",
        ),
        ("x = " + "[" * DEEP + "]" * DEEP + "\n", "nested too deep"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_file_and_key(
    tmp_path: Path, capture: Path, text: str, key: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(text)
    code, _, err = invoke("check", capture, "--policy", policy)
    assert code == ExitStatus.BAD_INPUT
    one_line(err, str(policy), key)


@pytest.fixture
def refuse_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any analysis fails the test: what is refused must be refused before one is spent."""

    def analysed(*args: object, **kwargs: object) -> None:
        raise AssertionError("analysed before the bad input was refused")

    monkeypatch.setattr(verdict, "check_one", analysed)


def _check_doc(name: str, **row: object) -> dict:
    connection = {"conn": 0, "bytes_a2b": 100_000, "throughput_a2b_bps": 1e6, **row}
    return {"captures": [{"name": name, "connections": [connection], "findings": []}]}


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"captures": 5}, "captures: expected a list, got 5"),
        (None, "got None"),
        ({"captures": [5]}, "captures[0]"),
        ({"captures": [{"name": "x", "connections": None, "findings": []}]}, "x: connections"),
        (_check_doc("x", bytes_a2b="lots"), "x: connections[0].bytes_a2b"),
        (_check_doc("x", conn=True), "x: connections[0].conn"),
        (_check_doc("x", throughput_a2b_bps="fast"), "x: connections[0].throughput_a2b_bps"),
        ({"connections": [], "findings": [{"kind": 5}]}, "findings[0]"),
    ],
)
def test_a_bad_baseline_is_refused_before_any_analysis(
    tmp_path: Path, capture: Path, refuse_analysis: None, doc: object, where: str
) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(doc))
    code, _, err = invoke("check", capture, "--baseline", baseline)
    assert code == ExitStatus.BAD_INPUT
    one_line(err, str(baseline), where)


@pytest.mark.parametrize(
    "text",
    [
        '{"captures": [{"name": "x", "connections": [{"conn": 0, "throughput_a2b_bps": NaN}]'
        ', "findings": []}]}',
        "[" * DEEP + "]" * DEEP,
    ],
)
def test_a_nan_or_deeply_nested_baseline_is_refused(
    tmp_path: Path, capture: Path, refuse_analysis: None, text: str
) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(text)
    code, _, err = invoke("check", capture, "--baseline", baseline)
    assert code == ExitStatus.BAD_INPUT
    one_line(err, str(baseline))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("capture = [1]\n", "capture 1: expected a [[capture]] table, got 1"),
        ('[[capture]]\nsender = "a\\u0000b"\n', "capture 1: sender"),
        ("capture = " + "[" * DEEP + "]" * DEEP + "\n", "nested too deep"),
    ],
)
def test_a_bad_manifest_is_one_line(tmp_path: Path, text: str, where: str) -> None:
    manifest = tmp_path / "pairs.toml"
    manifest.write_text(text)
    code, _, err = invoke("check", manifest)
    assert code == ExitStatus.BAD_INPUT
    one_line(err, str(manifest), where)


def test_the_command_exits_2_with_one_line_for_a_bad_policy(tmp_path: Path, capture: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("override = [1]\n")
    done = subprocess.run(
        [TRACEKIT, "check", str(capture), "--policy", str(policy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == ExitStatus.BAD_INPUT
    one_line(done.stderr, str(policy), "override 1")


def test_junit_with_control_characters_in_a_name_parses(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    transfer(runs / "a\x01b\x1b.pcap", resend=[3])
    junit = tmp_path / "junit.xml"
    code, _, _ = invoke("check", runs, "--junit", junit)
    assert code == ExitStatus.CHECK_FAILED
    root = ET.parse(junit).getroot()
    (suite,) = root
    assert suite.get("name") == f"{runs.as_posix()}/a\\x01b\\x1b.pcap"
    assert int(root.get("tests", "0")) >= 1


def _manifest(tmp_path: Path, sender: Path, receiver: Path, rules: str = "") -> Path:
    manifest = tmp_path / "pairs.toml"
    manifest.write_text(
        f'[[capture]]\nname = "pair"\nsender = "{sender}"\nreceiver = "{receiver}"\n{rules}'
    )
    return manifest


def _failures(doc_path: Path) -> list[str]:
    (entry,) = json.loads(doc_path.read_text())["captures"]
    return [f["name"] for f in entry["failures"]]


def test_a_receiver_capture_of_another_transfer_fails_the_check(tmp_path: Path) -> None:
    sender = transfer(tmp_path / "a.pcap")
    other = transfer(tmp_path / "b.pcap", sport=40001)  # the wrong file: another connection
    out = tmp_path / "check.json"
    code, stdout, _ = invoke("check", _manifest(tmp_path, sender, other), "--json", out)
    assert code == ExitStatus.CHECK_FAILED
    assert _failures(out) == ["receiver_match"]
    assert "--map SENDER_ADDR=RECEIVER_ADDR" in stdout


def test_a_nat_without_its_map_fails_and_with_it_passes(tmp_path: Path) -> None:
    sender, receiver = exchange(tmp_path, *_clean(4), client_at_receiver=NAT)
    out = tmp_path / "check.json"
    invoke("check", _manifest(tmp_path, sender, receiver), "--json", out)
    assert "receiver_match" in _failures(out)
    rules = f'map = ["{CLIENT}={NAT}", "10.9.9.9=10.8.8.8"]\n'
    _, _, err = invoke("check", _manifest(tmp_path, sender, receiver, rules), "--json", out)
    assert "receiver_match" not in _failures(out)
    # The rule that rewrote nothing is reported; the one that matched is not.
    assert "map rule 10.9.9.9=10.8.8.8 rewrote no connection" in err
    assert f"{CLIENT}={NAT}" not in err


def test_one_file_as_sender_and_receiver_is_refused(tmp_path: Path) -> None:
    sender = transfer(tmp_path / "a.pcap")
    link = tmp_path / "link.pcap"
    link.symlink_to(sender)
    for receiver in (sender, link):
        code, _, err = invoke("check", _manifest(tmp_path, sender, receiver))
        assert code == ExitStatus.BAD_INPUT
        one_line(err, str(receiver), "is the sender's capture")
        code, _, err = invoke("analyze", sender, "--receiver", receiver)
        assert code == ExitStatus.BAD_INPUT
        one_line(err, "is the sender's capture")


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_analyze_and_report_refuse_a_receiver_capture_that_matches_nothing(
    tmp_path: Path, command: str
) -> None:
    sender = transfer(tmp_path / "a.pcap")
    other = transfer(tmp_path / "b.pcap", sport=40001)
    extra = ["-o", tmp_path / "r.html"] if command == "report" else []
    code, _, err = invoke(command, sender, "--receiver", other, *extra)
    assert code == ExitStatus.BAD_INPUT
    one_line(err, str(other), "--map SENDER_ADDR=RECEIVER_ADDR")
    assert not (tmp_path / "r.html").exists()


def test_an_unused_map_rule_is_a_warning_in_analyze(tmp_path: Path) -> None:
    sender, receiver = exchange(tmp_path, *_clean(4), client_at_receiver=NAT)
    code, _, err = invoke(
        "analyze",
        sender,
        "--receiver",
        receiver,
        "--map",
        f"{CLIENT}={NAT}",
        "--map",
        "1.2.3.4=5.6.7.8",
    )
    assert code == ExitStatus.OK
    assert err.strip().splitlines() == [
        "tracekit: warning: --map 1.2.3.4=5.6.7.8: rewrote no connection found in both captures"
    ]
