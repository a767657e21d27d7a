from __future__ import annotations

from framebus.messages import FrameStatus
from framebus_live.stats import CameraStats, percentile


def test_percentile_when_values_then_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) is None


def test_figures_when_records_then_rates_latency_and_drops_by_reason() -> None:
    stats = CameraStats(window_s=60.0)
    for i in range(100):
        t = i * 0.2  # 5 fps for 20 s
        stats.frame_in(t)
        status = FrameStatus.DROPPED_STALE if i % 10 == 0 else FrameStatus.INFERRED
        stats.record_out(t + 0.05, i, i, status, float(i))
    stats.record_out(20.0, 100, 100, FrameStatus.FAILED, 0.0)
    f = stats.figures(20.0, stalled_after_s=5.0)
    assert (f.frames_in, f.records_out) == (100, 101)
    assert 4.9 <= f.fps_in <= 5.1
    assert f.drops == {"DROPPED_STALE": 10, "FAILED": 1}
    assert f.p50_ms is not None and 45 <= f.p50_ms <= 55
    assert f.p99_ms == 99.0
    assert f.state == "live"


def test_figures_when_window_passed_then_old_records_forgotten_and_camera_stalled() -> None:
    stats = CameraStats(window_s=60.0)
    stats.frame_in(0.0)
    stats.record_out(0.0, 1, 1, FrameStatus.INFERRED, 30.0)
    f = stats.figures(61.0, stalled_after_s=5.0)
    assert (f.frames_in, f.records_out, f.p50_ms, f.state) == (0, 0, None, "stalled")


def test_figures_when_nothing_seen_then_waiting() -> None:
    assert CameraStats(60.0).figures(1.0, 5.0).state == "waiting"


def test_record_out_when_same_frame_twice_then_counted_once() -> None:
    stats = CameraStats(60.0)
    stats.record_out(1.0, 7, 700, FrameStatus.INFERRED, 10.0)  # its detections record
    stats.record_out(1.1, 7, 700, FrameStatus.INFERRED, 12.0)  # then its tracks record
    assert stats.figures(2.0, 5.0).records_out == 1
