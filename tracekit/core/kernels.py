"""The compiled loops of tracekit: how each is compiled, in one place.

The read and connection stages' loops run in `tracekit flows` and `tracekit ingest`, which should
start without numba's half second of import, so they are built ahead of time (`bind`, below).
Every later stage imports numba anyway, and marks its loops with `jit`: numba's njit, cached on
disk, without the GIL (analyses may run as threads of one process).

The record walks, the header decoder, the connection passes and the segment classifier are
plain Python functions in their modules (`tracekit.capture.records`, `tracekit.capture.decode`,
`tracekit.connections.walk`, `tracekit.connections.segments`); each module hands them to `bind`
when it loads.

- **Ahead of time.** `pip install` compiles the kernels that Python calls, for the argument types
  in `SPECS`, into the extension module `tracekit.core._aot` (numba.pycc, from setup.py and
  `tracekit.core.aot_build`). When it is there and was built from these very sources, `bind` puts
  its functions in place and numba is never imported: `tracekit flows` and `tracekit ingest` start
  without numba's half second of start-up.
- **Just in time.** Without that module (a source tree, a failed build, a stale build, or
  `TRACEKIT_JIT=1`), `bind` wraps every kernel and helper in `numba.njit(cache=True, nogil=True)`.

An ahead-of-time function trusts its arguments' types: an array of another dtype would be read
as raw memory. So each call checks them against `SPECS`, and arguments that differ (another
caller's dtypes) go to the numba-compiled function instead, which is compiled on demand.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# The arguments of each kernel called from Python, by module and name: "u1[:]" a C-contiguous
# one-dimensional uint8 array (numpy's dtype codes), "[:,:]" two-dimensional, a trailing "r"
# read-only allowed (the kernel only reads it); "i8" an integer, "b1" a bool.
SPECS: dict[str, dict[str, tuple[str, ...]]] = {
    "tracekit.capture.records": {
        "walk_pcap": ("u1[:]r", "i8", "i8", "b1", "b1", "i8[:]", "u4[:]", "u4[:]", "i8[:]"),
        "walk_pcapng": (
            *("u1[:]r", "i8", "i8", "b1", "i8[:]", "i8[:]", "i8[:,:]"),
            *("i8[:]", "u4[:]", "u4[:]", "i8[:]", "u1[:]"),
        ),
    },
    "tracekit.capture.decode": {
        "decode_records": (
            *("u1[:]r", "i8[:]", "u4[:]", "u4[:]", "u1[:]", "i8[:]", "i8", "i8", "i8", "i8[:]"),
            *("i8[:]", "u1[:]", "u1[:]", "u1[:]", "u2[:]", "u4[:]", "u1[:]", "u4[:]", "u4[:]"),
            *("u2[:]", "u1[:]", "u2[:]", "u1[:]", "u4[:]", "u4[:]", "u1[:]", "u4[:,:]"),
            *("i4[:]", "u1[:]", "u1[:]", "u8[:]", "i4[:]", "u8[:,:]", "u8[:]", "i8[:]"),
            *("u8[:,:]", "u8[:,:]", "i8[:,:]", "i4[:,:]", "u1[:,:]", "u2[:,:]", "i8[:]", "i8[:]"),
            "i8[:]",
        ),
        "_rehash": ("i4[:]", "u8[:]", "i8"),
    },
    "tracekit.connections.walk": {
        "_assign": (
            *("i4[:]", "u1[:]", "u1[:]", "u1[:]", "u4[:]"),
            *("i8[:]", "i8[:]", "u1[:]", "i4[:]", "u1[:]", "i8"),
        ),
        "_bases": (
            *("i4[:]", "u1[:]", "u1[:]", "u1[:]", "u4[:]", "u4[:]", "u1[:]", "u2[:]", "u1[:]"),
            *("i8", "i8[:]", "i8[:]", "u1[:]", "u2[:]", "u1[:]", "i8[:]", "i8[:]"),
        ),
        "_relative": (
            *("i4[:]", "u1[:]", "u1[:]", "u1[:]", "u4[:]", "u4[:]", "u4[:]", "i8[:]", "i8[:]"),
            *("i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]"),
            *("b1[:]", "b1[:]", "i8[:]", "i8[:]"),
        ),
    },
    "tracekit.connections.segments": {
        "_classify": ("i4[:]", "u1[:]", "i8[:]", "u4[:]", "u1[:]", "i8"),
        "track_data": (
            *("i4[:]", "u1[:]", "u1[:]", "i8[:]", "u4[:]", "i8[:]"),
            *("i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8", "i8"),
        ),
        "resent_of": ("i8[:]", "i8[:]", "i8[:]", "i8[:]", "i8[:]"),
    },
}

# What the compiled code is made of: these files, and the constants they import.
SOURCES = (
    "capture/records.py",
    "capture/decode.py",
    "connections/walk.py",
    "connections/segments.py",
    "core/band.py",
    "schema.py",
    "core/kernels.py",
)

# The later stages' loops (`jit`) compiled ahead of time too, for the arguments their callers
# pass: each a tuple of specs as in SPECS, and besides "f8" a float, a trailing "a" an array of
# any layout (a strided view), a tuple of specs a tuple of those. A call with other arguments
# goes to numba, which compiles them on demand, as without this build. `bench/later_specs.py`
# writes this table from the calls of reports of captures of each kind.
Spec = str | tuple[str, ...]
LATER_SPECS: dict[str, dict[str, tuple[tuple[Spec, ...], ...]]] = {
    "tracekit.core.search": {
        "_walk": (
            ("f8[:]r", "f8[:]r", "b1"),
            ("i8[:]r", "i8[:]r", "b1"),
            ("u4[:]r", "u4[:]r", "b1"),
        ),
    },
    "tracekit.detectors._limits": {
        "_all_acknowledged": (("u4[:]r", "i8[:]r", "u4[:]r", "i8[:]r"),),
        "_bursts": (
            ("u4[:]r", "u4[:]r", "f8[:]r", "f8[:]r", "u4[:]r", "u1[:]", "b1[:]", "f8", "f8"),
        ),
        "_limit_runs": (
            (
                "u4[:]r",
                "f8[:]r",
                "i8[:]r",
                "i8[:]r",
                "i8[:]r",
                "u4[:]r",
                "f8[:]r",
                "i8[:]r",
                "u4[:]r",
                "f8[:]",
                "f8",
                "f8",
                "f8",
                "f8",
                "f8[:]",
                "f8",
                "b1",
                "b1",
            ),
        ),
        "_linux_schedule": (("f8[:]r", "f8[:]r", "f8[:]r"),),
        "_queue_limit": (("f8", "i8", "f8", "f8"),),
        "_rates_near": (("f8[:]r", "f8[:]r", "f8[:]r", "f8", "f8", "f8"),),
        "_rtt_allowance": (("f8",),),
    },
    "tracekit.detectors._measure": {
        "_window_transitions": (
            (
                "u4[:]r",
                "f8[:]r",
                "i8[:]r",
                "i8[:]r",
                "u4[:]r",
                "f8[:]r",
                "i8[:]r",
                "f8",
                "f8",
                "b1",
            ),
        ),
        "_ack_line_rates": (
            (
                "f8[:]r",
                "i8[:]r",
                "b1[:]r",
                "b1[:]r",
                "f8[:]a",
                "i8[:]a",
                "i8[:]",
                "f8[:]",
                "f8[:]",
                "f8[:]",
                "f8[:]",
                "i8",
                "f8[:]",
                "i8[:]",
            ),
        ),
        "_burst_tops": (
            ("u4[:]r", "u4[:]r", "i8[:]r", "b1[:]r", "u4[:]"),
            ("u4[:]r", "u4[:]r", "i8[:]r", "b1[:]r", "f8[:]"),
        ),
        "_echo_floors": (
            ("i4[:]r", "u1[:]r", "u1[:]r", "u4[:]r", "u4[:]r", "i8[:]r", "i8[:]", "i8"),
        ),
        "_handshake_times": (("i4[:]r", "u1[:]r", "u1[:]r", "u1[:]r", "i8[:]r", "i8"),),
        "_length_counts": (("u4[:]r",),),
        "_warp": (("f8[:]", "f8[:]", "f8[:]", "f8[:]"), ("f8[:]r", "f8[:]", "f8[:]", "f8[:]")),
    },
    "tracekit.detectors.capture_holes": {
        "_handshake_times": (("i4[:]r", "u1[:]r", "i8[:]r", "u1[:]r", "u1[:]r", "b1[:]"),),
    },
    "tracekit.detectors.capture_gaps": {
        "_jumps_and_fills": (("i8[:]r", "i8[:]r", "b1", "i8[:,:]", "i8[:,:]"),),
        "_uncovered": (("i8[:,:]", "i8[:,:]", "i8[:,:]", "b1"),),
    },
    "tracekit.detectors.line_rate_burst": {
        "_busy_spans": (("f8[:]r", "u4[:]r", "i8", "f8", "b1[:]", "i8[:]", "i8[:]"),),
        "_gap_rates_bps": (("f8[:]r", "u4[:]r", "i8"),),
        "_sum_between": (("b1[:]r", "i8[:]", "i8[:]"), ("u4[:]r", "i8[:]", "i8[:]")),
    },
    "tracekit.detectors.rate_limit_cause": {
        "_flight_windows": (
            ("f8[:]r", "b1[:]r", "u4[:]r", "i8[:]r", "f8", "f8", "i8", "i8", "f8", "b1"),
            ("f8[:]", "b1[:]r", "u4[:]r", "i8[:]r", "f8", "f8", "i8", "i8", "f8", "b1"),
            ("f8[:]r", "b1[:]r", "f8[:]r", "i8[:]r", "f8", "f8", "i8", "i8", "f8", "b1"),
            ("f8[:]", "b1[:]r", "f8[:]r", "i8[:]r", "f8", "f8", "i8", "i8", "f8", "b1"),
        ),
        "_sorted_in_runs": (("i8[:]r", "f8[:]r"),),
        "_window_sums": (
            ("f8[:]r", "b1[:]", "f8", "f8", "i8"),
            ("f8[:]", "i8[:]", "f8", "f8", "i8"),
            ("f8[:]", "b1[:]", "f8", "f8", "i8"),
        ),
    },
    "tracekit.detectors.receiver_coalescing": {
        "_bunched": (("f8[:]r", "f8[:]r", "i8[:]", "f8", "f8"),),
        "_increasing": (("f8[:]r", "i8[:]"),),
    },
    "tracekit.detectors.slow_start_overrun": {
        "_round_flights": (("f8[:]r", "f8[:]r", "b1[:]", "b1[:]", "b1[:]r"),),
    },
    "tracekit.detectors.window_limited": {
        "_flight_area_at": (
            ("u4[:]r", "f8[:]r", "i8[:]r", "u4[:]r", "f8[:]r", "i8[:]r", "f8", "f8[:]", "f8"),
        ),
    },
    "tracekit.detectors.window_oscillation": {
        "_owed_at_once": (("i8[:]", "i8[:]", "f8[:]", "f8[:]"),),
    },
    "tracekit.merge.clock": {
        "_bin_minima": (("f8[:]", "f8[:]", "f8", "f8", "i8"),),
        "_lower_hull": (("f8[:]", "f8[:]", "i8[:]"),),
        "_ties_by_y": (("f8[:]r", "f8[:]r"),),
    },
    "tracekit.merge.fate": {
        "_arrival_fates": (("i8[:]", "i8[:]", "u1[:]", "u1[:]", "b1[:]", "i8[:]"),),
        "_blocks": (("i8[:]", "i8[:]", "i8[:]r", "i4[:]r", "u1[:]r", "i8[:,:]", "u4[:]r"),),
        "_data_rows_of": (("i8[:]", "u4[:]r", "i8[:]"),),
        "_departures": (
            (
                "i8[:]",
                "i4[:]r",
                "u1[:]r",
                "i8[:]",
                "u1[:]",
                "i8[:]r",
                "i8[:,:]",
                "u4[:]r",
                "u4[:]r",
                "i8[:]r",
                "i8",
                "i4[:]",
                "u1[:]",
                "i8[:]",
                "i8[:]",
                "u4[:]",
                "u4[:]",
                "f8[:]",
            ),
        ),
        "_events": (("i4[:]r", "u1[:]r", "u1[:]r", "u4[:]r", "u1[:]r", "i8[:]"),),
        "_first_arrival_columns": (("i8[:]", "u4[:]r", "i8[:]r", "i8", "u4[:]", "f8[:]"),),
        "_first_arrivals": (
            (
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "i8",
                "i8",
                "u4[:]r",
                "u4[:]r",
                "i8[:]r",
                "i1[:]",
                "b1[:]",
            ),
        ),
        "_gaps": (
            (
                "i8[:]",
                "b1[:]",
                "i8[:]",
                "u1[:]r",
                "i8[:]r",
                "i4[:]r",
                "u1[:]r",
                "i8[:,:]",
                "u4[:]r",
                "i8[:]",
                "i8[:]",
                "i8[:]",
            ),
        ),
        "_max_ack": (
            ("i8[:]", "u1[:]r", "u1[:]r", "i8[:]r", "i4[:]r", "u1[:]r", "i8[:,:]", "i8[:]", "i8"),
        ),
        "_overtaken_rows": (("i8", "i8[:]", "i8[:]", "i8[:]r", "i8[:]"),),
        "_owners": (("i8[:]", "i8[:]", "i4[:]r", "i8[:]"),),
        "_reordered": (("i8[:]r", "i8[:]r", "i8[:]r", "i8[:]r", "i8[:]r"),),
        "_in_time_order": (("i8[:]r", "i8[:]r"),),
        "_scan": (
            (
                "i8[:]",
                "i4[:]r",
                "b1[:]",
                "i8[:]r",
                "u4[:]r",
                "i8[:]r",
                "u2[:]r",
                "b1[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
            ),
            (
                "i8[:]",
                "i8[:]",
                "b1[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "b1[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
            ),
        ),
    },
    "tracekit.merge.match": {
        "_cd": (("i4[:]r", "u1[:]r", "i8[:]", "u1[:]"),),
        "_shifted_rows": (("i8[:]r", "i8[:,:]r", "i4[:]r", "u1[:]r", "i8[:]r"),),
        "_zip_equal": (
            (
                "i8",
                "i8[:]",
                "i8[:]",
                (
                    "i8[:]",
                    "i8[:]r",
                    "i8[:]r",
                    "u4[:]r",
                    "u1[:]r",
                    "u2[:]r",
                    "u4[:]r",
                    "u8[:]",
                    "i8[:,:]",
                    "i8[:,:]",
                    "i4[:]r",
                    "u1[:]r",
                ),
                (
                    "i8[:]",
                    "i8[:]r",
                    "i8[:]r",
                    "u4[:]r",
                    "u1[:]r",
                    "u2[:]r",
                    "u4[:]r",
                    "u8[:]",
                    "i8[:,:]",
                    "i8[:,:]",
                    "i4[:]r",
                    "u1[:]r",
                ),
            ),
        ),
    },
    "tracekit.merge.stage": {
        "_conn_dir": (("i8[:]", "i8[:]"),),
        "_group_rows": (("i4[:]r", "u1[:]r"),),
        "_pure_acks": (("i8[:]", "u1[:]r", "u4[:]r", "u1[:]r", "i8[:]"),),
        "_timing": (("i8[:]", "i8[:]", "u1[:]", "i8[:]", "i8[:]", "i8[:]r", "i8[:]r", "i8"),),
        "_toward": (("i4[:]r", "u1[:]r", "i8[:]"),),
    },
    "tracekit.report.decimate": {
        "_compact": (("i8[:]", "b1[:]"),),
        "_in_order": (("f8[:]r", "b1[:]r"),),
        "_m4_any_order": (
            ("f8[:]r", "i8[:]r", "i8[:]r", "i8", "b1[:]r"),
            ("f8[:]r", "f8[:]r", "f8[:]r", "i8", "b1[:]r"),
        ),
        "_m4_at": (
            ("f8[:]", "i8[:]", "i8[:]", "i8", "i8[:]"),
            ("f8[:]r", "f8[:]", "f8[:]", "i8", "i8[:]"),
            ("f8[:]r", "i8[:]r", "i8[:]r", "i8", "i8[:]"),
            ("f8[:]", "f8[:]", "f8[:]", "i8", "i8[:]"),
            ("f8[:]r", "f8[:]r", "f8[:]r", "i8", "i8[:]"),
        ),
        "_m4_pass": (
            ("f8[:]", "i8[:]", "i8[:]", "i8"),
            ("f8[:]r", "f8[:]", "f8[:]", "i8"),
            ("f8[:]r", "i8[:]r", "i8[:]r", "i8"),
            ("f8[:]", "f8[:]", "f8[:]", "i8"),
            ("f8[:]r", "f8[:]r", "f8[:]r", "i8"),
        ),
        "_m4_pass_rows": (
            ("f8[:]r", "i8[:]r", "i8[:]r", "i8", "b1[:]r"),
            ("f8[:]r", "f8[:]r", "f8[:]r", "i8", "b1[:]r"),
        ),
    },
    "tracekit.report.html": {
        "_close_scaled": (("f8[:]", "i8", "f8[:]"),),
        "_zigzag_u4": (("i8[:]",),),
    },
    "tracekit.series.measures": {
        "_bin_of": (
            ("f8[:]r", "f8", "f8", "i8"),
            ("f8[:]", "f8", "f8", "i8"),
            ("f8[:]", "i8", "i8", "i8"),
        ),
        "_overlaps": (("i8[:]", "i8[:]", "i8[:]r", "i8[:]r"),),
        "_round_starts": (("f8[:]r", "i8[:]r", "i8[:]r", "f8[:]r", "i8[:]", "i8"),),
        "_round_totals": (("f8[:]", "f8[:]r", "u4[:]r"),),
        "_trains": (("f8[:]r", "u4[:]r", "f8", "i8"),),
    },
    "tracekit.series.walk": {
        "_walk_pass": (
            (
                "i4[:]",
                "i8[:]",
                "u1[:]r",
                "i8[:]r",
                "i8",
                "i4[:]r",
                "i8[:]r",
                "i8[:]r",
                "u4[:]r",
                "u1[:]r",
                "u2[:]r",
                "i8[:]",
                "i1[:]",
                "u4[:]r",
                "b1[:]",
                ("i4[:]", "u1[:]", "f8[:]", "i8[:]", "i8[:]", "u4[:]", "i1[:]", "u4[:]", "u4[:]"),
                (
                    "i4[:]",
                    "u1[:]",
                    "f8[:]",
                    "i8[:]",
                    "i8[:]",
                    "i8[:]",
                    "b1[:]",
                    "i4[:]",
                    "b1[:]",
                    "u4[:]",
                    "u4[:]",
                ),
                ("i8[:]", "i8[:]", "i8[:]"),
                "b1[:]",
                "i8[:]",
                "i8[:]",
            ),
            (
                "i4[:]",
                "i8[:]",
                "u1[:]",
                "i8[:]",
                "i8",
                "i4[:]",
                "i8[:]",
                "i8[:]",
                "u4[:]",
                "u1[:]",
                "u2[:]",
                "i8[:]",
                "i1[:]",
                "u4[:]",
                "b1[:]",
                ("i4[:]", "u1[:]", "f8[:]", "i8[:]", "i8[:]", "u4[:]", "i1[:]", "u4[:]", "u4[:]"),
                (
                    "i4[:]",
                    "u1[:]",
                    "f8[:]",
                    "i8[:]",
                    "i8[:]",
                    "i8[:]",
                    "b1[:]",
                    "i4[:]",
                    "b1[:]",
                    "u4[:]",
                    "u4[:]",
                ),
                ("i8[:]", "i8[:]", "i8[:]"),
                "b1[:]",
                "i8[:]",
                "i8[:]",
            ),
        ),
        "_flight_pass": (
            (
                "i4[:]",
                "u1[:]",
                "i8[:]",
                "u4[:]",
                "u4[:]",
                "i4[:]",
                "u1[:]",
                "i8[:]",
                "i8[:]",
                "u4[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
                "i8[:]",
            ),
        ),
        "by_connection": (("i4[:]r", "u1[:]r", "u4[:]r"), ("i4[:]", "u1[:]", "u4[:]")),
        "runs": (("i4[:]r", "u1[:]r"),),
        "timestamp_pairs": (
            ("i4[:]", "i8[:]", "u1[:]r", "b1[:]", "u4[:]r", "u1[:]r", "u4[:]r", "u4[:]r"),
            ("i4[:]", "i8[:]", "u1[:]", "b1[:]", "u4[:]", "u1[:]", "u4[:]", "u4[:]"),
        ),
    },
}

_PACKAGE = Path(__file__).resolve().parent.parent


def source_digest() -> int:
    """A 63-bit digest of SOURCES: the ahead-of-time module records the one it was built from."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((_PACKAGE / name).read_bytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


