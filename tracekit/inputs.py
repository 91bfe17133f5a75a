"""What to analyse: captures and sender/receiver pairs found from paths, folders and manifests.

The naming rule (docs/commands/check.md):

- `NAME.sender.EXT` and `NAME.receiver.EXT` in one folder are one pair, named `DIR/NAME`;
- `sender.EXT` and `receiver.EXT` in a folder (the capture lab's layout) are one pair named after
  the folder;
- any other capture file is a sender capture alone, named by its path;
- a `.toml` file given as a PATH is a manifest listing pairs explicitly (`manifest`).

EXT is `pcap`, `pcapng`, `cap` or `dmp`, optionally compressed (`.gz`, `.xz`, `.zst`, `.zstd`);
the reader tells the format and compression by the file's first bytes, so a file named
explicitly is read whatever its name. Folders are walked recursively, hidden entries skipped;
a folder reached again through a symlink is not walked again, and each file counts once however
many paths lead to it. Names are shown through `tracekit.core.paths.printable`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracekit.analysis import Analysis
from tracekit.core.paths import printable, read_toml, require_regular_file
from tracekit.errors import CaptureError, TracekitError
from tracekit.merge import parse_map
from tracekit.pipeline import analyze_files

CAPTURE_NAME = re.compile(
    r"^(?:(?P<stem>.+)\.)?(?P<base>[^.]+)\.(?:pcap|pcapng|cap|dmp)(?:\.(?:gz|xz|zst|zstd))?$",
    re.IGNORECASE,
)
ROLES = ("sender", "receiver")


@dataclass(frozen=True)
class CaptureInput:
    """One unit of work: a sender capture and, if there is one, the receiver's of the same transfer.

    `name` names it in every output (terminal, JUnit, JSON, batch dataset) and is what policy
    globs and baseline entries match. `problem`, when set, is why it cannot be analysed although
    its files may exist (a receiver capture without its sender); `analyze_input` raises it.
    """

    name: str
    sender: Path
    receiver: Path | None = None
    problem: str | None = None
    # NAT rules for the merge, (sender-side address, receiver-side address) pairs: a manifest's
    # `map` (the `--map` option of analyze and report).
    addr_map: tuple[tuple[str, str], ...] = ()

    @property
    def paths(self) -> tuple[Path, ...]:
        """The capture files of this input, sender first."""
        return (self.sender,) if self.receiver is None else (self.sender, self.receiver)


def is_capture_name(name: str) -> bool:
    """Whether a file name looks like a capture (what a folder walk picks up)."""
    return CAPTURE_NAME.match(name) is not None


def _role(path: Path) -> tuple[str, str] | None:
    """(pair name, role) of a file that follows the naming rule, else None."""
    m = CAPTURE_NAME.match(path.name)
    if m is None or m["base"].lower() not in ROLES:
        return None
    parent = path.parent.as_posix()
    if m["stem"] is None:
        # The lab's layout: the folder is the pair.
        return parent, m["base"].lower()
    name = m["stem"] if parent == "." else f"{parent}/{m['stem']}"
    return name, m["base"].lower()


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` leads to, or None when it leads nowhere."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _walk(folder: Path) -> list[Path]:
    """The capture files under `folder`, each real file once.

    Symlinks are followed, but a folder already walked is not walked again: a link to `..` or
    to the folder itself would otherwise lead round and round (two such links double the paths
    at every level). Folders reached through a symlink are walked after all the real ones, so
    a file keeps its real path when it has one.
    """
    found: list[Path] = []
    seen_folders: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    real: list[Path] = [folder]
    linked: list[Path] = []
    while real or linked:
        current = real.pop() if real else linked.pop(0)
        key = _file_id(current)
        if key is None or key in seen_folders:
            continue
        seen_folders.add(key)
        try:
            entries = sorted(current.iterdir())
        except OSError as exc:
            raise TracekitError(f"{printable(current)}: cannot list: {exc.strerror}") from None
        subfolders: list[Path] = []
        for path in entries:
            if path.name.startswith("."):
                continue
            if path.is_dir():
                (linked if path.is_symlink() else subfolders).append(path)
            elif path.is_file() and is_capture_name(path.name):
                file_key = _file_id(path)
                if file_key is not None and file_key not in seen_files:
                    seen_files.add(file_key)
                    found.append(path)
        # A stack: the first subfolder is walked next.
        real += reversed(subfolders)
    return found


def _partners(path: Path) -> list[Path]:
    """Files beside a sender (receiver) capture that may be its receiver (sender)."""
    role = _role(path)
    if role is None or not path.parent.is_dir():
        return []
    return [
        p
        for p in sorted(path.parent.iterdir())
        if p != path and p.is_file() and (r := _role(p)) is not None and r[0] == role[0]
    ]


def read_manifest(path: Path) -> list[CaptureInput]:
    """The pairs a manifest lists; paths in it are relative to the manifest's folder.

    A manifest is TOML with one `[[capture]]` table per pair: `sender` (required), `receiver`
    and `name` (optional; the sender's path without its extensions by default), and `map`
    (optional, with a receiver: a list of `SENDER_ADDR=RECEIVER_ADDR` NAT rules, as `--map`).
    """
    require_regular_file(path)
    doc = read_toml(path, "manifest", "manifest")
    unknown = sorted(set(doc) - {"capture"})
    entries = doc.get("capture", [])
    if unknown or not isinstance(entries, list):
        raise TracekitError(f"{path}: a manifest holds only [[capture]] tables")
    base = path.parent
    inputs = []
    for i, entry in enumerate(entries, 1):
        where = f"{path}: capture {i}"
        if not isinstance(entry, dict):
            raise TracekitError(f"{where}: expected a [[capture]] table, got {entry!r:.40}")
        extra = sorted(set(entry) - {"name", "sender", "receiver", "map"})
        if extra:
            raise TracekitError(f"{where}: unknown key {extra[0]!r}")
        for key in ("name", "sender", "receiver"):
            # No file name holds a NUL, and the system refuses one in a path.
            if key in entry and not (
                isinstance(entry[key], str) and entry[key] and "\x00" not in entry[key]
            ):
                raise TracekitError(f"{where}: {key} must be a non-empty string without NUL")
        if "sender" not in entry:
            raise TracekitError(f"{where}: needs a sender")
        sender = base / entry["sender"]
        receiver = base / entry["receiver"] if "receiver" in entry else None
        name = printable(entry.get("name") or _strip_extensions(sender).as_posix())
        addr_map = _manifest_map(where, entry.get("map"), receiver)
        inputs.append(CaptureInput(name, sender, receiver, addr_map=addr_map))
    return inputs


def _manifest_map(where: str, rules: object, receiver: Path | None) -> tuple[tuple[str, str], ...]:
    """A manifest entry's `map`: NAT rules for merging its receiver capture."""
    if rules is None:
        return ()
    if not (isinstance(rules, list) and all(isinstance(r, str) for r in rules)):
        raise TracekitError(f'{where}: map must be a list of "SENDER_ADDR=RECEIVER_ADDR" strings')
    if receiver is None:
        raise TracekitError(f"{where}: map applies to the receiver's capture: give a receiver")
    try:
        return tuple(parse_map(rules, label="map").items())
    except TracekitError as exc:
        raise TracekitError(f"{where}: {exc}") from None


def _strip_extensions(path: Path) -> Path:
    m = CAPTURE_NAME.match(path.name)
    if m is None:
        return path
    stem = m["base"] if m["stem"] is None else f"{m['stem']}.{m['base']}"
    return path.with_name(stem)


def _group(files: Iterable[Path]) -> list[CaptureInput]:
    """Pairs by the naming rule; other files alone. Ordered by name."""
    singles: dict[str, Path] = {}
    pairs: dict[str, dict[str, list[Path]]] = {}
    for path in files:
        role = _role(path)
        if role is None:
            singles.setdefault(printable(path.as_posix()), path)
        else:
            roles = pairs.setdefault(printable(role[0]), {r: [] for r in ROLES})
            if path not in roles[role[1]]:
                roles[role[1]].append(path)
    inputs = [CaptureInput(name=name, sender=path) for name, path in singles.items()]
    for name, roles in pairs.items():
        senders, receivers = roles["sender"], roles["receiver"]
        problem = None
        if len(senders) > 1 or len(receivers) > 1:
            both = senders if len(senders) > 1 else receivers
            first, second = (printable(p.name) for p in both[:2])
            problem = f"two captures for one role: {first} and {second}"
        elif not senders:
            problem = "a receiver capture without its sender capture (NAME.sender.pcap)"
        sender = senders[0] if senders else receivers[0]
        receiver = receivers[0] if senders and receivers else None
        inputs.append(CaptureInput(name=name, sender=sender, receiver=receiver, problem=problem))
    inputs.sort(key=lambda i: i.name)
    return inputs


def find_inputs(paths: Sequence[Path]) -> list[CaptureInput]:
    """Every capture and pair the PATHs name, by the naming rule, without reading them.

    A file is taken whatever its name (a missing one too: reading it reports the problem, so a
    policy may choose to report and continue); a folder is walked; a `.toml` file is a manifest.
    A file that follows the naming rule brings its partner beside it. Each input comes once,
    however many PATHs name it.
    """
    files: list[Path] = []
    listed: list[CaptureInput] = []
    for path in paths:
        if path.suffix.lower() == ".toml":
            listed += read_manifest(path)
        elif path.is_dir():
            files += _walk(path)
        else:
            files.append(path)
            files += _partners(path)
    seen: set[str] = set()
    inputs = []
    for inp in [*_group(_each_file_once(files)), *listed]:
        if inp.name in seen:
            raise TracekitError(f"{inp.name}: named twice (two inputs would share one name)")
        seen.add(inp.name)
        inputs.append(inp)
    return inputs


def _each_file_once(files: Iterable[Path]) -> list[Path]:
    """`files` without repeats: a file named by two paths (a symlink, `dir/../dir`, a hard
    link) is kept by the first; a missing one by its path, for the reader to report."""
    seen: set[object] = set()
    kept = []
    for path in files:
        key = _file_id(path) or os.path.normpath(path)
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


def analyze_input(
    inp: CaptureInput,
    configs: Mapping[str, object] | None = None,
    after_stage: Callable[[], None] | None = None,
) -> tuple[Analysis, tuple[str, ...]]:
    """Read and analyse one input; the reader's warnings come back, one line each with the file.

    `configs` maps a detector's kind to its Config (tracekit.tunables); `after_stage` is called
    between the stages (`analyze_files`). Raises CaptureError
    naming the file for a missing, corrupt or TCP-less capture. The receiver's series and the
    merge's delay table are not built (`analyze_files`): check, batch and compare read
    findings, connections and the merge's fates and counts.
    """
    if inp.problem is not None:
        raise CaptureError(printable(inp.sender), inp.problem)
    warnings: list[str] = []
    try:
        analysis = analyze_files(
            inp.sender,
            inp.receiver,
            configs=configs,
            addr_map=dict(inp.addr_map) or None,
            on_warning=warnings.append,
            receiver_series=False,
            merge_delay=False,
            after_stage=after_stage,
        )
    except CaptureError as exc:
        # The message goes into JUnit, JSON and Parquet files, which hold no lone surrogates.
        raise CaptureError(printable(exc.path), exc.problem) from None
    return analysis, tuple(warnings)
