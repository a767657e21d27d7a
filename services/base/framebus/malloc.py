"""Keep glibc's heap from handing 1.2 MB frame records back to the kernel after each one.

Every frame passes through several buffers of about 1.2 MB (librdkafka's fetch response, the
Python bytes confluent-kafka copies it into, the producer's copy of a record). glibc serves such
sizes from mmap, or from a heap top it trims back to the kernel once 128 KiB-2x the mmap threshold
lies free, so the kernel zeroes fresh pages for nearly every frame: `perf` showed
`clear_page_erms` at 22 % of a draining inferencer's samples. A fixed mmap threshold at glibc's
ceiling (32 MiB) and a high trim threshold keep freed buffers in the heap for the next frame.
The cost is resident memory: up to `trim_threshold_bytes` of freed heap per malloc arena is kept
instead of returned. See docs/benchmarks.md ("glibc's heap kept for the next record").
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2, which is 32 MiB on 64-bit.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# The default: room for a fetch response (16 MiB) and a batch of 16 records (20 MB) twice over.
MALLOC_TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
MAX_TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes a C int


def keep_freed_heap(trim_threshold_bytes: int) -> bool:
    """Set glibc's mmap and trim thresholds for this process; False where it could not (or 0).

    Call it once at start-up, before the Kafka clients make their first buffers. A C library other
    than glibc (musl) has no mallopt: the defaults stay, and the log says so.
    """
    if trim_threshold_bytes <= 0:
        return False
    mallopt = _mallopt()
    if mallopt is None:
        log.info("malloc thresholds left as they are: this C library has no mallopt")
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes)
    )
    if not applied:
        log.warning(
            "glibc refused the malloc thresholds (mmap %d B, trim %d B); its defaults stay",
            MMAP_THRESHOLD_BYTES,
            trim_threshold_bytes,
        )
    return applied


def _mallopt() -> Callable[[int, int], int] | None:
    # The symbols already loaded into this process, libc's among them: no library search (which
    # runs ldconfig, absent from slim images) and always the C library the process really uses.
    func = getattr(ctypes.CDLL(None), "mallopt", None)
    if func is None:
        return None
    func.argtypes = (ctypes.c_int, ctypes.c_int)
    func.restype = ctypes.c_int
    return func  # type: ignore[no-any-return]
