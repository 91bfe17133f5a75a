"""Detector tunables from tracekit.toml: `[detectors.KIND]` tables reach every command.

The bundled slow-start capture's truth (fixtures/captures/slow_start_overrun/truth.json) bounds
what any of its rounds can have lost: the sender's kernel resent 85 segments in all, so no round
lost more. A `min_lost_packets` above that must silence slow_start_overrun, which the default
reports (the capture's label).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli
from tracekit.cli.status import ExitStatus

from tests.helpers.contexts import analyze_with_context
from tracekit.batch import Job, fingerprint, run_job
from tracekit.check.policy import load_policy, parse_policy
from tracekit.detectors import all_detectors
from tracekit.inputs import CaptureInput
from tracekit.pipeline import analyze_files
from tracekit.tunables import parse_detector_tables, settings

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "fixtures/captures/slow_start_overrun"
TRUTH = json.loads((PAIR / "truth.json").read_text())
KIND = "slow_start_overrun"
# More than the whole transfer resent: no round can have lost this many.
ABOVE_ALL_LOSSES = TRUTH["retransmissions"]["segments"] + 1
TUNED = f"[detectors.{KIND}]\nmin_lost_packets = {ABOVE_ALL_LOSSES}\n"


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def default_findings() -> list[str]:
    """The kind of each of the pair's findings with every detector at its defaults."""
    analysis = analyze_files(PAIR / "sender.pcap", PAIR / "receiver.pcap")
    return [f.kind for f in analysis.findings]


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    path = tmp_path / "tracekit.toml"
    path.write_text(TUNED)
    return path


def test_the_capture_truth_says_it_overran() -> None:
    assert KIND in TRUTH["labels"]
    assert TRUTH["retransmissions"]["segments"] == TRUTH["drops"]["network"] > 0


# --- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", all_detectors(), ids=lambda cls: cls.kind)
def test_every_setting_can_be_written_in_toml(cls: type) -> None:
    # Each field's default, as TOML gives it, is accepted and gives the default Config.
    table = {f.name: f.default for f in dataclasses.fields(cls.Config)}
    assert parse_detector_tables({cls.kind: table}, "t.toml") == {cls.kind: cls.Config()}
    for name, setting in settings(cls).items():
        assert setting.parse(setting.default) == getattr(cls.Config(), name)


def test_a_table_sets_its_field_and_leaves_the_others() -> None:
    configs = parse_detector_tables({KIND: {"min_lost_packets": 4}}, "t.toml")
    (cls,) = [c for c in all_detectors() if c.kind == KIND]
    assert configs == {KIND: dataclasses.replace(cls.Config(), min_lost_packets=4)}
    # A float setting takes a TOML integer as the number it is.
    configs = parse_detector_tables({KIND: {"min_growth_factor": 2}}, "t.toml")
    value = configs[KIND].min_growth_factor
    assert value == 2.0 and type(value) is float


def test_the_example_policy_tunes_a_detector() -> None:
    policy = load_policy(ROOT / "docs/examples/tracekit.toml")
    assert policy.detector_configs["window_limited"].path_rate_bps == 20e6


def test_a_policy_without_tables_tunes_nothing() -> None:
    assert parse_policy({"fail": {"severity": "error"}}, "p.toml").detector_configs == {}


# Each: the file's text, and the one line tracekit prints for it after `tracekit: FILE: `.
BAD = [
    (
        f"[detectors.{KIND}]\nmin_lost_packet = 4\n",
        f"detectors.{KIND}.min_lost_packet: no such setting "
        "(min_lost_packets, min_growth_factor, link_header_bytes)",
    ),
    ("[detectors.slow_start]\nx = 1\n", "detectors.slow_start: no such detector (known: "),
    (
        f'[detectors.{KIND}]\nmin_lost_packets = "4"\n',
        f"detectors.{KIND}.min_lost_packets: must be an integer >= 0, got '4'",
    ),
    (
        f"[detectors.{KIND}]\nmin_lost_packets = 4.0\n",
        f"detectors.{KIND}.min_lost_packets: must be an integer >= 0, got 4.0",
    ),
    (
        f"[detectors.{KIND}]\nmin_lost_packets = true\n",
        f"detectors.{KIND}.min_lost_packets: must be an integer >= 0, got True",
    ),
    (
        f"[detectors.{KIND}]\nmin_lost_packets = -1\n",
        f"detectors.{KIND}.min_lost_packets: must be an integer >= 0, got -1",
    ),
    (
        f"[detectors.{KIND}]\nmin_growth_factor = nan\n",
        f"detectors.{KIND}.min_growth_factor: must be a number >= 0, finite (not nan or inf), "
        "got nan",
    ),
    (
        f"[detectors.{KIND}]\nmin_growth_factor = -inf\n",
        f"detectors.{KIND}.min_growth_factor: must be a number >= 0, finite (not nan or inf), "
        "got -inf",
    ),
    (
        "[detectors.window_limited]\nmin_pinned_fraction = 1.5\n",
        "detectors.window_limited.min_pinned_fraction: must be a number > 0 and <= 1, got 1.5",
    ),
    (
        "[detectors.window_limited]\nmin_pinned_fraction = 0\n",
        "detectors.window_limited.min_pinned_fraction: must be a number > 0 and <= 1, got 0",
    ),
    (
        "[detectors.ack_loss]\nmin_lost_packets = 0\n",
        "detectors.ack_loss.min_lost_packets: must be an integer >= 1, got 0",
    ),
    (
        "[detectors.snaplen_truncated]\nmin_packets = 1\n",
        "detectors.snaplen_truncated.min_packets: no such setting",
    ),
    ("detectors = 3\n", "detectors must hold one table per detector, [detectors.KIND], got 3"),
    (
        f"[detectors]\n{KIND} = 3\n",
        f"detectors.{KIND}: must be a table [detectors.{KIND}], got 3",
    ),
    (
        f'[[override]]\npaths = ["wan/*"]\n[override.detectors.{KIND}]\nmin_lost_packets = 4\n',
        "override 1: [detectors] tables apply to every input: set them at the top level, "
        "[detectors.KIND]",
    ),
    # The rest of the file is checked too, whichever command reads it.
    ("[thresholds]\nmax_retrans_ratio = 2\n", "thresholds.max_retrans_ratio must be a ratio"),
]