@functools.cache
def later_digest() -> int:
    """A 63-bit digest of every module of tracekit: a later stage's loop reads constants from
    any of them, and the ahead-of-time module records the digest it was built from.

    The command line is not counted: it is built from cli/ beside the package and installed
    into it as tracekit.cli, so an installed copy holds it where the tree the build read does
    not, and no loop reads it. Counted, every installed copy (not an editable one) would find
    its build stale and compile the later stages' loops with numba."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        name = path.relative_to(_PACKAGE)
        if name.parts[0] == "cli":
            continue
        h.update(str(name).encode())
        h.update(path.read_bytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def later_export_name(module: str, name: str, index: int) -> str:
    """The name in tracekit.core._aot of LATER_SPECS[module][name]'s `index`th version."""
    return f"{export_name(module, name)}__{index}"


def export_name(module: str, name: str) -> str:
    """The kernel's name in tracekit.core._aot: its module's path under tracekit, then its own."""
    return module.removeprefix("tracekit.").replace(".", "_") + "__" + name.lstrip("_")


def _load_aot() -> Any:
    if os.environ.get("TRACEKIT_JIT"):
        return None
    try:
        from tracekit.core import _aot  # type: ignore[attr-defined]
    except ImportError:
        return None
    if _aot.source_digest() != source_digest():
        return None  # built from other sources (an edited tree): its kernels are not these
    return _aot


