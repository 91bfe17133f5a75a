"""The `tracekit` command: a click group whose subcommands load on first use."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from typing import Any

import click
from tracekit.cli.memory import retain_freed_memory
from tracekit.cli.status import ExitStatus

from tracekit.core.paths import printable
from tracekit.errors import TracekitError

# name -> "module:attribute" of a click command; one line per command.
COMMANDS: dict[str, str] = {
    "analyze": "tracekit.cli.analyze:analyze",
    "batch": "tracekit.cli.batch:batch",
    "check": "tracekit.cli.check:check",
    "compare": "tracekit.cli.compare:compare",
    "flows": "tracekit.cli.flows:flows",
    "ingest": "tracekit.cli.ingest:ingest",
    "plan": "tracekit.cli.plan:plan",
    "report": "tracekit.cli.report:report",
    "tsg": "tracekit.cli.tsg:tsg",
}
# Each command's short help (its docstring's first sentence), so that `tracekit --help` lists
# the commands without importing them (numba, pandas, plotly: a second and more). A test
# checks these against the commands' docstrings.
SHORT_HELP: dict[str, str] = {
    "analyze": "Explain what held the transfers in CAPTURE back: connections and findings.",
    "batch": "Analyse every capture and pair under DIR into a Parquet dataset under OUT.",
    "check": "Fail CI when a capture shows an anomaly or a regression.",
    "compare": "Compare two runs of a test: throughput, findings, drops, verdict, BASE against "
    "NEW.",
    "flows": "List the connections in CAPTURE: endpoints, volumes, timing, retransmissions, "
    "options.",
    "ingest": "Read CAPTURE into the packet table and write it as Parquet.",
    "plan": "Window, socket buffer and bottleneck memory a path needs, by the paper's equations.",
    "report": "Write an HTML report of CAPTURE that opens offline: TSGs, rates, RTT, window, "
    "findings.",
    "tsg": "Export the time-sequence graph series of CAPTURE: one file per series and direction.",
}


class OneLineUsageError(click.UsageError):
    """A usage error shown as every other bad input is: one line, no usage and hint lines."""

    def show(self, file: Any = None) -> None:
        hint = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        click.echo(f"tracekit: {printable(self.format_message())}{hint}", err=True)


def _one_line(exc: click.UsageError) -> OneLineUsageError:
    return OneLineUsageError(exc.format_message(), exc.ctx)


class LazyGroup(click.Group):
    """Imports a subcommand's module only when it runs, and maps errors to exit statuses."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of --help, as click writes it, from SHORT_HELP."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        # A bare command with the same help shortens it as the real one would.
        rows = [
            (name, click.Command(name, help=SHORT_HELP[name]).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except OneLineUsageError:
            raise
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TracekitError as exc:
            # Bad input: one line naming the file and the problem, never a traceback (a file
            # name may hold a newline, or bytes that are not UTF-8).
            click.echo(f"tracekit: {printable(str(exc))}", err=True)
            ctx.exit(ExitStatus.BAD_INPUT)
        except OneLineUsageError:
            raise
        except click.UsageError as exc:
            # A subcommand's bad option or argument (exit 2, as click gives it).
            raise _one_line(exc) from None
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            ctx.exit(ExitStatus.OK)
        except Exception:
            click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo("tracekit: internal error (a bug: please report it)", err=True)
            ctx.exit(ExitStatus.INTERNAL_ERROR)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit-tcp")
def cli() -> None:
    """Explain what held a TCP transfer back, from its sender and receiver captures."""


# Commands that read a capture once and free little: keeping freed memory would only raise
# their peak (ingest has a memory budget of 64 bytes per packet + 200 MB).
_SINGLE_PASS = frozenset({"ingest", "flows"})
# numpy asks for transparent huge pages on arrays of 4 MB or more, and the kernel zeroes a
# 2 MB page at its first touch even where the array uses a few kilobytes of it: slow on a
# virtual machine, whose host backs memory as it is first touched (up to 3 s per GB measured
# here), and resident for nothing where an array is allocated for the most rows it can get
# and fills fewer (the reader's columns, the series' tables). Without huge pages, an ingest of
# 5 M packets took 1.36 s of CPU instead of 1.57 s (best of 8), and `analyze` of a 5 M-packet
# capture peaked at 1,276 MB instead of 1,324 MB, with 1.2 to 1.4 s of system time instead of
# 2.6 to 3.3 s (3 runs each). Set before numpy loads; a user's own setting stands.
_ENVIRONMENT = {"NUMPY_MADVISE_HUGEPAGE": "0"}


def main() -> None:
    """Console entry point."""
    # numpy's OpenBLAS starts a thread per core at import, and they spin for a while: on two
    # cores, 5% of an ingest's CPU went to them. tracekit does no linear algebra big enough to
    # share out (set before any command imports numpy; a user's own setting stands).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for name, value in _ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command not in _SINGLE_PASS:
        retain_freed_memory()
        cli(prog_name="tracekit")
        return
    try:
        cli(prog_name="tracekit")
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code: object) -> None:
    """End the process as SystemExit(code) would, without the interpreter's teardown.

    Once a single-pass command has returned, its files are closed and renamed into place;
    what is left is freeing every object and module one by one, 25 to 40 ms after a 5 M-packet
    ingest (a twentieth of it), which the system does at once when the process ends.
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away (`| head`), or a stream already closed: nothing to flush.
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()
    os._exit(status)