def _one_line(stderr: str, path: Path, expected: str) -> None:
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"tracekit: {path}: {expected}"), stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[e.split(":")[0] for _, e in BAD])
@pytest.mark.parametrize("command", ["analyze", "report", "check", "batch"])
def test_a_bad_table_is_one_line_and_exit_2_before_any_capture_is_read(
    tmp_path: Path, command: str, text: str, expected: str
) -> None:
    config = tmp_path / "tracekit.toml"
    config.write_text(text)
    # Not a capture at all: had it been read, its own error would be the line.
    garbage = tmp_path / "in/x.pcap"
    garbage.parent.mkdir()
    garbage.write_bytes(b"not a capture" * 10)
    out = tmp_path / "out"
    args = {
        "analyze": ["analyze", garbage, "--config", config],
        "report": ["report", garbage, "--config", config, "-o", out / "r.html"],
        "check": ["check", garbage.parent, "--config", config, "--json", out / "c.json"],
        "batch": ["batch", garbage.parent, "--config", config, "-o", out],
    }[command]
    code, stdout, stderr = invoke(*args)
    assert code == ExitStatus.BAD_INPUT
    assert stdout == ""
    _one_line(stderr, config, expected)
    assert not out.exists()
    assert config.read_text() == text


def test_check_reads_the_tables_from_its_policy_too(tmp_path: Path) -> None:
    policy = tmp_path / "tracekit.toml"
    policy.write_text(BAD[0][0])
    code, _, stderr = invoke("check", tmp_path / "absent.pcap", "--policy", policy)
    assert code == ExitStatus.BAD_INPUT
    _one_line(stderr, policy, BAD[0][1])


def test_check_policy_and_config_must_name_one_file(tmp_path: Path) -> None:
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text(TUNED)
    two.write_text(TUNED)
    code, _, stderr = invoke("check", PAIR, "--policy", one, "--config", two)
    assert code == ExitStatus.BAD_INPUT
    assert stderr.count("\n") == 1 and "--config is another name for --policy" in stderr


def test_an_output_over_the_config_file_is_refused(tuned: Path, tmp_path: Path) -> None:
    before = tuned.read_bytes()
    code, _, stderr = invoke("report", PAIR / "sender.pcap", "--config", tuned, "-o", tuned)
    assert code == ExitStatus.BAD_INPUT
    assert stderr == f"tracekit: {tuned}: is an input file: write the output elsewhere\n"
    assert tuned.read_bytes() == before


# --- the settings reach the detectors in every command ---------------------------------------


def test_the_default_reports_the_overrun(default_findings: list[str]) -> None:
    assert KIND in default_findings


def test_analyze_applies_the_setting(tuned: Path, default_findings: list[str]) -> None:
    code, stdout, stderr = invoke(
        "analyze", PAIR / "sender.pcap", "--receiver", PAIR / "receiver.pcap", "--config", tuned,
        "--json",
    )  # fmt: skip
    assert code == 0, stderr
    kinds = [f["kind"] for f in json.loads(stdout)["findings"]]
    assert sorted(kinds) == sorted(k for k in default_findings if k != KIND)


def test_report_applies_the_setting(
    tuned: Path, tmp_path: Path, default_findings: list[str]
) -> None:
    out = tmp_path / "r.html"
    code, _, stderr = invoke(
        "report", PAIR / "sender.pcap", "--receiver", PAIR / "receiver.pcap", "--config", tuned,
        "-o", out,
    )  # fmt: skip
    assert code == 0, stderr
    silenced = default_findings.count(KIND)
    assert stderr == f"{out}: {len(default_findings) - silenced} findings\n"