_AOT: Any = _load_aot()


def ahead_of_time() -> bool:
    """Whether the kernels run from tracekit.core._aot (False: numba compiles them)."""
    return _AOT is not None


def parse_spec(spec: str) -> tuple[np.dtype[Any], int, bool] | None:
    """(dtype, dimensions, read-only allowed) of an array spec; None for a scalar."""
    if "[" not in spec:
        return None
    code, dims = spec.split("[", 1)
    return np.dtype(code), dims.count(":"), dims.endswith("r")


def _matches(args: tuple[Any, ...], checks: list[Any]) -> bool:
    if len(args) != len(checks):
        return False
    for arg, check in zip(args, checks, strict=True):
        if check is None:
            if isinstance(arg, np.ndarray):
                return False
            continue
        dtype, ndim, readonly = check
        if not (
            isinstance(arg, np.ndarray)
            and arg.dtype == dtype
            and arg.ndim == ndim
            and arg.flags.c_contiguous
            and (readonly or arg.flags.writeable)
        ):
            return False
    return True


class _Module:
    """One kernel module's functions and, once needed, their numba-compiled versions."""

    def __init__(
        self,
        namespace: dict[str, Any],
        names: tuple[str, ...],
        numba_names: dict[str, str],
        unmanaged: tuple[str, ...] = (),
    ) -> None:
        self.namespace = namespace
        self.python = {name: namespace[name] for name in names}
        self.numba_names = numba_names
        self.unmanaged = frozenset(unmanaged)
        self.jitted: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def jit(self) -> dict[str, Any]:
        """numba dispatchers of all the module's kernels and helpers, put in its namespace (a
        kernel finds its helpers there when numba compiles it).

        Analyses may run as threads of one process (Dask workers). One thread builds the
        dispatchers while the others wait, and they are published only once every helper is in
        the namespace: a kernel compiled before that would find a helper still a plain Python
        function, which numba cannot call (a typing error, in whichever analysis came second).
        """
        jitted = self.jitted
        if jitted is not None:
            return jitted
        with self._lock:
            if self.jitted is None:
                import numba

                for name, path in self.numba_names.items():
                    value: Any = numba
                    for part in path.split("."):
                        value = getattr(value, part)
                    self.namespace[name] = value
                # nogil: the ingest stream runs kernels in two threads (connections.stream).
                # _nrt=False: numba counts no references to the arrays an unmanaged helper is
                # given, where it would count them at every call (see `bind`).
                njit: Any = numba.njit  # its stubs omit _nrt
                built = {
                    n: njit(cache=True, nogil=True, _nrt=n not in self.unmanaged)(f)
                    for n, f in self.python.items()
                }
                for name, dispatcher in built.items():
                    if not isinstance(self.namespace[name], _Kernel):
                        self.namespace[name] = dispatcher
                self.jitted = built
            return self.jitted


