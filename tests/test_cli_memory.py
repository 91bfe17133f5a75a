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


# Touched and freed under the setting, a 256 MiB array stays resident until give_back.
GIVE_BACK = textwrap.dedent(
    """
    import numpy as np
    from tracekit.cli.memory import give_back, retain_freed_memory

    def resident_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    print(retain_freed_memory())
    big = np.ones(256 << 20, np.uint8)
    small = np.ones(1 << 10, np.uint8)  # above it in the heap: the heap's top cannot shrink
    touched = resident_mib()
    del big
    kept = resident_mib()
    give_back()
    print(round(touched - kept), round(touched - resident_mib()))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_give_back_returns_freed_heap_pages_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "True"
    kept, given = int(out[1]), int(out[2])
    assert kept < 16  # freed, still resident
    assert given > 240  # handed back, though not at the heap's top
