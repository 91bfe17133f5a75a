"""Two vantage points: the sender's and the receiver's captures of one transfer, merged.

Modules: `stage` (the `Merge` value and `merge`), `match`, `clock`, `fate`, and `udpstream`
(numbered UDP test streams, received against sent).

`merge(sender, receiver)` finds the same connections and the same transmissions in both
(`match`), fits the receiver's clock to the sender's (`clock`), and gives each data transmission
its fate (`fate`): delivered, lost in the network, dropped by the receiving host after its
capture point, missed by either capture, duplicated or reordered. Antony et al. call this
"combined traces from sender and receiver" (fig. 7); docs/two-vantage.md states the method and
its limits.

The data direction of a connection (`tracekit.connections.data_direction`, in the sender
capture): its packets go sender capture -> receiver capture; the other direction's (ACKs) go back.
"""

from tracekit.merge.clock import ClockFit
from tracekit.merge.match import ConnectionMatch, parse_map
from tracekit.merge.stage import Merge, ReceiverMismatch, fate_is, merge, same_file

__all__ = [
    "ClockFit",
    "ConnectionMatch",
    "Merge",
    "ReceiverMismatch",
    "fate_is",
    "merge",
    "parse_map",
    "same_file",
]
