"""bench.marginal's arithmetic: marginal figures from the processes' lives (no broker)."""

import math

from bench.marginal_figures import figures, per_frame_ms
from bench.marginal_lives import Life


def life(frames: int, cpu_s: float, engine_s: float = 0.0, broker_s: float = 0.0) -> Life:
    return Life(frames, cpu_s, engine_s, broker_s, cpu_s, frames, float("nan"))


def test_per_frame_ms_when_two_drains_then_difference_over_frames() -> None:
    assert per_frame_ms(1.0, 4.0, (320, 3320)) == 1.0


def test_figures_when_workers_and_relays_then_their_floor_beside_them() -> None:
    small, large = 320, 3320
    pair = (life(small, 1.0), life(large, 2.5))  # 0.5 ms a frame
    fb = (life(small, 10.0, 8.0), life(large, 40.0, 35.0))  # own: (5 - 2) s / 3000 = 1 ms
    workers = (life(small, 12.0, 8.0), life(large, 48.0, 41.0))  # own: (7 - 4) s / 3000
    relays = (life(small, 2.0), life(large, 5.0))  # 1 ms a frame
    got = figures(fb, pair, pair, pair, pair, workers, relays, broker_idle=20.0)
    assert math.isclose(got.framebus_own, 1.0) and math.isclose(got.workers_own, 1.0)
    assert got.broker_idle == 20.0
    assert math.isclose(got.relay_floor, 0.5) and math.isclose(got.relays_floor, 1.0)


def test_figures_when_one_process_then_no_workers_figures() -> None:
    pair = (life(320, 1.0), life(3320, 2.5))
    got = figures(pair, pair, pair, pair, pair)
    assert math.isnan(got.workers_own) and math.isnan(got.relays_floor)
