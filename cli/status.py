"""Every exit status the tracekit command can return, in one place."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    # `tracekit check`: a finding or a threshold failed the policy.
    CHECK_FAILED = 1
    # Bad input or usage: a missing or corrupt capture, a bad option (click also uses 2).
    BAD_INPUT = 2
    # A bug in tracekit: the traceback is printed, please report it.
    INTERNAL_ERROR = 3
