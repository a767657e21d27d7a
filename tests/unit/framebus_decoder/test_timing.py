import pytest

from framebus_decoder.freeze import FreezeClock
from framebus_decoder.timing import Backoff, RealtimePacer, StallWatch


def test_backoff_when_failures_repeat_then_doubles_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 4.0, 0.0)
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 0.8), (1.0, 1.2), (0.5, 1.0)])
def test_backoff_when_jitter_then_delay_spread_within_fraction(
    rand: float, expected: float
) -> None:
    assert Backoff(1.0, 10.0, 0.2, rand=lambda: rand).next_delay() == pytest.approx(expected)


def test_pacer_when_frames_ahead_of_wall_clock_then_waits_the_difference() -> None:
    pacer = RealtimePacer()
    assert pacer.wait_s(10.0, 100.0) == 0.0
    assert pacer.wait_s(10.4, 100.1) == pytest.approx(0.3)
    assert pacer.wait_s(10.5, 100.9) == 0.0  # late: no wait


def test_pacer_when_timestamps_jump_then_resyncs_instead_of_sleeping() -> None:
    pacer = RealtimePacer()
    pacer.wait_s(0.0, 0.0)
    assert pacer.wait_s(3600.0, 0.1) == 0.0
    assert pacer.wait_s(3600.5, 0.1) == pytest.approx(0.5)


def test_stall_watch_when_progress_stops_then_stalled_after_timeout() -> None:
    watch = StallWatch(2.0, now_s=0.0)
    assert not watch.stalled(1.9)
    assert watch.stalled(2.1)
    watch.progress(5.0)  # e.g. the end of a wait on backpressure
    assert not watch.stalled(6.0)


def test_pacer_when_frames_are_late_or_early_then_capture_time_follows_the_files_timeline() -> None:
    pacer = RealtimePacer(epoch_s=lambda: 1000.0)
    assert pacer.scheduled_us(5.0) == 1_000_000_000  # before the first frame: the clock
    pacer.wait_s(5.0, now_s=50.0)
    pacer.wait_s(5.5, now_s=50.53)  # woke 30 ms late
    assert pacer.scheduled_us(5.5) == 1_000_500_000
    assert pacer.scheduled_us(6.0) == 1_001_000_000


def _ticking(clock: FreezeClock, start_s: float, end_s: float) -> None:
    """The ticker's ticks, on time, from `start_s` to `end_s`."""
    for i in range(round((end_s - start_s) / 0.2) + 1):
        clock.tick(start_s + i * 0.2)


def test_stall_watch_when_the_process_froze_past_the_timeout_then_not_stalled() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.1, frozen_s=clock.frozen_s)
    _ticking(clock, 0.0, 0.2)
    # SIGSTOP at 0.3 s, SIGCONT at 15 s: the worker sees a frame before the ticker ticks.
    assert not watch.stalled(15.0)
    assert watch.frozen_s(15.0) == pytest.approx(14.6)
    watch.progress(15.0)
    _ticking(clock, 15.1, 18.1)
    assert not watch.stalled(17.9)
    assert watch.stalled(18.1)  # a real stall after the freeze is still one


def test_stall_watch_when_the_source_is_silent_while_the_process_runs_then_stalled() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    _ticking(clock, 0.0, 3.0)  # a worker blocked in FFmpeg holds no GIL: the ticker runs on
    assert not watch.stalled(2.9)
    assert watch.stalled(3.1)
    assert watch.idle_s(3.1) == pytest.approx(3.1)


def test_stall_watch_when_a_stall_straddles_a_freeze_then_only_the_unfrozen_part_counts() -> None:
    clock = FreezeClock(0.0)
    watch = StallWatch(3.0, now_s=0.0, frozen_s=clock.frozen_s)
    _ticking(clock, 0.0, 2.0)  # 2 s silent while running
    _ticking(clock, 12.0, 12.4)  # then frozen 10 s: 9.8 s of it not counted
    assert watch.idle_s(12.4) == pytest.approx(2.6)
    assert not watch.stalled(12.4)
    _ticking(clock, 12.4, 12.8)
    assert watch.stalled(12.9)  # 3.1 s unfrozen: 2.2 s up to the freeze's end, 0.9 s after
