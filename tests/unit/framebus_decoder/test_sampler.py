import pytest

from framebus_decoder.sampler import FpsSampler, spread_phase


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


def test_sampler_when_phase_then_grid_shifted_by_that_fraction_of_the_interval() -> None:
    sampler = FpsSampler(5.0, phase=0.4)
    kept = [t for t in (i / 25 for i in range(50)) if sampler.accept(t)]
    assert kept[:3] == pytest.approx([0.08, 0.28, 0.48])
    assert len(kept) == 10


def test_sampler_when_phase_out_of_range_then_value_error() -> None:
    with pytest.raises(ValueError, match="phase"):
        FpsSampler(5.0, phase=1.0)


def test_spread_phase_when_many_cameras_then_no_two_closer_than_a_fraction_of_even_spacing() -> (
    None
):
    for n in (2, 3, 4, 8, 16, 64):
        phases = sorted(spread_phase(k) for k in range(n))
        gaps = [b - a for a, b in zip(phases, [*phases[1:], phases[0] + 1], strict=True)]
        # Golden-ratio phases: every gap is at least ~0.38 of the even spacing 1/n.
        assert min(gaps) >= 0.38 / n, (n, gaps)
