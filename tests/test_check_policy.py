"""tracekit.check.policy: keys, defaults, overrides by glob, one-line errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tracekit.check.policy import DEFAULT_POLICY, KEYS, Rules, load_policy, parse_policy
from tracekit.errors import TracekitError
from tracekit.findings import Severity

EXAMPLE = Path(__file__).parent.parent / "docs/examples/tracekit.toml"


def test_default_fails_warnings_and_judges_no_threshold() -> None:
    rules = DEFAULT_POLICY.rules_for("anything")
    assert rules.fail_severity is Severity.WARNING
    assert rules.min_throughput_bps is None
    assert rules.max_receiver_drops is None
    assert DEFAULT_POLICY.on_bad_input == "fail"


def test_every_key_reaches_its_field() -> None:
    doc = {
        "fail": {"kinds": ["k1"], "severity": "none", "ignore_kinds": ["k2"]},
        "thresholds": {
            "min_transfer_bytes": 10,
            "min_throughput_bps": 5e6,
            "max_retrans_ratio": 0.5,
            "max_retrans_segments": 7,
            "max_receiver_drops": 3,
            "max_duration_s": 9,
        },
        "baseline": {"max_throughput_drop_ratio": 0.25, "fail_on_new_kinds": False},
    }
    assert {(t, k) for t in doc for k in doc[t]} == set(KEYS)
    rules = parse_policy(doc, "p.toml").rules
    assert rules == Rules(
        fail_kinds=frozenset({"k1"}),
        fail_severity=None,
        ignore_kinds=frozenset({"k2"}),
        min_transfer_bytes=10,
        min_throughput_bps=5e6,
        max_retrans_ratio=0.5,
        max_retrans_segments=7,
        max_receiver_drops=3,
        max_duration_s=9.0,
        max_throughput_drop_ratio=0.25,
        fail_on_new_kinds=False,
    )


def test_overrides_apply_in_order_by_glob(tmp_path: Path) -> None:
    path = tmp_path / "tracekit.toml"
    path.write_text(
        'on_bad_input = "report"\n'
        "[thresholds]\nmin_throughput_bps = 20e6\nmax_retrans_ratio = 0.01\n"
        '[[override]]\npaths = ["wan/*"]\n[override.thresholds]\nmin_throughput_bps = 5e6\n'
        '[[override]]\npaths = ["wan/sat-*"]\n[override.thresholds]\nmin_throughput_bps = 1e6\n'
        '[override.fail]\nseverity = "error"\n'
    )
    policy = load_policy(path)
    assert policy.on_bad_input == "report"
    assert policy.rules_for("lan/a").min_throughput_bps == 20e6
    # `*` crosses `/`, as fnmatch does.
    assert policy.rules_for("wan/x/y").min_throughput_bps == 5e6
    sat = policy.rules_for("wan/sat-1")
    assert (sat.min_throughput_bps, sat.fail_severity) == (1e6, Severity.ERROR)
    assert sat.max_retrans_ratio == 0.01  # not overridden: kept


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[thresholds]\nmin_thruput_bps = 1\n", "unknown key thresholds.min_thruput_bps"),
        ("[limits]\nx = 1\n", r"unknown table \[limits\]"),
        ("[thresholds]\nmax_retrans_ratio = 2\n", "max_retrans_ratio must be a ratio"),
        ("[thresholds]\nmax_receiver_drops = -1\n", "must be an integer >= 0"),
        ("[thresholds]\nmin_throughput_bps = '1M'\n", "must be a number >= 0"),
        ("[fail]\nseverity = 'fatal'\n", "must be one of info, warning, error, none"),
        ("[fail]\nkinds = ['no_such_kind']\n", "no detector of kind 'no_such_kind'"),
        ("on_bad_input = 'skip'\n", "on_bad_input must be"),
        ("[[override]]\n[override.thresholds]\nmax_duration_s = 1\n", "override 1: needs paths"),
        ("[thresholds\n", "not valid TOML"),
    ],
)
def test_bad_policies_are_one_line_errors(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(TracekitError, match=error) as info:
        load_policy(path, known_kinds={"retransmissions"})
    assert str(info.value).startswith(str(path))
    assert "\n" not in str(info.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match="no such policy file"):
        load_policy(tmp_path / "absent.toml")


def test_example_policy_loads_and_sets_every_key() -> None:
    policy = load_policy(EXAMPLE)
    doc = tomllib.loads(EXAMPLE.read_text())
    assert {(t, k) for t in ("fail", "thresholds", "baseline") for k in doc[t]} == set(KEYS)
    assert policy.overrides


def test_every_key_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs/commands/check.md").read_text()
    for table, key in KEYS:
        assert f"| `{table}.{key}` |" in doc
    assert "| `on_bad_input` |" in doc
