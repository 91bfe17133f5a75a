"""A short coverage-guided run of the whole-pipeline fuzzer (tests/fuzz_pipeline.py) in the suite.

`make fuzz` runs it for an hour; here it runs for FUZZ_SECONDS (default 20) after the kernels
are compiled with bounds checks. Before the clock starts, every seed (tests/fuzz_pipeline.py's
`seeds()`) and every input that once crashed the pipeline (fixtures/crafted/fuzz, a second
corpus folder libFuzzer reads but never writes) runs once, bounds-checked: those are the inputs
known to reach deep, and the random mutations only add to them. Any crash fails the test and
leaves its input in the log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

HARNESS = Path(__file__).resolve().parent / "fuzz_pipeline.py"
REGRESSIONS = Path(__file__).resolve().parent.parent / "fixtures" / "crafted" / "fuzz"


@pytest.mark.slow
def test_a_short_run_of_fuzzing_finds_no_crash(tmp_path: Path) -> None:
    seconds = int(os.environ.get("FUZZ_SECONDS", "20"))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            f"-max_total_time={seconds}",
            "-rss_limit_mb=4096",
            "-timeout=90",
            f"-artifact_prefix={tmp_path}/",
            str(tmp_path / "corpus"),
            str(REGRESSIONS),
        ],
        capture_output=True,
        text=True,
        env=env,
        # A guard against a hang only: compiling the kernels bounds-checked and running every
        # stored input take minutes on a shared machine before the fuzzing clock starts.
        timeout=seconds + 600,
    )
    tail = done.stderr[-4000:]
    assert done.returncode == 0, tail
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("oom-*")), tail
    assert "Done " in done.stderr, tail  # libFuzzer's closing line: "Done N runs in S second(s)"
    # libFuzzer read every stored input of the second folder ("INFO: N files found in DIR").
    found = re.search(rf"INFO: +(\d+) files found in {re.escape(str(REGRESSIONS))}\n", done.stderr)
    assert found and int(found[1]) == len(list(REGRESSIONS.iterdir())), tail
