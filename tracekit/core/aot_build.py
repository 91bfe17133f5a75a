"""Build tracekit.core._aot: the kernels of tracekit.core.kernels.SPECS, compiled ahead of time
by numba.pycc.

Used by setup.py (`pip install` builds it); needs numba, and a C compiler for pycc's glue code.
"""

from __future__ import annotations

import importlib
import os
from typing import Any


def _numba_type(spec: str) -> Any:
    from numba import types
    from numba.np.numpy_support import from_dtype

    from tracekit.core.kernels import parse_spec

    parsed = parse_spec(spec)
    if parsed is None:
        return {"i8": types.int64, "b1": types.boolean}[spec]
    dtype, ndim, readonly = parsed
    return types.Array(from_dtype(dtype), ndim, "C", readonly=readonly)


def _release_the_gil() -> None:
    """Make pycc's Python wrappers release the GIL around each kernel, as `nogil=True` does for
    numba's own: `tracekit ingest` reads, numbers and encodes in three threads at once.

    pycc takes no option for it: it compiles every export with a fresh `Flags()` of its module
    (numba.pycc.compiler), which this replaces by one that says `release_gil`.
    """
    from numba.pycc import compiler as pycc_compiler

    base = pycc_compiler.Flags
    if getattr(base, "tracekit_release_gil", False):
        return

    class Flags(base):  # type: ignore[misc, valid-type]
        tracekit_release_gil = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True

    # Replacing a module's class is the point here; mypy types numba's Flags as a fixed class.
    pycc_compiler.Flags = Flags  # type: ignore[misc]


def compiler() -> Any:
    """The numba.pycc CC object of tracekit.core._aot, every kernel exported."""
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    # The modules must hand numba its dispatchers, not an earlier build's functions.
    os.environ["TRACEKIT_JIT"] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC
    _release_the_gil()

    from tracekit.core import kernels

    cc = CC("_aot", source_module="tracekit.core.aot_build")
    for module, specs in kernels.SPECS.items():
        importlib.import_module(module)
        for name, spec in specs.items():
            dispatcher = kernels.jit_dispatcher(module, name)
            argtypes = tuple(_numba_type(s) for s in spec)
            dispatcher.compile(argtypes)
            signature = dispatcher.overloads[argtypes].signature
            cc.export(kernels.export_name(module, name), signature)(dispatcher.py_func)
    for module, functions in kernels.LATER_SPECS.items():
        # A module that cannot be imported where the build runs leaves its loops to numba at
        # run time; the read and connection kernels are built all the same.
        try:
            importlib.import_module(module)
        except Exception:
            continue
        for name, versions in functions.items():
            for i, version in enumerate(versions):
                # A loop gone or whose arguments changed is left to numba at run time; the
                # read and connection kernels are built all the same.
                try:
                    dispatcher = kernels.jit_dispatcher(module, name)
                    argtypes = tuple(_later_type(s) for s in version)
                    dispatcher.compile(argtypes)
                except Exception:
                    continue
                signature = dispatcher.overloads[argtypes].signature
                cc.export(kernels.later_export_name(module, name, i), signature)(dispatcher.py_func)
    namespace: dict[str, Any] = {}
    exec(
        f"def source_digest():\n    return {kernels.source_digest()}\n"
        f"def later_source_digest():\n    return {kernels.later_digest()}\n",
        namespace,
    )
    cc.export("source_digest", "i8()")(namespace["source_digest"])
    cc.export("later_source_digest", "i8()")(namespace["later_source_digest"])
    return cc


def _later_type(spec: Any) -> Any:
    """The numba type of a LATER_SPECS spec (tracekit.core.kernels)."""
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype

    if isinstance(spec, tuple):
        return types.Tuple([_later_type(s) for s in spec])
    if "[" not in spec:
        return {"i8": types.int64, "f8": types.float64, "b1": types.boolean}[spec]
    code, dims = spec.split("[", 1)
    flags = dims.rsplit("]", 1)[1]
    dtype: Any = from_dtype(np.dtype(code))
    if "a" in flags:
        return types.Array(dtype, dims.count(":"), "A", readonly="r" in flags)
    return types.Array(dtype, dims.count(":"), "C", readonly="r" in flags)
