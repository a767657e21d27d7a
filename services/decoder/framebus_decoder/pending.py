"""Per-camera pending frames in front of the Kafka producer, with the backpressure policy.

librdkafka's queue cannot drop one camera's oldest record, so each camera hands frames to the
publishing thread through this small bounded queue, where the policy decides what a full queue does.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from framebus_decoder.settings import BackpressurePolicy

T = TypeVar("T")


@dataclass(frozen=True)
class PutResult(Generic[T]):
    """What happened to a put: frames dropped (to release and count) and whether it waited."""

    dropped: tuple[T, ...] = ()
    waited: bool = False
    accepted: bool = True


class PendingQueue(Generic[T]):
    """A bounded FIFO for one camera; all queues of a publisher share one condition."""

    def __init__(
        self, capacity: int, policy: BackpressurePolicy, cond: threading.Condition
    ) -> None:
        self.capacity = capacity
        self.policy = policy
        self._cond = cond
        self._items: deque[T] = deque()
        self.closed = False

    def put(self, item: T, stop: threading.Event | None = None) -> PutResult[T]:
        """Queue `item`; a full queue drops the oldest or the newest frame, or waits (block)."""
        with self._cond:
            if len(self._items) < self.capacity:
                self._items.append(item)
                self._cond.notify_all()
                return PutResult()
            if self.policy is BackpressurePolicy.DROP_NEWEST:
                return PutResult(dropped=(item,), accepted=False)
            if self.policy is BackpressurePolicy.DROP_OLDEST:
                oldest = self._items.popleft()
                self._items.append(item)
                self._cond.notify_all()
                return PutResult(dropped=(oldest,))
            while len(self._items) >= self.capacity and not self.closed:
                if stop is not None and stop.is_set():
                    return PutResult(dropped=(item,), waited=True, accepted=False)
                self._cond.wait(0.1)
            if self.closed:
                return PutResult(dropped=(item,), waited=True, accepted=False)
            self._items.append(item)
            self._cond.notify_all()
            return PutResult(waited=True)

    def pop(self) -> T | None:
        """The oldest item, or None (the shared condition is re-entrant: callers may hold it)."""
        with self._cond:
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> list[T]:
        """Refuse further waits and return what was still queued."""
        with self._cond:
            self.closed = True
            rest = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return rest

    def is_full(self) -> bool:
        """True when the next put triggers the policy."""
        return len(self._items) >= self.capacity
