import dataclasses
import json
from collections.abc import Iterable

import pytest

from framebus.messages import Box, Detections, FrameStatus, Tracks
from framebus_tracker.tracker import CameraTracker, TrackerConfig, TrackerStateError

W, H = 40.0, 100.0  # a person's box, px
T0 = 1_700_000_000_000_000  # capture time of the first record, us


def box(cx: float, cy: float = 300.0, cls: int = 0, score: float = 0.9) -> Box:
    return Box(cx - W / 2, cy - H / 2, cx + W / 2, cy + H / 2, cls, f"class{cls}", score)


def det(
    seq: int,
    *boxes: Box,
    t_s: float | None = None,
    status: FrameStatus = FrameStatus.INFERRED,
    camera: str = "cam-1",
    reason: str | None = None,
) -> Detections:
    at_s = t_s if t_s is not None else seq * 0.5
    return Detections(
        camera_id=camera,
        seq=seq,
        capture_ts_us=T0 + round(at_s * 1_000_000),
        status=status,
        model_name="m",
        model_version="1",
        boxes=boxes,
        reason=reason,
    )


def tracker(camera: str = "cam-1", **config: float) -> CameraTracker:
    return CameraTracker(camera, TrackerConfig(**config))  # type: ignore[arg-type]


def run(t: CameraTracker, records: Iterable[Detections]) -> list[Tracks]:
    out = []
    for record in records:
        tracks = t.step(record)
        assert tracks is not None
        out.append(tracks)
    return out


def ids(tracks: Tracks) -> list[str]:
    return [o.track_id for o in tracks.objects]


def walk(fps: float, seconds: float, *starts: tuple[float, float, float]) -> list[Detections]:
    """Objects (x0 px, y px, vx px/s) sampled at `fps` for `seconds`, one record per sample."""
    frames = round(seconds * fps)
    return [
        det(n + 1, *(box(x0 + vx * n / fps, y) for x0, y, vx in starts), t_s=n / fps)
        for n in range(frames)
    ]


# -- cursor ------------------------------------------------------------------------------------


def test_step_when_replayed_record_then_none_and_state_unchanged() -> None:
    t = tracker()
    run(t, [det(1, box(100)), det(2, box(101)), det(3, box(102))])
    before = t.snapshot()
    assert t.step(det(2, box(101))) is None
    assert t.step(det(3, box(102))) is None
    assert t.snapshot() == before
    assert t.last_seq == 3


def test_step_when_decoder_restarts_then_fresh_state_and_new_epoch() -> None:
    t = tracker()
    first = run(t, [det(1, box(100), t_s=0), det(2, box(100), t_s=0.5)])
    restarted = t.step(det(1, box(100), t_s=10))
    assert restarted is not None
    assert ids(first[0]) == [f"cam-1/{T0 // 1_000_000}/1"]
    assert ids(restarted) == [f"cam-1/{T0 // 1_000_000 + 10}/1"]
    assert restarted.objects[0].hits == 1  # the old track did not survive
    assert restarted.missing_before == 0
    assert t.last_seq == 1


def test_step_when_decoder_restarts_within_the_same_second_then_epoch_still_new() -> None:
    t = tracker()
    first = run(t, [det(1, box(100), t_s=0.1), det(2, box(100), t_s=0.2)])
    restarted = t.step(det(1, box(100), t_s=0.3))
    assert restarted is not None
    assert ids(restarted) != ids(first[0])
    assert ids(restarted)[0].startswith(f"cam-1/{T0 // 1_000_000 + 1}/")


def test_step_when_seqs_skipped_then_missing_before_counts_them() -> None:
    out = run(tracker(), [det(1), det(2), det(6), det(7), det(9)])
    assert [o.missing_before for o in out] == [0, 0, 3, 0, 1]


def test_step_when_first_record_has_high_seq_then_nothing_missing() -> None:
    out = run(tracker(), [det(500)])
    assert out[0].missing_before == 0


