import threading

import pytest

from framebus_decoder.freeze import FreezeClock, FreezeTicker
from framebus_decoder.stats import DecoderStats
from framebus_decoder.telemetry import DecoderCollector


def test_freeze_clock_when_ticks_come_on_time_then_nothing_frozen() -> None:
    clock = FreezeClock(0.0, tick_every_s=0.2, late_s=1.0)
    assert [clock.tick(t / 10) for t in range(2, 40, 3)] == [0.0] * 13  # 0.3 s apart: jitter
    assert clock.frozen_s(3.9) == 0.0


def test_freeze_clock_when_a_tick_comes_late_then_its_gap_less_one_interval_is_frozen() -> None:
    clock = FreezeClock(0.0, tick_every_s=0.2, late_s=1.0)
    clock.tick(0.2)
    assert clock.tick(15.2) == pytest.approx(14.8)
    assert clock.tick(15.4) == 0.0
    assert clock.frozen_s(15.4) == pytest.approx(14.8)


def test_freeze_clock_when_no_tick_since_the_freeze_then_the_ongoing_gap_is_counted() -> None:
    clock = FreezeClock(0.0, tick_every_s=0.2, late_s=1.0)
    clock.tick(0.2)
    assert clock.frozen_s(1.3) == 0.0  # not late enough yet
    assert clock.frozen_s(10.2) == pytest.approx(9.8)
    clock.tick(10.5)  # the ticker catches up: the same freeze, not counted twice
    assert clock.frozen_s(10.5) == pytest.approx(10.1)


def test_freeze_ticker_when_its_clock_jumps_then_counts_the_freeze_in_stats_and_metrics() -> None:
    times = iter([0.1, 9.0])
    stats = DecoderStats()
    done = threading.Event()

    def now() -> float:
        t = next(times, None)
        if t is None:
            done.set()
            return 9.0
        return t

    ticker = FreezeTicker(FreezeClock(0.0), stats, now_s=now, tick_every_s=0.001).start()
    assert done.wait(5.0)
    ticker.stop()
    assert stats.frozen_s() == pytest.approx(8.7)
    families = {f.name: f for f in DecoderCollector(stats).collect()}
    assert families["framebus_decoder_frozen_seconds"].samples[0].value == pytest.approx(8.7)
