"""The report's plots of tables only the report reads, encoded while the analysis runs.

On a sender and receiver pair, the receiver's series (its TSG's only source) and the merge's
delay table (its delay plot's) are as big as the sender's series, and no detector reads them.
Built by the pipeline and held to the end, they sat beside the sender's series, its packets and
every detector's working memory. `EarlyPlots` is the pipeline's `Early`: it encodes those plots
for the connections the report will draw as soon as their tables are made (the delay plots
once the merge is done, the receiver's TSGs once the receiver's series are), as the page would
carry them at every thinning (`tracekit.report.html.encode`), and lets the pipeline drop the
tables before the sender's series are built. The page made from them is the same page.

Encoding every thinning of a trace up front costs more than the one the page picks, so it is
done only where the receiver's capture is big enough for its tables to matter.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from tracekit.analysis import Vantage
from tracekit.connections import Connections
from tracekit.core.groups import row_count
from tracekit.merge import Merge
from tracekit.report.build import (
    ReportConfig,
    delay_plot_of,
    delays_ms,
    drawn_connections,
    main_direction,
    receiver_direction,
    receiver_tsg,
)
from tracekit.report.html import Budget, encode
from tracekit.report.model import Encoded

# Below a million packets in the receiver's capture its series and the delay table are tens of
# megabytes: not worth the extra encodings.
MIN_RECEIVER_PACKETS = 1 << 20


class EarlyPlots:
    """The receiver's TSGs and the delay plots of the connections a report draws, encoded as
    soon as their tables exist (the pipeline's `Early`), by (sender connection, direction).

    `budget` must be the one the page is made with. `min_packets` is how many packets the
    receiver's capture must hold for this to be done at all. `after_plot` is called once each
    plot is encoded and its arrays let go, and within a plot's encoding between its parts
    (`html.encode`): a command returns the freed memory to the system there, as `html.render`
    takes it.
    """

    def __init__(
        self,
        config: ReportConfig | None = None,
        budget: Budget | None = None,
        min_packets: int = MIN_RECEIVER_PACKETS,
        after_plot: Callable[[], None] | None = None,
    ) -> None:
        self.config = config or ReportConfig()
        self.budget = budget or Budget()
        self.min_packets = min_packets
        self.after_plot = after_plot or _nothing
        self.delay: dict[tuple[int, int], Encoded] = {}
        self.receiver: dict[tuple[int, int], Encoded] = {}
        self.active = False

    def _drawn(self, sender: Connections) -> list[tuple[int, int]]:
        """(conn, direction) of each connection the report will draw (`build_report`)."""
        conns = sender.frame()
        return [(c, main_direction(conns.loc[c])) for c in drawn_connections(conns, self.config)]

    def after_merge(
        self, sender: Connections, receiver: Connections, merged: Merge, delay: list[pd.DataFrame]
    ) -> bool:
        """Encode the delay plots, taking the delay table `delay` holds (nothing else reads
        it); whether it took it."""
        self.active = receiver.packets.num_rows >= self.min_packets
        if not self.active:
            return False
        table = delay.pop()
        ms: tuple[np.ndarray, np.ndarray] | None = None
        for conn, direction in self._drawn(sender):
            rows = merged.transmission_groups().get((conn, direction))
            if rows is None or row_count(rows) == 0:
                continue  # the report draws no merged plots of it
            # In ms once for every plot, each column in seconds let go as its ms are made.
            ms = ms or delays_ms(table)
            plot = delay_plot_of(table, conn, direction, ms)
            self.delay[conn, direction] = encode(plot, self.budget, self.after_plot)
            del plot
            self.after_plot()
        return True

    def after_receiver(self, sender: Connections, receiver: Vantage, merged: Merge) -> bool:
        """Encode the receiver's TSGs (unshaded: the findings come later, `Encoded.with_shell`);
        whether the receiver's series may go (nothing else reads them)."""
        if not self.active:
            return False
        for conn, direction in self._drawn(sender):
            paired = receiver_direction(merged, conn, direction)
            if paired is None:
                continue
            rc, rdir = paired
            plot = receiver_tsg(receiver.series, sender.t0_ns, merged, rc, rdir, ())
            self.receiver[conn, direction] = encode(plot, self.budget, self.after_plot)
            del plot
            self.after_plot()
        return True


def _nothing() -> None:
    """No step between plots."""
