"""The command's allocator setting: big arrays come from the heap, and freed ones are reused."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Run in a fresh interpreter: the setting is process-wide and must not leak into the tests.
PROBE = textwrap.dedent(
    """
    import numpy as np
    from tracekit.cli.memory import retain_freed_memory

    def in_heap(a):
        address = a.ctypes.data
        for line in open("/proc/self/maps"):
            if line.rstrip().endswith("[heap]"):
                low, high = (int(v, 16) for v in line.split()[0].split("-"))
                if low <= address < high:
                    return True
        return False

    before = np.ones(64 << 20, np.uint8)
    print(in_heap(before), retain_freed_memory())
    first = np.ones(64 << 20, np.uint8)
    address = first.ctypes.data
    del first
    second = np.ones(64 << 20, np.uint8)
    print(in_heap(second), second.ctypes.data == address)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_big_arrays_come_from_the_heap_and_freed_ones_are_reused() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    # glibc's default: a 64 MiB array is its own mmap, outside the heap.
    assert out[:2] == ["False", "True"]
    # After the setting: from the heap, and the freed array's memory serves the next one.
    assert out[2:] == ["True", "True"]
