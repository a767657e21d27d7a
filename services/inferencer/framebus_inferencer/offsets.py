"""Which consumed offsets may be committed, when batches finish out of offset order (pure logic)."""

from __future__ import annotations

from collections.abc import Iterable

TopicPartition = tuple[str, int]


class OffsetTracker:
    """Tracks received and delivered offsets per partition.

    The committable offset of a partition is its lowest offset not yet delivered (Kafka commits
    "the next offset to read"), so a frame held back for fairness is never skipped by a commit.
    """

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, set[int]] = {}
        self._next: dict[TopicPartition, int] = {}
        self._uncommitted_max: dict[TopicPartition, int] = {}

    def received(self, tp: TopicPartition, offset: int) -> None:
        """A message was consumed and is now in flight."""
        self._pending.setdefault(tp, set()).add(offset)

    def delivered(self, items: Iterable[tuple[TopicPartition, int]]) -> None:
        """The results of these messages are durably delivered."""
        for tp, offset in items:
            self._pending.get(tp, set()).discard(offset)
            self._next[tp] = max(self._next.get(tp, 0), offset + 1)
            self._uncommitted_max[tp] = max(self._uncommitted_max.get(tp, -1), offset)

    def committable(self) -> dict[TopicPartition, int]:
        """Per partition, the offset to commit: everything below it is delivered."""
        out: dict[TopicPartition, int] = {}
        for tp, nxt in self._next.items():
            pending = self._pending.get(tp)
            out[tp] = min(*pending, nxt) if pending else nxt
        return out

    def contiguous(self) -> bool:
        """True when committing `committable()` covers every delivery since `settled()`."""
        marks = self.committable()
        return all(mx < marks[tp] for tp, mx in self._uncommitted_max.items())

    def settled(self) -> None:
        """The offsets from `committable()` were committed: every delivery so far is covered."""
        self._uncommitted_max.clear()

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop all state of partitions this consumer no longer owns."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._next.pop(tp, None)
            self._uncommitted_max.pop(tp, None)

    def in_flight(self) -> int:
        """How many received messages are not delivered yet."""
        return sum(len(p) for p in self._pending.values())


class CommitWindow:
    """Delivered records whose commit has not returned yet, per partition (pure logic).

    These are what a crash would deliver a second time. The publisher may deliver ahead of the
    commits while no partition would hold more than `limit` of them, so a commit round trip does
    not pace the batches, and the repeat after a crash stays bounded per partition.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self._open: dict[TopicPartition, list[int]] = {}

    def allows(self, items: Iterable[tuple[TopicPartition, int]]) -> bool:
        """True if delivering these records keeps every partition within the limit.

        A partition with nothing open always takes a batch, however large, so a batch never
        waits for itself.
        """
        adding: dict[TopicPartition, int] = {}
        for tp, _offset in items:
            adding[tp] = adding.get(tp, 0) + 1
        for tp, n in adding.items():
            held = len(self._open.get(tp, ()))
            if held and held + n > self.limit:
                return False
        return True

    def delivered(self, items: Iterable[tuple[TopicPartition, int]]) -> None:
        """These records are delivered; their commit has not returned yet."""
        for tp, offset in items:
            self._open.setdefault(tp, []).append(offset)

    def confirmed(self, marks: dict[TopicPartition, int]) -> None:
        """A commit of these marks returned: every record below its partition's mark is safe."""
        for tp, mark in marks.items():
            held = self._open.get(tp)
            if held:
                self._open[tp] = [o for o in held if o >= mark]

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop partitions this consumer no longer owns."""
        for tp in partitions:
            self._open.pop(tp, None)
