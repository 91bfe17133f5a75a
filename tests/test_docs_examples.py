"""Every `$ tracekit ...` example in the README and the docs runs, and prints what it shows.

An example is a fenced block whose first line is `$ tracekit ...` (continued with a trailing
backslash); the lines after the command are its expected output, where a line `...` stands for
any number of lines, and the output ends at the block's next `$ ` line. The command runs in a
temporary folder, which receives what it writes, with the repository's fixtures/ and
docs/examples/ linked in, so that it names them as the page does. A file an example reads from
docs/examples/ may be shown in a fenced block whose first line is a comment naming it
(`# docs/examples/NAME.toml`): the block is that file, to the byte. Every fenced Python block
runs (on the bundled pair, its ingest and its batch output), and every other TOML block loads
as the manifest or policy it is. Every YAML block is a CI job: its shell steps (GitHub's `run:`,
GitLab's `script:` and `after_script:`) run as the CI would run them, in a temporary folder that
holds captures named by the page's rule, the example policy and an accepted baseline, and the
files its artifacts name must be there after. So an example cannot go stale.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# ---- CI snippets: YAML, parsed as far as the docs use it ---------------------------------------


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` at its start or after a space, outside
    quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(item) for item in text[1:-1].split(",") if item.strip()]
    return text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse_yaml(text: str) -> Any:
    """Block mappings and sequences, plain, quoted and flow-list scalars, `|` and `>` block
    scalars, comments: the YAML of a CI file as docs/ci.md writes it."""
    raw = text.splitlines()
    lines = [(i, _strip_comment(line)) for i, line in enumerate(raw)]
    lines = [(i, line) for i, line in lines if line.strip()]
    pos = 0

    def block_scalar(style: str, parent: int) -> str:
        # The raw lines (comments are text here) more indented than their key, up to the next
        # line of the structure.
        nonlocal pos
        start = lines[pos - 1][0] + 1
        while pos < len(lines) and _indent(lines[pos][1]) > parent:
            pos += 1
        end = lines[pos][0] if pos < len(lines) else len(raw)
        body = raw[start:end]
        while body and not body[-1].strip():
            body.pop()
        margin = min(_indent(line) for line in body if line.strip())
        body = [line[margin:] for line in body]
        if style.startswith("|"):
            return "\n".join(body) + "\n"
        return " ".join(line.strip() for line in body) + "\n"

    def value_after(rest: str, parent: int) -> Any:
        nonlocal pos
        if rest in ("|", ">", "|-", ">-"):
            return block_scalar(rest, parent)
        if rest:
            return _scalar(rest)
        if pos < len(lines) and _indent(lines[pos][1]) > parent:
            return node(_indent(lines[pos][1]))
        if (
            pos < len(lines)
            and _indent(lines[pos][1]) == parent
            and lines[pos][1].lstrip().startswith("- ")
        ):
            return node(parent)  # a sequence may sit at its key's own indent
        return None

    def mapping_entry(text: str, indent: int, into: dict[str, Any]) -> None:
        key, _, rest = text.partition(":")
        into[_scalar(key)] = value_after(rest.strip(), indent)

    def node(indent: int) -> Any:
        nonlocal pos
        first = lines[pos][1].strip()
        if first.startswith("- ") or first == "-":
            items: list[Any] = []
            while pos < len(lines) and _indent(lines[pos][1]) == indent:
                item = lines[pos][1].strip()
                if not item.startswith("-"):
                    break
                body = item[1:].strip()
                pos += 1
                if re.match(r"^[\w.-]+:(\s|$)", body):
                    # A mapping, its first entry on the dash's line.
                    entry: dict[str, Any] = {}
                    mapping_entry(body, indent + 2, entry)
                    while pos < len(lines) and _indent(lines[pos][1]) == indent + 2:
                        pos += 1
                        mapping_entry(lines[pos - 1][1].strip(), indent + 2, entry)
                    items.append(entry)
                else:
                    items.append(value_after(body, indent))
            return items
        out: dict[str, Any] = {}
        while pos < len(lines) and _indent(lines[pos][1]) == indent:
            entry_text = lines[pos][1].strip()
            if entry_text.startswith("- "):
                break
            pos += 1
            mapping_entry(entry_text, indent, out)
        return out

    parsed = node(_indent(lines[0][1]))
    assert pos == len(lines), (
        f"YAML not understood from line {lines[pos][0] + 1}: {raw[lines[pos][0]]}"
    )
    return parsed


def test_the_yaml_subset_parses_as_yaml_does() -> None:
    text = """# a comment
job:
  on: [push, pull_request]
  name: "quoted # not a comment"
  steps:
    - uses: a/b@v1   # a comment
      with:
        path: |
          one/
          two.xml
    - run: >
        folded
        line
  script:
  - plain
  - |
    for x in a b; do  # kept: shell
      echo "$x"
    done
