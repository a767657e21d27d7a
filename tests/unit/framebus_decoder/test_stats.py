from framebus_decoder.stats import CameraState, DecoderStats


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
