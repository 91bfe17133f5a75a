"""Connections -> per-direction series: the third stage.

- `stage`: `build_series` and the `Series` and `Direction` values.
- `walk`: the compiled passes that write the segments and ACK tables and the RTT pairs, then
  the flight table from them.
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
