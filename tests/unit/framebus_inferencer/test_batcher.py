from framebus_inferencer.batcher import DeadlineBatcher, Pending

NOW_US = 1_700_000_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1000.0

    def advance(self, ms: float) -> float:
        self.ms += ms
        return self.ms


def frame(camera: str, offset: int, received_ms: float, age_ms: float = 0.0, partition: int = 0):
    return Pending(camera, NOW_US - int(age_ms * 1000), received_ms, partition, offset, offset)


def test_batcher_when_max_batch_frames_arrive_then_closes_at_once_as_full() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=5)
    for i in range(3):
        b.add(frame(f"c{i}", i, clock.ms))
    assert b.poll(clock.ms, NOW_US) is None
    b.add(frame("c3", 3, clock.ms))
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None and batch.reason == "full"
    assert [p.offset for p in batch.frames] == [0, 1, 2, 3]
    assert len(b) == 0


def test_batcher_when_fewer_frames_then_closes_exactly_max_wait_after_first_frame() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=8, max_wait_ms=5)
    first = clock.ms
    b.add(frame("a", 0, clock.ms))
    clock.advance(3)
    b.add(frame("b", 1, clock.ms))
    assert b.next_deadline_ms(NOW_US) == first + 5
    clock.advance(1.999)
    assert b.poll(clock.ms, NOW_US) is None
    clock.advance(0.001)
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None and batch.reason == "deadline"
    assert [p.offset for p in batch.frames] == [0, 1]
    assert b.next_deadline_ms(NOW_US) is None


def test_batcher_when_camera_exceeds_quota_then_excess_carries_over_in_order() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=5, camera_quota=2)
    for off, cam in enumerate(["a", "a", "a", "b", "a", "c"]):
        b.add(frame(cam, off, clock.ms))
    first = b.poll(clock.ms, NOW_US)
    assert first is not None and first.reason == "full"
    assert [(p.camera, p.offset) for p in first.frames] == [("a", 0), ("a", 1), ("b", 3), ("c", 5)]
    clock.advance(5)
    second = b.poll(clock.ms, NOW_US)
    assert second is not None
    assert [(p.camera, p.offset) for p in second.frames] == [("a", 2), ("a", 4)]
    assert len(b) == 0


def test_batcher_when_no_skip_ahead_then_batch_is_a_gap_free_prefix_per_partition() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(
        max_batch=4, max_wait_ms=5, camera_quota=1, skip_ahead=False
    )
    b.add(frame("a", 0, clock.ms, partition=0))
    b.add(frame("a", 1, clock.ms, partition=0))  # over quota: partition 0 stops here
    b.add(frame("b", 2, clock.ms, partition=0))
    b.add(frame("c", 0, clock.ms, partition=1))
    clock.advance(5)
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None
    assert [(p.partition, p.offset) for p in batch.frames] == [(0, 0), (1, 0)]


def test_batcher_when_frame_too_old_then_returned_as_stale_not_for_inference() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=5, max_frame_age_ms=100)
    b.add(frame("a", 0, clock.ms, age_ms=150))
    b.add(frame("a", 1, clock.ms, age_ms=10))
    clock.advance(5)
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None
    assert [p.offset for p in batch.stale] == [0]
    assert [p.offset for p in batch.frames] == [1]


def test_batcher_when_only_stale_frames_then_emitted_without_waiting() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=50, max_frame_age_ms=100)
    b.add(frame("a", 0, clock.ms, age_ms=500))
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None and batch.reason == "stale-only" and not batch.frames


def test_batcher_when_pending_reaches_capacity_then_closes_without_waiting() -> None:
    clock = FakeClock()
    b: DeadlineBatcher[int] = DeadlineBatcher(
        max_batch=4, max_wait_ms=50, camera_quota=1, capacity=3
    )
    for i in range(3):
        b.add(frame("a", i, clock.ms))
    assert b.full
    batch = b.poll(clock.ms, NOW_US)
    assert batch is not None and batch.reason == "backpressure"
    assert [p.offset for p in batch.frames] == [0]


def test_batcher_when_partition_revoked_then_its_frames_are_dropped() -> None:
    b: DeadlineBatcher[int] = DeadlineBatcher(max_batch=4, max_wait_ms=5)
    b.add(frame("a", 0, 0.0, partition=0))
    b.add(frame("b", 0, 0.0, partition=1))
    assert [p.partition for p in b.drop_partitions([1])] == [1]
    assert len(b) == 1
