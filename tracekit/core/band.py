"""One int64 key per (group, value), so that a single sort or binary search respects groups first.

A group is a connection's direction (or a connection and direction pair), a value a relative
sequence number. 2**41 bytes is 2 TiB of sequence space per group: no capture reaches it, and
2**63 / 2**41 leaves room for four million groups.
"""

from __future__ import annotations

import numpy as np

BAND = np.int64(1 << 41)


def band(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The key of each (group, value): group * BAND + value, as int64."""
    return group.astype(np.int64) * BAND + value.astype(np.int64, copy=False)
