"""`tracekit batch DIR -o OUT [--jobs N] [--engine dask --scheduler ADDRESS]`."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import click
from tracekit.cli import common
from tracekit.cli.memory import give_back

from tracekit.batch import BatchConfig, Engine, Outcome, outcome_counts, run_batch
from tracekit.core.paths import printable
from tracekit.inputs import find_inputs
from tracekit.merge import parse_map


@click.command()
@click.argument("root", type=click.Path(file_okay=False, path_type=Path), metavar="DIR")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of the Parquet dataset (created with any missing folders above it; a run "
    "started again resumes in it).",
)
@click.option("-j", "--jobs", type=int, default=0, help="Worker processes [default: one per core].")
@click.option(
    "--engine",
    type=click.Choice(["process", "dask"]),
    default="process",
    show_default=True,
    help="Run on local processes or on a Dask cluster.",
)
@click.option("--scheduler", help="Address of the Dask scheduler (with --engine dask).")
@common.map_option
@common.config_option
def batch(
    root: Path,
    output: Path,
    jobs: int,
    engine: str,
    scheduler: str | None,
    maps: tuple[str, ...],
    config_file: Path | None,
) -> None:
    """Analyse every capture and pair under DIR into a Parquet dataset under OUT.

    OUT/connections, OUT/findings and OUT/captures each read as one table in DuckDB, pandas or
    polars (docs/commands/batch.md). Inputs finished by an earlier run are skipped; a capture
    that cannot be read is reported and the batch goes on. Exit 0 even then: its error is in
    OUT/captures (status 'error'); see `tracekit check` to gate CI.
    """
    config = BatchConfig(
        root=root,
        out=output,
        jobs=jobs,
        engine=cast(Engine, engine),
        scheduler=scheduler,
        addr_map=tuple(parse_map(maps).items()),
        detector_configs=tuple(common.detector_configs(config_file).items()),
        after_stage=give_back,
    )
    _prepare_output(root, output, config_file)
    with ExitStack() as stack:
        bar: Any = None

        def start(to_do: int, done: int) -> None:
            nonlocal bar
            if done:
                click.echo(f"tracekit: {done} inputs already done in {output}, skipped", err=True)
            if sys.stderr.isatty() and to_do:
                bar = stack.enter_context(
                    click.progressbar(length=to_do, label="analysing", file=sys.stderr)
                )

        def finished(outcome: Outcome) -> None:
            if outcome.status in ("error", "crash"):
                # On its own line, not in the middle of the bar's.
                click.echo("\n" if bar is not None else "", err=True, nl=False)
                line = f"tracekit: {outcome.status}: {outcome.name}: {outcome.error}"
                click.echo(printable(line), err=True)
            if bar is not None:
                bar.update(1)

        with common.writing(output):
            outcomes = run_batch(config, on_start=start, on_done=finished)
    counts = outcome_counts(outcomes)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    click.echo(f"{output}: {len(outcomes)} inputs: {summary}")


# --- the output rules of every command (cli.common), applied to the dataset's folder ----------


def _prepare_output(root: Path, output: Path, config_file: Path | None) -> None:
    """Refuse an OUT that holds DIR or any input (the --config file too); make OUT; refuse,
    before any work, an input whose name the dataset could not record."""
    files = [p for inp in find_inputs([root]) for p in inp.paths]
    common.refuse_overwriting([root, *files, config_file], folder=output)
    for path in files:
        # OUT/captures records each input's path.
        common.require_utf8_name(path, "OUT/captures")
    common.prepare_output(output, folder=True)
