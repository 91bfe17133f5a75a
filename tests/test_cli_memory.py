"""The command's allocator setting: arrays below a column of a big capture come from the heap,
and freed ones are reused; a bigger one is its own mapping, given back when freed."""

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

    def resident_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    before = np.ones(32 << 20, np.uint8)
    print(in_heap(before), retain_freed_memory())
    first = np.ones(32 << 20, np.uint8)
    address = first.ctypes.data
    del first
    second = np.ones(32 << 20, np.uint8)
    print(in_heap(second), second.ctypes.data == address)
    column = np.ones(64 << 20, np.uint8)
    touched = resident_mib()
    print(in_heap(column))
    del column
    print(round(touched - resident_mib()))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_arrays_below_a_column_come_from_the_heap_and_a_column_is_its_own_mapping() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    # glibc's default: a 32 MiB array is its own mmap, outside the heap.
    assert out[:2] == ["False", "True"]
    # After the setting: from the heap, and the freed array's memory serves the next one.
    assert out[2:4] == ["True", "True"]
    # A 64 MiB column is its own mapping still, and its pages go back the moment it is freed.
    assert out[4] == "False"
    assert int(out[5]) > 60


# Touched and freed under the setting, a 48 MiB array stays resident until give_back.
GIVE_BACK = textwrap.dedent(
    """
    import numpy as np
    from tracekit.cli.memory import give_back, retain_freed_memory

    def resident_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    print(retain_freed_memory())
    big = np.ones(48 << 20, np.uint8)
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
    assert given > 44  # handed back, though not at the heap's top
