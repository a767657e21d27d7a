from framebus_inferencer.offsets import OffsetTracker

TP = ("frames", 0)


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
    t.committed()
    assert t.in_flight() == 2


def test_offsets_when_partition_forgotten_then_nothing_committed_for_it() -> None:
    t = OffsetTracker()
    t.received(TP, 0)
    t.delivered([(TP, 0)])
    t.forget([TP])
    assert t.committable() == {}