@pytest.mark.parametrize("status", [FrameStatus.DROPPED_STALE, FrameStatus.FAILED])
def test_step_when_stale_or_failed_then_passed_through_without_confirming_or_ending(
    status: FrameStatus,
) -> None:
    t = tracker(min_hits=2)
    seen = run(t, [det(1, box(100))])[0]
    skipped = run(t, [det(n, box(100), status=status, reason="why") for n in range(2, 5)])
    again = run(t, [det(5, box(100))])[0]
    assert all(s.status is status and s.reason == "why" and s.objects == () for s in skipped)
    assert [s.seq for s in skipped] == [2, 3, 4]
    assert t.last_seq == 5
    # The tentative track neither ended at the skipped records nor counted them as hits.
    assert ids(again) == ids(seen)
    assert (again.objects[0].hits, again.objects[0].confirmed) == (2, True)


# -- tracks ------------------------------------------------------------------------------------


def test_step_when_several_boxes_then_each_gets_an_id_in_detection_order() -> None:
    a, b = box(100, score=0.8), box(400, cls=2, score=0.6)
    out = run(tracker(), [det(1, a, b), det(2, b, a)])
    assert [o.box for o in out[1].objects] == [b, a]
    assert ids(out[1]) == list(reversed(ids(out[0])))
    assert len(set(ids(out[0]))) == 2
    assert out[1].objects[0].first_seen_us == T0 + 500_000  # seq 1 is at 0.5 s


def test_step_when_matched_min_hits_times_then_confirmed_and_stays_so() -> None:
    t = tracker(min_hits=3)
    out = run(t, [det(1, box(100)), det(2, box(102)), det(3, box(104)), det(4), det(5, box(108))])
    objects = [o.objects[0] for o in out if o.objects]
    assert [(o.hits, o.confirmed) for o in objects] == [
        (1, False),
        (2, False),
        (3, True),
        (4, True),
    ]
    assert len({o.track_id for o in objects}) == 1


def test_step_when_tentative_track_missed_once_then_it_ends() -> None:
    out = run(tracker(min_hits=2), [det(1, box(100)), det(2), det(3, box(100))])
    assert ids(out[0]) != ids(out[2])


def test_step_when_min_hits_one_then_confirmed_at_first_sight() -> None:
    out = run(tracker(min_hits=1), [det(1, box(100))])
    assert out[0].objects[0].confirmed


@pytest.mark.parametrize("fps", [2, 25])
@pytest.mark.parametrize(("absent_s", "same_id"), [(1.5, True), (2.0, True), (3.0, False)])
def test_step_when_confirmed_track_unseen_then_ageing_by_capture_time_not_frames(
    fps: int, absent_s: float, same_id: bool
) -> None:
    t = tracker(max_lost_s=2.0)
    frames = round((1 + absent_s) * fps) + 1
    records = [
        det(n + 1, *([box(100)] if n / fps <= 1 or n == frames - 1 else []), t_s=n / fps)
        for n in range(frames)
    ]
    out = run(t, records)
    first, last = out[0].objects[0], out[-1].objects[0]
    assert (last.track_id == first.track_id) is same_id
    assert last.confirmed is same_id


def test_step_when_classes_differ_then_no_match() -> None:
    out = run(tracker(), [det(1, box(100, cls=0)), det(2, box(100, cls=1))])
    assert ids(out[0]) != ids(out[1])
    assert out[1].objects[0].hits == 1


def test_step_when_other_class_nearer_then_same_class_matches() -> None:
    out = run(tracker(), [det(1, box(100, cls=0)), det(2, box(100, cls=1), box(130, cls=0))])
    assert ids(out[1])[1] == ids(out[0])[0]


def test_step_when_two_cameras_same_data_then_ids_differ() -> None:
    a, b = (
        run(tracker(cam), [det(n, box(100), box(300), camera=cam) for n in (1, 2)])
        for cam in ("cam-a", "cam-b")
    )
    assert not set(ids(a[1])) & set(ids(b[1]))
    assert all(i.startswith("cam-a/") for i in ids(a[1]))


