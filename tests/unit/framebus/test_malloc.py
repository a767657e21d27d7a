import subprocess
import sys
import textwrap

import pytest

from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, TOP_PAD_BYTES, keep_freed_heap

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
