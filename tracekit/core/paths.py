"""File names as a user reads them, and the kind of file a capture must be.

A file name is bytes: it may hold a newline, a terminal escape, or bytes that are not UTF-8
(Python keeps those as lone surrogates, which no UTF-8 file or Arrow string can hold). Every
message, warning and input name shows a name through `printable`, so it stays one line and can
be written anywhere.
"""

from __future__ import annotations

import os
import stat
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

from tracekit.errors import CaptureError, TracekitError

# os.fsdecode keeps a byte that is not UTF-8 as the lone surrogate U+DC80 + byte.
_SURROGATE_BASE = 0xDC00
_SURROGATES = range(0xDC80, 0xDD00)


def _escape(char: str) -> str:
    code = ord(char)
    if code in _SURROGATES:
        return f"\\x{code - _SURROGATE_BASE:02x}"
    if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
        # repr's escape: \n, \t, \x1b, \u202e (which would turn the rest of a line around)
        return repr(char)[1:-1]
    return char


def printable(text: str | os.PathLike[str]) -> str:
    """`text` (a file name, or a message naming one) on one line: control characters as
    Python writes them in a string (`\\n`), a byte that is not UTF-8 as `\\xff`; anything
    else, backslashes included, as it is."""
    text = os.fspath(text)
    if text.isprintable():
        return text
    return "".join(_escape(c) if not c.isprintable() else c for c in text)


def require_regular_file(path: Path) -> None:
    """Raise CaptureError when `path` exists but is not a regular file.

    A FIFO would block the reader until someone writes to it, a device may never end; neither
    is a capture. Only the file's status is read, never the file. A missing or unreadable path
    is left to the reader, which names the problem.
    """
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        kind = "a folder"
    elif stat.S_ISFIFO(mode):
        kind = "a FIFO"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    else:
        kind = "a device"
    raise CaptureError(printable(path), f"{kind}, not a regular file")


def read_toml(path: Path, what: str, missing: str) -> dict[str, Any]:
    """A TOML file the user named (a policy, a manifest), each failure one line naming the
    file: `missing` says what it is when absent ("no such <missing>"), `what` when unreadable
    ("cannot read <what>")."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TracekitError(f"{path}: no such {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TracekitError(f"{path}: cannot read {what}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TracekitError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        # tomllib recurses once per nesting level: thousands of [[[...]]] exhaust the stack.
        raise TracekitError(f"{path}: not valid TOML: nested too deep") from None
