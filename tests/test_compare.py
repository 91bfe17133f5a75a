"""`tracekit compare BASE NEW` on real lab captures: its counts against truth.json, its
throughput change against tshark, its regression gate, its page in Chromium, its bad inputs."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tracekit.compare import Comparison, compare
from tracekit.detectors import all_detectors

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "fixtures" / "captures"
OVERRUN = CAPTURES / "slow_start_overrun"  # 85 network drops (truth.json)
CLEAN = CAPTURES / "clean"  # none
DROPS = CAPTURES / "network_drops"  # 41, at a much lower rate than clean
TRACEKIT = str(Path(sys.executable).parent / "tracekit")

READY = "window.tracekitStatus && window.tracekitStatus.ready"


def truth(pair: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((pair / "truth.json").read_text())
    return doc


@cache
def tshark_rate_bps(pair: Path) -> float:
    """The transfer's bytes (truth.json) over its duration as tshark reads the sender's
    capture: its first TCP packet to its last (read once per process and pair)."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(pair / "sender.pcap"), "-Y", "tcp", "-T", "fields",
         "-e", "frame.time_epoch"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    times = [float(t) for t in out]
    return truth(pair)["flow"]["bytes"] * 8 / (max(times) - min(times))


@cache
def compared(base: Path, new: Path) -> Comparison:
    """compare(base, new), made once per process for each pair of runs: several tests read the
    same comparison (read it, do not change it)."""
    return compare(base, new)


@pytest.fixture(scope="module")
def better() -> Comparison:
    """BASE the overrun, NEW the clean run: the change helped."""
    return compared(OVERRUN, CLEAN)


@pytest.fixture(scope="module")
def worse() -> Comparison:
    """BASE the clean run, NEW the overrun: the change hurt."""
    return compared(CLEAN, OVERRUN)


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRACEKIT, "compare", *map(str, args)], capture_output=True, text=True, timeout=300,
        cwd=cwd,
    )  # fmt: skip


def run_in_process(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """As run(), through click's CliRunner: for checks of the message and the exit status, where
    the process adds nothing (the regression gate's tests run the console script)."""
    with contextlib.chdir(cwd or Path.cwd()):
        result = CliRunner().invoke(cli, ["compare", *map(str, args)], prog_name="tracekit")
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_drop_and_resend_counts_are_the_kernels(better: Comparison, worse: Comparison) -> None:
    overrun, clean = truth(OVERRUN), truth(CLEAN)
    counts = dict((name, (x, y)) for name, x, y in better.counts())
    assert counts["network drops"] == (overrun["drops"]["network"], clean["drops"]["network"])
    assert counts["receiver drops"] == (overrun["drops"]["receiver"], clean["drops"]["receiver"])
    assert counts["retransmissions"] == (
        overrun["retransmissions"]["segments"],
        clean["retransmissions"]["segments"],
    )
    # The summary says so in words, and the other way round for the other order.
    net = (overrun["drops"]["network"], clean["drops"]["network"])
    assert f"network drops {net[0]} -> {net[1]}" in better.summary()
    assert f"network drops {net[1]} -> {net[0]}" in worse.summary()


def test_findings_that_went_and_came(better: Comparison, worse: Comparison) -> None:
    # truth.json labels the overrun run slow_start_overrun and network_drops; clean has neither.
    assert "slow_start_overrun" in truth(OVERRUN)["labels"]
    assert {"slow_start_overrun", "network_drop"} <= set(better.gone)
    assert better.appeared == []
    assert "slow_start_overrun gone" in better.summary()
    assert {"slow_start_overrun", "network_drop"} <= set(worse.appeared)
    assert "slow_start_overrun new" in worse.summary()


@pytest.mark.parametrize(("base", "new"), [(OVERRUN, CLEAN), (DROPS, CLEAN), (CLEAN, DROPS)])
def test_throughput_change_against_tshark(base: Path, new: Path) -> None:
    expected = tshark_rate_bps(new) / tshark_rate_bps(base) - 1
    got = compared(base, new)
    assert got.throughput_change is not None
    assert (got.throughput_change > 0) == (expected > 0)
    assert got.throughput_change == pytest.approx(expected, abs=0.002)
    rates = f"{tshark_rate_bps(base) / 1e6:.1f} -> {tshark_rate_bps(new) / 1e6:.1f} Mbit/s"
    assert got.summary().startswith(f"throughput {rates} (")


def test_the_drops_run_against_clean_is_a_big_gain() -> None:
    # 4 MB in 1.69 s against 9 MB in 2.76 s: the clean run is over a third faster.
    got = compared(DROPS, CLEAN)
    assert got.throughput_change is not None and 0.30 < got.throughput_change < 0.45
    assert got.counts()[0] == ("network drops", truth(DROPS)["drops"]["network"], 0)


def test_after_stage_runs_between_each_analysis_stages() -> None:
    # The hook `tracekit compare` trims its heap with: after each capture's connections, the
    # merge, each capture's series and inside the sender's (its walk's working memory freed),
    # the sender's packet columns only its walk read let go, each detector and the detectors,
    # for BASE and for NEW.
    calls: list[int] = []
    hooked = compare(DROPS, CLEAN, after_stage=lambda: calls.append(1))
    assert len(calls) == 2 * (8 + len(all_detectors()))
    assert hooked.counts() == compared(DROPS, CLEAN).counts()


def test_fail_on_regression_exits_1_when_new_is_worse(tmp_path: Path) -> None:
    done = run(CLEAN, OVERRUN, "--fail-on-regression")
    assert done.returncode == 1, done.stderr
    assert "regression: new finding kind slow_start_overrun" in done.stdout
    # Without the flag the same comparison is only told.
    assert run(CLEAN, OVERRUN).returncode == 0


def test_fail_on_regression_exits_0_when_new_is_better(tmp_path: Path) -> None:
    done = run(OVERRUN, CLEAN, "--fail-on-regression", "--json", tmp_path / "c.json")
    assert done.returncode == 0, done.stderr
    assert "regression" not in done.stdout
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["regressed"] is False
    assert doc["counts"]["network_drops"] == {"base": 85, "new": 0}
    assert doc["base"]["metrics"]["retrans_segments"] == 85


def test_policy_throughput_drop_is_checks(tmp_path: Path) -> None:
    # DROPS is 27% slower than CLEAN: a regression at the default 10%, none at 50%, and no new
    # kind either way once network drops and their kin are ignored.
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[fail]\nignore_kinds = ["slow_start_overrun", "network_drop", "retransmissions"]\n'
        "[baseline]\nmax_throughput_drop_ratio = 0.5\n"
    )
    assert run_in_process(CLEAN, DROPS, "--fail-on-regression", "--policy", policy).returncode == 0
    policy.write_text(policy.read_text().replace("0.5", "0.1"))
    done = run_in_process(CLEAN, DROPS, "--fail-on-regression", "--policy", policy)
    assert done.returncode == 1
    assert "max_throughput_drop_ratio" in done.stdout


