"""Output files: whole or not at all, with the permissions the user's umask gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tracekit.core.atomic import replacing

ROOT = Path(__file__).resolve().parent.parent
SENDER = ROOT / "fixtures" / "captures" / "clean" / "sender.pcap"


@pytest.fixture
def umask_027() -> object:
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_output_has_the_umasks_permissions(tmp_path: Path, umask_027: object) -> None:
    target = tmp_path / "out.txt"
    with replacing(target) as tmp:
        tmp.write_text("whole")
    assert target.read_text() == "whole"
    assert _mode(target) == 0o640  # 0666 less the umask, as open() makes a file
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_an_error_leaves_the_earlier_output_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("earlier")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "earlier"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_ingest_and_report_outputs_are_readable_as_the_umask_says(
    tmp_path: Path, umask_027: object
) -> None:
    runner = CliRunner()
    table = tmp_path / "t.parquet"
    result = runner.invoke(cli, ["ingest", str(SENDER), "-o", str(table)])
    assert result.exit_code == 0, result.output
    report = tmp_path / "r.html"
    result = runner.invoke(cli, ["report", str(SENDER), "-o", str(report)])
    assert result.exit_code == 0, result.output
    written = sorted(tmp_path.iterdir())
    assert [p.name for p in written] == ["r.html", "t.connections.parquet", "t.parquet"]
    assert all(_mode(p) == 0o640 for p in written), [oct(_mode(p)) for p in written]
