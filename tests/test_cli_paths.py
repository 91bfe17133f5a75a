"""Paths a user can get wrong, for every command: an output over an input, an output that cannot
be written (a read-only mount, a full disk, a file where a folder should be), odd file names,
files that are no capture (a FIFO) and folders that lead round in circles. Each is exit 2 and
one line on stderr naming the file, never a traceback, never a changed input; missing folders
above an output are made."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli

from tracekit.core.paths import printable

REPO = Path(__file__).resolve().parent.parent
CLEAN = REPO / "fixtures" / "captures" / "clean"
MAIN = "import sys; from tracekit.cli.main import main; sys.argv[0] = 'tracekit'; main()"


def tracekit(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """The console script in a subprocess: real exit status, real stderr bytes."""
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        capture_output=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def in_process(*args: str) -> subprocess.CompletedProcess[bytes]:
    """The same command through click's CliRunner, as a subprocess's result: exit status and
    stderr bytes. For checks of the message and the files, where the process adds nothing;
    each command keeps tests through the console script (tracekit() above) too."""
    result = CliRunner().invoke(cli, list(args), prog_name="tracekit")
    return subprocess.CompletedProcess(
        list(args), result.exit_code, result.stdout_bytes, result.stderr_bytes
    )


def one_line(done: subprocess.CompletedProcess[bytes], *words: str) -> str:
    """Exit 2 with one line on stderr that says each of `words`; that line."""
    err = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    sender, receiver = tmp_path / "sender.pcap", tmp_path / "receiver.pcap"
    shutil.copy(CLEAN / "sender.pcap", sender)
    shutil.copy(CLEAN / "receiver.pcap", receiver)
    return sender, receiver


# --- an output over an input ------------------------------------------------------------------


def _overwrite_cases(sender: Path, receiver: Path) -> dict[str, tuple[list[str], Path]]:
    tmp = sender.parent
    side_input = tmp / "t.connections.parquet"  # ingest -o t.parquet writes this beside it
    shutil.copy(sender, side_input)
    s, r = str(sender), str(receiver)
    return {
        "report -o capture": (["report", s, "-o", s], sender),
        "report -o receiver": (["report", s, "--receiver", r, "-o", r], receiver),
        "ingest -o capture": (["ingest", s, "-o", s], sender),
        "ingest side file": (["ingest", str(side_input), "-o", str(tmp / "t.parquet")], side_input),
        "ingest -o receiver": (["ingest", s, "--receiver", r, "-o", r], receiver),
        "check --json": (["check", s, "--json", s], sender),
        "check --junit receiver": (["check", str(tmp), "--junit", r], receiver),
    }


@pytest.mark.parametrize(
    "case",
    [
        "report -o capture",
        "report -o receiver",
        "ingest -o capture",
        "ingest side file",
        "ingest -o receiver",
        "check --json",
        "check --junit receiver",
    ],
)
def test_an_output_over_an_input_is_refused(pair: tuple[Path, Path], case: str) -> None:
    args, victim = _overwrite_cases(*pair)[case]
    before = digest(victim)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is an input file" in lines[0], result.stderr
    assert digest(victim) == before


def test_a_symlink_or_hard_link_to_an_input_is_refused_too(pair: tuple[Path, Path]) -> None:
    sender, _ = pair
    linked = sender.parent / "linked.html"
    linked.symlink_to(sender)
    hard = sender.parent / "hard.html"
    os.link(sender, hard)
    before = digest(sender)
    for output in (linked, hard):
        result = CliRunner().invoke(cli, ["report", str(sender), "-o", str(output)])
        assert result.exit_code == 2, result.output
        assert "is an input file" in result.stderr
    assert digest(sender) == before and linked.is_symlink()


def test_a_policy_or_baseline_is_an_input_of_check(pair: tuple[Path, Path]) -> None:
    sender, _ = pair
    baseline = sender.parent / "base.json"
    first = CliRunner().invoke(cli, ["check", str(sender), "--json", str(baseline)])
    assert first.exit_code == 0, first.output
    before = digest(baseline)
    again = CliRunner().invoke(
        cli, ["check", str(sender), "--baseline", str(baseline), "--json", str(baseline)]
    )
    assert again.exit_code == 2 and "is an input file" in again.stderr
    assert digest(baseline) == before


def test_tsg_never_exports_over_its_capture(tmp_path: Path) -> None:
    # A capture that goes by a name the export writes, in the export folder.
    capture = tmp_path / "conn0_a2b_segments.csv"
    shutil.copy(CLEAN / "sender.pcap", capture)
    before = digest(capture)
    result = CliRunner().invoke(cli, ["tsg", str(capture), "--export", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "is an input file" in result.stderr
    assert digest(capture) == before
    # A hard link of the capture under such a name, too.
    elsewhere = tmp_path / "cap.pcap"
    shutil.copy(CLEAN / "sender.pcap", elsewhere)
    out = tmp_path / "out"
    out.mkdir()
    os.link(elsewhere, out / "conn0_a2b_acks.csv")
    result = CliRunner().invoke(cli, ["tsg", str(elsewhere), "--export", str(out)])
    assert result.exit_code == 2 and "is an input file" in result.stderr
    # A capture beside the export under another name is no obstacle.
    result = CliRunner().invoke(cli, ["tsg", str(elsewhere), "--export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert digest(elsewhere) == before


def test_batch_output_holding_its_inputs_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data" / "captures"
    root.mkdir(parents=True)
    shutil.copy(CLEAN / "sender.pcap", root / "x.pcap")
    for out in (tmp_path / "data", tmp_path):
        done = in_process("batch", str(root), "-o", str(out))
        one_line(done, "holds the input")
    assert not (tmp_path / "data" / "connections").exists()
    # An input reached by a symlink under DIR counts where it really is.
    real = tmp_path / "elsewhere"
    real.mkdir()
    shutil.copy(CLEAN / "sender.pcap", real / "y.pcap")
    (root / "y.pcap").symlink_to(real / "y.pcap")
    one_line(in_process("batch", str(root), "-o", str(real)), "holds the input")


# --- one rule for output folders: made when missing; a failure is one line --------------------


def test_missing_folders_above_an_output_are_made_by_every_command(tmp_path: Path) -> None:
    sender = str(CLEAN / "sender.pcap")
    runs = {
        "report": ["report", sender, "-o", str(tmp_path / "r" / "a" / "r.html")],
        "ingest": ["ingest", sender, "-o", str(tmp_path / "i" / "a" / "t.parquet")],
        "tsg": ["tsg", sender, "--export", str(tmp_path / "t" / "a")],
        "check": ["check", sender, "--junit", str(tmp_path / "c" / "a" / "j.xml")],
    }
    for name, args in runs.items():
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (name, result.output)
    assert (tmp_path / "r" / "a" / "r.html").is_file()
    assert (tmp_path / "i" / "a" / "t.connections.parquet").is_file()
    assert any((tmp_path / "t" / "a").iterdir())
    assert (tmp_path / "c" / "a" / "j.xml").is_file()


def _unwritable_args(place: Path) -> dict[str, list[str]]:
    sender = str(CLEAN / "sender.pcap")
    return {
        "report": ["report", sender, "-o", str(place / "r.html")],
        "ingest": ["ingest", sender, "-o", str(place / "t.parquet")],
        "ingest --receiver": [
            "ingest",
            sender,
            "--receiver",
            str(CLEAN / "receiver.pcap"),
            "-o",
            str(place / "t.parquet"),
        ],
        "tsg": ["tsg", sender, "--export", str(place / "series")],
        "check --junit": ["check", sender, "--junit", str(place / "j.xml")],
        "check --json": ["check", sender, "--json", str(place / "j.json")],
        "batch": ["batch", str(CLEAN), "-o", str(place / "dataset")],
        "compare": ["compare", str(CLEAN), str(CLEAN), "-o", str(place / "c.html")],
        "compare --json": ["compare", str(CLEAN), str(CLEAN), "--json", str(place / "c.json")],
        "tsg --plot": ["tsg", sender, "--export", str(place / "series"), "--plot", "svg"],
    }


COMMANDS = list(_unwritable_args(Path()))


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_under_a_file_is_one_line(tmp_path: Path, command: str) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    args = _unwritable_args(blocker / "sub")[command]
    one_line(in_process(*args), "cannot write", "file.txt is not a folder")
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["report", "check --json", "tsg"])
def test_an_output_under_proc_is_one_line(command: str) -> None:
    one_line(in_process(*_unwritable_args(Path("/proc/tracekit-test"))[command]), "cannot write")


@contextlib.contextmanager
def mounted(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs at `folder` (tests marked root; skipped when it cannot be mounted)."""
    folder.mkdir(exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def _no_temporary_left(folder: Path) -> None:
    left = [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert left == [], left


@pytest.mark.root
@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_mount_is_one_line(tmp_path: Path, command: str) -> None:
    with mounted(tmp_path / "ro", "ro,size=1m") as ro:
        one_line(in_process(*_unwritable_args(ro / "sub")[command]), "cannot write")
        one_line(in_process(*_unwritable_args(ro)[command]), "cannot write", "Read-only")


@pytest.mark.root
@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path: Path, command: str) -> None:
    with mounted(tmp_path / "full", "size=256k") as full:
        # Room for the folders and the first bytes, not for the outputs.
        with contextlib.suppress(OSError), (full / "filler").open("ab") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        args = _unwritable_args(full)[command]
        line = one_line(in_process(*args), "cannot write", "No space left")
        assert line.startswith(f"tracekit: {full}")
        _no_temporary_left(full)


# --- odd file names ---------------------------------------------------------------------------

ODD = b"\xff\xfe capture.pcap"


@pytest.fixture
def odd_capture(tmp_path: Path) -> Path:
    path = Path(os.fsdecode(bytes(tmp_path) + b"/" + ODD))
    shutil.copy(CLEAN / "sender.pcap", path)
    return path


def test_a_capture_whose_name_is_not_utf8_is_analysed(tmp_path: Path, odd_capture: Path) -> None:
    name = os.fsencode(odd_capture)
    report = tracekit("report", name, "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr
    assert "\\xff\\xfe capture.pcap" in (tmp_path / "r.html").read_text()
    check = tracekit(
        "check", name, "--junit", str(tmp_path / "j.xml"), "--json", str(tmp_path / "j.json")
    )
    assert check.returncode == 0, check.stderr
    assert "\\xff\\xfe capture.pcap" in (tmp_path / "j.xml").read_text()


def test_ingest_and_batch_refuse_a_name_they_cannot_record(
    tmp_path: Path, odd_capture: Path
) -> None:
    ingest = tracekit("ingest", os.fsencode(odd_capture), "-o", str(tmp_path / "t.parquet"))
    one_line(ingest, "\\xff\\xfe capture.pcap", "not UTF-8")
    batch = tracekit("batch", str(tmp_path), "-o", str(tmp_path.parent / "dataset"))
    one_line(batch, "\\xff\\xfe capture.pcap", "not UTF-8")


def test_a_newline_in_a_file_name_stays_on_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "two\nlines.pcap"
    line = one_line(tracekit("analyze", str(missing)), "no such file")
    assert "two\\nlines.pcap" in line
    junk = tmp_path / "bad\nname.pcap"
    junk.write_bytes(b"not a capture" * 8)
    one_line(tracekit("report", str(junk), "-o", str(tmp_path / "r.html")), "bad\\nname.pcap")
    assert printable("a\nb\udcff") == "a\\nb\\xff"


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{dir}", "-o", "{dir}/r.html"],
        ["check", str(CLEAN / "sender.pcap"), "--policy", "{dir}"],
        ["flows", "--bogus", str(CLEAN / "sender.pcap")],
        ["no-such-command"],
    ],
)
def test_a_usage_error_is_one_line(tmp_path: Path, args: list[str]) -> None:
    done = tracekit(*(a.format(dir=tmp_path) for a in args))
    line = one_line(done)
    assert line.startswith("tracekit: ") and "Usage:" not in line


