from framebus_decoder.freeze import FreezeClock
from framebus_decoder.source import DECODE_ERROR, FROZEN, STALL, SourceFailure
from framebus_decoder.timing import StallWatch
from framebus_decoder.worker import freeze_failure

CUT = SourceFailure(STALL, "rtsp://cam/1: no data: Immediate exit requested")


def test_freeze_failure_when_the_read_timed_out_across_a_freeze_then_frozen_not_stall() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    clock.tick(0.2)  # then frozen until 9 s, inside a read: PyAV's timeout fires on waking
    failure = freeze_failure(CUT, watch, 9.0)
    assert failure is not None and failure.reason == FROZEN
    assert "did not run for 8.6 s" in str(failure)


def test_freeze_failure_when_the_source_was_silent_while_the_process_ran_then_none() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    for i in range(1, 17):
        clock.tick(i * 0.2)
    assert freeze_failure(CUT, watch, 3.2) is None  # a stall indeed: it stays one


def test_freeze_failure_when_bad_data_without_a_freeze_then_none() -> None:
    watch = StallWatch(3.0, now_s=0.0)  # the process ran throughout
    assert freeze_failure(SourceFailure(DECODE_ERROR, "bad data"), watch, 9.0) is None


def test_freeze_failure_when_bad_data_right_after_a_long_freeze_then_frozen() -> None:
    # Seen in CI: a live RTSP camera's first packets after a 9 s freeze did not decode (the
    # server had dropped what it could not send meanwhile); that is no fault of the camera.
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    clock.tick(0.2)
    failure = freeze_failure(SourceFailure(DECODE_ERROR, "Invalid data"), watch, 9.0)
    assert failure is not None and failure.reason == FROZEN
    assert "data the sender dropped" in str(failure)


def test_freeze_failure_when_bad_data_after_a_freeze_shorter_than_the_timeout_then_none() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    clock.tick(0.2)  # then frozen until 2 s: under the 3 s timeout, the data stays the camera's
    assert freeze_failure(SourceFailure(DECODE_ERROR, "Invalid data"), watch, 2.0) is None
