"""Data a connection carried back, from the receiver's host to the sender's, gets fates too.

The lab's `bidir_reverse_drops` row sends 4 MB each way on one connection, and nftables in the
middle drops every 100th data segment on its way back to the sender, counting them: a loss
between the capture points, in the direction the merge judges with the captures' roles swapped.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracekit.capture import read_capture
from tracekit.pipeline import analyze

ROW = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "bidir_reverse_drops"


def test_returning_data_lost_in_the_middle_equals_the_firewall_counter() -> None:
    truth = json.loads((ROW / "truth.json").read_text())
    analysis = analyze(
        read_capture(ROW / "sender.pcap.zst"), read_capture(ROW / "receiver.pcap.zst")
    )
    assert analysis.merge is not None
    tx = analysis.merge.transmissions
    # The lab's sender is side a: its data is a2b, the data coming back b2a.
    assert analysis.sender.connections.table.column("a").to_pylist()[0] == truth["flow"]["sender"]
    back = tx[(tx["conn"] == 0) & (tx["dir"] == 1)]
    forth = tx[(tx["conn"] == 0) & (tx["dir"] == 0)]
    assert int((back["fate"] == "network_drop").sum()) == truth["drops"]["reverse_data"] > 0
    # The bottleneck's counter: nothing lost on the way out.
    assert int((forth["fate"] == "network_drop").sum()) == truth["drops"]["network"] == 0
    # Every returning segment the receiver's host sent is judged: those it resent are the
    # retransmissions its kernel counted.
    assert len(back) - truth["reverse"]["retransmissions"]["segments"] == int(
        (back["fate"] == "delivered").sum() + (back["fate"] == "reordered").sum()
    )
    (finding,) = [f for f in analysis.findings if f.kind == "network_drop" and f.direction == "b2a"]
    assert finding.evidence["network_drops_packets"] == truth["drops"]["reverse_data"]
    # Departures of the returning data were stamped by the receiver's clock: on the sender's,
    # each arrives after it left.
    both = back.dropna(subset=["sender_t_s", "receiver_t_s"])
    assert (both["receiver_t_s"] > both["sender_t_s"]).all()
