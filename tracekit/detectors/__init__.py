"""Detectors: one module each, found by scanning this package; see `base` for the protocol."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from tracekit.core.fork import can_fork, fork
from tracekit.detectors.base import AnalysisContext, Detector, DetectorError, check_detector
from tracekit.errors import TracekitError
from tracekit.findings import Finding

__all__ = [
    "AnalysisContext",
    "Detector",
    "DetectorError",
    "all_detectors",
    "connection_shares",
    "discover",
    "run_detectors",
]

# Modules of a detector package that hold no detector: the protocol itself. Private modules
# (a leading underscore) are skipped too, for helpers several detectors share.
_NOT_DETECTORS = frozenset({"base"})


def discover(package: str, read_source: bool = True) -> tuple[type[Detector], ...]:
    """The detector classes of a package, one per public module, sorted by kind.

    Every public module except `base` must hold exactly one concrete Detector subclass defined
    in it; kinds must be unique. Import errors propagate as they are: a detector that cannot be
    imported is a bug to see, not one to skip. `read_source=False` leaves out the checks that
    read each detector's source (check_detector).
    """
    root = importlib.import_module(package)
    found: dict[str, type[Detector]] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        if info.name in _NOT_DETECTORS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        classes = [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj)
            and issubclass(obj, Detector)
            and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)
        ]
        if len(classes) != 1:
            names = ", ".join(c.__name__ for c in classes) or "none"
            raise DetectorError(
                f"{module.__name__}: a detector module holds exactly one Detector class, "
                f"found {names}"
            )
        cls = classes[0]
        check_detector(cls, read_source)
        if cls.kind in found:
            raise DetectorError(
                f"kind {cls.kind!r} is declared by both {found[cls.kind].__module__} and "
                f"{cls.__module__}"
            )
        found[cls.kind] = cls
    return tuple(found[kind] for kind in sorted(found))


# Analyses in threads (Dask workers) discover once, under a lock, and share the result, which
# never changes within a process.
_DISCOVERY = threading.Lock()


@functools.cache
def _discovered() -> tuple[type[Detector], ...]:
    # tracekit's own detectors: the tests check their source (tests/test_detectors.py);
    # parsing it again would be most of a run's discovery time.
    return discover(__name__, read_source=False)


def all_detectors() -> tuple[type[Detector], ...]:
    """Every detector of tracekit, sorted by kind."""
    with _DISCOVERY:
        return _discovered()


def run_detectors(
    ctx: AnalysisContext,
    detectors: Iterable[type[Detector]] | None = None,
    configs: Mapping[str, object] | None = None,
    after_each: Callable[[], None] | None = None,
    jobs: int = 1,
) -> list[Finding]:
    """Run detectors (all by default) on ctx; findings sorted by connection, time and severity.

    `configs` maps a kind to that detector's Config; an unknown kind is a TracekitError (it comes
    from the user). A finding of another kind than its detector's is a DetectorError.
    `after_each` is called after each detector, once the measures no later one reads are let
    go (a command returns their memory to the system there, as between stages).

    With `jobs` above one, the detectors that judge each connection apart (`per_connection`)
    work on up to that many shares of the connections at once, each share but the first in a
    forked copy of this process (`tracekit.core.fork`), where fork may be used and the
    capture's work is worth it (`connection_shares`). The findings are the same: each
    connection is judged by the same code on the same rows, in one process or another; a
    copy that fails leaves its share to this process.
    """
    classes = tuple(all_detectors() if detectors is None else detectors)
    configs = configs or {}
    unknown = sorted(set(configs) - {cls.kind for cls in classes})
    if unknown:
        raise TracekitError(f"no detector of kind {', '.join(unknown)}")
    # Detectors that share a measure run one after another (a stable sort by the measures they
    # read), so that each measure is held from its first reader to its last with no other
    # detector's working memory beside it. The findings are sorted below, whatever the order.
    classes = tuple(sorted(classes, key=lambda cls: sorted(cls.measures)))
    apart = tuple(cls for cls in classes if cls.per_connection)
    shares = connection_shares(ctx, jobs) if apart and jobs > 1 and can_fork() else []
    if len(shares) < 2:
        findings = _run(ctx, classes, configs, after_each)
    else:
        views = [replace(ctx, series=ctx.series.share(share)) for share in shares]
        copies = [
            (view, fork(functools.partial(_run, view, apart, configs, after_each)))
            for view in views[1:]
        ]
        try:
            findings = _run(views[0], apart, configs, after_each)
            rest = tuple(cls for cls in classes if not cls.per_connection)
            findings += _run(ctx, rest, configs, after_each)
            for view, copy in copies:
                found = copy.result() if copy is not None else None
                if found is None:
                    found = _run(view, apart, configs, after_each)
                findings += found
        finally:
            for _, copy in copies:
                if copy is not None:
                    copy.stop()
    findings.sort(key=lambda f: (f.conn, f.start_s, -f.severity.rank, f.kind))
    return findings


def _run(
    ctx: AnalysisContext,
    classes: tuple[type[Detector], ...],
    configs: Mapping[str, object],
    after_each: Callable[[], None] | None,
) -> list[Finding]:
    """The findings of `classes` on ctx, run in their order."""
    findings: list[Finding] = []
    for i, cls in enumerate(classes):
        detector = cls(configs.get(cls.kind))
        for finding in detector.detect(ctx):
            if finding.kind != cls.kind:
                raise DetectorError(
                    f"{cls.__name__} yielded a finding of kind {finding.kind!r}, not {cls.kind!r}"
                )
            findings.append(finding)
        # The measures no detector still to run reads are let go: on a big capture they would
        # otherwise add up, each detector's on top of the ones before.
        ctx.series.forget(frozenset().union(*(later.measures for later in classes[i + 1 :])))
        if after_each is not None:
            after_each()
    return findings


# A direction costs the detectors about as much before its first segment is read (slicing its
# tables, a few dozen numpy calls: about a millisecond) as this many data segments do in their
# compiled passes (about half a microsecond each): the weight a direction adds to its share
# beside its segments. It balances the shares' times; it changes no finding.
DIRECTION_COST_SEGMENTS = 2000
# A share is forked only where its work outweighs the fork: copying the process's page
# tables and pickling its findings back take milliseconds, as much as this many segments.
LEAST_SHARE_SEGMENTS = 50_000


def connection_shares(ctx: AnalysisContext, jobs: int) -> list[npt.NDArray[np.int64]]:
    """The connections with data, in up to `jobs` shares of about equal work (each
    direction's data segments and DIRECTION_COST_SEGMENTS), the largest connections placed
    first, each in the share with least work so far. None where a share would hold less than
    LEAST_SHARE_SEGMENTS of work, or there is one connection: no fork is worth it."""
    keys, sent = ctx.series.data_counts()
    if keys.size == 0 or jobs < 2:
        return []
    conns, at = np.unique(keys // 2, return_inverse=True)
    work = np.bincount(at, weights=sent + DIRECTION_COST_SEGMENTS)
    count = int(min(jobs, max(work.sum() // LEAST_SHARE_SEGMENTS, 1), conns.size))
    if count < 2:
        return []
    load = np.zeros(count)
    share = np.empty(conns.size, dtype=np.int64)
    for i in np.argsort(-work, kind="stable"):
        share[i] = int(np.argmin(load))
        load[share[i]] += work[i]
    if load.min() < LEAST_SHARE_SEGMENTS:
        return []
    return [conns[share == s] for s in range(count)]
