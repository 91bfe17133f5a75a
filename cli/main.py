"""The `tracekit` command: a click group whose subcommands load on first use."""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

import click

from cli.memory import retain_freed_memory
from cli.status import ExitStatus
from tracekit.errors import TracekitError

# name -> "module:attribute" of a click command; one line per command.
COMMANDS: dict[str, str] = {
    "analyze": "cli.analyze:analyze",
    "batch": "cli.batch:batch",
    "check": "cli.check:check",
    "flows": "cli.flows:flows",
    "ingest": "cli.ingest:ingest",
    "plan": "cli.plan:plan",
    "report": "cli.report:report",
    "tsg": "cli.tsg:tsg",
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when it runs, and maps errors to exit statuses."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TracekitError as exc:
            # Bad input: one line naming the file and the problem, never a traceback.
            click.echo(f"tracekit: {exc}", err=True)
            ctx.exit(ExitStatus.BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            ctx.exit(ExitStatus.OK)
        except Exception:
            click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo("tracekit: internal error (a bug: please report it)", err=True)
            ctx.exit(ExitStatus.INTERNAL_ERROR)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def cli() -> None:
    """Explain what held a TCP transfer back, from its sender and receiver captures."""


# Commands that read a capture once and free little: keeping freed memory would only raise
# their peak (ingest has a memory budget of 64 bytes per packet + 200 MB).
_SINGLE_PASS = frozenset({"ingest", "flows"})


def main() -> None:
    """Console entry point."""
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command not in _SINGLE_PASS:
        retain_freed_memory()
    cli(prog_name="tracekit")
