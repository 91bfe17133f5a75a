"""The LATER_SPECS of tracekit.core.kernels, from what the later stages' loops are called with.

Runs `tracekit report` of each capture (or pair: SENDER,RECEIVER) given, in this process, with
every loop compiled by numba (TRACEKIT_JIT=1), then prints, for each loop that ran, the argument
types of every version it ran with (called by Python or by another loop: a loop may be both), as
LATER_SPECS declares them. Paste the output over LATER_SPECS, then build again (`python setup.py
build_ext --inplace --force`). Run it on captures of each kind the project meets (a sender's, a
pair, several connections, UDP): a call with types no entry lists runs through numba, correct
but with numba's start-up.

Usage: python bench/later_specs.py CAPTURE[,RECEIVER]... > specs.txt
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ["TRACEKIT_JIT"] = "1"


def spec(t: Any) -> Any:
    """A numba type as a LATER_SPECS spec, or None when it cannot be one."""
    from numba.core import types

    if isinstance(t, types.BaseTuple):
        items = tuple(spec(x) for x in t.types)
        return None if None in items else items
    if isinstance(t, types.Array):
        if t.layout not in "CA" or t.ndim not in (1, 2):
            return None
        code = t.dtype.name
        codes = {"float64": "f8", "int64": "i8", "int32": "i4", "int8": "i1", "bool": "b1"}
        codes |= {"uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8"}
        if code not in codes:
            return None
        dims = "[:]" if t.ndim == 1 else "[:,:]"
        return (
            codes[code] + dims + ("r" if not t.mutable else "") + ("a" if t.layout == "A" else "")
        )
    return {"int64": "i8", "float64": "f8", "bool": "b1"}.get(str(t))


def main() -> None:
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    from tracekit.core.kernels import Jitted

    with tempfile.TemporaryDirectory() as folder:
        for i, arg in enumerate(sys.argv[1:]):
            sender, *receiver = arg.split(",")
            args = ["report", sender, "-o", str(Path(folder) / f"{i}.html")]
            args += ["--receiver", receiver[0]] if receiver else []
            result = CliRunner().invoke(cli, args)
            if result.exit_code != 0:
                sys.exit(f"bench/later_specs.py: {arg}: {result.output} {result.exception!r}")
            print(result.output.strip(), file=sys.stderr)
    loops = {
        (m, v.__name__): v
        for m in sorted(sys.modules)
        if m.startswith("tracekit.")
        for v in list(vars(sys.modules[m]).values())
        if isinstance(v, Jitted) and v.__module__ == m and v._dispatcher is not None
    }
    print("LATER_SPECS: dict[str, dict[str, tuple[tuple[Spec, ...], ...]]] = {")
    module = None
    for (m, name), loop in sorted(loops.items()):
        versions = [tuple(spec(t) for t in sig) for sig in loop._dispatcher.overloads]
        versions = [v for v in versions if None not in v]
        if not versions:
            continue
        if m != module:
            print("    }," if module else "", end="\n" if module else "")
            print(f'    "{m}": {{')
            module = m
        print(f'        "{name}": {tuple(versions)!r},')
    print("    },\n}")


if __name__ == "__main__":
    main()
