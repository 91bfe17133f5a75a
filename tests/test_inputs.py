"""tracekit.inputs: the naming rule, the lab's layout, manifests, bad inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.check_crafting import transfer
from tracekit.errors import CaptureError, TracekitError
from tracekit.inputs import CaptureInput, analyze_input, find_inputs, is_capture_name


def touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


@pytest.mark.parametrize(
    ("name", "is_capture"),
    [
        ("a.pcap", True),
        ("a.PCAPNG", True),
        ("run.sender.pcapng.zst", True),
        ("sender.pcap.gz", True),
        ("x.cap.xz", True),
        ("truth.json", False),
        ("a.pcap.bak", False),
        ("pcap", False),
    ],
)
def test_capture_names(name: str, is_capture: bool) -> None:
    assert is_capture_name(name) is is_capture


def test_folder_pairs_by_the_naming_rule_and_lab_layout(tmp_path: Path) -> None:
    touch(
        tmp_path / "runs/r1.sender.pcap",
        tmp_path / "runs/r1.receiver.pcap.gz",
        tmp_path / "runs/alone.pcapng",
        tmp_path / "lab/clean/sender.pcap",
        tmp_path / "lab/clean/receiver.pcap",
        tmp_path / "lab/clean/truth.json",
        tmp_path / "runs/.hidden/x.pcap",
    )
    found = find_inputs([tmp_path])
    root = tmp_path.as_posix()
    assert found == [
        CaptureInput(f"{root}/lab/clean", tmp_path / "lab/clean/sender.pcap",
                     tmp_path / "lab/clean/receiver.pcap"),
        CaptureInput(f"{root}/runs/alone.pcapng", tmp_path / "runs/alone.pcapng"),
        CaptureInput(f"{root}/runs/r1", tmp_path / "runs/r1.sender.pcap",
                     tmp_path / "runs/r1.receiver.pcap.gz"),
    ]  # fmt: skip


def test_a_named_file_brings_its_partner_once(tmp_path: Path) -> None:
    touch(tmp_path / "t.sender.pcap", tmp_path / "t.receiver.pcap", tmp_path / "u.pcap")
    for paths in (
        [tmp_path / "t.receiver.pcap"],
        [tmp_path / "t.sender.pcap"],
        [tmp_path / "t.sender.pcap", tmp_path / "t.receiver.pcap", tmp_path],
    ):
        pairs = [i for i in find_inputs(paths) if i.receiver is not None]
        assert pairs == [
            CaptureInput(
                f"{tmp_path.as_posix()}/t", tmp_path / "t.sender.pcap", tmp_path / "t.receiver.pcap"
            )
        ]


def test_receiver_without_sender_is_a_problem_named_on_analysis(tmp_path: Path) -> None:
    touch(tmp_path / "t.receiver.pcap")
    (inp,) = find_inputs([tmp_path])
    assert inp.problem is not None
    with pytest.raises(CaptureError, match=r"t\.receiver\.pcap: a receiver capture without"):
        analyze_input(inp)


def test_a_missing_file_is_kept_for_the_reader_to_name(tmp_path: Path) -> None:
    (inp,) = find_inputs([tmp_path / "nope.pcap"])
    with pytest.raises(CaptureError, match=r"nope\.pcap: no such file"):
        analyze_input(inp)


def test_manifest_paths_are_relative_to_it(tmp_path: Path) -> None:
    sender = transfer(tmp_path / "caps/host-a.pcap")
    receiver = transfer(tmp_path / "caps/host-b.pcap")
    manifest = tmp_path / "pairs.toml"
    manifest.write_text(
        '[[capture]]\nname = "nightly"\nsender = "caps/host-a.pcap"\n'
        'receiver = "caps/host-b.pcap"\n\n[[capture]]\nsender = "caps/host-b.pcap"\n'
    )
    found = find_inputs([manifest])
    assert found == [
        CaptureInput("nightly", sender, receiver),
        CaptureInput(f"{tmp_path.as_posix()}/caps/host-b", receiver),
    ]
    analysis, warnings = analyze_input(found[0])
    assert analysis.receiver is not None
    assert warnings == ()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[[capture]]\nreceiver = 'b.pcap'\n", "capture 1: needs a sender"),
        ("[[capture]]\nsender = 'a.pcap'\nsendr = 'b'\n", "unknown key 'sendr'"),
        ("[[capture]]\nsender = 3\n", "sender must be a non-empty string"),
        ("[pairs]\n", "only \\[\\[capture\\]\\] tables"),
        ("[[capture]\n", "not valid TOML"),
        ("[[capture]]\nsender = 'a.pcap'\nmap = ['10.0.0.1=192.0.2.1']\n", "give a receiver"),
        (
            "[[capture]]\nsender = 'a.pcap'\nreceiver = 'b.pcap'\nmap = '10.0.0.1=192.0.2.1'\n",
            "map must be a list",
        ),
        (
            "[[capture]]\nsender = 'a.pcap'\nreceiver = 'b.pcap'\nmap = ['10.0.0.1']\n",
            "capture 1: map '10.0.0.1': expected SENDER_ADDR=RECEIVER_ADDR",
        ),
    ],
)
def test_bad_manifests_are_one_line_errors(tmp_path: Path, text: str, error: str) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(text)
    with pytest.raises(TracekitError, match=error):
        find_inputs([manifest])


def test_manifest_map_rules_ride_with_their_pair(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        "[[capture]]\nsender = 'a.pcap'\nreceiver = 'b.pcap'\n"
        "map = ['10.0.0.1=192.0.2.1', '10.0.0.2:80=192.0.2.2:8080']\n"
    )
    (found,) = find_inputs([manifest])
    assert found.addr_map == (("10.0.0.1", "192.0.2.1"), ("10.0.0.2:80", "192.0.2.2:8080"))


def test_one_name_twice_is_refused(tmp_path: Path) -> None:
    touch(tmp_path / "a.pcap")
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[capture]]\nname = "{tmp_path.as_posix()}/a.pcap"\nsender = "a.pcap"\n')
    with pytest.raises(TracekitError, match="named twice"):
        find_inputs([tmp_path / "a.pcap", manifest])
