"""A bounded fuzz of read_capture in the normal suite (tests/fuzz_reader.py runs it for longer)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.fuzz_reader import check_one, inputs, mutate, seed_bytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs)
def test_mutated_captures_give_a_result_or_capture_error(
    case: tuple[str, list[tuple[str, int, int]]],
) -> None:
    name, mutations = case
    with tempfile.TemporaryDirectory() as tmp:
        check_one(mutate(seed_bytes(name), mutations), Path(tmp))


def test_mutate_applies_each_kind() -> None:
    data = bytes(range(16))
    assert mutate(data, [("byte", 1, 255)])[1] == 255
    assert mutate(data, [("u32", 0, 0x01020304)])[:4] == bytes([1, 2, 3, 4])
    assert mutate(data, [("truncate", 5, 0)]) == data[:5]
    assert mutate(data, [("delete", 2, 3)]) == data[:2] + data[5:]
    assert mutate(data, [("repeat", 2, 2)]) == data[:4] + data[2:]
