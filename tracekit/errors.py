"""Errors the library raises for input a user can fix; the CLI turns them into one line, exit 2."""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """Bad input or usage: the message is one line, fit to show a user as it is."""


class CaptureError(TracekitError):
    """A capture file that cannot be read (missing, empty, corrupt, unknown link type, no TCP)."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
