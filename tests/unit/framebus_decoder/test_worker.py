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


def test_freeze_failure_when_another_failure_during_a_freeze_then_none() -> None:
    watch = StallWatch(3.0, now_s=0.0, frozen_s=FreezeClock(0.0).frozen_s)
    assert freeze_failure(SourceFailure(DECODE_ERROR, "bad data"), watch, 9.0) is None
