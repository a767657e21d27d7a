"""The chaos soak's pure pieces: the seeded schedule and the checks that judge a run (no broker)."""

from __future__ import annotations

import pytest

from framebus.messages import Detections, FrameStatus, Tracks
from tests.reliability.chaos import Fault, FaultKind, Incarnation, Injected, make_schedule
from tests.reliability.chaos_checks import (
    capture_gaps,
    fault_windows,
    one_record_each,
    recovery_times,
    rss_growth,
    seq_gaps,
    unexpected_exits,
)

SERVICES = ("decoder", "inferencer", "tracker", "alerts", "live", "clips")


def test_schedule_when_drawn_twice_from_a_seed_then_same_and_one_coordinator_no_broker_after_it() -> (
    None
):
    for seed in range(200):
        faults = make_schedule(seed, 300, SERVICES, ["cam"])
        assert faults == make_schedule(seed, 300, SERVICES, ["cam"])
        kinds = [f.kind for f in faults]
        assert len(faults) == 6
        assert kinds.count(FaultKind.COORDINATOR) == 1
        after = kinds[kinds.index(FaultKind.COORDINATOR) :]
        assert FaultKind.BROKER not in after, (seed, kinds)
        assert faults[-1].at_s <= 300 - 45


def test_schedule_when_too_short_for_a_fault_then_error_names_the_variable() -> None:
    with pytest.raises(ValueError, match="FRAMEBUS_CHAOS_S=60"):
        make_schedule(1, 60, SERVICES, [])


def _det(cam: str, seq: int, ts: int, status: FrameStatus = FrameStatus.INFERRED) -> Detections:
    return Detections(cam, seq, ts, status, "m", "1")


def _trk(cam: str, seq: int, ts: int) -> Tracks:
    return Tracks(cam, seq, ts, FrameStatus.INFERRED)


def test_one_record_each_when_a_frame_doubled_one_missing_one_failed_then_each_reported() -> None:
    frames = [("a", 0, 10), ("a", 1, 20), ("a", 0, 30)]  # the decoder restarted at capture 30
    dets = [_det("a", 0, 10), _det("a", 0, 10), _det("a", 1, 20, FrameStatus.FAILED)]
    tracks = [_trk("a", 0, 10), _trk("a", 1, 20), _trk("a", 0, 30)]
    problems = one_record_each(frames, dets, tracks)
    assert any("1 frames without a detections record" in p for p in problems), problems
    assert any("more than one detections record" in p for p in problems), problems
    assert any("status not allowed" in p for p in problems), problems
    assert not [p for p in problems if "tracks" in p], problems
    assert seq_gaps(frames) == []
    assert seq_gaps([("a", 0, 1), ("a", 2, 2)]) == ["a run 0: seqs 0..2 with holes"]


def test_gaps_and_recovery_when_a_camera_cut_then_its_gap_explained_and_others_not() -> None:
    cut = Injected(Fault(30, FaultKind.CAMERA_CUT, "a"), at=100.0, wall_s=1000.0, detail="")
    changes = [(0.0, "decoder", True), (102.0, "decoder", False), (114.0, "decoder", True)]
    windows = fault_windows([cut], changes, services=1)
    assert windows[0].start_s == 1000.0 and windows[0].end_s == 1000.0 + 14.0 + 10.0
    s = 1_000_000
    frames = [("a", 0, 999 * s), ("a", 1, 1012 * s), ("b", 0, 999 * s), ("b", 1, 1012 * s)]
    gaps = {g.camera: g for g in capture_gaps(frames, 5.0, windows)}
    assert gaps["a"].kinds == ("camera-cut",) and gaps["a"].lost == 64
    assert gaps["b"].kinds == ()  # another camera's cut explains nothing
    assert recovery_times([cut], changes, end=200.0) == {"decoder": [14.0]}


def test_unexpected_exits_when_traceback_or_error_exit_then_named_but_kill_term_watchdog_not() -> (
    None
):
    restarts = [(10.0, "tracker", 1), (20.0, "clips", 2), (30.0, "live", -9), (40.0, "alerts", 0)]
    restarts.append((50.0, "inferencer", 70))
    problems = unexpected_exits(restarts, 5.0)
    assert [p.split(" (")[0] for p in problems] == [
        "tracker exited 1 at 5 s",
        "clips exited 2 at 15 s",
    ]


def test_rss_growth_when_bump_is_a_producer_backlog_then_left_out_but_a_leak_is_not() -> None:
    # 150 MiB flat, then 230 MiB for the last samples: a queue filled by a broker's outage.
    samples = [(120.0 + 10 * i, (150 if i < 12 else 230) * 1024) for i in range(18)]
    bump = Incarnation(1, 0.0, samples, backlogged=[t for t, kb in samples if kb > 150 * 1024])
    leak = Incarnation(2, 0.0, samples)
    problems, lines = rss_growth({"decoder": [bump, leak]})
    assert problems == ["decoder pid 2 RSS grew 53.3% after warm-up"]
    assert "6 with a backlog left out" in lines[0]


def test_rss_growth_when_step_within_the_heap_glibc_keeps_then_no_problem() -> None:
    # A tracker's restore after a rewind: 60 MiB, then 85 MiB (+42 %, but 25 MiB).
    samples = [(120.0 + 10 * i, (60 if i < 9 else 85) * 1024) for i in range(18)]
    problems, _lines = rss_growth({"tracker": [Incarnation(1, 0.0, samples)]})
    assert problems == []
