"""`tracekit compare BASE NEW [--connection N|BASE_N:NEW_N] [-o FILE.html] [--json FILE]
[--fail-on-regression] [--policy FILE]`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from tracekit.cli import common
from tracekit.cli.memory import give_back
from tracekit.cli.status import ExitStatus

_file = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--connection",
    "connection",
    metavar="N|BASE_N:NEW_N",
    help="The connections to compare (numbers as `tracekit flows` shows them); default: "
    "the busiest of BASE and its match in NEW.",
)
@click.option("-o", "--output", type=_file, help="Write the comparison as an HTML page here.")
@click.option("--json", "json_out", type=_file, help="Write the comparison as JSON here.")
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 1 when NEW regressed against BASE as `check --baseline` judges it.",
)
@click.option(
    "--policy",
    type=_file,
    help="Policy file (TOML) as `check` reads it: its [baseline] keys judge a regression.",
)
@click.pass_context
def compare(
    ctx: click.Context,
    base: Path,
    new: Path,
    connection: str | None,
    output: Path | None,
    json_out: Path | None,
    fail_on_regression: bool,
    policy: Path | None,
) -> None:
    """Compare two runs of a test: throughput, findings, drops, verdict, BASE against NEW.

    BASE and NEW are each a capture or a sender/receiver pair (NAME.sender.pcap beside
    NAME.receiver.pcap, or a folder holding sender.pcap and receiver.pcap). Exit 0: compared
    (1 with --fail-on-regression when NEW regressed); 2: bad input or usage.
    docs/commands/compare.md.
    """
    from tracekit import detectors
    from tracekit.check.policy import DEFAULT_POLICY, load_policy
    from tracekit.check.write import write_text_atomic
    from tracekit.compare import compare as run_compare
    from tracekit.compare import one_input, parse_choice, render_page
    from tracekit.core.paths import require_regular_file

    choice = parse_choice(connection) if connection is not None else None
    if policy is not None:
        require_regular_file(policy)
        known = {cls.kind for cls in detectors.all_detectors()}
        rules = load_policy(policy, known)
    else:
        rules = DEFAULT_POLICY
    # Outputs are checked before any analysis: none may land on a capture or the policy.
    read = [*one_input(base, "BASE").paths, *one_input(new, "NEW").paths, policy]
    common.refuse_overwriting(read, (output, json_out))
    for out in (output, json_out):
        if out is not None:
            common.prepare_output(out)
    result = run_compare(
        base, new, policy=rules, choice=choice, on_warning=common.warn, after_stage=give_back
    )
    if output is not None:
        with common.writing(output):
            write_text_atomic(output, render_page(result))
    if json_out is not None:
        with common.writing(json_out):
            write_text_atomic(json_out, json.dumps(result.to_dict(), indent=2) + "\n")
    click.echo(result.text())
    if fail_on_regression and result.regressions:
        ctx.exit(ExitStatus.CHECK_FAILED)
