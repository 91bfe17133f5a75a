import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from tracekit import schema
from tracekit.findings import Finding, Severity, analyze_schema, render_schema

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "docs" / "analyze.schema.json"


def overrun(**changes: Any) -> Finding:
    fields: dict[str, Any] = {
        "kind": "slow_start_overrun",
        "severity": Severity.WARNING,
        "conn": 0,
        "direction": "a2b",
        "start_s": 0.9,
        "end_s": 1.0,
        "evidence": {"buffer_bytes": 463_333, "rate_bps": 622e6, "drops_packets": [1, 2]},
        "summary": "Slow start overran a 463 kB bottleneck buffer at 622 Mbit/s",
        "explanation": "The last slow-start round arrived faster than the bottleneck drains.",
        "advice": "Pace the sender or add bottleneck memory.",
    }
    return Finding(**{**fields, **changes})


def connection_row() -> dict[str, Any]:
    # The transatlantic test of Antony et al.: one 100 s transfer at 405 Mbit/s, no capture of
    # the handshake's options lost.
    return {
        "conn": 0, "proto": 6, "ip_version": 4, "a": "192.0.2.1:40000", "b": "198.51.100.2:5001",
        "start_ns": 1_000_000_000, "end_ns": 101_000_000_000, "duration_s": 100.0,
        "packets_a2b": 3_500_000, "packets_b2a": 1_750_000,
        "bytes_a2b": 5_062_500_000, "bytes_b2a": 0,
        "throughput_a2b_bps": 405e6, "throughput_b2a_bps": 0.0,
        "retrans_a2b": 12, "retrans_b2a": 0, "syn_seen": True, "synack_seen": True,
        "isn_a": 4_294_967_295, "isn_b": 0, "mss_a": 1448, "mss_b": 1448, "ws_a": 7, "ws_b": 7,
        "ws_state": "known", "sack_ok": True, "ts_ok": True, "tso": False, "tunnel": "",
    }  # fmt: skip


def validator() -> jsonschema.Draft202012Validator:
    doc = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc)


def test_schema_file_is_generated_from_the_code() -> None:
    assert SCHEMA_FILE.read_text() == render_schema()


def test_schema_connection_properties_follow_connection_columns() -> None:
    props = analyze_schema()["$defs"]["connection"]["properties"]
    assert set(props) - {"start_s", "wireshark_filter"} == {
        c.name for c in schema.CONNECTION_COLUMNS
    }
    assert set(connection_row()) == {c.name for c in schema.CONNECTION_COLUMNS}


def test_a_full_document_validates() -> None:
    doc = {"connections": [connection_row()], "findings": [overrun().to_dict()]}
    validator().validate(json.loads(json.dumps(doc)))


def test_empty_document_validates() -> None:
    validator().validate({"connections": [], "findings": []})


def test_connection_records_of_the_connections_stage_validate() -> None:
    from tracekit.connections import records

    row = connection_row()
    row["ws_b"] = -1  # unknown shift: records() writes null
    table = pa.Table.from_pylist([row], schema=schema.arrow_schema(schema.CONNECTION_COLUMNS))
    validator().validate({"connections": records(table), "findings": []})


def _bad(path: list[str | int], value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"connections": [connection_row()], "findings": [overrun().to_dict()]}
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["findings", 0, "severity"], "fatal"),
        (["findings", 0, "direction"], "up"),
        (["findings", 0, "kind"], "SlowStart"),
        (["findings", 0, "conn"], -1),
        (["findings", 0, "summary"], "two\nlines"),
        (["findings", 0, "evidence", "Rate"], 1),
        (["findings", 0, "evidence", "ratios"], ["a"]),
        (["findings", 0, "advice"], KeyError),
        (["findings", 0, "extra"], 1),
        (["connections", 0, "throughput_a2b_bps"], "fast"),
        (["connections", 0, "mss_a"], 70_000),
        (["connections", 0, "isn_a"], -1),
        (["connections", 0, "ws_state"], None),
        (["connections", 0, "tso"], KeyError),
        (["connections", 0, "flow"], 3),
        (["findings"], KeyError),
        (["verdict"], "ok"),
    ],
)
def test_a_bad_document_fails(path: list[str | int], value: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(_bad(path, value))


def test_to_dict_converts_numpy_to_plain_types() -> None:
    f = overrun(
        conn=np.int32(3),
        start_s=np.float64(0.5),
        evidence={
            "queue_bytes": np.int64(7),
            "lossy": np.bool_(True),
            "ratio": np.float32(0.25),
            "gaps_s": np.array([0.5, 1.0]),
            "note": "receiver",
        },
    )
    d = f.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert type(d["conn"]) is int and type(d["start_s"]) is float
    ev = d["evidence"]
    assert type(ev["queue_bytes"]) is int and ev["queue_bytes"] == 7
    assert type(ev["lossy"]) is bool and ev["lossy"] is True
    assert type(ev["ratio"]) is float and ev["ratio"] == 0.25
    assert ev["gaps_s"] == [0.5, 1.0] and all(type(v) is float for v in ev["gaps_s"])
    assert d["severity"] == "warning"


def test_round_trip_through_json() -> None:
    f = overrun()
    assert Finding.from_dict(json.loads(json.dumps(f.to_dict()))) == f


def test_findings_are_frozen_and_hashable() -> None:
    f = overrun()
    with pytest.raises(AttributeError):
        f.conn = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        f.evidence["rate_bps"] = 1  # type: ignore[index]
    assert len({f, overrun()}) == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"kind": "Slow-Start"},
        {"severity": "fatal"},
        {"conn": -1},
        {"conn": 1.5},
        {"direction": "up"},
        {"start_s": 2.0},
        {"start_s": -0.1},
        {"end_s": float("nan")},
        {"evidence": {"rate": float("inf")}},
        {"evidence": {"RateBps": 1}},
        {"evidence": {"rates_bps": [1, "x"]}},
        {"evidence": {"where": None}},
        {"summary": "one\ntwo"},
        {"advice": " "},
    ],
)
def test_malformed_findings_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises((ValueError, TypeError)):
        overrun(**changes)


def test_severity_ranks_order_info_warning_error() -> None:
    assert [s.rank for s in (Severity.INFO, Severity.WARNING, Severity.ERROR)] == [0, 1, 2]
    assert Severity("error") is Severity.ERROR
