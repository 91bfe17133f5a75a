"""`tracekit batch`: analyse every capture and pair under a folder into a Parquet dataset.

The dataset (docs/commands/batch.md) is three folders of Parquet files, one file per input in
each, so DuckDB (`'OUT/findings/*.parquet'`), pandas and polars (`pd.read_parquet('OUT/findings')`)
read each folder as one table:

- `connections/`: `capture` (the input's name) and the connections table (docs/tables.md);
- `findings/`: `capture` and the findings, evidence as a JSON object in `evidence_json`;
- `captures/`: one row per input: its files, `status` (`ok`, `error`: the capture cannot be read,
  `crash`: a bug in tracekit), the error, counts and timing.

Every file is written through a temporary file and a rename, and an input's `captures/` row is
written last: it marks the input finished. A run started again skips finished inputs whose
files have not changed (same sizes and modification times), and retries crashes. Inputs are
analysed in worker processes, one forked process per input, or on a Dask cluster; each worker
writes its input's files itself, so the output folder must be shared with a cluster's workers.

A worker that dies (the kernel's OOM killer, a crash in compiled code) costs only its input,
recorded as a crash; workers die with the run; a lock file in the output folder keeps a second
run out of it while one is writing there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import signal
import time
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit import schema
from tracekit.connections.table_io import write_parquet_atomic
from tracekit.core.fork import die_with
from tracekit.errors import TracekitError
from tracekit.findings import Finding
from tracekit.inputs import CaptureInput, analyze_input, find_inputs
from tracekit.tunables import non_defaults
from tracekit.warmup import warm_up

Engine = Literal["process", "dask"]
Status = Literal["ok", "error", "crash", "skipped"]

# The dataset's three tables, declared in tracekit/schema.py (docs/tables.md).
CAPTURE_SCHEMA = schema.arrow_schema(schema.BATCH_CAPTURE_COLUMNS)
CONNECTION_SCHEMA = schema.arrow_schema(schema.BATCH_CONNECTION_COLUMNS)
FINDING_SCHEMA = schema.arrow_schema(schema.BATCH_FINDING_COLUMNS)
TABLES = ("captures", "connections", "findings")
# In the output folder: held (flock) by the run writing there. Dot-named, so that readers of
# the dataset skip it as they skip the temporaries.
LOCK_NAME = ".tracekit-batch.lock"


@dataclass(frozen=True)
class BatchConfig:
    """What to analyse, where to write it, and on what."""

    root: Path
    out: Path
    jobs: int = 0  # worker processes; 0: one per core this process may use
    engine: Engine = "process"
    scheduler: str | None = None  # the Dask scheduler's address, for engine "dask"
    # NAT rules (SENDER_ADDR, RECEIVER_ADDR), as `--map`, for every pair's receiver capture.
    addr_map: tuple[tuple[str, str], ...] = ()
    # (kind, Config) of every tuned detector, as `--config`'s [detectors.KIND] tables give them.
    detector_configs: tuple[tuple[str, Any], ...] = ()
    # Called in a worker process between an analysis's stages (`analyze_files`): the command
    # returns freed memory to the system there. A Dask worker's process is not this one's.
    after_stage: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise TracekitError(f"--jobs must be >= 0, got {self.jobs}")
        if self.engine not in ("process", "dask"):
            raise TracekitError(f"unknown engine {self.engine!r} (process or dask)")
        if self.engine == "dask" and not self.scheduler:
            raise TracekitError("--engine dask needs --scheduler ADDRESS (tcp://host:8786)")
        if self.engine == "process" and self.scheduler:
            raise TracekitError("--scheduler goes with --engine dask")
        if not self.root.is_dir():
            raise TracekitError(f"{self.root}: not a folder")
        if self.out.resolve().is_relative_to(self.root.resolve()):
            # Its own output would be walked next time (and Parquet is no capture anyway).
            raise TracekitError(f"{self.out}: the output folder must lie outside {self.root}")

    @property
    def workers(self) -> int:
        """How many inputs run at once on this machine."""
        return self.jobs or len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Outcome:
    """What became of one input."""

    name: str
    status: Status
    error: str | None = None
    connections: int = 0
    findings: int = 0
    time_s: float = 0.0


@dataclass(frozen=True)
class Job:
    """One input and where its files go; a plain value, so it travels to any worker."""

    input: CaptureInput
    key: str
    out: str
    fingerprint: str
    # (kind, Config) pairs: Configs are frozen dataclasses of numbers, which pickle to a worker.
    configs: tuple[tuple[str, Any], ...] = ()


def relative_inputs(root: Path) -> list[CaptureInput]:
    """Every input under root, named by its path relative to root (the lab's folder pairs by
    the folder's name)."""
    prefix = root.as_posix().rstrip("/") + "/"
    inputs = []
    for inp in find_inputs([root]):
        # Outside the prefix is only the root itself, as a lab pair: named after its folder.
        name = inp.name[len(prefix) :] if inp.name.startswith(prefix) else root.resolve().name
        inputs.append(replace(inp, name=name))
    return inputs


def file_key(name: str) -> str:
    """A file name for an input: its name made safe, and a hash so that two names never meet."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def fingerprint(inp: CaptureInput, configs: tuple[tuple[str, Any], ...] = ()) -> str:
    """Sizes and modification times of the input's files (missing: -1), its NAT rules and the
    detector settings that differ from their defaults; not their paths, so DIR given another
    way (relative, absolute, moved) still finds its finished inputs, while other rules for a
    pair, or other settings, analyse it again."""
    parts = []
    for path in inp.paths:
        try:
            st = path.stat()
            parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append("-1")
    parts += [f"map={a}={b}" for a, b in inp.addr_map]
    parts += [f"detectors.{setting}" for setting in non_defaults(dict(configs))]
    return "|".join(parts)


def _finding_rows(name: str, findings: Sequence[Finding]) -> pa.Table:
    rows = [
        {
            "capture": name,
            "conn": f.conn,
            "kind": f.kind,
            "severity": f.severity.value,
            "direction": f.direction,
            "start_s": f.start_s,
            "end_s": f.end_s,
            "summary": f.summary,
            "evidence_json": json.dumps(f.to_dict()["evidence"], sort_keys=True),
        }
        for f in findings
    ]
    return pa.Table.from_pylist(rows, schema=FINDING_SCHEMA)


def run_job(job: Job, after_stage: Callable[[], None] | None = None) -> Outcome:
    """Analyse one input and write its three files; never raises for a bad capture.
    `after_stage` is called between the analysis's stages (`analyze_files`)."""
    start = time.perf_counter()
    out = Path(job.out)
    inp = job.input
    try:
        analysis, _ = analyze_input(inp, dict(job.configs), after_stage)
    except TracekitError as exc:
        outcome = Outcome(inp.name, "error", str(exc), time_s=time.perf_counter() - start)
    except Exception as exc:
        # A bug must not cost the night's other captures; its traceback goes in the dataset.
        detail = "".join(traceback.format_exception_only(exc)).strip()
        outcome = Outcome(inp.name, "crash", detail, time_s=time.perf_counter() - start)
    else:
        conns = analysis.sender.connections.table
        names = pa.array([inp.name] * conns.num_rows, pa.string())
        write_parquet_atomic(
            conns.cast(schema.arrow_schema(schema.CONNECTION_COLUMNS)).add_column(
                0, CONNECTION_SCHEMA.field("capture"), names
            ),
            out / "connections" / f"{job.key}.parquet",
        )
        write_parquet_atomic(
            _finding_rows(inp.name, analysis.findings), out / "findings" / f"{job.key}.parquet"
        )
        outcome = Outcome(
            inp.name,
            "ok",
            connections=conns.num_rows,
            findings=len(analysis.findings),
            time_s=time.perf_counter() - start,
        )
    record(job, outcome)
    return outcome


def record(job: Job, outcome: Outcome) -> None:
    """Write the input's `captures/` row, the mark of a finished input (after its other files)."""
    out = Path(job.out)
    inp = job.input
    if outcome.status != "ok":
        # A capture that failed now leaves no rows from an earlier, different version of it.
        for table in ("connections", "findings"):
            (out / table / f"{job.key}.parquet").unlink(missing_ok=True)
    row = {
        "capture": inp.name,
        "sender": str(inp.sender),
        "receiver": None if inp.receiver is None else str(inp.receiver),
        "status": outcome.status,
        "error": outcome.error,
        "connections": outcome.connections,
        "findings": outcome.findings,
        "time_s": outcome.time_s,
        "fingerprint": job.fingerprint,
    }
    write_parquet_atomic(
        pa.Table.from_pylist([row], schema=CAPTURE_SCHEMA), out / "captures" / f"{job.key}.parquet"
    )


def _finished(path: Path, fp: str) -> bool:
    try:
        row = pq.read_table(path, columns=["status", "fingerprint"]).to_pylist()[0]
    except (OSError, IndexError, pa.ArrowException):
        return False
    return bool(row["fingerprint"] == fp and row["status"] in ("ok", "error"))


def plan(config: BatchConfig) -> tuple[list[Job], list[str]]:
    """The jobs still to run, largest first (so no big capture starts last), and the names of
    the inputs a previous run finished."""
    jobs, done = [], []
    for inp in relative_inputs(config.root):
        if inp.receiver is not None and config.addr_map:
            inp = replace(inp, addr_map=config.addr_map)
        key = file_key(inp.name)
        fp = fingerprint(inp, config.detector_configs)
        if _finished(config.out / "captures" / f"{key}.parquet", fp):
            done.append(inp.name)
        else:
            jobs.append(Job(inp, key, str(config.out), fp, config.detector_configs))

    def size(job: Job) -> int:
        return sum(p.stat().st_size for p in job.input.paths if p.is_file())

    jobs.sort(key=size, reverse=True)
    return jobs, done


def _on_processes(
    jobs: Sequence[Job],
    workers: int,
    lock: int | None = None,
    after_stage: Callable[[], None] | None = None,
) -> Generator[Outcome, None, None]:
    """Each job in a process of its own, forked from this one, `workers` at a time.

    A process per input rather than a pool: a worker that dies (SIGKILL from the OOM killer, a
    segfault in compiled code) is then known to have died on exactly its input, which is
    recorded as a crash while the others go on, and no input is ever analysed in this process.
    Forking costs milliseconds against an analysis's tenths of seconds; a made-up transfer is
    analysed here first (tracekit.warmup), so that every worker starts with what a first
    analysis loads (over a second of numba's cache) in memory instead of loading it again.
    """
    warm_up()
    context = multiprocessing.get_context("fork")
    parent = os.getpid()
    waiting = list(reversed(jobs))  # taken from the end: largest first
    running: dict[Connection, _Worker] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                job = waiting.pop()
                receiving, sending = context.Pipe(duplex=False)
                process = context.Process(
                    target=_work,
                    args=(job, sending, parent, lock, after_stage),
                    name="tracekit-batch",
                    daemon=True,
                )
                process.start()
                sending.close()  # the worker's end: its exit is then the pipe's end here
                running[receiving] = _Worker(job, process, time.perf_counter())
            for ready in wait(list(running)):
                assert isinstance(ready, Connection)
                yield running.pop(ready).outcome(ready)
    finally:
        # Stopped early (an error here, Ctrl-C, a consumer that gave up): no worker outlives it.
        for receiving, worker in running.items():
            worker.process.kill()
            worker.process.join()
            receiving.close()


@dataclass(frozen=True)
class _Worker:
    job: Job
    process: multiprocessing.process.BaseProcess
    started: float

    def outcome(self, receiving: Connection) -> Outcome:
        """The worker's outcome once its pipe is ready; a worker that died without one is
        recorded as a crash of its input, as an exception in the analysis would be."""
        try:
            outcome: Outcome | None = receiving.recv()
        except (EOFError, OSError):
            outcome = None
        finally:
            receiving.close()
        self.process.join()
        if outcome is not None:
            return outcome
        code = self.process.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            why = " (the kernel's OOM killer sends it)" if -code == signal.SIGKILL else ""
            detail = f"the worker analysing it was killed by {name}{why}"
        else:
            detail = f"the worker analysing it exited with status {code}"
        crash = Outcome(
            self.job.input.name, "crash", detail, time_s=time.perf_counter() - self.started
        )
        record(self.job, crash)
        return crash


def _work(
    job: Job,
    sending: Connection,
    parent: int,
    lock: int | None,
    after_stage: Callable[[], None] | None = None,
) -> None:
    """A worker process: analyse one input, hand its outcome back.

    `lock`, the output folder's lock descriptor inherited from the run, is closed: the lock is
    the run's, and ends with it (a batch started right after a killed one must not find it
    still held by a worker that is only being killed).
    """
    if lock is not None:
        os.close(lock)
    if not die_with(parent):
        return  # the run is gone already: nobody wants this input's files
    try:
        outcome = run_job(job, after_stage)
    except OSError:
        # The output folder cannot take this input's files (a full disk, a read-only mount):
        # the run meets the same when it records the worker's end, and says so in one line;
        # a traceback from here would be a second, unreadable report of it.
        sending.close()
        os._exit(1)
    sending.send(outcome)
    sending.close()


def _warm_worker() -> int:
    """Import every stage and discover the detectors; returns how many there are."""
    from tracekit.detectors import all_detectors

    return len(all_detectors())


def _on_dask(jobs: Sequence[Job], address: str) -> Generator[Outcome, None, None]:
    try:
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise TracekitError("--engine dask needs Dask: pip install 'tracekit[dask]'") from None
    try:
        client = Client(address, timeout="10s")
    except OSError as exc:
        raise TracekitError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    with client:
        # Import the detectors on every worker before any job: a threaded worker would
        # otherwise run its first jobs' imports of the detector modules concurrently.
        client.run(_warm_worker)
        # pure=False: an input whose files changed must run again under the same key.
        futures = client.map(run_job, jobs, pure=False, key=[f"tracekit-{j.key}" for j in jobs])
        for future in dask_completed(futures):
            yield future.result()


def run_batch(
    config: BatchConfig,
    on_start: Callable[[int, int], None] | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Analyse every unfinished input under config.root into config.out.

    `on_start(to_do, already_done)` is called once the plan is made, `on_done` once per input
    as it finishes (in completion order). Returns the outcomes, finished ones as "skipped".
    """
    jobs, done = plan(config)
    if not jobs and not done:
        raise TracekitError(f"no captures found under {config.root}")
    with _locked(config.out) as lock:
        for table in TABLES:
            folder = config.out / table
            folder.mkdir(parents=True, exist_ok=True)
            # Temporary files of a run that was killed mid-write (readers skip dot files
            # anyway); the lock says no other run is writing them now.
            for stale in folder.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
        if on_start is not None:
            on_start(len(jobs), len(done))
        outcomes = [Outcome(name, "skipped") for name in done]
        if config.engine == "dask":
            assert config.scheduler is not None  # checked by BatchConfig
            stream = _on_dask(jobs, config.scheduler)
        else:
            workers = min(config.workers, max(len(jobs), 1))
            stream = _on_processes(jobs, workers, lock, config.after_stage)
        with contextlib.closing(stream):
            for outcome in stream:
                outcomes.append(outcome)
                if on_done is not None:
                    on_done(outcome)
    return outcomes


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[int]:
    """Hold the output folder's lock (made with the folder if need be) for the block; another
    run holding it is a TracekitError. Yields the lock's descriptor. The lock is the kernel's
    (flock): it ends with the process holding it, so a killed run leaves none."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise TracekitError(f"{out}: cannot write the output folder: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TracekitError(
                f"{out}: another tracekit batch is writing into this folder; "
                "wait for it to end or give another -o"
            ) from None
        yield fd
    finally:
        os.close(fd)


def outcome_counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """How many inputs ended in each status."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return counts
