import subprocess
import sys
import textwrap

import pytest

from framebus.malloc import (
    MALLOC_TRIM_THRESHOLD_BYTES,
    TOP_PAD_BYTES,
    BacklogDrain,
    keep_freed_heap,
)

# In a fresh process (the thresholds are process-wide): hold a batch of 16 record-sized buffers,
# free them, twice, and report from glibc's mallinfo2 the most bytes mmapped while they were held,
# how much freed heap stayed in the process after they went, and the heap glibc took in all.
PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "keep":
        assert keep_freed_heap(MALLOC_TRIM_THRESHOLD_BYTES)
    mapped = 0
    for _ in range(2):
        batch = [bytearray(1_228_800) for _ in range(16)]
        mapped = max(mapped, libc.mallinfo2().hblkhd)
        del batch
    info = libc.mallinfo2()
    print(mapped, info.fordblks, info.arena)
    """
)


def _run(probe: str, mode: str) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True
    ).stdout
    return [int(x) for x in out.split()]


def _probe(mode: str) -> tuple[int, int, int]:
    mapped, free, heap = _run(PROBE, mode)
    return mapped, free, heap


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")


def test_keep_freed_heap_when_set_then_record_buffers_come_from_and_stay_in_the_heap() -> None:
    mapped, free, heap = _probe("keep")
    assert mapped < 1_228_800  # served from the heap, not fresh mmapped pages
    assert free >= 16 * 1_228_800  # and kept there for the next batch, not trimmed
    # The top pad took effect: the heap grew by a whole thread heap's worth at once (address
    # space only), which is what keeps glibc from unmapping a thread's emptied heaps.
    assert heap >= TOP_PAD_BYTES


def test_keep_freed_heap_when_not_set_then_glibc_maps_and_trims_record_buffers() -> None:
    mapped, free, heap = _probe("default")
    # What the setting is for: glibc's default threshold (128 KiB) maps the first 1.2 MB buffer,
    # and a freed batch at the heap's top goes back to the kernel, to be faulted in afresh.
    assert mapped >= 1_228_800
    assert free < 16 * 1_228_800
    assert heap < TOP_PAD_BYTES


def test_keep_freed_heap_when_zero_then_nothing_is_changed() -> None:
    assert keep_freed_heap(0) is False


def test_trim_threshold_default_when_compared_then_holds_a_fetch_response_and_a_batch() -> None:
    assert MALLOC_TRIM_THRESHOLD_BYTES >= 16 * 1024 * 1024 + 16 * 1_228_800


# In a fresh process with the heap kept: a new thread (its own malloc arena, as the receive
# thread's) optionally pre-touches 32 records' worth, then holds 16 record-sized buffers; print
# what pre_touch returned and the minor page faults the thread took while making the 16.
TOUCH_PROBE = textwrap.dedent(
    """
    import resource, sys, threading
    from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap, pre_touch

    RECORD = 1_228_800
    if sys.argv[1] != "default":
        assert keep_freed_heap(MALLOC_TRIM_THRESHOLD_BYTES)
    out = []

    def receive_thread():
        touched = pre_touch(32 * RECORD, RECORD) if sys.argv[1] != "keep-only" else 0
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        batch = [bytearray(RECORD) for _ in range(16)]
        out.append((touched, resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before))
        del batch

    t = threading.Thread(target=receive_thread)
    t.start()
    t.join()
    print(*out[0])
    """
)


def _touch_probe(mode: str) -> tuple[int, int]:
    touched, faults = _run(TOUCH_PROBE, mode)
    return touched, faults


def test_pre_touch_when_heap_kept_then_a_threads_next_records_take_no_fresh_pages() -> None:
    touched, faults = _touch_probe("touch")
    assert touched == 32 * 1_228_800
    # Without it the same 16 buffers fault in every page (checked below); with it, a handful.
    assert faults < 16 * 1_228_800 // 4096 // 10


def test_pre_touch_when_not_done_then_a_threads_first_records_fault_their_pages_in() -> None:
    touched, faults = _touch_probe("keep-only")
    assert touched == 0
    assert faults >= 16 * 1_228_800 // 4096 * 9 // 10


def test_pre_touch_when_heap_not_kept_then_nothing_is_touched() -> None:
    touched, _faults = _touch_probe("default")
    assert touched == 0  # the blocks would only be unmapped again


# In a fresh process, on a thread (its own malloc arena, as the decoder's publisher has): 40
# record-sized buffers, each with a small buffer after it that stays, are freed; the RSS before
# and after give_back_freed_heap, and what it returned.
TRIM_PROBE = textwrap.dedent(
    """
    import os, threading
    from framebus.malloc import give_back_freed_heap

    RECORD = 1_228_800

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    out = []

    def publisher_thread():
        for _ in range(2):  # glibc raises its mmap threshold once it frees a mapped chunk
            del_me = bytearray(2 * RECORD)
            del del_me
        big, small = [], []
        for _ in range(40):
            big.append(bytearray(RECORD))
            small.append(bytearray(4096))  # glibc, not pymalloc: the heap top is never free
        del big
        before = rss()
        released = give_back_freed_heap()
        out.append((before, rss(), int(released)))

    t = threading.Thread(target=publisher_thread)
    t.start()
    t.join()
    print(*out[0])
    """
)


def test_give_back_freed_heap_when_freed_records_sit_below_live_ones_then_rss_falls() -> None:
    before, after, released = _run(TRIM_PROBE, "-")
    assert released == 1
    assert before - after >= 30 * 1_228_800  # most of the 40 freed records' pages


def test_backlog_drain_when_queue_passes_high_then_drains_to_low_then_once_with_its_peak() -> None:
    drain = BacklogDrain(high=10, low=2)
    assert [drain.drained(n) for n in (0, 5, 9, 3, 1)] == [0, 0, 0, 0, 0]  # never reached 10
    assert [drain.drained(n) for n in (12, 30, 8, 3, 2, 0)] == [0, 0, 0, 0, 30, 0]
    assert [drain.drained(n) for n in (11, 1)] == [0, 11]  # a second backlog, once again


def test_backlog_drain_when_marks_are_reversed_then_refused() -> None:
    with pytest.raises(ValueError, match="below its high mark"):
        BacklogDrain(high=4, low=4)
