"""Writing a check's outputs atomically: CI never reads a half-written JUnit or JSON file."""

from __future__ import annotations

from pathlib import Path

from tracekit.core.atomic import replacing


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to `path` through a temporary file in the same folder and a rename."""
    with replacing(path, parents=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
