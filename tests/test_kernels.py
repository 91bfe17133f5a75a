"""The ahead-of-time kernels (tracekit.core._aot) against the same kernels compiled by numba.

`pip install -e .` builds tracekit.core._aot (setup.py); `TRACEKIT_JIT=1` makes the same code run
through numba instead, which is the independent path these tests compare with.
"""

from __future__ import annotations

import importlib
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.helpers.python import run_python
from tracekit.capture import decode as decode_module
from tracekit.capture import read_capture
from tracekit.connections import build_connections
from tracekit.connections.segments import classify_data
from tracekit.core import kernels
from tracekit.errors import CaptureError

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted(
    [
        *(ROOT / "fixtures" / "crafted").glob("zoo*"),
        *(ROOT / "fixtures" / "crafted").glob("cut_mid_record*"),
        *(ROOT / "fixtures" / "crafted").glob("wire_*.pcap*"),
        *(ROOT / "fixtures" / "crafted").glob("fragments_*.pcap"),
        *(ROOT / "fixtures" / "captures").glob("*/*.pcap*"),
    ]
)

# Reads each capture given on the command line with numba's kernels and writes its packet and
# connection tables to the folder given first.
_JIT_TABLES = """
import sys, warnings
from pathlib import Path
import pyarrow.parquet as pq
from tracekit.core import kernels
from tracekit.capture import read_capture
from tracekit.connections import build_connections
assert not kernels.ahead_of_time()
warnings.simplefilter("ignore")
out = Path(sys.argv[1])
for i, path in enumerate(sys.argv[2:]):
    c = build_connections(read_capture(path))
    pq.write_table(c.packets, out / f"{i}.packets.parquet")
    pq.write_table(c.table, out / f"{i}.table.parquet")
"""


_run = run_python


def test_the_installed_tree_runs_the_ahead_of_time_kernels() -> None:
    # `pip install -e .` (make test) builds them from these sources; a stale or missing build
    # would leave the numba path, correct but a second slower to start.
    assert kernels.ahead_of_time(), "tracekit.core._aot missing or stale: run `pip install -e .`"


def test_reading_and_connections_start_without_numba() -> None:
    code = (
        "import sys\n"
        "from tracekit.capture import read_capture\n"
        "from tracekit.connections import build_connections\n"
        f"c = build_connections(read_capture({str(CAPTURES[0])!r}))\n"
        "print(c.packets.num_rows, 'numba' in sys.modules)\n"
    )
    rows, numba_loaded = _run(code).stdout.split()
    assert int(rows) > 0
    assert numba_loaded == "False"


def test_importing_the_later_stages_imports_no_numba() -> None:
    # Their compiled functions are made on first use: numba's import can then be paid on another
    # thread (tracekit.core.preload) while the capture is read.
    code = (
        "import sys\n"
        "import tracekit.pipeline, tracekit.report.build, tracekit.report.html\n"
        "from tracekit.detectors import all_detectors\n"
        "all_detectors()\n"
        "print('numba' in sys.modules)\n"
    )
    assert _run(code).stdout.split() == ["False"]


@pytest.mark.parametrize("name", ["clean", "paced_sender", "bursty_sender", "receiver_drops"])
def test_a_report_of_a_lab_pair_runs_without_numba(name: str, tmp_path: Path) -> None:
    # The later stages' loops are built ahead of time for the argument types a report passes
    # them (LATER_SPECS); a loop whose types changed without its spec would quietly go to
    # numba, which then compiles it in every run: seconds and a hundred MiB more.
    if not kernels.later_ahead_of_time():
        pytest.skip("the later stages' loops are not built ahead of time in this tree")
    folder = ROOT / "fixtures" / "captures" / name
    sender = next(folder.glob("sender.pcap*"))
    receiver = next(folder.glob("receiver.pcap*"))
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from tracekit.cli.main import cli\n"
        "out = sys.argv[3]\n"
        "result = CliRunner().invoke(cli, ['report', sys.argv[1], '--receiver', sys.argv[2],"
        " '-o', out])\n"
        "assert result.exit_code in (0, 1), result.output\n"
        "print('numba' in sys.modules)\n"
    )
    ran = _run(code, str(sender), str(receiver), str(tmp_path / "r.html"))
    assert ran.stdout.split()[-1:] == ["False"]