def test_step_when_other_camera_record_then_error() -> None:
    with pytest.raises(ValueError, match="cam-2"):
        tracker().step(det(1, camera="cam-2"))


# -- motion ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fps", [2, 5, 10])
def test_step_when_two_objects_cross_then_each_keeps_its_id(fps: int) -> None:
    # Opposite directions at 100 px/s (1.25 box widths per sample at 2 fps), 30 px apart
    # vertically (boxes 100 px tall overlap 70 %), meeting at 3 s.
    records = walk(fps, 6.0, (100, 300, 100), (700, 330, -100))
    out = run(tracker(), records)
    left = {o.objects[0].track_id for o in out}
    right = {o.objects[1].track_id for o in out}
    assert len(left) == 1
    assert len(right) == 1
    assert left != right


def test_step_when_moving_one_and_a_half_widths_per_sample_at_2_fps_then_one_id() -> None:
    records = walk(2, 5.0, (100, 300, 1.5 * W * 2))
    out = run(tracker(), records)
    assert len({o.objects[0].track_id for o in out}) == 1
    assert out[-1].objects[0].hits == 10


def test_step_when_second_sample_two_and_a_half_widths_away_then_second_round_matches() -> None:
    # Beyond the first round's reach (~1.8 widths at buffer 0.5); then the velocity carries it.
    records = walk(2, 5.0, (100, 300, 2.5 * W * 2))
    out = run(tracker(), records)
    assert len({o.objects[0].track_id for o in out}) == 1


def test_step_when_track_has_velocity_then_no_wide_second_round_for_it() -> None:
    # A confirmed walker (80 px/s) is missed; another person shows up 2 widths ahead of where it
    # was predicted: out of the first round's reach, and the wide round is for new tracks only.
    walker = [det(n + 1, box(100 + 40 * n)) for n in range(3)]
    out = run(tracker(), [*walker, det(4, box(220 + 2 * W))])
    assert ids(out[-1]) != ids(out[0])
    assert out[-1].objects[0].hits == 1


def test_step_when_new_track_sits_on_established_ones_detection_then_established_keeps_it() -> None:
    # A walks left 50 px per sample and slows; B appears where A will be next, then steps down.
    records = [
        det(1, box(1000)),
        det(2, box(950)),
        det(3, box(900), box(870)),
        det(4, box(870), box(870, 360)),
    ]
    out = run(tracker(), records)
    assert ids(out[3]) == ids(out[2])


def test_active_tracks_when_tentative_missed_and_confirmed_lost_then_counts_the_lost() -> None:
    t = tracker()
    run(t, [det(1, box(100), box(400)), det(2, box(100), box(400), box(900)), det(3)])
    assert t.active_tracks == 2


def test_step_when_no_buffer_and_fast_object_then_ids_break() -> None:
    # The case the buffer is for: plain IoU loses an object that moves more than its width.
    records = walk(2, 5.0, (100, 300, 1.5 * W * 2))
    out = run(tracker(match_buffer=0.0), records)
    assert len({o.objects[0].track_id for o in out}) == 10


def test_step_when_object_reappears_after_lost_then_prediction_follows_it() -> None:
    # Walks at 120 px/s (1.5 widths per sample at 2 fps), unseen for 1 s, found where it went.
    fps, vx = 2, 120.0
    records = walk(fps, 5.0, (100, 300, vx))
    records = [
        r if not 2.0 <= n / fps < 3.0 else det(r.seq, t_s=n / fps) for n, r in enumerate(records)
    ]
    out = run(tracker(), records)
    assert len({i for o in out for i in ids(o)}) == 1


# -- state -------------------------------------------------------------------------------------


