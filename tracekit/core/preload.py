"""Import numba and load the later stages' compiled functions from numba's disk cache on a
second thread, while the first thread reads the capture.

A stage's compiled function (`tracekit.core.kernels.Jitted`) is made when first called and
loaded from numba's cache then: numba's import, then over a second in all for a report (the
first load initialises numba's code generator, then each takes tens of milliseconds), paid on
the one thread that runs the pipeline, after the capture is read. The read runs ahead-of-time
kernels that release the GIL, so a second core can do this meanwhile.

Only what the cache index holds is loaded, never compiled: a function whose source changed has
no valid index, and one whose cache is missing is compiled on its first call, as before. It is
speed only: any failure leaves the functions to load on their first call.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

from tracekit.core.kernels import Jitted, later_ahead_of_time

# Loaded in the order the pipeline calls them.
_ORDER = ("tracekit.series", "tracekit.merge", "tracekit.detectors", "tracekit.report")


def _rank(module: str) -> int:
    return next((i for i, p in enumerate(_ORDER) if module.startswith(p)), len(_ORDER))


def _functions(skip: tuple[str, ...] = ()) -> list[Jitted]:
    """The compiled functions of the tracekit modules imported so far, in pipeline order, but
    those of modules under `skip`. A function that other compiled functions call is left out:
    its code is in theirs, each loaded with its own."""
    found: dict[int, Jitted] = {}
    names = (m for m in list(sys.modules) if m.startswith("tracekit.") and not m.startswith(skip))
    for name in sorted(names, key=_rank):
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            if isinstance(value, Jitted) and value.__module__ == name:
                found.setdefault(id(value), value)
    called = {name for f in found.values() for name in f.py_func.__code__.co_names}
    return [f for f in found.values() if f.__name__ not in called]


def _load_cached(dispatcher: Any) -> None:
    """Every overload the dispatcher's cache index holds for this machine, as its first call
    would load it (numba.core.dispatcher.Dispatcher.compile), never compiling one."""
    from numba.core import types
    from numba.core.compiler_lock import global_compiler_lock

    cache = dispatcher._cache
    index = cache._cache_file._load_index()
    target = dispatcher.targetctx
    for key in index:
        sig = key[0]
        # A literal argument is a call from another compiled function, never from Python.
        if any(isinstance(t, types.Literal) for t in sig) or tuple(sig) in dispatcher.overloads:
            continue
        with global_compiler_lock:
            if tuple(sig) in dispatcher.overloads:
                continue
            compiled = cache.load_overload(sig, target)
            if compiled is None:
                continue
            if not compiled.objectmode:
                target.insert_user_function(
                    compiled.entry_point, compiled.fndesc, [compiled.library]
                )
            dispatcher.add_overload(compiled)


def _load_all(skip: tuple[str, ...]) -> None:
    for function in _functions(skip):
        with contextlib.suppress(Exception):
            _load_cached(function.dispatcher())


def start(skip: tuple[str, ...] = ()) -> threading.Thread | None:
    """Start importing numba and loading the functions of the tracekit modules imported so far
    (but those under the packages in `skip`, which this run does not call) on a second thread;
    join it before the process exits. Import what the run imports first: the two threads then
    import nothing at the same time but numba. None when the loops were built ahead of time
    (`tracekit.core.kernels.LATER_SPECS`): numba is then needed only for a call with other
    arguments, which loads what it needs itself."""
    if later_ahead_of_time():
        return None
    thread = threading.Thread(target=_load_all, args=(skip,), name="tracekit-preload", daemon=True)
    thread.start()
    return thread