class _Kernel:
    """A kernel called from Python: the ahead-of-time function when the arguments are the types
    it was built for, else the numba one."""

    def __init__(self, module: _Module, name: str, compiled: Callable[..., Any]) -> None:
        self.module, self.name, self.compiled = module, name, compiled
        self.checks = [parse_spec(s) for s in SPECS[module.namespace["__name__"]][name]]
        self.__doc__ = module.python[name].__doc__
        self.__wrapped__ = module.python[name]

    def __call__(self, *args: Any) -> Any:
        if _matches(args, self.checks):
            return self.compiled(*args)
        return self.module.jit()[self.name](*args)


class Jitted:
    """A compiled loop of a stage after connections: `numba.njit(cache=True, nogil=True)` of
    `function`, made when first used. Until then numba need not be imported: importing the
    stages costs nothing of numba's, and its import and disk cache can be loaded on another
    thread (`tracekit.core.preload`) while the capture is read.

    numba types this object as its dispatcher (`_numba_type_`), so a compiled function that
    calls it by its global name compiles the call as it would a dispatcher's.
    """

    def __init__(self, function: Callable[..., Any], numba_names: dict[str, str]) -> None:
        self.py_func = function
        self.numba_names = numba_names
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__qualname__ = function.__qualname__
        self.__module__ = function.__module__
        self.__wrapped__ = function
        self._dispatcher: Any = None
        self.compiled = _ahead_of_time_versions(function.__module__, function.__name__)

    def dispatcher(self) -> Any:
        """numba's dispatcher of the function, made on first use (by one thread)."""
        made = self._dispatcher
        if made is not None:
            return made
        import numba
        from numba.core.compiler_lock import global_compiler_lock

        # numba's own lock, which a compilation holds while it types the functions it calls:
        # a lock of this object's, taken inside that one by one thread and outside it by
        # another, could deadlock the two.
        with global_compiler_lock:
            if self._dispatcher is None:
                namespace = self.py_func.__globals__
                for name, path in self.numba_names.items():
                    value: Any = numba
                    for part in path.split("."):
                        value = getattr(value, part)
                    namespace[name] = value
                self._dispatcher = numba.njit(cache=True, nogil=True)(self.py_func)
            return self._dispatcher

    @property
    def _numba_type_(self) -> Any:
        return self.dispatcher()._numba_type_

    def __call__(self, *args: Any) -> Any:
        for checks, compiled in self.compiled:
            if len(args) == len(checks) and all(c(a) for c, a in zip(checks, args, strict=True)):
                return compiled(*args)
        return self.dispatcher()(*args)


