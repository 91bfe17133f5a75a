"""The notebook API: one call from capture files to pandas tables and plotly figures.

    import tracekit
    run = tracekit.open("sender.pcap", receiver="receiver.pcap")
    run.connections, run.findings, run.series(0, "a2b").segments, run.figure(0, "tsg")

`open` runs `tracekit.pipeline.analyze_files`, as every command does; the figures are the
report's own plots (`tracekit.report.build.connection_plots`) drawn by
`tracekit.report.figure.to_figure`. Documented in docs/api.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pandas as pd

from tracekit.analysis import Analysis
from tracekit.connections import data_direction
from tracekit.errors import TracekitError
from tracekit.pipeline import analyze_files
from tracekit.report.build import ReportConfig, connection_plots
from tracekit.report.figure import to_figure
from tracekit.report.model import Plot

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from tracekit.merge import Merge

__all__ = ["FIGURES", "Run", "SeriesTables", "open"]

# The plots `Run.figure` draws, by name: the report's plots of a connection, in its order.
FIGURES = ("tsg", "throughput", "rtt", "flight", "merged", "delay", "receiver_tsg")
_SENDER_PLOTS = ("tsg", "throughput", "rtt", "flight", "merged", "delay")
_DIRECTIONS = {"a2b": 0, "b2a": 1}


@dataclass(frozen=True)
class SeriesTables:
    """The five series tables of one direction of one connection, as pandas DataFrames (columns
    in docs/tables.md; copies, free to change)."""

    segments: pd.DataFrame
    acks: pd.DataFrame
    sacks: pd.DataFrame
    rtt: pd.DataFrame
    flight: pd.DataFrame


class Run:
    """An analysed transfer: the sender's capture and, if given, the receiver's."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis

    def __repr__(self) -> str:
        receiver = ", with a receiver capture" if self.analysis.receiver is not None else ""
        return (
            f"<tracekit.Run: {len(self.connections)} connections, "
            f"{len(self.analysis.findings)} findings{receiver}>"
        )

    @cached_property
    def connections(self) -> pd.DataFrame:
        """One row per connection of the sender's capture (`tracekit flows`' columns)."""
        return self.analysis.sender.connections.frame()

    @cached_property
    def findings(self) -> pd.DataFrame:
        """One row per finding: kind, severity, conn, direction, start_s, end_s, summary,
        explanation, evidence (a dict), advice (as `tracekit analyze --json` gives them)."""
        rows = [f.to_dict() for f in self.analysis.findings]
        if rows:
            return pd.DataFrame(rows)
        return pd.DataFrame(
            columns=["kind", "severity", "conn", "direction", "start_s", "end_s", "summary"]
        )

    @property
    def transmissions(self) -> pd.DataFrame:
        """The merge's data transmissions with their fates (docs/tables.md, transmissions);
        needs a receiver capture."""
        return self._merge().transmissions.copy()

    @property
    def delay(self) -> pd.DataFrame:
        """The merge's one-way and queueing delay (docs/tables.md, delay); needs a receiver
        capture."""
        return self._merge().delay.copy()

    def series(
        self,
        conn: int,
        direction: int | Literal["a2b", "b2a"] | None = None,
        vantage: Literal["sender", "receiver"] = "sender",
    ) -> SeriesTables:
        """The series tables of connection `conn` (the sender capture's number) in `direction`
        (default: the one that carried more data), as the sender's or the receiver's capture
        saw it. The receiver's tables keep its own clock (seconds since its first packet) and
        its sequence numbers relative to its own view of the ISN; `transmissions` puts both
        captures on the sender's clock."""
        d = self._direction(conn, direction)
        if vantage == "sender":
            series = self.analysis.sender.series.of(conn, d)
        elif vantage == "receiver":
            receiver = self.analysis.receiver
            if receiver is None:
                raise TracekitError(
                    "the receiver's series need a receiver capture: open(..., receiver=...)"
                )
            rconn, rdir = self._receiver_direction(conn, d)
            series = receiver.series.of(rconn, rdir)
        else:
            raise TracekitError(f"unknown vantage {vantage!r}: sender or receiver")
        return SeriesTables(
            *(series.table(name).copy() for name in ("segments", "acks", "sacks", "rtt", "flight"))
        )

    def plot(
        self,
        conn: int,
        kind: str = "tsg",
        direction: int | Literal["a2b", "b2a"] | None = None,
        config: ReportConfig | None = None,
    ) -> Plot:
        """The report's view model of one plot (`tracekit.report.model.Plot`), one of FIGURES."""
        if kind not in FIGURES:
            raise TracekitError(f"unknown figure {kind!r}: one of {', '.join(FIGURES)}")
        plots, beside = connection_plots(
            self.analysis, conn, self._direction(conn, direction), config
        )
        found: Mapping[str, Plot | None]
        if kind == "receiver_tsg":
            found = {kind: beside[0] if beside else None}
        else:
            found = dict(zip(_SENDER_PLOTS, plots, strict=False))
        plot = found.get(kind)
        if plot is None:
            raise TracekitError(
                f"connection {conn}: no {kind} plot (the merged plots need a receiver capture "
                "that holds the connection)"
            )
        return plot

    def figure(
        self,
        conn: int,
        kind: str = "tsg",
        direction: int | Literal["a2b", "b2a"] | None = None,
        config: ReportConfig | None = None,
    ) -> go.Figure:
        """A plotly figure of one of the report's plots of connection `conn` (FIGURES: tsg,
        throughput, rtt, flight; with a receiver capture merged, delay and receiver_tsg)."""
        return to_figure(self.plot(conn, kind, direction, config))

    def _direction(self, conn: int, direction: int | str | None) -> int:
        n = len(self.connections)
        if not 0 <= conn < n:
            raise TracekitError(f"no connection {conn}: the capture has {n} (0 to {n - 1})")
        if direction is None:
            row = self.connections.iloc[conn]
            return int(data_direction(row["bytes_a2b"], row["bytes_b2a"]))
        if isinstance(direction, str):
            if direction not in _DIRECTIONS:
                raise TracekitError(f"unknown direction {direction!r}: a2b or b2a")
            return _DIRECTIONS[direction]
        if direction not in (0, 1):
            raise TracekitError(f"unknown direction {direction!r}: 0 (a2b) or 1 (b2a)")
        return int(direction)

    def _receiver_direction(self, conn: int, direction: int) -> tuple[int, int]:
        pairs = self._merge().connections.pairs
        hit = pairs[pairs["conn_s"] == conn]
        if hit.empty:
            raise TracekitError(f"connection {conn} is not in the receiver's capture")
        # flip: the receiver's capture calls a what the sender's calls b.
        flip = bool(hit["flip"].iloc[0])
        return int(hit["conn_r"].iloc[0]), 1 - direction if flip else direction

    def _merge(self) -> Merge:
        if self.analysis.merge is None:
            raise TracekitError("the merge needs a receiver capture: open(..., receiver=...)")
        return self.analysis.merge


# Named as io.open and gzip.open are: `tracekit.open(path)`.
def open(
    sender: str | Path,
    receiver: str | Path | None = None,
    *,
    addr_map: Mapping[str, str] | None = None,
) -> Run:
    """Analyse the sender's capture (and the receiver's: the two are merged) as `tracekit
    analyze` does. `addr_map` maps a NAT'd sender-side address to what the receiver saw
    (`--map`)."""
    return Run(analyze_files(sender, receiver, addr_map=addr_map))
