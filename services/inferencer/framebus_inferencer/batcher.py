"""Deadline-exact micro-batching with freshness drops and per-camera fairness (pure logic).

A batch closes when it holds `max_batch` frames, or `max_wait_ms` after its first frame arrived,
whichever comes first. The caller drives the clock: it asks `next_deadline_ms()` how long it may
wait for more frames, and calls `poll(now)`; nothing here sleeps, reads Kafka or touches a model,
so tests run it against a fake clock.

Staleness is decided here, once: a frame older than `max_frame_age_ms` when its batch closes
leaves as stale instead of taking a place in the batch.

A still frame (the decoder's motion gate saw nothing move: no pixels) never takes a place in a
batch either. It waits here only behind earlier frames of its partition, so its record is not
published before theirs (the tracker takes a camera's records in seq order, and a camera is one
partition); with nothing before it, it leaves at once, without the batch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Pending(Generic[T]):
    """A received frame waiting for a batch, with what batching decisions need to know."""

    camera: str
    capture_ts_us: int
    received_ms: float  # batcher clock, milliseconds
    partition: int
    offset: int
    payload: T
    still: bool = False  # no pixels: answered without the model (see the module doc)


class CloseReason(enum.StrEnum):
    """Why a batch closed (the values are the metric labels)."""

    FULL = "full"  # max_batch frames
    DEADLINE = "deadline"  # max_wait_ms after its first frame arrived
    BACKPRESSURE = "backpressure"  # the batcher is full: nothing more can arrive
    STALE_ONLY = "stale-only"  # only frames too old to infer were due
    STILL_ONLY = "still-only"  # only still frames (no pixels) were due
    FLUSH = "flush"  # shutdown, or partitions given up


@dataclass(frozen=True)
class Batch(Generic[T]):
    """What one `poll` hands out: frames to infer, frames too old to infer, and still frames."""

    frames: tuple[Pending[T], ...]
    stale: tuple[Pending[T], ...]
    closed_ms: float
    reason: CloseReason
    still: tuple[Pending[T], ...] = ()


def too_old(capture_ts_us: int, wall_us: int, max_frame_age_ms: float) -> bool:
    """True when a frame captured at `capture_ts_us` is older than the limit (0 = no limit)."""
    return max_frame_age_ms > 0 and (wall_us - capture_ts_us) / 1000.0 > max_frame_age_ms


@dataclass
class _Selection(Generic[T]):
    frames: list[Pending[T]]
    stale: list[Pending[T]]
    still: list[Pending[T]]
    free_still: list[Pending[T]]  # still frames with nothing before them in their partition


class DeadlineBatcher(Generic[T]):
    """Holds received frames and decides when a batch closes and which frames it takes.

    Fairness: at most `camera_quota` frames of one camera go into a batch; the excess stays, in
    order, for the next batch. With `skip_ahead` a later frame of another camera may overtake a
    held-back frame of the same partition (best fairness; offsets then commit at the lowest
    undelivered offset). Without it a batch takes a gap-free prefix of each partition, so every
    batch's offsets can be committed atomically with its results (exactly-once mode).
    """

    def __init__(
        self,
        max_batch: int,
        max_wait_ms: float,
        camera_quota: int | None = None,
        max_frame_age_ms: float = 0.0,
        capacity: int | None = None,
        skip_ahead: bool = True,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.camera_quota = camera_quota or max_batch
        self.max_frame_age_ms = max_frame_age_ms
        self.capacity = capacity or 4 * max_batch
        self.skip_ahead = skip_ahead
        self._pending: list[Pending[T]] = []

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def full(self) -> bool:
        """True when no more frames should be accepted until a batch leaves."""
        return len(self._pending) >= self.capacity

    def add(self, item: Pending[T]) -> None:
        """Accept a received frame (callers stop adding while `full`)."""
        self._pending.append(item)

    def next_deadline_ms(self, wall_us: int) -> float | None:
        """Clock time at which the current batch must close; None when nothing is waiting."""
        sel = self._select(wall_us)
        if sel.free_still:
            return float("-inf")
        if sel.frames:
            return sel.frames[0].received_ms + self.max_wait_ms
        return None if not sel.stale and not sel.still else float("-inf")

    def poll(self, now_ms: float, wall_us: int) -> Batch[T] | None:
        """Close and return a batch if one is due at `now_ms` (wall clock `wall_us` for ages)."""
        sel = self._select(wall_us)
        if len(sel.frames) >= self.max_batch:
            return self._close(sel, now_ms, CloseReason.FULL)
        if sel.frames:
            if now_ms >= sel.frames[0].received_ms + self.max_wait_ms:
                return self._close(sel, now_ms, CloseReason.DEADLINE)
            if self.full:  # nothing more can arrive: waiting would only add latency
                return self._close(sel, now_ms, CloseReason.BACKPRESSURE)
            if sel.free_still:  # they need no batch: they leave now, the frames wait
                return self._close(
                    _Selection([], [], sel.free_still, []), now_ms, CloseReason.STILL_ONLY
                )
            return None
        if sel.stale:
            return self._close(sel, now_ms, CloseReason.STALE_ONLY)
        return self._close(sel, now_ms, CloseReason.STILL_ONLY) if sel.still else None

    def flush(self, now_ms: float, wall_us: int) -> Batch[T] | None:
        """Close whatever is eligible now (shutdown, or a partition being revoked)."""
        sel = self._select(wall_us)
        due = sel.frames or sel.stale or sel.still
        return self._close(sel, now_ms, CloseReason.FLUSH) if due else None

    def drop_partitions(self, partitions: Iterable[int]) -> list[Pending[T]]:
        """Forget frames of partitions this consumer no longer owns; return them."""
        gone = set(partitions)
        dropped = [p for p in self._pending if p.partition in gone]
        self._pending = [p for p in self._pending if p.partition not in gone]
        return dropped

    def is_stale(self, item: Pending[T], wall_us: int) -> bool:
        """True when the frame is older than `max_frame_age_ms` (capture time to `wall_us`)."""
        return too_old(item.capture_ts_us, wall_us, self.max_frame_age_ms)

    def _select(self, wall_us: int) -> _Selection[T]:
        frames: list[Pending[T]] = []
        stale: list[Pending[T]] = []
        still: list[Pending[T]] = []
        free_still: list[Pending[T]] = []
        per_camera: dict[str, int] = {}
        blocked: set[int] = set()
        held: set[int] = set()  # partitions with an earlier frame that stays here
        seen: set[int] = set()  # partitions with an earlier frame at all
        for item in self._pending:
            if item.partition in blocked:
                continue
            if item.still:  # leaves with its batch, never before an earlier frame of its own
                if item.partition not in held:
                    still.append(item)
                if item.partition not in seen:
                    free_still.append(item)
                continue
            seen.add(item.partition)
            if self.is_stale(item, wall_us):
                stale.append(item)
                continue
            taken = per_camera.get(item.camera, 0)
            if len(frames) < self.max_batch and taken < self.camera_quota:
                frames.append(item)
                per_camera[item.camera] = taken + 1
            else:
                held.add(item.partition)
                if not self.skip_ahead:
                    blocked.add(item.partition)
        return _Selection(frames, stale, still, free_still)

    def _close(self, sel: _Selection[T], now_ms: float, reason: CloseReason) -> Batch[T]:
        leaving = {id(p) for p in (*sel.frames, *sel.stale, *sel.still)}
        self._pending = [p for p in self._pending if id(p) not in leaving]
        return Batch(tuple(sel.frames), tuple(sel.stale), now_ms, reason, tuple(sel.still))
