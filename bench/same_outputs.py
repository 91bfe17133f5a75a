"""Same outputs: `analyze --json` and `report` of every lab capture, from two installs (not a test).

A change meant to keep every output as it was (a faster or leaner stage) is checked by running
this once under each install and comparing the two folders:

    /path/to/main-venv/bin/python bench/same_outputs.py store /tmp/out-main
    python bench/same_outputs.py store /tmp/out-branch
    python bench/same_outputs.py compare /tmp/out-main /tmp/out-branch

`store` runs, in this interpreter's tracekit (in one process, through the command line's own
entry point), `analyze --json` and `report` of each sender capture in fixtures/captures/ and
fixtures/sweep/, and of its pair where the receiver's capture is there too, and writes each
command's exit status and output, and each report, to the folder. `compare` names every file
that differs (the folder's own name, which the commands print, aside) and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "fixtures" / "captures", ROOT / "fixtures" / "sweep")
SUFFIXES = ("pcap", "pcap.zst", "pcapng")


def inputs() -> Iterator[tuple[str, Path, Path | None]]:
    """(name, sender capture, receiver capture or None) of each lab scenario."""
    for folder in FOLDERS:
        for scenario in sorted(p for p in folder.iterdir() if p.is_dir()):
            for suffix in SUFFIXES:
                sender, receiver = scenario / f"sender.{suffix}", scenario / f"receiver.{suffix}"
                if sender.exists():
                    yield (
                        f"{folder.name}__{scenario.name}",
                        sender,
                        receiver if receiver.exists() else None,
                    )


def store(out: Path) -> None:
    """Run every command on every capture with this interpreter's tracekit; write to `out`."""
    from click.testing import CliRunner
    from tracekit.cli.main import cli

    import tracekit

    print(f"tracekit {tracekit.__version__} from {Path(tracekit.__file__).parent}")
    out.mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    for name, sender, receiver in inputs():
        jobs = {
            "analyze": ["analyze", str(sender), "--json"],
            "report": ["report", str(sender), "-o", str(out / f"{name}.report.html")],
        }
        if receiver is not None:
            pair = ["--receiver", str(receiver)]
            jobs["analyze_pair"] = ["analyze", str(sender), *pair, "--json"]
            jobs["report_pair"] = [
                *("report", str(sender), *pair),
                *("-o", str(out / f"{name}.report_pair.html")),
            ]
        for job, args in jobs.items():
            result = runner.invoke(cli, args)
            (out / f"{name}.{job}.out").write_text(f"exit {result.exit_code}\n{result.output}")
        print(name, flush=True)


def compare(a: Path, b: Path) -> int:
    """Name each file that differs between the folders; the count of those."""

    def text(folder: Path, name: str) -> bytes:
        return (folder / name).read_bytes().replace(str(folder).encode(), b"OUT")

    names_a = {p.name for p in a.iterdir()}
    names_b = {p.name for p in b.iterdir()}
    differ = sorted(names_a ^ names_b)
    differ += sorted(n for n in names_a & names_b if text(a, n) != text(b, n))
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(names_a | names_b) - len(differ)} of {len(names_a | names_b)} files identical")
    return len(differ)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("store").add_argument("out", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("a", type=Path)
    both.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "store":
        store(args.out)
    else:
        sys.exit(1 if compare(args.a, args.b) else 0)


if __name__ == "__main__":
    main()