@kernels.jit
def _double(x: int) -> int:  # pragma: no cover - compiled
    return 2 * x


@kernels.jit
def _double_plus_one(x: int) -> int:  # pragma: no cover - compiled
    return _double(x) + 1


def test_a_compiled_function_calls_another_by_its_global_name() -> None:
    # numba types the global `_double` (a kernels.Jitted, not a dispatcher) as its dispatcher.
    assert _double_plus_one(20) == 41
    assert _double(4) == 8


def test_ahead_of_time_tables_equal_numbas(tmp_path: Path) -> None:
    readable = []
    for path in CAPTURES:
        try:
            read_capture(path)
        except CaptureError:
            continue
        readable.append(path)
    assert len(readable) >= 20
    _run(_JIT_TABLES, str(tmp_path), *map(str, readable), jit=True)
    for i, path in enumerate(readable):
        conns = build_connections(read_capture(path))
        jit_packets = pq.read_table(tmp_path / f"{i}.packets.parquet")
        jit_table = pq.read_table(tmp_path / f"{i}.table.parquet")
        assert conns.packets.num_rows == jit_packets.num_rows, path.name
        assert conns.packets.equals(jit_packets), path.name
        assert conns.table.equals(jit_table), path.name


# `tracekit analyze --json` of each capture pair given on the command line, one JSON a line.
_ANALYZE = """
import sys
from click.testing import CliRunner
from tracekit.cli.main import cli
for sender, receiver in zip(sys.argv[1::2], sys.argv[2::2]):
    result = CliRunner().invoke(cli, ["analyze", sender, "--receiver", receiver, "--json"])
    assert result.exit_code in (0, 1), result.output
    sys.stdout.write(result.stdout)
"""


def test_ahead_of_time_analyses_equal_numbas() -> None:
    # The later stages' loops (LATER_SPECS), built ahead of time, against numba's: every finding
    # and number of the analysis of each lab pair.
    pairs = sorted((ROOT / "fixtures" / "captures").glob("*/receiver.pcap"))
    args = [str(p) for r in pairs for p in (r.with_name("sender.pcap"), r)]
    assert len(pairs) >= 5
    ahead = _run(_ANALYZE, *args).stdout
    assert ahead.count('"findings"') == len(pairs)
    assert ahead == _run(_ANALYZE, *args, jit=True).stdout


def test_the_later_stages_run_ahead_of_time_without_numba() -> None:
    assert kernels.later_ahead_of_time(), "tracekit.core._aot stale: run `pip install -e .`"
    code = (
        "import sys\n"
        "from tracekit.pipeline import analyze_files\n"
        f"analyze_files({str(ROOT / 'fixtures/captures/clean/sender.pcap')!r})\n"
        "print('numba' in sys.modules)\n"
    )
    assert _run(code).stdout.split() == ["False"]


def test_a_later_stage_given_other_types_goes_to_numba() -> None:
    # The ahead-of-time version takes float64 times and float bounds; float32 times, or an
    # integer for a float, are what numba compiles anew, as it would without the build.
    from tracekit.series import measures

    t = np.array([0.5, 1.5, 2.5])
    expected = measures._bin_of.py_func(t, 0.0, 1.0, 3)
    assert measures._bin_of.compiled, "built ahead of time"
    assert np.array_equal(measures._bin_of(t, 0.0, 1.0, 3), expected)
    assert np.array_equal(measures._bin_of(t.astype(np.float32), 0.0, 1.0, 3), expected)
    assert np.array_equal(measures._bin_of(t, 0, 1, 3), expected)


