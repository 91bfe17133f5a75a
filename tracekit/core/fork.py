"""Work handed to a forked copy of this process, its result sent back pickled.

After the merge a capture's connections are independent of one another: a copy of the process
made by fork(2) shares every table read so far with its parent (copy-on-write, nothing is
pickled on the way in) and can work on its own share of the connections on another core. Only
its result, a list of findings, comes back through a pipe.

A copy that fails in any way (an exception, a signal, the out-of-memory killer, a result that
does not unpickle) returns nothing, and the caller does that share itself: the same work, the
same result, only slower, and an error then raised where it can be told. Forking a process
that runs other threads would copy locks they may hold, so a share is forked only from a
process running one thread of Python's (`can_fork`); numpy, pyarrow and numba's kernels hold
no lock between calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# prctl(2): the signal a process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


def can_fork() -> bool:
    """Whether work may be forked here: Linux, and no other thread of Python's running."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
    )


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset
    limits), at least one."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def die_with(parent: int) -> bool:
    """Have the kernel kill this process when its parent dies (a run killed by a CI timeout
    must not leave workers behind); False when the parent is gone already.

    Linux's PR_SET_PDEATHSIG fires when the thread that forked this process ends: the run's
    thread, as long as the run lasts. Elsewhere a thread watches the parent's pid instead.
    """
    armed = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    # The parent may have died before the line above: this process is then someone else's.
    if os.getppid() != parent:
        return False
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    return True


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Forked:
    """A forked copy at work: its pid and the read end of the pipe its result comes through."""

    pid: int
    fd: int

    def result(self) -> Any | None:
        """Wait for the copy; its result, or None where it failed in any way."""
        data = b""
        try:
            fd, self.fd = self.fd, -1
            with os.fdopen(fd, "rb") as pipe:
                data = pipe.read()
        finally:
            _, status = os.waitpid(self.pid, 0)
            # Reaped, its pipe closed: `stop` has nothing left to do (that pid and that file
            # descriptor number may be another's by then).
            self.pid = 0
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            return None
        try:
            return pickle.loads(data)
        except Exception:
            # A result cut short is no result: the caller redoes the work.
            return None

    def stop(self) -> None:
        """Kill the copy and reap it (the caller failed, or is being interrupted); nothing
        once its result was read."""
        if self.pid <= 0:
            return
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)


def fork(work: Callable[[], Any]) -> Forked | None:
    """Run `work` in a forked copy of this process; None where no copy could be made (the
    caller then does the work itself). The copy writes `work()`'s result, pickled, to a pipe
    and leaves at once (os._exit: no exit handler of the parent's runs twice, no buffer of its
    is flushed twice); any failure leaves it with a non-zero status and no result."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # pragma: no cover - the copy's side; its result is what the tests check
        status = 1
        try:
            os.close(read_end)
            # An interrupt is the parent's to act on: it kills this copy.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if die_with(parent):
                data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(data)
                status = 0
        except BaseException:
            # The parent redoes the work and tells the error.
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    return Forked(pid, read_end)