def _later_check(spec: Spec) -> Callable[[Any], bool]:
    """Whether an argument is of a LATER_SPECS spec's type, exactly as numba would type it: a
    scalar of another type (a float32, a bool for an integer) would compile other code."""
    if isinstance(spec, tuple):
        items = [_later_check(s) for s in spec]
        return lambda v: (
            isinstance(v, tuple)
            and len(v) == len(items)
            and all(c(x) for c, x in zip(items, v, strict=True))
        )
    scalars: dict[str, tuple[type, ...]] = {
        "i8": (int, np.int64),
        "f8": (float, np.float64),
        "b1": (bool, np.bool_),
    }
    if spec in scalars:
        kinds = scalars[spec]
        return lambda v: type(v) in kinds
    code, dims = spec.split("[", 1)
    dtype, ndim = np.dtype(code), dims.count(":")
    flags = dims.rsplit("]", 1)[1]
    readonly, any_layout = "r" in flags, "a" in flags
    return lambda v: (
        isinstance(v, np.ndarray)
        and v.dtype == dtype
        and v.ndim == ndim
        and (any_layout or v.flags.c_contiguous)
        and (readonly or v.flags.writeable)
    )


@functools.cache
def _later_aot() -> Any:
    """tracekit.core._aot when its later stages' loops were built from these very sources."""
    if _AOT is None or not hasattr(_AOT, "later_source_digest"):
        return None
    return _AOT if _AOT.later_source_digest() == later_digest() else None


