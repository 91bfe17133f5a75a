"""`tracekit check PATH... [--policy FILE] [--junit FILE] [--json FILE] [--baseline FILE]`.

`--config FILE` is another name for `--policy FILE`: the one tracekit.toml holds the policy and
the detectors' tables, and analyze, report and batch read it as `--config`."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from tracekit.cli import common
from tracekit.cli.memory import give_back
from tracekit.cli.status import ExitStatus

from tracekit import detectors
from tracekit.check.baseline import load_baseline
from tracekit.check.junit import render_junit
from tracekit.check.policy import DEFAULT_POLICY, load_policy
from tracekit.check.text import render_text
from tracekit.check.verdict import CaptureVerdict, run_check
from tracekit.check.write import write_text_atomic
from tracekit.core.paths import require_regular_file
from tracekit.errors import TracekitError
from tracekit.inputs import CaptureInput, find_inputs

_file = click.Path(dir_okay=False, path_type=Path)


@contextmanager
def _bar(total: int) -> Iterator[Callable[[], None]]:
    """A progress bar over inputs on a terminal; nothing when stderr is a file or a CI log."""
    if not sys.stderr.isatty() or total < 2:
        yield lambda: None
        return
    with click.progressbar(length=total, label="checking", file=sys.stderr) as bar:
        yield lambda: bar.update(1)


@click.command()
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH..."
)
@click.option(
    "--policy",
    type=_file,
    help="Policy file (TOML), with any [detectors.KIND] tables; without it the default applies.",
)
@click.option(
    "--config",
    "config_file",
    type=_file,
    help="The same file as --policy, by the name analyze, report and batch give it.",
)
@click.option("--junit", type=_file, help="Write a JUnit XML report here.")
@click.option("--json", "json_out", type=_file, help="Write the verdicts as JSON here.")
@click.option("--baseline", type=_file, help="An earlier --json output to compare with.")
@click.pass_context
def check(
    ctx: click.Context,
    paths: tuple[Path, ...],
    policy: Path | None,
    config_file: Path | None,
    junit: Path | None,
    json_out: Path | None,
    baseline: Path | None,
) -> None:
    """Fail CI when a capture shows an anomaly or a regression.

    PATH is a capture, a sender/receiver pair (NAME.sender.pcap beside NAME.receiver.pcap, or a
    folder holding sender.pcap and receiver.pcap), a folder to search, or a manifest (.toml).
    Exit 0: everything passed; 1: a finding, threshold or regression failed the policy; 2: bad
    input or usage. Rules and the default policy: docs/commands/check.md.
    """
    policy = _policy_file(policy, config_file)
    _require_regular_files(policy, baseline)
    known_kinds = {cls.kind for cls in detectors.all_detectors()}
    rules = load_policy(policy, known_kinds) if policy is not None else DEFAULT_POLICY
    earlier = load_baseline(baseline) if baseline is not None else None
    inputs = find_inputs(paths)
    if not inputs:
        raise TracekitError(f"no captures found in {', '.join(str(p) for p in paths)}")
    _prepare_outputs(paths, inputs, (policy, baseline), (junit, json_out))
    with _bar(len(inputs)) as advance:

        def done(verdict: CaptureVerdict) -> None:
            for warning in verdict.warnings:
                click.echo(f"tracekit: warning: {warning}", err=True)
            advance()

        result = run_check(inputs, rules, earlier, on_done=done, after_stage=give_back)
    if junit is not None:
        with common.writing(junit):
            write_text_atomic(junit, render_junit(result))
    if json_out is not None:
        with common.writing(json_out):
            write_text_atomic(json_out, json.dumps(result.to_dict(), indent=2) + "\n")
    click.echo(render_text(result))
    if not result.passed:
        ctx.exit(ExitStatus.CHECK_FAILED)


def _policy_file(policy: Path | None, config_file: Path | None) -> Path | None:
    """The one policy file, named by --policy or --config (or both, naming the same file)."""
    if config_file is None:
        return policy
    if policy is not None and os.path.realpath(policy) != os.path.realpath(config_file):
        raise click.UsageError(
            "--config is another name for --policy (one tracekit.toml holds the policy and the "
            "detectors' tables): give one of them"
        )
    return config_file


# --- the output rules of every command (cli.common), applied to check's files -----------------


def _require_regular_files(*option_files: Path | None) -> None:
    """--policy and --baseline are read whole: a FIFO would block forever."""
    for path in option_files:
        if path is not None:
            require_regular_file(path)


def _prepare_outputs(
    paths: tuple[Path, ...],
    inputs: list[CaptureInput],
    option_files: tuple[Path | None, ...],
    outputs: tuple[Path | None, ...],
) -> None:
    """Refuse an output over any file the check reads; make the outputs' folders."""
    manifests = [p for p in paths if p.suffix.lower() == ".toml"]
    read = [*(p for inp in inputs for p in inp.paths), *manifests, *option_files]
    common.refuse_overwriting(read, outputs)
    for output in outputs:
        if output is not None:
            common.prepare_output(output)
