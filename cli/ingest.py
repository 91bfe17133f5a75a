"""`tracekit ingest CAPTURE -o table.parquet`: the packet table, for pandas, DuckDB or polars."""

from __future__ import annotations

from pathlib import Path

import click
from tracekit.cli import common

from tracekit.connections.table_io import connections_path, write_packet_table
from tracekit.core.paths import printable


@click.command()
@common.capture_argument
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Parquet file to write (replaced atomically; missing folders are made).",
)
@common.receiver_option(
    "The receiver's capture of the same transfer: adds each packet's fate (delivered, "
    "network drop, receiver drop, ...) as the column `fate`."
)
@common.map_option
def ingest(capture: Path, output: Path, receiver: Path | None, maps: tuple[str, ...]) -> None:
    """Read CAPTURE into the packet table and write it as Parquet.

    One row per TCP or UDP packet with connection, direction and relative sequence numbers
    (columns in docs/tables.md); the connections table beside it, as `OUTPUT` with
    `.connections.parquet`. Both carry the same id (`tracekit.pair` in their metadata).
    """
    addr_map = common.address_map(maps, receiver)
    common.refuse_overwriting([capture, receiver], [output, connections_path(output)])
    # The table's metadata records the capture's path (`tracekit.capture`).
    common.require_utf8_name(capture, "the table's metadata")
    common.prepare_output(output)
    if receiver is None:
        from tracekit.connections.stream import ingest_capture

        with common.progress(capture) as progress, common.writing(output):
            result = ingest_capture(capture, output, progress=progress)
        common.print_warnings(capture, result.warnings)
        n_packets, n_conn = result.packets, result.connections
    else:
        from tracekit.merge import merge

        conns = common.connections(capture, need_tcp=False)
        matched = merge(conns, common.connections(receiver, need_tcp=False), addr_map)
        packets = matched.sender_packets(conns.packets)
        with common.writing(output):
            write_packet_table(conns, output, packets)
        n_packets, n_conn = packets.num_rows, conns.table.num_rows
    click.echo(
        f"{printable(output)}: {n_packets} packets, "
        f"{n_conn} connection{'' if n_conn == 1 else 's'}",
        err=True,
    )