def test_arguments_of_other_types_go_to_numba() -> None:
    # An ahead-of-time function would read an int64 array as if it held int32s; the call must
    # notice and compile the kernel for these types instead.
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**63, size=50, dtype=np.int64).astype(np.uint64)
    expected = np.full(128, -1, dtype=np.int32)
    decode_module._rehash(expected, hashes, 50)
    other = np.full(128, -1, dtype=np.int64)
    decode_module._rehash(other, hashes, 50)
    assert (other == expected).all()
    # The slots hold each flow once, at or after its hash's home slot.
    assert sorted(expected[expected >= 0].tolist()) == list(range(50))


def test_a_build_from_other_sources_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    if not kernels.ahead_of_time():
        pytest.skip("no ahead-of-time build here")
    assert kernels._load_aot() is not None
    with monkeypatch.context() as m:
        m.setattr(kernels, "source_digest", lambda: 12345)
        assert kernels._load_aot() is None
    monkeypatch.setenv("TRACEKIT_JIT", "1")
    assert kernels._load_aot() is None


def test_an_installed_copy_has_the_digest_of_the_tree_its_build_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # pip installs cli/ into the package as tracekit.cli (pyproject.toml's package-dir); the
    # build that records the later stages' digest reads the tree, where tracekit/ has no cli/.
    # Laid out as site-packages lays it out, the copy must still match that digest.
    tree = kernels._PACKAGE
    installed = tmp_path / "tracekit"
    shutil.copytree(tree, installed, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "cli", installed / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    digest = kernels.later_digest.__wrapped__
    monkeypatch.setattr(kernels, "_PACKAGE", tree)
    from_tree = digest()
    monkeypatch.setattr(kernels, "_PACKAGE", installed)
    assert digest() == from_tree
    # ... and any change to the package's own modules still shows.
    (installed / "units.py").write_text((tree / "units.py").read_text() + "\n# changed\n")
    assert digest() != from_tree


def test_every_kernel_in_specs_is_bound_to_compiled_code() -> None:
    # A kernel left as its Python function would run, correctly, a thousand times slower.
    for module, specs in kernels.SPECS.items():
        mod = importlib.import_module(module)
        for name in specs:
            bound = mod.__dict__[name]
            assert bound is not kernels.jit_dispatcher(module, name).py_func, (module, name)
            assert type(bound).__name__ in {"_Kernel", "CPUDispatcher"}, (module, name)


def test_kernels_release_the_gil_while_they_run() -> None:
    # The ingest stream decodes in one thread while another numbers connections: that works
    # only if a kernel lets go of the GIL. A thread that holds it for a whole call keeps every
    # other thread from running a line of Python until the call returns, so this thread's
    # loop below would stall once per call, for the length of the call.
    n = 6_000_000  # a call of about 50 ms: far longer than the scheduler's pauses
    conn = np.zeros(n, np.int32)
    pdir = np.zeros(n, np.uint8)
    pay = np.full(n, 1000, np.uint16)
    seq = np.arange(n, dtype=np.int64) * 1000
    proto = np.full(n, 6, np.uint8)
    start = time.perf_counter()
    kinds, resent = classify_data(conn, pdir, seq, pay, proto)
    call = time.perf_counter() - start
    assert (kinds == 0).all() and resent.tolist() == [0, 0]  # all new data, nothing resent
    calls = 8
    done = threading.Event()

    def work() -> None:
        for _ in range(calls):
            classify_data(conn, pdir, seq, pay, proto)
        done.set()

    stamps = [time.perf_counter()]
    worker = threading.Thread(target=work)
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
    worker.join()
    stalls = int((np.diff(stamps) > 0.8 * call).sum())
    # Held: a stall per call (8). Released: none, bar the scheduler's odd pause.
    assert stalls <= calls // 4, (stalls, call)
