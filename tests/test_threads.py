"""Analyses as threads of one process (Dask workers run tasks so): each as it is run alone."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tracekit.core import kernels
from tracekit.pipeline import analyze_files

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
# A TCP pair with losses in the network and one with drops in the receiver host, and a numbered
# UDP stream: between them every stage and every detector runs.
PAIRS = ("slow_start_overrun", "receiver_drops", "udp_loss")
ROUNDS = 4


def _document(name: str) -> str:
    lab = CAPTURES / name
    doc = analyze_files(lab / "sender.pcap", lab / "receiver.pcap").to_dict()
    return json.dumps(doc, sort_keys=True)


def test_analyses_in_threads_match_the_same_analyses_run_alone() -> None:
    alone = {name: _document(name) for name in PAIRS}
    start = threading.Barrier(len(PAIRS))

    def together(name: str) -> str:
        start.wait()  # every analysis starts at once, so that their stages overlap
        return _document(name)

    with ThreadPoolExecutor(len(PAIRS)) as pool:
        for _ in range(ROUNDS):
            start.reset()
            threaded = dict(zip(PAIRS, pool.map(together, PAIRS), strict=True))
            for name in PAIRS:
                assert threaded[name] == alone[name], name


class _Namespace(dict):
    """A module namespace whose store of `helper` waits, once armed, until released: the moment
    between the dispatchers' creation and their publication, held open."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.storing = threading.Event()
        self.release = threading.Event()

    def __setitem__(self, key: str, value: Any) -> None:
        if self.armed and key == "helper":
            self.storing.set()
            assert self.release.wait(30)
        super().__setitem__(key, value)


def test_a_kernel_module_is_compiled_once_and_published_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread that needs the numba kernels while another is building them waits for it, and
    never gets a kernel whose helper is still a plain Python function (numba cannot call one)."""
    import numba

    njit = numba.njit
    # Functions made here have no source file to cache beside.
    monkeypatch.setattr(
        numba, "njit", lambda *f, **options: njit(*f, **{**options, "cache": False})
    )
    namespace = _Namespace()
    exec(
        "def helper(x):\n    return x + 1\n\ndef kernel(x):\n    return helper(x) * 2\n", namespace
    )
    module = kernels._Module(namespace, ("kernel", "helper"), {})
    namespace.armed = True
    first = threading.Thread(target=module.jit)
    first.start()
    assert namespace.storing.wait(30)
    seen: dict[str, Any] = {}

    def second() -> None:
        jitted = module.jit()
        seen["helper"] = namespace["helper"]  # what numba will find when it compiles kernel
        seen["result"] = jitted["kernel"](1)

    other = threading.Thread(target=second)
    other.start()
    other.join(0.5)  # under a lock it waits for the first; without one it runs on regardless
    namespace.release.set()
    first.join(30)
    other.join(60)
    assert seen["helper"] is module.jitted["helper"]  # type: ignore[index]
    assert seen["result"] == 4
