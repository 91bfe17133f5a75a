"""Run Python code in a fresh interpreter of this environment, from the tree's root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def run_python(code: str, *args: str, jit: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -c code args...`, checked; with `jit`, tracekit's kernels run through numba
    (TRACEKIT_JIT=1) instead of the ahead-of-time build."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_JIT"}
    if jit:
        env["TRACEKIT_JIT"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
