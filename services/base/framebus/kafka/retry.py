"""Kafka calls made again through a broker's absence: which errors pass, and for how long.

A broker that is away or restarting, a partition whose leader is moving, a request that timed out
meanwhile: the same call, made again a moment later, gets past these. `transient` tells them from
the errors no retry fixes (a missing topic, a refused authorisation), and `retry_transient` calls
again after a doubling, bounded wait until a budget is spent; then the error is raised as it
would have been without the retry. No confluent_kafka here: the wrappers raise
`framebus.errors.KafkaError` with librdkafka's error name and its retriable flag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from framebus.errors import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

# librdkafka's error names (`KafkaError.name()`) that a later try gets past; librdkafka retries
# the same ones inside its own requests.
TRANSIENT_CODES = frozenset(
    {
        "_TIMED_OUT",
        "_TIMED_OUT_QUEUE",
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        # A broker left the cluster's metadata (it was killed): its pending requests fail with
        # this. Not a client used after close: that is _DESTROY ("for termination").
        "_DESTROY_BROKER",
        "_WAIT_COORD",
        "_NODE_UPDATE",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "REPLICA_NOT_AVAILABLE",
        "OFFSET_NOT_AVAILABLE",  # a new leader's offsets, while it catches up
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
    }
)


def transient(code: str | None, retriable: bool = False, also: Collection[str] = ()) -> bool:
    """Whether a call that failed with this error may succeed when made again.

    librdkafka's retriable flag, a name in TRANSIENT_CODES, or one the caller adds (`also`).
    """
    return retriable or code in TRANSIENT_CODES or code in also


@dataclass(frozen=True)
class RetryPolicy:
    """How long a failing call is made again: for `budget_s` in all, the waits doubling."""

    budget_s: float
    first_wait_s: float = 0.2
    max_wait_s: float = 2.0

    def wait_s(self, tries: int, elapsed_s: float) -> float | None:
        """The wait before the next try after `tries` failed ones; None once the budget is spent."""
        left = self.budget_s - elapsed_s
        if left <= 0:
            return None
        return min(self.first_wait_s * 2.0 ** (tries - 1), self.max_wait_s, left)


def _ignore(_exc: KafkaError) -> None:
    """The default `on_retry`: nothing to count."""


def retry_transient(
    call: Callable[[], T],
    policy: RetryPolicy,
    on_retry: Callable[[KafkaError], None] = _ignore,
    also: Collection[str] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`; after a transient KafkaError, again after a wait, until `policy`'s budget is spent.

    Each retried error is logged and handed to `on_retry` (to count it). Any other error is raised
    at once; the last transient one once the budget is spent, saying how long it was retried.
    """
    started = clock()
    tries = 0
    while True:
        try:
            return call()
        except KafkaError as exc:
            tries += 1
            elapsed = clock() - started
            if not transient(exc.code, exc.retriable, also):
                raise
            wait = policy.wait_s(tries, elapsed)
            if wait is None:
                raise _spent(exc, tries, elapsed) from exc
            log.warning("%s (transient, try %d: again in %.1f s)", exc, tries, wait)
            on_retry(exc)
            sleep(wait)


def _spent(exc: KafkaError, tries: int, elapsed_s: float) -> KafkaError:
    """`exc` once retrying is over: its message (code included) and how long it was retried."""
    spent = KafkaError(
        f"{exc}; still failing after {tries} tries in {elapsed_s:.1f} s: check that the brokers "
        "are up and reachable"
    )
    spent.code, spent.retriable = exc.code, exc.retriable
    return spent