@pytest.mark.parametrize("option", ["--policy", "--config"])
def test_check_applies_the_setting(tmp_path: Path, option: str) -> None:
    # Only the tuned kind fails: the check passes exactly when the setting silenced it.
    rules = f'[fail]\nseverity = "none"\nkinds = ["{KIND}"]\n'
    plain, tuned = tmp_path / "plain.toml", tmp_path / "tuned.toml"
    plain.write_text(rules)
    tuned.write_text(rules + TUNED)
    code, stdout, stderr = invoke("check", PAIR, option, tuned)
    assert code == ExitStatus.OK, stdout + stderr
    if option == "--policy":
        code, stdout, _ = invoke("check", PAIR, option, plain)
        assert code == ExitStatus.CHECK_FAILED
        assert f"finding: [warning] {KIND}:" in stdout


def _batch_kinds(out: Path) -> set[str]:
    return set(pq.read_table(out / "findings").column("kind").to_pylist())


def test_batch_applies_the_setting_and_redoes_inputs_when_it_changes(
    tuned: Path, tmp_path: Path
) -> None:
    root = tmp_path / "runs/overrun"
    root.mkdir(parents=True)
    for name in ("sender.pcap", "receiver.pcap"):
        (root / name).symlink_to(PAIR / name)
    out = tmp_path / "out"
    code, stdout, stderr = invoke("batch", root.parent, "-o", out, "--jobs", "1", "--config", tuned)
    assert code == 0, stderr
    assert stdout == f"{out}: 1 inputs: 1 ok\n"
    assert KIND not in _batch_kinds(out)
    # The same settings: finished. Default settings: another analysis, which reports it.
    code, stdout, _ = invoke("batch", root.parent, "-o", out, "--jobs", "1", "--config", tuned)
    assert stdout == f"{out}: 1 inputs: 1 skipped\n"
    code, stdout, _ = invoke("batch", root.parent, "-o", out, "--jobs", "1")
    assert stdout == f"{out}: 1 inputs: 1 ok\n"
    assert KIND in _batch_kinds(out)


def test_a_batch_job_carries_its_settings_through_pickle(tmp_path: Path) -> None:
    # A Dask worker gets the job pickled (cloudpickle, a superset of pickle's protocol).
    configs = tuple(
        parse_detector_tables({KIND: {"min_lost_packets": ABOVE_ALL_LOSSES}}, "t").items()
    )
    inp = CaptureInput("overrun", PAIR / "sender.pcap", PAIR / "receiver.pcap")
    job = Job(inp, "overrun", str(tmp_path), fingerprint(inp, configs), configs)
    travelled = pickle.loads(pickle.dumps(job))
    assert travelled == job
    assert f"detectors.{KIND}.min_lost_packets={ABOVE_ALL_LOSSES}" in travelled.fingerprint
    outcome = run_job(travelled)
    assert outcome.status == "ok", outcome.error
    assert KIND not in _batch_kinds(tmp_path)


def test_default_settings_leave_the_fingerprint_as_it_was() -> None:
    # Datasets written before settings existed resume: defaults add nothing to a fingerprint.
    inp = CaptureInput("overrun", PAIR / "sender.pcap")
    (cls,) = [c for c in all_detectors() if c.kind == KIND]
    assert fingerprint(inp, ((KIND, cls.Config()),)) == fingerprint(inp)


# --- the ends of every range ------------------------------------------------------------------


@pytest.fixture(scope="module")
def contexts() -> list[object]:
    """The detectors' contexts of two bundled pairs: one that overran, one whose window shut."""
    found = []
    for name in ("slow_start_overrun", "window_oscillation"):
        folder = ROOT / "fixtures/captures" / name
        _, ctx = analyze_with_context(folder / "sender.pcap", folder / "receiver.pcap")
        found.append(ctx)
    return found


@pytest.mark.parametrize("cls", all_detectors(), ids=lambda cls: cls.kind)
def test_every_setting_runs_at_both_ends_of_its_range(cls: type, contexts: list[object]) -> None:
    # A range lets through only values the detector copes with: the least (or just above an
    # open bound) and the greatest (or a huge one), each alone, give valid findings.
    for name, setting in settings(cls).items():
        least = setting.min if setting.above is None else setting.above + 1e-9
        huge = 2**62 if setting.type == "int" else 1e300
        for value in (least, huge if setting.max is None else setting.max):
            value = setting.parse(int(value) if setting.type == "int" else float(value))
            config = dataclasses.replace(cls.Config(), **{name: value})
            for ctx in contexts:
                for finding in cls(config).detect(ctx):
                    json.dumps(finding.to_dict(), allow_nan=False)
