"""Loading the later stages' compiled functions from numba's cache on a second thread, which
`tracekit report` does when they are not built ahead of time (here: TRACEKIT_JIT=1)."""

from __future__ import annotations

from tests.helpers.python import run_python

# Calls a compiled function of the series stage once: numba compiles it, or loads it, and its
# cache then holds it for float64 times.
_CALL = (
    "import numpy as np\n"
    "from tracekit.series import measures\n"
    "measures._bin_of(np.array([0.5, 1.5, 2.5]), 0.0, 1.0, 3)\n"
)

# Preloads in a fresh process, skipping the packages given, and prints how many versions of that
# function are loaded, without having called it.
_PRELOAD = (
    "import sys\n"
    "from tracekit.series import measures\n"
    "from tracekit.core import preload\n"
    "preload.start(skip=tuple(sys.argv[1:])).join()\n"
    "print(len(measures._bin_of.dispatcher().overloads))\n"
)


def _run(code: str, *args: str) -> str:
    return run_python(code, *args, jit=True).stdout


def test_a_cached_function_is_loaded_before_its_first_call() -> None:
    _run(_CALL)
    assert int(_run(_PRELOAD)) >= 1


def test_a_skipped_package_is_not_loaded() -> None:
    _run(_CALL)
    assert int(_run(_PRELOAD, "tracekit.series")) == 0


def test_nothing_is_loaded_when_the_loops_are_built_ahead_of_time() -> None:
    code = (
        "from tracekit.core import kernels, preload\n"
        "print(kernels.later_ahead_of_time(), preload.start())\n"
    )
    assert run_python(code).stdout.split() == ["True", "None"]
