from pathlib import Path

import pyarrow as pa

from tracekit import schema

DOCS = Path(__file__).resolve().parent.parent / "docs" / "tables.md"


def test_docs_table_matches_declared_schema() -> None:
    assert DOCS.read_text() == schema.render_docs()


def test_column_names_are_unique_per_table() -> None:
    for name, _, columns in schema.TABLES:
        names = [c.name for c in columns]
        assert len(names) == len(set(names)), name


def test_packet_row_stays_compact() -> None:
    # The budget: a 10M-packet capture fits in well under 1 GiB of packet table.
    def width(cols: tuple[schema.Column, ...]) -> int:
        return sum(c.type.bit_width // 8 for c in cols if pa.types.is_primitive(c.type))

    assert width(schema.PACKET_COLUMNS) <= 56
