"""Output files written whole or not at all: a temporary file in the same folder, then a rename.

A reader (a browser, CI, DuckDB) never sees a half-written file, and an interrupted run leaves
the earlier output as it was. The temporary file is made as `open` would make the output, so
the result has the permissions the user's umask gives (tempfile.mkstemp's would be 0600: a
report or table nobody else on the machine can read).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


def _create_beside(path: Path, parents: bool) -> Path:
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


@contextlib.contextmanager
def replacing(path: Path, *, parents: bool = False) -> Iterator[Path]:
    """The path of an empty temporary file beside `path`: write it in the block, and it
    replaces `path` when the block ends; an error in the block removes it instead.

    `parents`: make the missing folders above `path` (else a missing one is FileNotFoundError).
    """
    tmp = _create_beside(path, parents)
    try:
        yield tmp
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temporary_beside(path: Path, *, parents: bool = False) -> Path:
    """An empty temporary file beside `path`, for a writer that renames it into place itself
    (or removes it); `parents` as for `replacing`."""
    return _create_beside(path, parents)
