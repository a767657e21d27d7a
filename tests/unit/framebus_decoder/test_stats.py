import pytest

from framebus_decoder.stats import CameraState, DecoderStats
from framebus_decoder.telemetry import DecoderCollector


def test_stats_when_counted_then_snapshot_per_camera_with_reasons() -> None:
    stats = DecoderStats()
    stats.frame_decoded("a")
    stats.incr("a", "published", 2)
    stats.drop("a", "backpressure_drop_oldest")
    stats.error("b", "open_failed", "cannot open rtsp://x")
    stats.set_state("b", CameraState.RECONNECTING, "open_failed")
    snap = stats.snapshot()
    assert snap["a"].count("decoded") == 1
    assert snap["a"].count("published") == 2
    assert snap["a"].dropped == {"backpressure_drop_oldest": 1}
    assert (snap["b"].state, snap["b"].state_reason) == (CameraState.RECONNECTING, "open_failed")
    assert snap["b"].errors == {"open_failed": 1}
    assert snap["b"].last_error == "cannot open rtsp://x"
    assert stats.total("published") == 2
    assert stats.state("never-seen") is CameraState.STARTING


def test_collector_when_motion_gate_decides_then_still_full_by_reason_fraction_and_cpu() -> None:
    stats = DecoderStats()
    stats.frame_decoded("quiet")  # a camera without a gate has no motion samples
    for reason, fraction in [("first", 0.0), ("still", 0.0), ("still", 0.001), ("motion", 0.04)]:
        stats.gated("gated", reason, fraction, 0.0005)
    families = {f.name: f for f in DecoderCollector(stats).collect()}

    def samples(name: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(s.labels.values()): s.value
            for s in families[name].samples
            if not s.name.endswith("_created")
        }

    assert samples("framebus_decoder_still_frames") == {("gated",): 2}
    assert samples("framebus_decoder_motion_full_frames") == {
        ("gated", "first"): 1,
        ("gated", "motion"): 1,
    }
    assert samples("framebus_decoder_motion_changed_fraction") == {("gated",): 0.04}
    assert samples("framebus_decoder_motion_gate_cpu_seconds") == {("gated",): pytest.approx(0.002)}
