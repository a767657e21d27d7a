"""How a camera's record stands to the last one a consumer processed: its seq and capture time.

The tracker and the alerts engine decide the same way: a record whose seq and capture time are
not newer than the last one's is a replay (a redelivery after a restart or a rebalance); a seq at
or below the last with a newer capture time means the decoder restarted (its seq began again).
"""

from __future__ import annotations

import enum


class Arrival(enum.Enum):
    """What a record is, next to the last one processed for its camera."""

    FIRST = "first"  # nothing processed before
    NEXT = "next"  # a newer seq (perhaps after a gap)
    REPLAY = "replay"  # processed already: skip it
    RESTART = "restart"  # the decoder restarted: start the camera afresh


def arrival(last: tuple[int, int] | None, seq: int, capture_ts_us: int) -> Arrival:
    """Classify a record by the last (seq, capture_ts_us) processed for its camera."""
    if last is None:
        return Arrival.FIRST
    if seq > last[0]:
        return Arrival.NEXT
    return Arrival.REPLAY if capture_ts_us <= last[1] else Arrival.RESTART
