import pytest

from framebus_inferencer.offsets import CommitWindow, OffsetTracker

TP = ("frames", 0)
TP1 = ("frames", 1)


def test_offsets_when_held_back_frame_pending_then_commit_stops_below_it() -> None:
    t = OffsetTracker()
    for off in range(5):
        t.received(TP, off)
    t.delivered([(TP, 0), (TP, 1), (TP, 3), (TP, 4)])
    assert t.committable() == {TP: 2}
    assert not t.contiguous()
    t.delivered([(TP, 2)])
    assert t.committable() == {TP: 5}
    assert t.contiguous()


def test_offsets_when_later_frames_in_flight_then_delivered_prefix_is_contiguous() -> None:
    t = OffsetTracker()
    for off in range(4):
        t.received(TP, off)
    t.delivered([(TP, 0), (TP, 1)])
    assert t.committable() == {TP: 2}
    assert t.contiguous()
    t.settled()
    assert t.in_flight() == 2


def test_offsets_when_partition_forgotten_then_nothing_committed_for_it() -> None:
    t = OffsetTracker()
    t.received(TP, 0)
    t.delivered([(TP, 0)])
    t.forget([TP])
    assert t.committable() == {}


def test_commit_window_when_partition_full_then_refuses_until_commit_returns() -> None:
    w = CommitWindow(limit=4)
    w.delivered([(TP, 0), (TP, 1), (TP, 2)])
    assert w.allows([(TP, 3)])
    assert not w.allows([(TP, 3), (TP, 4)])
    assert w.allows([(TP1, 0), (TP1, 1), (TP1, 2)])  # other partitions are not held up
    w.confirmed({TP: 2})  # offsets 0 and 1 are committed: only 2 is open
    assert w.allows([(TP, 3), (TP, 4), (TP, 5)])
    assert not w.allows([(TP, 3), (TP, 4), (TP, 5), (TP, 6)])


def test_commit_window_when_nothing_open_then_any_batch_is_allowed() -> None:
    w = CommitWindow(limit=2)
    assert w.allows([(TP, o) for o in range(10)])
    w.delivered([(TP, o) for o in range(10)])
    assert not w.allows([(TP, 10)])
    w.forget([TP])
    assert w.allows([(TP, o) for o in range(10, 20)])


def test_commit_window_when_commit_stops_below_held_back_frame_then_ones_above_stay_open() -> None:
    w = CommitWindow(limit=8)
    w.delivered([(TP, 0), (TP, 2), (TP, 3)])  # 1 is held back in the batcher
    w.confirmed({TP: 1})  # 2 and 3 stay open
    assert w.allows([(TP, o) for o in range(4, 10)])
    assert not w.allows([(TP, o) for o in range(4, 11)])


def test_commit_window_when_limit_below_one_then_error() -> None:
    with pytest.raises(ValueError):
        CommitWindow(0)
