"""Keep glibc's heap from handing 1.2 MB frame records back to the kernel after each one.

Every frame passes through several buffers of about 1.2 MB (librdkafka's fetch response, the
Python bytes confluent-kafka copies it into, the producer's copy of a record). glibc serves such
sizes from mmap, or from a heap top it trims back to the kernel once 128 KiB-2x the mmap threshold
lies free, so the kernel zeroes fresh pages for nearly every frame (`perf` shows the kernel's
page clearing high among a draining inferencer's samples). A fixed mmap threshold at glibc's
ceiling (32 MiB) and a high trim threshold keep freed buffers in the heap for the next frame.

Threads other than the main one allocate from arenas made of 64 MiB heaps, and glibc unmaps a
heap whole once its last chunk is freed, whatever the trim threshold: the receive thread's record
values and librdkafka's fetch buffers spill into a second heap under load, which was unmapped and
mapped again every second or so of a drain (`perf` on munmap: `heap_trim` from
`rd_buf_destroy` and from freeing the values), each time 64 MiB of fresh pages to fault in. A top
pad of a whole heap keeps such heaps (glibc keeps a heap while its predecessor lacks `top_pad`
bytes of room); it only reserves address space when the heap grows.

The cost is resident memory: up to `trim_threshold_bytes` of freed heap per malloc arena, and the
heaps a thread's arena once needed, are kept instead of returned (docs/inferencer.md; the
figures are in docs/benchmarks.md).

With the heap kept, `pre_touch` lets a thread fault in, at start-up, the heap its records will
reach under a backlog, so the first frames do not pay for it (JVM's AlwaysPreTouch, per thread).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# Whether keep_freed_heap took effect in this process (mallopt's settings are process-wide).
_heap = {"kept": False}

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2, which is 32 MiB on 64-bit.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# A thread arena's heap size on 64-bit (HEAP_MAX_SIZE, twice the mmap ceiling): as a top pad, it
# keeps glibc from unmapping a thread's emptied heaps (`heap_trim`).
TOP_PAD_BYTES = 2 * MMAP_THRESHOLD_BYTES
# The default: room for a fetch response (16 MiB) and a batch of 16 records (20 MB) twice over.
MALLOC_TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
MAX_TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes a C int


def keep_freed_heap(trim_threshold_bytes: int) -> bool:
    """Set glibc's mmap threshold, trim threshold and top pad for this process; False if not set.

    0 leaves glibc's defaults (False). Call it once at start-up, before the Kafka clients make
    their first buffers. A C library other than glibc (musl) has no mallopt: the defaults stay,
    and the log says so.
    """
    if trim_threshold_bytes <= 0:
        return False
    mallopt = _mallopt()
    if mallopt is None:
        log.info("malloc thresholds left as they are: this C library has no mallopt")
        return False
    settings = (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (M_TRIM_THRESHOLD, trim_threshold_bytes),
        (M_TOP_PAD, TOP_PAD_BYTES),
    )
    # Every setting is tried (a list, not a short-circuit): one refused leaves the others applied.
    applied = all([bool(mallopt(param, value)) for param, value in settings])
    if not applied:
        log.warning(
            "glibc refused a malloc setting (mmap threshold %d B, trim threshold %d B, top pad "
            "%d B); its defaults stay for the refused ones",
            MMAP_THRESHOLD_BYTES,
            trim_threshold_bytes,
            TOP_PAD_BYTES,
        )
    _heap["kept"] = applied
    return applied


def pre_touch(total_bytes: int, block_bytes: int) -> int:
    """Fault in `total_bytes` of this thread's malloc arena, then free it; return bytes touched.

    Blocks of `block_bytes` (a record's size) are allocated through Python's allocator, as
    record values are, each written whole, and freed: with the heap kept (`keep_freed_heap`)
    their pages stay mapped for the buffers this thread allocates next. Without it the blocks
    would go straight back to the kernel, so nothing is done (0).
    """
    if not _heap["kept"] or total_bytes <= 0 or block_bytes <= 0:
        return 0
    # bytearray(n) writes its n zero bytes, so every page is faulted in here, not mid-stream.
    held = [bytearray(block_bytes) for _ in range(-(-total_bytes // block_bytes))]
    touched = len(held) * block_bytes
    del held
    return touched


def _mallopt() -> Callable[[int, int], int] | None:
    # The symbols already loaded into this process, libc's among them: no library search (which
    # runs ldconfig, absent from slim images) and always the C library the process really uses.
    func = getattr(ctypes.CDLL(None), "mallopt", None)
    if func is None:
        return None
    func.argtypes = (ctypes.c_int, ctypes.c_int)
    func.restype = ctypes.c_int
    return func  # type: ignore[no-any-return]


def give_back_freed_heap() -> bool:
    """Return the free memory of every malloc arena to the kernel (glibc's `malloc_trim(0)`).

    A burst (a producer queue filled while its broker was away) leaves freed chunks that glibc
    keeps where a live one sits above them; this hands their pages back. True when glibc released
    some; False when there was nothing to release or the C library has no malloc_trim (musl).
    """
    func = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if func is None:
        return False
    func.argtypes = (ctypes.c_size_t,)
    func.restype = ctypes.c_int
    return bool(func(0))


class BacklogDrain:
    """Says when a queue that held at least `high` items has come back down to `low` or fewer."""

    def __init__(self, high: int, low: int) -> None:
        if not 0 <= low < high:
            raise ValueError(f"a backlog's low mark ({low}) must be below its high mark ({high})")
        self.high, self.low = high, low
        self._peak = 0  # the most seen since the last drain

    def drained(self, queued: int) -> int:
        """Feed the queue's length now; the backlog's peak once it has drained, else 0."""
        self._peak = max(self._peak, queued)
        if self._peak < self.high or queued > self.low:
            return 0
        peak, self._peak = self._peak, 0
        return peak