def mixed_records() -> list[Detections]:
    records = walk(5, 6.0, (100, 300, 100), (700, 330, -100), (300, 600, 20))
    mixed: list[Detections] = []
    for n, r in enumerate(records):
        if n % 7 == 3:
            mixed.append(det(r.seq, t_s=n / 5, status=FrameStatus.DROPPED_STALE, reason="late"))
        elif n % 11 == 5:
            mixed.append(det(r.seq, *r.boxes[1:], t_s=n / 5))  # the first object missed
        elif n % 13 != 8:  # a gap in seq
            mixed.append(r)
    return mixed


def test_restore_when_snapshot_json_round_trip_mid_sequence_then_same_outputs() -> None:
    records = mixed_records()
    whole = run(tracker(), records)
    for cut in (0, 1, 2, 9, 15, len(records) // 2, len(records) - 1):
        first = tracker()
        run(first, records[:cut])
        state = json.loads(json.dumps(first.snapshot()))
        restored = CameraTracker.restore("cam-1", TrackerConfig(), state)
        assert restored.last_seq == first.last_seq
        assert run(restored, records[cut:]) == whole[cut:]


def test_restore_when_cut_after_a_decoder_restart_then_epoch_and_counter_carry_on() -> None:
    first_run = mixed_records()[:20]
    # The decoder restarted: seq from 0 again, capture times 100 s later.
    second_run = [
        dataclasses.replace(r, seq=i, capture_ts_us=r.capture_ts_us + 100_000_000)
        for i, r in enumerate(mixed_records()[:20])
    ]
    records = first_run + second_run
    whole = run(tracker(), records)
    epochs = {o.track_id.split("/")[1] for t in whole for o in t.objects}
    assert len(epochs) == 2  # the restart began a new epoch
    for cut in (21, 25, 30):
        first = tracker()
        run(first, records[:cut])
        restored = CameraTracker.restore(
            "cam-1", TrackerConfig(), json.loads(json.dumps(first.snapshot()))
        )
        assert run(restored, records[cut:]) == whole[cut:]


def test_step_when_same_records_twice_then_same_outputs() -> None:
    assert run(tracker(), mixed_records()) == run(tracker(), mixed_records())


def test_restore_when_snapshot_has_no_lost_flag_then_tracks_restored_as_seen() -> None:
    t = tracker()
    run(t, [det(1, box(100)), det(2, box(140))])
    state = t.snapshot()
    for track in state["tracks"]:
        del track["lost"]
    restored = CameraTracker.restore("cam-1", TrackerConfig(), state)
    assert ids(run(restored, [det(3, box(180))])[0]) == ids(run(t, [det(3, box(180))])[0])


def test_restore_when_other_version_then_state_error() -> None:
    state = tracker().snapshot() | {"v": 99}
    with pytest.raises(TrackerStateError, match="version"):
        CameraTracker.restore("cam-1", TrackerConfig(), state)


def test_restore_when_other_camera_then_state_error() -> None:
    with pytest.raises(TrackerStateError, match="cam-2"):
        CameraTracker.restore("cam-2", TrackerConfig(), tracker().snapshot())


def test_restore_when_damaged_then_state_error() -> None:
    state = tracker().snapshot()
    del state["tracks"]
    with pytest.raises(TrackerStateError, match="damaged"):
        CameraTracker.restore("cam-1", TrackerConfig(), state)


# -- exits and newcomers -----------------------------------------------------------------------

FRAME_W, FRAME_H = 1280, 720
SIDE = 128.0  # the object: a 128 px square


def square(cx: float, cy: float) -> Box:
    return Box(cx - SIDE / 2, cy - SIDE / 2, cx + SIDE / 2, cy + SIDE / 2, 0, "class0", 0.9)


def framed(seq: int, t_s: float, *boxes: Box) -> Detections:
    """A looked-at record of a 1280 x 720 camera."""
    record = det(seq, *boxes, t_s=t_s)
    return dataclasses.replace(record, orig_width=FRAME_W, orig_height=FRAME_H)


def exit_then_newcomer(fps: int) -> tuple[list[Detections], int]:
    """A walks right at 160 px/s, last seen at x 1120-1248, y 584-712; then nothing; one second
    later B enters at the right edge 192 px higher, walking left. Returns records, A's count."""
    last_a = 3.0
    a = [
        framed(n + 1, n / fps, square(1184 - 160 * (last_a - n / fps), 648))
        for n in range(round(last_a * fps) + 1)
    ]
    rest = []
    for n in range(round(last_a * fps) + 1, round((last_a + 3.0) * fps) + 1):
        t_s = n / fps
        since_b = t_s - (last_a + 1.0)
        boxes = [square(1216 - 160 * since_b, 456)] if since_b >= 0 else []
        rest.append(framed(n + 1, t_s, *boxes))
    return a + rest, len(a)


@pytest.mark.parametrize("fps", [2, 5])
def test_step_when_object_exits_and_other_enters_near_it_within_max_lost_then_new_id(
    fps: int,
) -> None:
    records, count_a = exit_then_newcomer(fps)
    out = run(tracker(max_lost_s=2.0), records)
    a_ids = {i for o in out[:count_a] for i in ids(o)}
    b_ids = {i for o in out[count_a:] for i in ids(o)}
    assert len(a_ids) == 1
    assert out[count_a - 1].objects[0].confirmed
    assert len(b_ids) == 1
    assert not a_ids & b_ids


@pytest.mark.parametrize("fps", [2, 5])
def test_step_when_lost_track_predicted_out_of_frame_then_it_ends(fps: int) -> None:
    records, count_a = exit_then_newcomer(fps)
    t = tracker(max_lost_s=2.0)
    run(t, records[:count_a])
    # A's predicted box (x1 = 1120 + 160 t) leaves the 1280 px frame 1 s after A was last seen,
    # well within max_lost_s: the track ends there.
    last_seen_us = records[count_a - 1].capture_ts_us
    active = {}
    for r in records[count_a:]:
        t.step(dataclasses.replace(r, boxes=()))
        active[(r.capture_ts_us - last_seen_us) / 1_000_000] = t.active_tracks
    assert active[1 / fps] == 1
    assert active[1.0] == 0


@pytest.mark.parametrize("fps", [2, 5])
def test_step_when_frame_size_unknown_then_lost_track_kept_until_max_lost(fps: int) -> None:
    t = tracker(max_lost_s=2.0)
    run(t, walk(fps, 2.0, (1000, 300, 160)))
    run(t, [det(100 + n, t_s=2.0 + n / fps) for n in range(1, round(1.5 * fps))])
    assert t.active_tracks == 1


@pytest.mark.parametrize("fps", [2, 5])
@pytest.mark.parametrize(("miss_x", "miss_y"), [(0.0, 0.0), (0.6, 0.3)])
def test_step_when_occluded_object_reappears_where_predicted_then_keeps_id(
    fps: int, miss_x: float, miss_y: float
) -> None:
    # Walks right at 160 px/s in a 1280 px frame, hidden for 1.5 s, then found where its motion
    # predicts, off by up to 0.6 of its width and 0.3 of its height.
    records = []
    for n in range(round(6.0 * fps)):
        t_s = n / fps
        hidden = 2.0 <= t_s < 3.5
        off = (miss_x * SIDE, miss_y * SIDE) if t_s >= 3.5 else (0.0, 0.0)
        cx = 200 + 160 * t_s + off[0]
        records.append(framed(n + 1, t_s, *([] if hidden else [square(cx, 400 + off[1])])))
    out = run(tracker(), records)
    assert len({i for o in out for i in ids(o)}) == 1


def test_step_when_lost_and_box_not_where_predicted_then_new_id() -> None:
    # Lost for one sample, a box 1.5 heights off the predicted path takes a new id.
    walker = [framed(n + 1, n / 2, square(200 + 80 * n, 400)) for n in range(4)]
    out = run(tracker(), [*walker, framed(5, 2.0), framed(6, 2.5, square(600, 400 - 192))])
    assert ids(out[-1]) != ids(out[0])
