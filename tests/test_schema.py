from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

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


TSG_DOCS = DOCS.parent / "commands" / "tsg.md"
CAPTURES = sorted((DOCS.parent.parent / "fixtures" / "captures").glob("*/sender.pcap"))


def test_tsg_docs_columns_match_declared_schema() -> None:
    assert schema.tsg_columns_section(TSG_DOCS.read_text()) == schema.render_tsg_columns()


def assert_declared(df: pd.DataFrame, columns: tuple[schema.Column, ...], what: str) -> None:
    """The frame has exactly the declared columns, in order, of the declared dtypes."""
    assert list(df.columns) == [c.name for c in columns], what
    for c in columns:
        dtype = df[c.name].dtype
        assert dtype == schema.pandas_dtype(c), f"{what}.{c.name}: {dtype}"
        if c.categories:
            # Unordered categoricals compare equal whatever their order; the codes do not.
            assert tuple(df[c.name].cat.categories) == c.categories, f"{what}.{c.name}"


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.parent.name)
def test_series_of_a_real_capture_are_the_declared_tables(path: Path) -> None:
    from tracekit.pipeline import analyze_files
    from tracekit.series import rate, rounds, trains

    series = analyze_files(path).sender.series
    for name, columns in schema.SERIES_TABLES.items():
        assert_declared(getattr(series, name), columns, name)
    for conn, direction in series.with_data()[:2]:
        d = series.of(conn, direction)
        for name, columns in schema.SERIES_TABLES.items():
            assert_declared(d.table(name), columns, f"{name} of ({conn}, {direction})")
        assert_declared(rounds(d.segments, d.acks), schema.ROUND_COLUMNS, "rounds")
        assert_declared(trains(d.segments, 0.001), schema.TRAIN_COLUMNS, "trains")
        assert_declared(rate(d.segments, d.acks, 0.01), schema.RATE_COLUMNS, "rate")


def test_empty_series_and_measures_are_the_declared_tables() -> None:
    from tracekit.series import rate, rounds, trains

    for name, _, columns in schema.TABLES:
        assert_declared(schema.empty_frame(columns), columns, name)
    segments = schema.empty_frame(schema.SERIES_SEGMENT_COLUMNS)
    acks = schema.empty_frame(schema.SERIES_ACK_COLUMNS)
    assert_declared(rounds(segments, acks), schema.ROUND_COLUMNS, "rounds")
    assert_declared(trains(segments, 0.001), schema.TRAIN_COLUMNS, "trains")
    assert_declared(rate(segments, acks, 0.01), schema.RATE_COLUMNS, "rate")


def test_a_udp_only_capture_has_empty_declared_series() -> None:
    from tracekit.pipeline import analyze_files

    udp_only = DOCS.parent.parent / "fixtures" / "captures" / "udp_loss" / "sender.pcap"
    series = analyze_files(udp_only).sender.series
    for name, columns in schema.SERIES_TABLES.items():
        assert getattr(series, name).empty, name
        assert_declared(getattr(series, name), columns, name)


def test_batch_dataset_schemas_are_the_declared_ones() -> None:
    from tracekit import batch

    assert schema.arrow_schema(schema.BATCH_CAPTURE_COLUMNS) == batch.CAPTURE_SCHEMA
    assert schema.arrow_schema(schema.BATCH_CONNECTION_COLUMNS) == batch.CONNECTION_SCHEMA
    assert schema.arrow_schema(schema.BATCH_FINDING_COLUMNS) == batch.FINDING_SCHEMA
    # The connections of the dataset are the connections table behind the input's name.
    assert schema.BATCH_CONNECTION_COLUMNS[1:] == schema.CONNECTION_COLUMNS


def test_exported_series_are_the_declared_tables() -> None:
    from tracekit.export import SERIES

    assert tuple(schema.SERIES_TABLES) == SERIES
