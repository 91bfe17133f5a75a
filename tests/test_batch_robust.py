"""`tracekit batch` against what kills processes: a worker killed (the OOM killer), the run
killed (a CI timeout), a second run into the same folder. Real runs of the command on the lab's
captures, in subprocesses; workers are found as the run's children in /proc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

REPO = Path(__file__).parent.parent
# Lab pairs that each take a worker a few tenths of a second.
SCENARIOS = ("bursty_sender", "network_drops", "paced_sender", "receiver_drops", "window_limited")
INPUTS = len(SCENARIOS)
MAIN = "from tracekit.cli.main import main; main()"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    root = tmp_path / "lab"
    for name in SCENARIOS:
        (root / name).mkdir(parents=True)
        for side in ("sender.pcap", "receiver.pcap"):
            shutil.copy(REPO / "fixtures" / "captures" / name / side, root / name / side)
    return root


def start(lab: Path, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", MAIN, "batch", str(lab), "-o", str(out), "-j", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def first_workers(proc: subprocess.Popen[str], timeout: float = 30.0) -> list[int]:
    """The run's workers, as soon as there are any."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := children(proc.pid):
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    raise AssertionError("no worker started")


def test_a_killed_worker_costs_only_its_input(lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = start(lab, out)
    os.kill(first_workers(proc)[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    captures = pd.read_parquet(out / "captures")
    assert len(captures) == INPUTS
    crashed = captures[captures["status"] == "crash"]
    assert len(crashed) == 1, captures[["capture", "status", "error"]]
    assert "killed by SIGKILL" in crashed["error"].iloc[0]
    assert (captures["status"] != "crash").sum() == INPUTS - 1
    assert set(captures["status"]) == {"ok", "crash"}
    assert f"tracekit: crash: {crashed['capture'].iloc[0]}: " in stderr
    assert stdout == f"{out}: {INPUTS} inputs: 1 crash, {INPUTS - 1} ok\n"
    # Recorded as any crash is: the next run does it again, and the rest is skipped.
    again = start(lab, out)
    stdout, stderr = again.communicate(timeout=60)
    assert again.returncode == 0, stderr
    assert stdout == f"{out}: {INPUTS} inputs: 1 ok, {INPUTS - 1} skipped\n"


def test_workers_die_with_a_killed_run(lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = start(lab, out)
    workers = first_workers(proc)
    proc.kill()
    proc.wait()  # not communicate: a surviving worker would hold its pipes open
    try:
        deadline = time.monotonic() + 1.0
        while any(map(alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(map(alive, workers)), "a worker outlived its run"
        # Nothing goes on writing into OUT.
        written = sorted(p.name for p in (out / "captures").iterdir())
        time.sleep(1.5)
        assert sorted(p.name for p in (out / "captures").iterdir()) == written
    finally:
        for pid in filter(alive, workers):
            os.kill(pid, signal.SIGKILL)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_a_second_run_into_the_same_folder_is_refused(lab: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = start(lab, out)
    first_workers(first)
    # In this process, so that it meets the first run's lock within milliseconds.
    second = CliRunner().invoke(cli, ["batch", str(lab), "-o", str(out)])
    assert second.exit_code == 2
    assert second.stdout == ""
    assert second.stderr.count("\n") == 1
    assert second.stderr.startswith(f"tracekit: {out}: another tracekit batch is writing into")
    assert first.poll() is None, "the first run ended before the second started"
    # The first run, undisturbed, finishes every input.
    stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 0, stderr
    assert stdout == f"{out}: {INPUTS} inputs: {INPUTS} ok\n"
    assert not list(out.glob("*/.*.tmp"))
