"""Builds tracekit.core._aot: the read and connection kernels, compiled ahead of time
(tracekit.core.kernels).

Everything else about the package is in pyproject.toml. When the build cannot be made (no C
compiler, no numba.pycc), tracekit installs without it and numba compiles the kernels on first use.
"""

import sys
from pathlib import Path

from setuptools import setup

sys.path.insert(0, str(Path(__file__).resolve().parent))
ext_modules = []
try:
    from tracekit.core.aot_build import compiler

    ext_modules.append(compiler().distutils_extension(optional=True))
except Exception as exc:  # any failure leaves the numba path, which always works
    print(f"tracekit: building without ahead-of-time kernels: {exc}", file=sys.stderr)

setup(ext_modules=ext_modules)