"""
    assert parse_yaml(text) == {
        "job": {
            "on": ["push", "pull_request"],
            "name": "quoted # not a comment",
            "steps": [
                {"uses": "a/b@v1", "with": {"path": "one/\ntwo.xml\n"}},
                {"run": "folded line\n"},
            ],
            "script": [
                "plain",
                'for x in a b; do  # kept: shell\n  echo "$x"\ndone\n',
            ],
        }
    }


YAML = fenced("yaml")


def test_there_are_ci_snippets() -> None:
    assert len(YAML) >= 3


def _jobs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The CI jobs of a file: GitHub's under `jobs:`, GitLab's at the top (any mapping with a
    `script:`)."""
    if "jobs" in doc:
        return list(doc["jobs"].values())
    return [job for job in doc.values() if isinstance(job, dict) and "script" in job]


def _shell_steps(job: dict[str, Any]) -> list[tuple[str, bool]]:
    """(shell text, runs after a failure) of each step, in order."""
    if "steps" in job:
        return [
            (step["run"], "cancelled()" in str(step.get("if", "")))
            for step in job["steps"]
            if "run" in step
        ]
    return [(text, False) for text in job["script"]] + [
        (text, True) for text in job.get("after_script", [])
    ]


def _artifacts(job: dict[str, Any]) -> list[str]:
    """The files and folders a job's artifacts and test reports name."""
    names: list[str] = []
    for step in job.get("steps", []):
        with_ = step.get("with") or {}
        for key in ("path", "report_paths"):
            names += str(with_.get(key, "")).split()
    artifacts = job.get("artifacts") or {}
    names += artifacts.get("paths", [])
    names += [str(v) for v in (artifacts.get("reports") or {}).values()]
    return names


@pytest.mark.parametrize(("page", "line", "text"), YAML,
                         ids=[f"{p}:{n}" for p, n, _ in YAML])  # fmt: skip
def test_the_ci_snippet_runs(page: str, line: int, text: str, tmp_path: Path) -> None:
    # The folder a CI job checks out, as docs/ci.md describes it: two bundled pairs named by its
    # rule, the example policy, and an accepted run's --json output as the baseline. A job that
    # reads /srv/... (a runner's own disk) reads the same captures under the temporary folder.
    work = tmp_path / "checkout"
    work.mkdir()
    for folder in (work / "captures", tmp_path / "srv" / "captures"):
        folder.mkdir(parents=True)
        for name in ("clean", "slow_start_overrun"):
            for side in ("sender", "receiver"):
                (folder / f"{name}.{side}.pcap").symlink_to(
                    ROOT / "fixtures" / "captures" / name / f"{side}.pcap"
                )
    (work / "tracekit.toml").write_text((ROOT / "docs" / "examples" / "tracekit.toml").read_text())
    (work / "ci").mkdir()
    accepted = subprocess.run(
        [TRACEKIT, "check", "captures/", "--policy", "tracekit.toml", "--json",
         "ci/tracekit-baseline.json"],
        capture_output=True, text=True, timeout=300, cwd=work,
    )  # fmt: skip
    assert accepted.returncode in (0, 1), accepted.stderr[-2000:]
    # `pip install tracekit-tcp` installs what is installed already: a pip that checks the
    # line and does nothing else; tracekit is this checkout's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pip = bin_dir / "pip"
    pip.write_text('#!/bin/sh\n[ "$*" = "install tracekit-tcp" ] || exit 9\n')
    pip.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{Path(TRACEKIT).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    jobs = _jobs(parse_yaml(text))
    assert jobs, "no CI job in the block"
    ran = 0
    for job in jobs:
        failed = False
        for shell, after_failure in _shell_steps(job):
            if failed and not after_failure:
                continue
            shell = shell.replace("/srv/", f"{tmp_path}/srv/")
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", shell],
                capture_output=True, text=True, timeout=600, cwd=work, env=env,
            )  # fmt: skip
            ran += "tracekit " in shell
            # Exit 1 is a failed check, the job's verdict; anything else is a broken step.
            allowed = (0, 1) if re.search(r"tracekit check\b", shell) else (0,)
            assert done.returncode in allowed, (shell, done.stdout[-2000:], done.stderr[-2000:])
            failed = failed or done.returncode != 0
        for name in _artifacts(job):
            assert (work / name).exists(), f"{name}: the job's artifact was not written"
    assert ran, "no step ran tracekit"
    if "tracekit report" in text:
        assert sorted(p.name for p in (work / "reports").iterdir()) == [
            "clean.html",
            "slow_start_overrun.html",
        ]
    if "tracekit batch" in text:
        assert any((tmp_path / "srv" / "tracekit-dataset").iterdir())
