"""numpy <-> Arrow without pandas: values survive both ways, and ingest never imports pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracekit.connections import packet_schema
from tracekit.core.columns import to_arrow, to_numpy

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("values", "type"),
    [
        (np.array([0, 1, 2**32 - 1], dtype=np.uint32), pa.uint32()),
        (np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64), pa.int64()),
        (np.array([-1, 0, 7], dtype=np.int8), pa.int8()),
        (np.array([0.5, -1e300, 3.0]), pa.float64()),
        (np.array([True, False, True, True, False, False, True, False, True]), pa.bool_()),
    ],
)
def test_numbers_and_flags_go_both_ways_as_pyarrow_has_them(
    values: np.ndarray, type: pa.DataType
) -> None:
    array = to_arrow(values, type)
    assert array.type == type
    assert array.to_pylist() == values.tolist()  # pyarrow's own reading of the buffers
    assert to_numpy(array).tolist() == values.tolist()
    # A slice starts inside a byte of a boolean bitmap: the offset must be honoured.
    assert to_numpy(array.slice(3)).tolist() == values[3:].tolist()
    chunked = pa.chunked_array([array, array.slice(1)], type=type)
    assert to_numpy(chunked).tolist() == values.tolist() + values[1:].tolist()


def test_numbers_are_shared_not_copied() -> None:
    values = np.arange(10, dtype=np.int64)
    back = to_numpy(pa.chunked_array([to_arrow(values, pa.int64())]))
    assert np.shares_memory(back, values)


def test_strings_and_empty_columns() -> None:
    text = ["10.0.0.1:80", "[2001:db8::1]:443", "", "é"]
    assert to_arrow(text, pa.string()).to_pylist() == text
    assert to_arrow([], pa.string()).to_pylist() == []
    assert to_numpy(pa.chunked_array([], type=pa.uint16())).dtype == np.uint16


def test_a_null_is_refused() -> None:
    with pytest.raises(ValueError, match="no nulls"):
        to_numpy(pa.array([1, None], type=pa.int64()))


def test_ingest_and_flows_never_import_pandas(tmp_path: Path) -> None:
    capture = ROOT / "fixtures" / "kernel" / "veth_v4_tbf_s96.pcap"
    probe = textwrap.dedent(
        f"""
        import sys
        from tracekit.cli.main import cli
        for args in (["ingest", {str(capture)!r}, "-o", {str(tmp_path / "t.parquet")!r}],
                     ["flows", {str(capture)!r}]):
            try:
                cli(args, prog_name="tracekit")
            except SystemExit as exit:
                assert exit.code == 0, exit.code
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip().splitlines()[-1] == "False"
    written = pq.read_schema(tmp_path / "t.parquet")
    assert written.names == packet_schema().names
