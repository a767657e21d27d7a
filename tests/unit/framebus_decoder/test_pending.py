import threading
import time

from framebus_decoder.pending import PendingQueue
from framebus_decoder.settings import BackpressurePolicy


def make(policy: BackpressurePolicy) -> PendingQueue[int]:
    q: PendingQueue[int] = PendingQueue(2, policy, threading.Condition())
    assert q.put(1).dropped == ()
    assert q.put(2).dropped == ()
    return q


def drain(q: PendingQueue[int]) -> list[int]:
    out = []
    while (item := q.pop()) is not None:
        out.append(item)
    return out


def test_pending_when_full_and_drop_oldest_then_oldest_dropped_newest_kept() -> None:
    q = make(BackpressurePolicy.DROP_OLDEST)
    result = q.put(3)
    assert result.dropped == (1,)
    assert result.accepted
    assert drain(q) == [2, 3]


def test_pending_when_full_and_drop_newest_then_new_frame_refused() -> None:
    q = make(BackpressurePolicy.DROP_NEWEST)
    result = q.put(3)
    assert result.dropped == (3,)
    assert not result.accepted
    assert drain(q) == [1, 2]


def test_pending_when_full_and_block_then_waits_until_room() -> None:
    q = make(BackpressurePolicy.BLOCK)
    results = []
    t = threading.Thread(target=lambda: results.append(q.put(3)))
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # held back, nothing dropped
    assert q.pop() == 1
    t.join(2)
    assert results[0].waited
    assert results[0].dropped == ()
    assert drain(q) == [2, 3]


def test_pending_when_blocked_and_stop_set_then_returns_the_frame_as_dropped() -> None:
    q = make(BackpressurePolicy.BLOCK)
    stop = threading.Event()
    stop.set()
    result = q.put(3, stop)
    assert result.dropped == (3,)
    assert not result.accepted