def later_ahead_of_time() -> bool:
    """Whether the later stages' loops run from tracekit.core._aot (for LATER_SPECS' arguments)."""
    return _later_aot() is not None


def _ahead_of_time_versions(
    module: str, name: str
) -> tuple[tuple[list[Callable[[Any], bool]], Callable[..., Any]], ...]:
    """The ahead-of-time versions of a later stage's loop, with their argument checks."""
    aot = _later_aot()
    specs = LATER_SPECS.get(module, {}).get(name, ())
    if aot is None:
        return ()
    return tuple(
        ([_later_check(a) for a in spec], getattr(aot, later_export_name(module, name, i)))
        for i, spec in enumerate(specs)
        # A version whose build failed (its arguments changed since) is left to numba.
        if hasattr(aot, later_export_name(module, name, i))
    )


def jit(
    function: Callable[..., Any] | None = None, *, numba_names: dict[str, str] | None = None
) -> Any:
    """A compiled loop of a stage after connections (`Jitted`); `numba_names` are numba objects
    the loop uses by these global names (e.g. typed.Dict), put in its module when it is
    compiled, so that the module need not import numba."""
    if function is None:
        return lambda f: Jitted(f, numba_names or {})
    return Jitted(function, numba_names or {})


def bind(
    namespace: dict[str, Any],
    kernels: tuple[str, ...],
    helpers: tuple[str, ...] = (),
    numba_names: dict[str, str] | None = None,
    unmanaged: tuple[str, ...] = (),
) -> None:
    """Replace a module's kernel functions by their compiled versions (see the module's doc).

    `kernels` are called from Python (each in SPECS), `helpers` only from kernels (a kernel
    never calls another kernel); `numba_names` are numba objects the kernels use by these
    global names (e.g. typed.Dict). `unmanaged` helpers (among `helpers`) are compiled without
    numba's reference counting: each only reads or writes the arrays it is given, and makes
    no array nor view. numba otherwise counts a reference to each array argument at every
    call of a helper with branches, a call and an atomic add each in the ahead-of-time build
    (such as a header parser called once a packet).
    """
    module = _Module(namespace, kernels + helpers, numba_names or {}, unmanaged)
    if _AOT is None:
        module.jit()
        return
    for name in kernels:
        compiled = getattr(_AOT, export_name(namespace["__name__"], name))
        namespace[name] = _Kernel(module, name, compiled)


def jit_dispatcher(module: str, name: str) -> Any:
    """The numba dispatcher of a bound kernel (for the ahead-of-time build and for tests)."""
    mod = importlib.import_module(module)
    kernel = mod.__dict__[name]
    if isinstance(kernel, _Kernel):
        return kernel.module.jit()[name]
    if isinstance(kernel, Jitted):
        return kernel.dispatcher()
    return kernel
