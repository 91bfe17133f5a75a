"""The command's allocator setting: freed memory stays in the process for the next stage to reuse.

Every stage makes arrays of tens of megabytes on a big capture and frees most of them when it
is done. glibc serves each such array from a fresh mmap and unmaps it on free, so the next one
touches new pages: the kernel zeroes them and, on a virtual machine, the host may have to back
them first (measured here: 0.26 s per GB reused, up to 3 s per GB fresh). With arrays below
`OWN_MAPPING_BYTES` served from the heap and the heap never trimmed, a freed array's pages serve
the next one as they are. The peak is the same; the memory is given back when the command exits.

Kept for ever, though, the heap holds every stage's working memory on top of what the stages
after it keep, and a stage's freed arrays are reused only where the next one's fit in them: so
between stages (`give_back`, which the pipeline calls once a stage has let its working memory
go) the heap's free pages go back to the system, and within a stage they are reused as they are.
A column of a big capture (`OWN_MAPPING_BYTES` and more) is still its own mapping, given back
the moment it is freed: in the heap, one freed in the middle of a stage sat resident under
arrays that did not fit in it (on a 50 M-packet capture, 70 MiB more at the detectors' peak),
and the kernel's zeroing of its pages is a small part of the work a column that size stands for.

This is the command's choice, made once in `main` for the commands that run the analysis stages
(not ingest and flows, which read once and free little): the library never changes process state.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

# glibc's malloc.h parameter numbers.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The most mallopt takes (a C int): the heap keeps up to 2 GiB free at its top.
TRIM_THRESHOLD_BYTES = 2**31 - 1
# An allocation this big or bigger is a mapping of its own (8 M rows of 8 bytes: a column of a
# capture of millions of packets); smaller ones come from the heap and are reused there.
OWN_MAPPING_BYTES = 64 * 2**20


def retain_freed_memory() -> bool:
    """Have glibc serve allocations below OWN_MAPPING_BYTES from the heap and keep what is
    freed; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; musl's stub returns 0 and changes nothing.
    # A threshold set by hand also stops glibc from raising it as mappings are freed.
    return bool(mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def give_back() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim): a no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc's; musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim
