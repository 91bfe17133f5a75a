"""Every input that once crashed the pipeline (fixtures/crafted/fuzz) now gives a result or exit 2.

In process with the installed kernels (an overflow there corrupts the heap of this worker, and
the test fails with it), then through the `tracekit` command, where a signal or exit 3 fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz_pipeline import run_pipeline, split_input

ROOT = Path(__file__).resolve().parent.parent
# The console script, as installed beside this interpreter.
TRACEKIT = str(Path(sys.executable).parent / "tracekit")
INPUTS = sorted(
    p for p in (ROOT / "fixtures" / "crafted" / "fuzz").iterdir() if p.name != "README.md"
)


def test_every_input_is_documented() -> None:
    listed = (ROOT / "fixtures" / "crafted" / "fuzz" / "README.md").read_text()
    assert INPUTS
    for path in INPUTS:
        assert f"`{path.name}`" in listed, path.name


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_the_whole_pipeline_takes_it(path: Path, tmp_path: Path) -> None:
    run_pipeline(path.read_bytes(), tmp_path)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_the_command_takes_it(path: Path, tmp_path: Path) -> None:
    sender, receiver = split_input(path.read_bytes())
    (tmp_path / "s.pcap").write_bytes(sender)
    args = [str(tmp_path / "s.pcap")]
    if receiver is not None:
        (tmp_path / "r.pcap").write_bytes(receiver)
        args += ["--receiver", str(tmp_path / "r.pcap")]
    for command in (
        ["analyze", *args, "--json"],
        ["report", *args, "-o", str(tmp_path / "r.html")],
    ):
        done = subprocess.run(
            [TRACEKIT, *command],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode in (0, 2), (command, done.returncode, done.stderr[-2000:])
        if done.returncode == 2:
            assert len(done.stderr.strip().splitlines()) == 1
        elif command[0] == "analyze":
            json.loads(done.stdout, parse_constant=_refuse)


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")