def test_connection_choice(tmp_path: Path) -> None:
    done = run_in_process(OVERRUN, CLEAN, "--connection", "0:0")
    assert done.returncode == 0, done.stderr
    assert "matched by choice" in done.stdout
    bad = run_in_process(OVERRUN, CLEAN, "--connection", "1")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "no connection 1" in bad.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("fixtures/captures", "fixtures/captures/clean"), "found 9 inputs"),
        (("missing.pcap", "fixtures/captures/clean"), "no such file"),
        (("README.md", "fixtures/captures/clean"), "not a pcap"),
        (("fixtures/captures/clean", "fixtures/captures/clean", "--connection", "a:b"), "N or"),
        (
            (
                "fixtures/captures/clean",
                "fixtures/captures/clean",
                "-o",
                "fixtures/captures/clean/sender.pcap",
            ),
            "is an input file",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    done = run_in_process(*args, cwd=ROOT)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_a_receiver_without_its_sender_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "x.receiver.pcap").symlink_to(CLEAN / "receiver.pcap")
    done = run_in_process(tmp_path / "x.receiver.pcap", CLEAN)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "without its sender" in done.stderr


HOSTILE = "<img src=x onerror=window.pwned=1>"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page of a comparison whose inputs' names would be markup if they were not escaped."""
    root = tmp_path_factory.mktemp("compare")
    base, new = root / f"base{HOSTILE}", root / f"new{HOSTILE}"
    for folder, source in ((base, OVERRUN), (new, CLEAN)):
        folder.mkdir()
        for name in ("sender.pcap", "receiver.pcap"):
            shutil.copy(source / name, folder / name)
    out = root / "compare.html"
    done = run(base, new, "-o", out)
    assert done.returncode == 0, done.stderr
    return out


def test_page_escapes_what_comes_from_the_inputs(page: Path) -> None:
    text = page.read_text()
    assert HOSTILE not in text
    assert "&lt;img src=x onerror=window.pwned=1&gt;" in text
    assert 'class="compare"' in text and 'class="better"' in text


@pytest.mark.browser
def test_page_opens_and_overlays_both_tsgs(page: Path) -> None:
    from tests.helpers.browser import Browser

    names = (
        "JSON.stringify([window.pwned === undefined, window.tracekitStatus.errors,"
        " Array.from(document.getElementById('plot-0-0-sender').data, t => t.name),"
        " Array.from(document.getElementById('plot-0-1-sender').data, t => t.name),"
        " document.querySelectorAll('.compare td.better').length])"
    )
    with Browser() as browser:
        result = browser.open(page, READY, names, timeout=60, scale=0.25, height=2400)
    assert result.console_errors == [] and result.exceptions == []
    assert result.requests == []
    safe, errors, tsg, rates, better = json.loads(result.value)
    assert safe is True and errors == []
    for side in ("BASE", "NEW"):
        assert f"{side} data" in tsg and f"{side} ACK line" in tsg
        assert any(name.startswith(f"{side} sent") for name in rates)
    assert better >= 3  # throughput up, drops and resends down, findings gone
