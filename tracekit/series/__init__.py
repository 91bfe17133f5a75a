"""Connections -> per-direction series: the third stage.

- `stage`: `build_series` and the `Series` and `Direction` values.
- `walk`: the compiled pass that writes the segments, ACK and flight tables, and the RTT pairs.
- `measures`: rates, trains, rounds and resends, measured over a direction's tables.
"""

from tracekit.series.measures import kind_mask, rate, resent, rounds, train_rows, trains
from tracekit.series.stage import Direction, Series, build_series

__all__ = [
    "Direction",
    "Series",
    "build_series",
    "kind_mask",
    "rate",
    "resent",
    "rounds",
    "train_rows",
    "trains",
]