# --- files that are no capture, folders that go round -----------------------------------------


@pytest.mark.parametrize(
    "command", ["analyze", "flows", "report", "ingest", "tsg", "check", "--receiver", "--policy"]
)
def test_a_fifo_is_refused_not_read(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "pipe.pcap"
    os.mkfifo(fifo)
    sender, f = str(CLEAN / "sender.pcap"), str(fifo)
    out = str(tmp_path / "out")
    args = {
        "analyze": ["analyze", f],
        "flows": ["flows", f],
        "report": ["report", f, "-o", out],
        "ingest": ["ingest", f, "-o", out],
        "tsg": ["tsg", f, "--export", out],
        "check": ["check", f],
        "--receiver": ["analyze", sender, "--receiver", f],
        "--policy": ["check", sender, "--policy", f],
    }[command]
    one_line(tracekit(*args), "pipe.pcap", "FIFO")


def _looping_folder(tmp_path: Path) -> Path:
    root = tmp_path / "captures"
    (root / "run").mkdir(parents=True)
    shutil.copy(CLEAN / "sender.pcap", root / "run" / "x.pcap")
    (root / "self1").symlink_to(".")
    (root / "self2").symlink_to(".")
    (root / "run" / "up").symlink_to("..")
    return root


def test_check_walks_symlinked_folders_once_and_counts_each_file_once(tmp_path: Path) -> None:
    root = _looping_folder(tmp_path)
    result = CliRunner().invoke(cli, ["check", str(root)])
    assert result.exit_code == 0, result.output
    assert "all 1 inputs passed" in result.output
    assert f"{root}/run/x.pcap" in result.output  # the real path, not one through a link


def test_batch_walks_symlinked_folders_once(tmp_path: Path) -> None:
    root = _looping_folder(tmp_path)
    done = tracekit("batch", str(root), "-o", str(tmp_path / "dataset"), "-j", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip().endswith("1 inputs: 1 ok")
