"""tracekit.batch and `tracekit batch`: the dataset read back by DuckDB, pandas and polars and
held against how the captures were built; resuming, a killed run, a bad capture, Dask."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tests.helpers.check_crafting import SPORT, transfer
from tests.helpers.crafting import CLIENT, SERVER
from tracekit import detectors
from tracekit.batch import BatchConfig, file_key, run_batch
from tracekit.detectors import AnalysisContext, Detector
from tracekit.errors import TracekitError
from tracekit.findings import Finding, Severity

REPO = Path(__file__).parent.parent


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """a: 100 x 1000 bytes; b: 30 x 500 bytes, 3 resent; pair: the lab's layout; bad: corrupt."""
    root = tmp_path / "corpus"
    transfer(root / "a.pcap")
    transfer(root / "deep/b.pcapng.pcap", segments=30, segment_bytes=500, resend=[1, 2, 3])
    transfer(root / "lab/run1/sender.pcap", segments=10)
    transfer(root / "lab/run1/receiver.pcap", segments=10)
    (root / "bad.pcap").write_bytes(b"\x0a\x0d\x0d\x0a" + b"\xff" * 40)
    return root


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["batch", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_dataset_reads_in_duckdb_pandas_and_polars(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = invoke(corpus, "-o", out, "--jobs", "2")
    assert code == 0, stderr
    assert stdout == f"{out}: 4 inputs: 1 error, 3 ok\n"
    assert stderr.startswith(f"tracekit: error: bad.pcap: {corpus / 'bad.pcap'}: ")

    rows = duckdb.sql(
        f"SELECT capture, a, b, bytes_a2b, retrans_a2b FROM '{out}/connections/*.parquet' "
        "ORDER BY capture"
    ).fetchall()
    ends = (f"{CLIENT}:{SPORT}", f"{SERVER}:5201")
    assert rows == [
        ("a.pcap", *ends, 100 * 1000, 0),
        ("deep/b.pcapng.pcap", *ends, 33 * 500, 3),
        ("lab/run1", *ends, 10 * 1000, 0),
    ]
    captures = pd.read_parquet(out / "captures").sort_values("capture")
    assert captures["status"].tolist() == ["ok", "error", "ok", "ok"]
    assert captures["capture"].tolist() == ["a.pcap", "bad.pcap", "deep/b.pcapng.pcap", "lab/run1"]
    assert captures["receiver"].tolist()[3] == str(corpus / "lab/run1/receiver.pcap")
    findings = pl.read_parquet(out / "findings" / "*.parquet")
    assert set(findings.columns) >= {"capture", "conn", "kind", "severity", "evidence_json"}
    assert set(findings["capture"].to_list()) <= {"a.pcap", "deep/b.pcapng.pcap", "lab/run1"}
    counts = duckdb.sql(
        f"SELECT capture, count(*) FROM '{out}/findings/*.parquet' GROUP BY capture"
    ).fetchall()
    assert dict(counts) == {
        r: n for r, n in zip(captures["capture"], captures["findings"], strict=True) if n
    }
    # The queries docs/commands/batch.md shows run on it as they are written.
    sql = (REPO / "docs/commands/batch.md").read_text().split("```sql\n")[1].split("```")[0]
    statements = [s for s in sql.replace("OUT/", f"{out}/").split(";") if "SELECT" in s]
    assert len(statements) == 4
    for statement in statements:
        duckdb.sql(statement).fetchall()


def test_resume_skips_finished_and_redoes_changed(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = BatchConfig(corpus, out, jobs=1)
    first = {o.name: o.status for o in run_batch(config)}
    assert first == {"a.pcap": "ok", "bad.pcap": "error", "deep/b.pcapng.pcap": "ok",
                     "lab/run1": "ok"}  # fmt: skip
    marker = out / "captures" / f"{file_key('a.pcap')}.parquet"
    before = marker.stat().st_mtime_ns
    again = {o.name: o.status for o in run_batch(config)}
    assert set(again.values()) == {"skipped"}
    assert marker.stat().st_mtime_ns == before
    transfer(corpus / "a.pcap", segments=7)  # a new version of the capture
    (corpus / "bad.pcap").unlink()
    third = {o.name: o.status for o in run_batch(config)}
    assert third == {"a.pcap": "ok", "deep/b.pcapng.pcap": "skipped", "lab/run1": "skipped"}
    conns = pq.read_table(out / "connections" / f"{file_key('a.pcap')}.parquet")
    assert conns["bytes_a2b"].to_pylist() == [7 * 1000]


def test_workers_call_after_stage_between_the_stages(corpus: Path, tmp_path: Path) -> None:
    # Each worker is a forked process: it leaves a mark in a file per call.
    marks = tmp_path / "marks"

    def mark() -> None:
        with marks.open("a") as f:
            f.write("x")

    outcomes = run_batch(BatchConfig(corpus, tmp_path / "out", jobs=1, after_stage=mark))
    analysed = sum(o.status == "ok" for o in outcomes)
    assert analysed == 3  # bad.pcap is refused as it is read, before any stage
    # Per input: each capture's connections, the merge, each capture's series and inside the
    # sender's (its walk's working memory freed; no receiver's series is walked), the sender's
    # packet columns only its walk read let go, each detector and the detectors.
    assert len(marks.read_text()) == analysed * (8 + len(detectors.all_detectors()))


def test_a_killed_run_leaves_only_whole_files_and_resumes(tmp_path: Path) -> None:
    root, out = tmp_path / "many", tmp_path / "out"
    one = transfer(tmp_path / "one.pcap", segments=200)
    root.mkdir()
    for i in range(20):
        shutil.copy(one, root / f"r{i:02}.pcap")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    main = "from tracekit.cli.main import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", main, "batch", str(root), "-o", str(out), "-j", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((out / "captures").glob("*.parquet")):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = list((out / "captures").glob("*.parquet"))
    assert 0 < len(finished) < 20, "the run was not caught in the middle"
    for table in ("captures", "connections", "findings"):
        for path in (out / table).glob("[!.]*"):
            pq.read_table(path)  # every visible file is whole
    outcomes = run_batch(BatchConfig(root, out, jobs=1))
    statuses = [o.status for o in outcomes]
    assert statuses.count("skipped") == len(finished)
    assert statuses.count("ok") == 20 - len(finished)
    assert not list(out.glob("*/.*.tmp"))
    total = duckdb.sql(f"SELECT count(*), sum(bytes_a2b) FROM '{out}/connections/*.parquet'")
    assert total.fetchall() == [(20, 20 * 200 * 1000)]


def test_dask_engine_on_a_local_cluster(corpus: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    out_dask, out_local = tmp_path / "dask", tmp_path / "local"
    # One thread per worker, as docs/commands/batch.md says to run Dask workers: the analysis
    # holds the GIL, so processes give the parallelism, and concurrent analyses in threads of
    # one process are not proven safe (a rare crash was seen with two, not reproduced).
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        code, stdout, _ = invoke(
            corpus, "-o", out_dask, "--engine", "dask", "--scheduler", cluster.scheduler_address
        )
    assert code == 0
    assert stdout == f"{out_dask}: 4 inputs: 1 error, 3 ok\n"
    run_batch(BatchConfig(corpus, out_local, jobs=1))
    for table in ("captures", "connections", "findings"):
        dask_df = pd.read_parquet(out_dask / table).sort_values(["capture"]).reset_index(drop=True)
        local_df = (
            pd.read_parquet(out_local / table).sort_values(["capture"]).reset_index(drop=True)
        )
        ignore = [c for c in ("time_s", "fingerprint") if c in dask_df]
        pd.testing.assert_frame_equal(dask_df.drop(columns=ignore), local_df.drop(columns=ignore))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["-o", "{tmp}/o", "--engine", "dask"], "--engine dask needs --scheduler"),
        (["-o", "{tmp}/o", "--scheduler", "tcp://x:1"], "--scheduler goes with --engine dask"),
        (["-o", "{tmp}/o", "--jobs", "-1"], "--jobs must be >= 0"),
        (["-o", "{root}/out"], "must lie outside"),
        pytest.param(
            ["-o", "{tmp}/o", "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9"],
            "cannot reach",
            marks=pytest.mark.slow,  # the client waits out its 10 s connect timeout
        ),
    ],
)
def test_usage_errors_exit_2(corpus: Path, tmp_path: Path, args: list[str], error: str) -> None:
    args = [a.format(tmp=tmp_path, root=corpus) for a in args]
    code, _, stderr = invoke(corpus, *args)
    assert code == 2
    assert error in stderr and stderr.count("\n") == 1


def test_an_empty_folder_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TracekitError, match="no captures found"):
        run_batch(BatchConfig(tmp_path / "empty", tmp_path / "out"))


class Broken(Detector):
    """Raises on connections that moved exactly 10 segments of data: a bug on one input."""

    kind = "test_broken"
    title = "A detector with a bug"
    severity = Severity.INFO

    def detect(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if (ctx.connections["bytes_a2b"] == 10 * 1000).any():
            raise ZeroDivisionError("a bug")
        yield from ()


def test_a_crash_is_recorded_and_retried(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(detectors, "all_detectors", lambda: (Broken,))
    config = BatchConfig(corpus, tmp_path / "out", jobs=1)
    first = {o.name: (o.status, o.error) for o in run_batch(config)}
    assert first["lab/run1"] == ("crash", "ZeroDivisionError: a bug")
    assert first["a.pcap"][0] == "ok"
    again = {o.name: o.status for o in run_batch(config)}
    assert again == {"a.pcap": "skipped", "bad.pcap": "skipped", "deep/b.pcapng.pcap": "skipped",
                     "lab/run1": "crash"}  # fmt: skip
