"""Process-level tuning that the CLI and benchmarks opt into; the library never does it alone.

glibc returns every freed block above its mmap threshold (at most 32 MiB) straight to the
operating system, so each training step page-faults its large activation and gradient buffers
in again. Measured here on the banded backward at T=4096 (1 thread): those faults were ~15-20%
of the step. `tune_allocator` keeps such blocks in the heap instead.

The attention engines no longer depend on it: they keep their own large buffers across calls
(`aah.attention.workspace`), so a plain script that never calls this gets their speed too. It
still helps the rest of a training step (activations, optimizer state), which is why the CLI
keeps calling it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds; True when applied.

    Skipped (False) off Linux, on a C library without `mallopt`, or when the environment sets
    AAH_TUNE_ALLOCATOR=0.
    """
    if os.environ.get("AAH_TUNE_ALLOCATOR", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)  # glibc's maximum on 64-bit
    ok &= mallopt(_M_TRIM_THRESHOLD, 1024 * 2**20)
    ok &= mallopt(_M_TOP_PAD, 64 * 2**20)
    return bool(ok)
