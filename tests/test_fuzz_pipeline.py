"""A short coverage-guided run of the whole-pipeline fuzzer (tests/fuzz_pipeline.py) in the suite.

`make fuzz` runs it for an hour; here it runs for FUZZ_SECONDS (default 60) after the kernels
are compiled with bounds checks. Any crash fails the test and leaves its input in the log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

HARNESS = Path(__file__).resolve().parent / "fuzz_pipeline.py"


@pytest.mark.slow
def test_a_minute_of_fuzzing_finds_no_crash(tmp_path: Path) -> None:
    seconds = int(os.environ.get("FUZZ_SECONDS", "60"))
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
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=seconds + 300,
    )
    tail = done.stderr[-4000:]
    assert done.returncode == 0, tail
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("oom-*")), tail
    assert "Done " in done.stderr, tail  # libFuzzer's closing line: "Done N runs in S second(s)"
