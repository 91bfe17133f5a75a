import hashlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from tracekit.cli.main import COMMANDS, SHORT_HELP, cli

from tests.helpers.crafting import write


def test_every_registered_command_loads_and_has_help() -> None:
    runner = CliRunner()
    for name in COMMANDS:
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage:" in result.output


def test_the_command_list_says_what_each_command_says_of_itself() -> None:
    """`tracekit --help` lists commands from SHORT_HELP, without importing them: it must say
    what click would say from the commands themselves."""
    assert set(SHORT_HELP) == set(COMMANDS)
    runner = CliRunner()
    eager = click.Group("tracekit", help=cli.help)
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        assert SHORT_HELP[name] == command.get_short_help_str(limit=1000), name
        eager.add_command(command, name)
    lazy_help = runner.invoke(cli, ["--help"], terminal_width=100)
    eager_help = runner.invoke(eager, ["--help"], terminal_width=100, prog_name="tracekit")
    assert lazy_help.exit_code == 0
    commands_part = lazy_help.output.split("Commands:")[1]
    assert commands_part == eager_help.output.split("Commands:")[1]


def test_help_imports_no_command() -> None:
    code = (
        "import sys; sys.argv = ['tracekit', '--help']\n"
        "from tracekit.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('numba', 'pandas', 'plotly', 'pyarrow') if m in sys.modules)\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in out.stdout
    assert "HEAVY []" in out.stdout


def test_version_names_the_installed_distribution() -> None:
    # The version comes from the installed distribution's metadata (tracekit-tcp), which the
    # command must name: a wrong name is a traceback, not a version.
    from importlib.metadata import version

    out = subprocess.run(
        ["tracekit", "--version"], capture_output=True, text=True, check=False, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"tracekit, version {version('tracekit-tcp')}\n"


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2


# --- bad input: one line naming the file, exit 2, no traceback, the file unchanged -------------


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp / "empty.pcap"
    empty.write_bytes(b"")
    junk = tmp / "junk.pcap"
    junk.write_bytes(b"this is not a capture file at all\n" * 4)
    udp = write(tmp / "udp.pcap", [Ether() / IP() / UDP(sport=1, dport=2) / b"12345678"])
    return {
        "missing": (tmp / "nope.pcap", "no such file"),
        "empty": (empty, "empty"),
        "junk": (junk, "magic"),
        "udp only": (udp, "no TCP"),
    }


@pytest.mark.parametrize("command", ["flows", "analyze", "ingest"])
@pytest.mark.parametrize("case", ["missing", "empty", "junk", "udp only"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, command: str, case: str) -> None:
    path, words = _bad_inputs(tmp_path)[case]
    if command == "ingest" and case == "udp only":
        pytest.skip("ingest keeps UDP: a UDP-only capture is valid input there")
    before = path.read_bytes() if path.exists() else None
    args = [command, str(path)] + (
        ["-o", str(tmp_path / "o.parquet")] if command == "ingest" else []
    )
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and words.lower() in lines[0].lower()
    assert "Traceback" not in result.output
    if before is not None:
        assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(before).digest()


DOCS = Path(__file__).resolve().parent.parent / "docs" / "commands"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_its_page(name: str) -> None:
    page = DOCS / f"{name}.md"
    assert page.is_file(), f"docs/commands/{name}.md is missing"
    assert f"tracekit {name}" in page.read_text()


def test_analyze_lists_the_busiest_connections_and_counts_the_rest(tmp_path: Path) -> None:
    from tracekit.cli.analyze import MAX_LISTED

    from tests.helpers.crafting import CLIENT, SERVER, tcp

    packets = [tcp(0.001 * i, CLIENT, SERVER, 20000 + i, 80, "S", 0) for i in range(60)]
    packets += [  # connection 60 carries data
        tcp(1.0, CLIENT, SERVER, 30000, 80, "S", 0),
        tcp(1.1, SERVER, CLIENT, 80, 30000, "SA", 0, 1),
        tcp(1.2, CLIENT, SERVER, 30000, 80, "A", 1, 1, 1000),
    ]
    capture = write(tmp_path / "scan.pcap", packets)
    result = CliRunner().invoke(cli, ["analyze", str(capture)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("connection ")]
    assert len(lines) == MAX_LISTED == 50
    assert any(ln.startswith("connection 60:") and "1000 bytes" in ln for ln in lines)
    assert f"... {61 - MAX_LISTED} more connections" in result.output
    every = CliRunner().invoke(cli, ["analyze", "--json", str(capture)])
    assert len(json.loads(every.output)["connections"]) == 61


def test_analyze_counts_every_connection_by_what_held_it_back(tmp_path: Path) -> None:
    # A troubled transfer (a resend and a zero-window stall, too few segments for a verdict)
    # among 60 scans of one SYN each: more connections than analyze lists, so it counts them
    # all by cause, and names the troubled one.
    from tracekit.cli.analyze import MAX_LISTED

    from tests.helpers.crafting import CLIENT, SERVER, tcp, transfer
    from tests.helpers.independent import tshark_directions

    scans = [tcp(20.0 + 0.001 * i, CLIENT, SERVER, 20000 + i, 80, "S", 0) for i in range(60)]
    capture = write(tmp_path / "scan.pcap", [*transfer(), *scans])
    streams = tshark_directions(capture).groupby("stream").ngroups
    assert streams == 61 > MAX_LISTED
    result = CliRunner().invoke(cli, ["analyze", str(capture)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"all {streams} connections by"))
    causes = []
    for ln in lines[at + 1 :]:
        if not ln.startswith("  "):
            break
        causes.append(ln.strip())
    # None carries enough data for a verdict; the transfer is connection 0 (the capture's
    # first), the one troubled connection.
    assert causes == [f"too little data to tell: {streams}, 1 with a warning or an error (#0)"]


# --- the console entry point: single-pass commands end without the interpreter's teardown -------

CLEAN = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "clean"


def _entry_point(*args: str) -> subprocess.CompletedProcess[str]:
    """The `tracekit` console script as installed (tracekit.cli.main:main), output piped."""
    code = "import sys; from tracekit.cli.main import main; sys.argv[0] = 'tracekit'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_single_pass_commands_flush_their_output_and_keep_their_status(tmp_path: Path) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    truth = json.loads((CLEAN / "truth.json").read_text())
    sent = truth["transfer"]["sender"]["bytes"]
    out = tmp_path / "t.parquet"
    done = _entry_point("ingest", str(CLEAN / "sender.pcap"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"{out}: ") and done.stderr.endswith(" 1 connection\n")
    table = pq.read_table(out, columns=["dir", "payload_bytes"])
    data = table.filter(pc.equal(table["dir"], 0))
    assert pc.sum(data["payload_bytes"]).as_py() == sent  # the bytes the sender wrote

    flows = _entry_point("flows", str(CLEAN / "sender.pcap"), "--json")
    assert flows.returncode == 0, flows.stderr
    # stdout is a pipe, so block-buffered: the JSON is whole only if it was flushed.
    (row,) = json.loads(flows.stdout)
    assert row["bytes_a2b"] == sent
    # The sender's kernel counted the segments it sent, FIN included (tcp_info after close).
    assert row["packets_a2b"] == truth["transfer"]["sender"]["tcp_info"]["segs_out"]

    missing = _entry_point("ingest", str(tmp_path / "nope.pcap"), "-o", str(out))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"tracekit: {tmp_path / 'nope.pcap'}: no such file"
    ]
    usage = _entry_point("flows")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


def test_a_connection_is_named_from_the_end_that_sent_its_data() -> None:
    # The lab's copy that starts half a second into the transfer opens with the receiver's ACK,
    # so the receiver is side a and the data runs b2a. The line names the lab's sender first,
    # with the data bytes the lab counted in that copy.
    root = Path(__file__).resolve().parent.parent / "fixtures" / "sweep" / "base_midstream"
    truth = json.loads((root / "truth.json").read_text())
    sender, receiver = truth["flow"]["sender"], truth["flow"]["receiver"]
    data_bytes = truth["capture"]["counts"]["sender"]["a2b_payload_bytes"]
    result = CliRunner().invoke(cli, ["analyze", str(root / "sender.pcap.zst")])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(f"connection 0: {sender} -> {receiver} (b2a)  {data_bytes} bytes")
