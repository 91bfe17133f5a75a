import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.cli.main import cli
from tracekit.cli.plan import DURATION, RATE, SIZE


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["plan", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("622M", 622e6),
        ("1G", 1e9),
        ("1g", 1e9),
        ("100 Mbit/s", 100e6),
        ("64k", 64e3),
        ("1.5Gbps", 1.5e9),
        ("9600", 9600.0),
        ("10Mb/s", 10e6),
    ],
)
def test_rates_are_decimal_bits_per_second(text: str, bps: float) -> None:
    assert RATE.convert(text, None, None) == pytest.approx(bps)


@pytest.mark.parametrize(
    ("text", "seconds"), [("100ms", 0.1), ("0.1s", 0.1), ("500us", 500e-6), ("539 ms", 0.539)]
)
def test_times_need_a_unit(text: str, seconds: float) -> None:
    assert DURATION.convert(text, None, None) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0.5MB", 500_000),
        ("64kB", 64_000),
        ("64KB", 64_000),
        ("64KiB", 65_536),
        ("1MiB", 1_048_576),
        ("1448", 1448),
        ("2GB", 2e9),
        ("1GiB", 2**30),
        ("0", 0),
    ],
)
def test_sizes_are_decimal_unless_iec(text: str, size: float) -> None:
    assert SIZE.convert(text, None, None) == pytest.approx(size)


def test_text_output_for_the_transatlantic_lambda() -> None:
    code, out = run("--rate", "622M", "--rtt", "100ms", "--ingress", "1G", "--buffer", "0.5MB")
    assert code == 0, out
    # BDP 622e6 * 0.1 / 8 = 7,775,000 B; shift 7 (65535 << 7 = 8,388,480); eq. 3 gives
    # (1 - 0.622) * 622e6 * 0.1 / 8 = 2,938,950 B; eq. 2: 1000/378 * 4e6 / 0.1 = 105.8 Mbit/s;
    # roots 500 * (1 -/+ sqrt(0.84)) = 41.74 and 958.3 Mbit/s.
    assert "7,775,000 B" in out
    assert "65535 << 7 = 8,388,480 B" in out
    assert "2,938,950 B" in out
    assert "105.8 Mbit/s" in out
    assert "41.74 Mbit/s to 958.3 Mbit/s" in out
    assert "882 packets" in out  # eq. 1: 500,000 / 1500 * 1000 / 378 = 881.8
    assert "short of" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_text_rows_are_aligned() -> None:
    _, out = run("--rate", "135M", "--rtt", "539ms")
    # 135e6 * 0.539 / 8 = 9,095,625 B, shift 8; the notes column starts at one position.
    notes = ["9.096 MB", "send buffer", "65535 << 8", "65,535 B per 539 ms"]
    starts = {line.index(n) for line in out.splitlines() for n in notes if n in line}
    assert len(starts) == 1
    assert "9,095,625 B" in out


def test_json_output_carries_units_in_its_names() -> None:
    code, out = run("--rate", "135M", "--rtt", "539ms", "--window", "64KiB", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["bdp_bytes"] == pytest.approx(9_095_625)
    assert doc["window_scale_shift"] == 8
    # 65,536 B * 8 / 0.539 s = 972,698 bit/s.
    assert doc["window_rate_bps"] == pytest.approx(65_536 * 8 / 0.539)
    assert doc["buffer_needed_bytes"] is None
    assert doc["ingress_bps"] is None


def test_json_for_an_ingress_no_faster_than_the_bottleneck_has_no_infinities() -> None:
    code, out = run("--rate", "1G", "--rtt", "10ms", "--ingress", "1G", "--buffer", "1MB", "--json")
    assert code == 0, out
    doc = json.loads(out)  # json.loads would accept Infinity: check explicitly
    assert "Infinity" not in out
    assert doc["buffer_needed_bytes"] == 0
    assert doc["loss_free_rate_bps"] is None


def test_ample_buffer_has_no_forbidden_band() -> None:
    # 4 MB = 32e6 bit; 4 M = 1.28e8 > f R = 1e9 * 0.01 = 1e7.
    code, out = run("--rate", "100M", "--rtt", "10ms", "--ingress", "1G", "--buffer", "4MB")
    assert code == 0
    assert "Roots: none" in out and "covers" in out


@pytest.mark.parametrize(
    "args",
    [
        ("--rate", "0", "--rtt", "1ms"),
        ("--rate", "5MB/s", "--rtt", "1ms"),
        ("--rate", "fast", "--rtt", "1ms"),
        ("--rate", "1G", "--rtt", "100"),
        ("--rate", "1G", "--rtt", "-1ms"),
        ("--rate", "1G", "--rtt", "1ms", "--buffer", "3mb"),
        ("--rate", "1G", "--rtt", "1ms", "--buffer", "-1MB"),
        ("--rate", "1G", "--rtt", "1ms", "--mss", "0"),
        (
            "--rtt",
            "1ms",
        ),
    ],
)
def test_bad_values_exit_2_with_one_error_line(args: tuple[str, ...]) -> None:
    code, out = run(*args)
    assert code == 2
    # One line, as every bad input gets: the option, the value and what is wrong with it.
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: "), out
    assert "Traceback" not in out


def test_examples_in_the_docs_are_real_output() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "commands" / "plan.md").read_text()
    blocks = re.findall(r"^```\n\$ tracekit plan (.*?)\n(.*?)^```$", doc, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 3
    for args, shown in blocks:
        code, out = run(*shlex.split(args))
        assert code == 0
        assert out == shown, args
