import pytest

from framebus_decoder.sampler import FpsSampler


def count_accepted(timestamps: list[float], fps: float) -> int:
    sampler = FpsSampler(fps)
    return sum(sampler.accept(t) for t in timestamps)


def test_sampler_when_25fps_source_at_5fps_then_5_per_second() -> None:
    assert count_accepted([i / 25 for i in range(250)], 5.0) == 50


def test_sampler_when_variable_frame_rate_then_rate_follows_time_not_count() -> None:
    # 2 s at 60 fps, then 2 s at 10 fps: still ~5 per second in both halves.
    ts = [i / 60 for i in range(120)] + [2 + i / 10 for i in range(20)]
    sampler = FpsSampler(5.0)
    first = sum(sampler.accept(t) for t in ts[:120])
    second = sum(sampler.accept(t) for t in ts[120:])
    assert first == 10
    assert second == pytest.approx(10, abs=1)


def test_sampler_when_target_zero_then_every_frame() -> None:
    assert count_accepted([i / 25 for i in range(30)], 0.0) == 30


def test_sampler_when_timestamps_restart_then_resyncs() -> None:
    ts = [i / 25 for i in range(50)] + [i / 25 for i in range(50)]
    assert count_accepted(ts, 5.0) == pytest.approx(20, abs=1)


def test_sampler_when_25fps_at_5_then_every_second_has_5() -> None:
    sampler = FpsSampler(5.0)
    kept = [t for t in (i / 25 for i in range(250)) if sampler.accept(t)]
    per_second = [sum(1 for t in kept if int(t) == s) for s in range(10)]
    assert all(4 <= n <= 6 for n in per_second), per_second
