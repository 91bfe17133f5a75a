"""The tree is the pipeline: each stage imports only the stages before it, and the package list
that pyproject.toml installs is the tree's.

capture -> connections -> series -> merge -> detectors -> pipeline -> report/check/batch -> cli,
on a floor (`tracekit.core`, errors, schema, findings, units, physics) that imports no stage.
"""

from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Rank of each part of the package: a module may import parts of its own rank or lower. Parts of
# one rank do not depend on each other's order (e.g. the report and the CI gate).
RANKS: dict[str, int] = {
    "tracekit": 0,
    "tracekit.core": 0,
    "tracekit.errors": 0,
    "tracekit.units": 0,
    "tracekit.schema": 0,
    "tracekit.findings": 0,
    "tracekit.physics": 0,
    "tracekit.capture": 1,
    "tracekit.connections": 2,
    "tracekit.series": 3,
    "tracekit.merge": 4,
    "tracekit.detectors": 5,
    "tracekit.analysis": 5,
    "tracekit.tunables": 5,
    "tracekit.pipeline": 6,
    "tracekit.inputs": 7,
    "tracekit.warmup": 7,
    "tracekit.report": 8,
    "tracekit.check": 8,
    "tracekit.batch": 8,
    "tracekit.export": 8,
    "tracekit.compare": 8,
    "tracekit.api": 8,
    "tracekit.cli": 9,
}


# The one import that goes up, on purpose: `tracekit.open` (the notebook API) is reached from the
# package itself, imported on first use only.
ALLOWED_UPWARD = {("tracekit", "tracekit.api")}


def _module_name(path: Path) -> str:
    """The installed name of a source file: cli/ installs as tracekit.cli."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "cli":
        parts = ["tracekit", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _part(module: str) -> str:
    """The longest RANKS key that is `module` or a package above it."""
    best = ""
    for key in RANKS:
        if (module == key or module.startswith(key + ".")) and len(key) > len(best):
            best = key
    if not best:
        raise AssertionError(f"{module}: not in the layout's RANKS; give it a rank")
    return best


def _sources() -> list[Path]:
    return sorted([*(ROOT / "tracekit").rglob("*.py"), *(ROOT / "cli").rglob("*.py")])


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every tracekit module the file imports, at any depth (lazy imports count too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tracekit import units` names a module; `from tracekit.x import f`, a value.
            if node.module == "tracekit":
                found += [(node.lineno, f"tracekit.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] == "tracekit"]


def test_every_source_file_has_a_rank() -> None:
    for path in _sources():
        _part(_module_name(path))


def test_nothing_imports_a_later_stage() -> None:
    upward = []
    for path in _sources():
        here = _part(_module_name(path))
        for line, name in _imports(path):
            if name == "tracekit.__version__":
                continue
            there = _part(name)
            if (_module_name(path), name) in ALLOWED_UPWARD:
                continue
            if RANKS[there] > RANKS[here]:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {name}")
    assert not upward, "\n".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    # The rule above can fail: a stage module that imports the report is one it reports.
    here = _part(_module_name(ROOT / "tracekit" / "series" / "stage.py"))
    assert RANKS[_part("tracekit.report.build")] > RANKS[here]


def test_the_installed_packages_are_the_tree() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {_module_name(p) for p in _sources() if p.name == "__init__.py"}
    assert listed == on_disk
    assert config["package-dir"] == {"tracekit.cli": "cli"}


@pytest.mark.parametrize("name", ["cli", "tracekit.cli.main"])
def test_the_command_line_installs_under_tracekit(name: str) -> None:
    import importlib.util
    import os
    import subprocess
    import sys

    # From a folder other than the source tree, so that cwd does not put cli/ on sys.path.
    code = f"import importlib.util as u; print(u.find_spec({name!r}) is not None)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    assert out == ("False" if name == "cli" else "True")
    assert importlib.util.find_spec("tracekit.cli") is not None


@pytest.mark.slow
def test_a_wheel_installs_the_cli_under_tracekit(tmp_path: Path) -> None:
    # `pip install .` (not -e) builds a wheel: what it holds is what a user gets. It is built
    # from a copy, so that the build's files never land in the tree the other tests run from.
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("tracekit", "cli"):
        shutil.copytree(
            ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "_aot*")
        )
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    # The kernels' build is the one the install made of these sources, where its cache holds
    # it (setup.py): the same module a build from them makes, in seconds, not minutes.
    env = {**os.environ, "TRACEKIT_AOT_CACHE": str(ROOT / "build" / "aot-cache")}
    subprocess.run([*pip, "-w", str(tmp_path), str(src)], check=True, capture_output=True, env=env)
    (wheel,) = tmp_path.glob("tracekit_tcp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"tracekit"}
    assert "tracekit/cli/main.py" in names
    assert any(n.startswith("tracekit/core/_aot") for n in names)  # the kernels, built ahead
    # The report opens offline: its scripts, styles and the vendored plotly.js with its licence.
    for name in ("report.js", "report.css", "plotly-basic.min.js", "plotly-basic.LICENSE"):
        assert f"tracekit/report/{name}" in names
    # The build writes nothing beside the sources but its own folders.
    assert not (src / "root").exists()
    (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "tracekit = tracekit.cli.main:main" in text
