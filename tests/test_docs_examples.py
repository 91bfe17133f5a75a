"""Every `$ tracekit ...` example in the README and the docs runs, and prints what it shows.

An example is a fenced block whose first line is `$ tracekit ...` (continued with a trailing
backslash); the lines after the command are its expected output, where a line `...` stands for
any number of lines, and the output ends at the block's next `$ ` line. The command runs in a
temporary folder, which receives what it writes, with the repository's fixtures/ and
docs/examples/ linked in, so that it names them as the page does. A file an example reads from
docs/examples/ may be shown in a fenced block whose first line is a comment naming it
(`# docs/examples/NAME.toml`): the block is that file, to the byte. Every fenced Python block
runs (on the bundled pair, its ingest and its batch output), and every other TOML block loads
as the manifest or policy it is. So an example cannot go stale.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TRACEKIT = str(Path(sys.executable).parent / "tracekit")


def examples() -> list[tuple[str, int, str, list[str]]]:
    """(page, line, command, expected lines) of every example."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in re.finditer(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S):
            lines = block.group(1).splitlines()
            if not lines or not lines[0].startswith("$ tracekit "):
                continue
            command = lines[0][2:]
            k = 1
            while command.endswith("\\") and k < len(lines):
                command = command[:-1].rstrip() + " " + lines[k].strip()
                k += 1
            # The output runs up to the block's next command, if any.
            out = lines[k:]
            stop = next((i for i, x in enumerate(out) if x.startswith("$ ")), len(out))
            line = text[: block.start()].count("\n") + 1
            found.append((str(page.relative_to(ROOT)), line, command, out[:stop]))
    return found


EXAMPLES = examples()


def matches(expected: list[str], got: list[str]) -> bool:
    """Whether `got` has the expected lines in order, `...` standing for any lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line.rstrip()) + r"\n"
        for line in expected
    )
    text = "".join(line.rstrip() + "\n" for line in got)
    if expected and expected[-1].strip() == "...":
        return re.match(pattern, text) is not None
    return re.fullmatch(pattern, text) is not None


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize(("page", "line", "command", "expected"), EXAMPLES,
                         ids=[f"{p}:{n}" for p, n, _, _ in EXAMPLES])  # fmt: skip
def test_the_example_prints_what_it_shows(
    page: str, line: int, command: str, expected: list[str], tmp_path: Path
) -> None:
    # Run in a temporary folder, so that the outputs the example writes land there; the
    # repository's folders it reads are linked in, so that it names them as the page does.
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "examples").symlink_to(ROOT / "docs" / "examples")
    args = shlex.split(command)[1:]
    done = subprocess.run(
        [TRACEKIT, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    got = (done.stdout + done.stderr).splitlines()
    # Exit 2 is bad input: an example may show its one line, and then nothing else.
    refused = bool(expected) and expected[0].startswith("tracekit: ") and len(expected) == 1
    assert done.returncode in ((2,) if refused else (0, 1)), done.stderr[-2000:]
    assert matches(expected, got), "\n".join(["got:", *got])


def shown_files() -> list[tuple[str, int, str, str]]:
    """(page, line, file, block) of every block that shows a file of docs/examples/."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in re.finditer(
            r"^```[a-z]*\n# (docs/examples/\S+)\n(.*?)^```", text, re.M | re.S
        ):
            line = text[: block.start()].count("\n") + 1
            found.append((str(page.relative_to(ROOT)), line, block.group(1), block.group(2)))
    return found


SHOWN = shown_files()


def test_there_are_shown_files() -> None:
    assert SHOWN


@pytest.mark.parametrize(("page", "line", "name", "block"), SHOWN,
                         ids=[f"{p}:{n}" for p, n, _, _ in SHOWN])  # fmt: skip
def test_a_shown_file_is_the_file(page: str, line: int, name: str, block: str) -> None:
    assert (ROOT / name).read_text() == block


def test_install_lines_name_this_projects_distribution() -> None:
    # `tracekit` on PyPI is another project: every install line in the docs names ours.
    import tomllib

    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    lines = [
        line
        for page in PAGES
        for line in page.read_text().splitlines()
        if re.search(r"pip install\b.*tracekit", line)
    ]
    assert lines
    for line in lines:
        assert re.search(rf"pip install\s+'?{re.escape(name)}(\[|'|`|\s|$)", line), line


def fenced(lang: str) -> list[tuple[str, int, str]]:
    """(page, line, text) of every fenced block of `lang` in the README and the docs, but the
    blocks that show a file of docs/examples/ (test_a_shown_file_is_the_file)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.M | re.S):
            if block.group(1).startswith("# docs/examples/"):
                continue
            line = text[: block.start()].count("\n") + 1
            found.append((str(page.relative_to(ROOT)), line, block.group(1)))
    return found


PYTHON = fenced("python")


def test_there_are_python_blocks() -> None:
    assert PYTHON


@pytest.mark.parametrize(("page", "line", "code"), PYTHON,
                         ids=[f"{p}:{n}" for p, n, _ in PYTHON])  # fmt: skip
def test_the_python_block_runs(page: str, line: int, code: str, tmp_path: Path) -> None:
    # The files the blocks read, made as their pages say: the bundled pair under the names
    # the API page uses, `tracekit ingest ... -o t.parquet`, and `tracekit batch DIR -o OUT`.
    pair = ROOT / "fixtures" / "captures" / "slow_start_overrun"
    for side in ("sender", "receiver"):
        (tmp_path / f"{side}.pcap").write_bytes((pair / f"{side}.pcap").read_bytes())
    (tmp_path / "DIR").mkdir()
    (tmp_path / "DIR" / "sender.pcap").write_bytes((pair / "sender.pcap").read_bytes())
    for command in (
        ["ingest", "sender.pcap", "-o", "t.parquet"],
        ["batch", "DIR", "-o", "OUT"],
    ):
        done = subprocess.run(
            [TRACEKIT, *command], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]


TOML = fenced("toml")


def test_there_are_toml_blocks() -> None:
    assert TOML


@pytest.mark.parametrize(("page", "line", "text"), TOML,
                         ids=[f"{p}:{n}" for p, n, _ in TOML])  # fmt: skip
def test_the_toml_block_loads(page: str, line: int, text: str, tmp_path: Path) -> None:
    # A manifest ([[capture]] tables) is read as `tracekit check` reads one; any other block
    # is a policy, loaded with the detectors' kinds as `check --policy` loads it.
    from tracekit.check.policy import load_policy
    from tracekit.detectors import all_detectors
    from tracekit.inputs import read_manifest

    path = tmp_path / "block.toml"
    path.write_text(text)
    if "[[capture]]" in text:
        inputs = read_manifest(path)
        assert inputs and all(i.sender.parent.is_relative_to(tmp_path) for i in inputs)
    else:
        load_policy(path, {d.kind for d in all_detectors()})
