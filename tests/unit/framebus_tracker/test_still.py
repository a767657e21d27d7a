"""Still frames in the tracker: the world as last seen holds, and the still period is not time."""

from __future__ import annotations

import json

import pytest

from framebus.messages import Detections, FrameStatus
from framebus_tracker.tracker import CameraTracker, TrackerConfig
from tests.unit.framebus_tracker.test_tracker import T0, box, det, ids, run, tracker

STILL = FrameStatus.STILL


def still(seq: int, t_s: float) -> Detections:
    return det(seq, t_s=t_s, status=STILL)


def test_step_when_still_then_seen_tracks_carried_at_last_box_unchanged_and_not_counted() -> None:
    t = tracker(min_hits=2)
    a, b = box(100, score=0.8), box(400, cls=2, score=0.6)
    seen = run(t, [det(1, a), det(2, a, b)])[-1]  # a confirmed, b tentative
    carried = run(t, [still(n, n * 0.5) for n in range(3, 8)])
    for out in carried:
        assert out.status is STILL
        assert [(o.track_id, o.box, o.first_seen_us) for o in out.objects] == [
            (o.track_id, o.box, o.first_seen_us) for o in seen.objects
        ]
        assert [(o.confirmed, o.hits, o.carried) for o in out.objects] == [
            (True, 2, True),
            (False, 1, True),
        ]
    # The tentative track did not end at the still frames and was not counted as seen there.
    again = run(t, [det(8, a, b)])[0]
    assert ids(again) == ids(seen)
    assert [(o.hits, o.confirmed, o.carried) for o in again.objects] == [
        (3, True, False),
        (2, True, False),
    ]


def test_step_when_still_period_longer_than_max_lost_then_no_track_ends() -> None:
    t = tracker(max_lost_s=2.0)
    seen = run(t, [det(1, box(100)), det(2, box(100))])[-1]
    run(t, [still(n, n * 0.5) for n in range(3, 40)])  # 18 s without a looked-at frame
    assert ids(run(t, [det(40, box(100), t_s=20.0)])[0]) == ids(seen)


def test_step_when_track_lost_just_before_still_period_then_stays_lost_its_clock_stopped() -> None:
    t = tracker(max_lost_s=2.0)
    seen = run(t, [det(1, box(100), t_s=0.0), det(2, box(100), t_s=0.5)])[-1]
    lost = run(t, [det(3, t_s=1.5)])[0]  # unseen for 1 s so far
    assert lost.objects == ()
    carried = run(t, [still(n, 1.5 + (n - 3) * 0.5) for n in range(4, 30)])
    assert all(c.objects == () for c in carried)  # a lost track is not carried: it is not seen
    # 1 s unseen before the still period + 0.5 s after it: within max_lost_s, same track.
    back = run(t, [det(30, box(100), t_s=1.5 + 27 * 0.5)])[0]
    assert ids(back) == ids(seen)


def test_step_when_lost_track_unseen_before_and_after_still_period_past_max_lost_then_it_ends() -> (
    None
):
    t = tracker(max_lost_s=2.0)
    seen = run(t, [det(1, box(100), t_s=0.0), det(2, box(100), t_s=0.5)])[-1]
    run(t, [det(3, t_s=1.5), still(4, 2.0), still(5, 10.0)])
    # 1 s unseen before the still period + 1.5 s after it.
    assert ids(run(t, [det(6, box(100), t_s=11.5)])[0]) != ids(seen)


def test_step_when_still_is_the_first_record_then_nothing_carried() -> None:
    out = run(tracker(), [still(1, 0.0), det(2, box(100))])
    assert out[0].objects == () and out[0].status is STILL
    assert out[1].objects[0].hits == 1


def test_step_when_object_moved_after_still_period_then_velocity_ignores_the_still_time() -> None:
    # A walker at 100 px/s, a 10 s still period (it waited), then on at 100 px/s: one id.
    t = tracker()
    walking = [det(n + 1, box(100 + 50 * n), t_s=n * 0.5) for n in range(4)]
    first = run(t, walking)[0]
    run(t, [still(n, 1.5 + (n - 4) * 0.5) for n in range(5, 25)])
    on = run(t, [det(25, box(300), t_s=12.0), det(26, box(350), t_s=12.5)])
    assert ids(on[0]) == ids(first) == ids(on[1])


def still_records() -> list[Detections]:
    records = [det(n, box(100 + 10 * n), box(600), t_s=n * 0.5) for n in range(1, 5)]
    records += [det(5, box(140), t_s=2.5)]  # the second object is lost here
    records += [still(n, n * 0.5) for n in range(6, 14)]
    records += [det(14, box(150), box(600), t_s=7.0), det(15, box(160), box(600), t_s=7.5)]
    records += [still(n, n * 0.5) for n in range(16, 20)]
    return records


@pytest.mark.parametrize("cut", [1, 5, 6, 8, 13, 14, 17])
def test_restore_when_snapshot_taken_mid_still_period_then_same_outputs_as_uninterrupted(
    cut: int,
) -> None:
    records = still_records()
    whole = run(tracker(), records)
    first = tracker()
    run(first, records[:cut])
    state = json.loads(json.dumps(first.snapshot()))
    restored = CameraTracker.restore("cam-1", TrackerConfig(), state)
    assert run(restored, records[cut:]) == whole[cut:]
    assert any(o.carried for out in whole[cut:] for o in out.objects)


def test_restore_when_snapshot_has_no_last_box_then_carried_at_the_filtered_box() -> None:
    t = tracker()
    run(t, [det(1, box(100)), det(2, box(100))])
    state = t.snapshot()
    for track in state["tracks"]:
        del track["last_box"]
    restored = CameraTracker.restore("cam-1", TrackerConfig(), state)
    (carried,) = run(restored, [still(3, 1.5)])[0].objects
    b = box(100)
    assert (carried.box.x1, carried.box.y2, carried.box.class_id) == (b.x1, b.y2, b.class_id)
    assert carried.carried and carried.first_seen_us == T0 + 500_000
