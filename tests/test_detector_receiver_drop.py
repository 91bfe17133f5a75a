"""receiver_drop: fires with the receiver's nftables counter exactly, quiet without it."""

from __future__ import annotations

import pytest

from tests.helpers.lab_captures import lab_kind, truth


def test_count_is_the_nftables_counter() -> None:
    (f,) = lab_kind("receiver_drops", "receiver_drop")
    assert f.evidence["receiver_drops_packets"] == truth("receiver_drops")["drops"]["receiver"]
    # nftables drops every 100th data segment: about 1 in 100 of all transmissions.
    assert f.evidence["drop_ratio"] == pytest.approx(0.01, abs=0.002)


@pytest.mark.parametrize("scenario", ["clean", "network_drops", "slow_start_overrun"])
def test_quiet_when_the_host_kept_everything(scenario: str) -> None:
    found = lab_kind(scenario, "receiver_drop")
    assert truth(scenario)["drops"]["receiver"] == 0
    assert found == []
