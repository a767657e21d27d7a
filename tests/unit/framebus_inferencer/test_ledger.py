"""The commit ledger's decisions, driven with a stub consumer and a fake clock (no broker)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from framebus.errors import KafkaError
from framebus.kafka.protocol import CommitResult, Marks
from framebus_inferencer.pipeline.ledger import RETRY_AFTER_FAILURE_S, CommitLedger

P0 = ("frames", 0)
P1 = ("frames", 1)


@dataclass
class StubConsumer:
    """Records each commit; fails the next `fail` of them as librdkafka would raise."""

    commits: list[tuple[Marks, bool]] = field(default_factory=list)
    fail: int = 0

    def commit(self, marks: Marks, asynchronous: bool) -> None:
        if self.fail:
            self.fail -= 1
            raise KafkaError("cannot commit offsets", "_STATE")
        self.commits.append((dict(marks), asynchronous))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ledger_with(window: int = 8) -> tuple[CommitLedger, StubConsumer, FakeClock, list[str]]:
    errors: list[str] = []
    clock = FakeClock()
    return CommitLedger(window, on_error=errors.append, clock=clock), StubConsumer(), clock, errors


def receive(ledger: CommitLedger, tp: tuple[str, int], *offsets: int) -> None:
    for o in offsets:
        ledger.received(tp, o)


def test_ledger_when_batch_delivered_then_handed_off_and_committed_asynchronously() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0, 1)
    ledger.commit(consumer)
    assert consumer.commits == []  # nothing delivered: nothing to commit
    ledger.delivered([(P0, 0), (P0, 1)])
    assert not ledger.idle
    ledger.commit(consumer)
    assert consumer.commits == [({P0: 2}, True)]
    assert not ledger.idle  # in flight until the result comes back
    ledger.commit_returned(CommitResult({P0: 2}))
    assert ledger.idle


def test_ledger_when_frame_held_back_then_commit_stops_below_it() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0, 1, 2)
    ledger.delivered([(P0, 1), (P0, 2)])  # offset 0 waits for a later batch
    ledger.commit(consumer)
    assert consumer.commits == [({P0: 0}, True)]
    ledger.commit_returned(CommitResult({P0: 0}))
    ledger.delivered([(P0, 0)])
    ledger.commit(consumer)
    assert consumer.commits[-1] == ({P0: 3}, True)


def test_ledger_when_commit_in_flight_then_next_waits_and_covers_every_hand_off() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0, 1, 2)
    receive(ledger, P1, 0)
    ledger.delivered([(P0, 0)])
    ledger.commit(consumer)
    ledger.delivered([(P0, 1)])
    ledger.delivered([(P0, 2), (P1, 0)])
    ledger.commit(consumer)
    assert len(consumer.commits) == 1  # one asynchronous commit at a time
    ledger.commit_returned(CommitResult({P0: 1}))
    ledger.commit(consumer)
    assert consumer.commits[-1] == ({P0: 3, P1: 1}, True)


def test_ledger_when_auto_commit_reports_lower_marks_then_own_commit_stays_in_flight() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0, 1)
    ledger.delivered([(P0, 0), (P0, 1)])
    ledger.commit(consumer)
    ledger.commit_returned(CommitResult({P0: 1}))  # the auto-commit of an older store
    assert not ledger.idle
    ledger.commit_returned(CommitResult({P0: 2}))
    assert ledger.idle


def test_ledger_when_commit_raises_then_marks_kept_and_retried_after_the_pause() -> None:
    ledger, consumer, clock, errors = ledger_with()
    receive(ledger, P0, 0)
    ledger.delivered([(P0, 0)])
    consumer.fail = 1
    ledger.commit(consumer)
    assert consumer.commits == [] and errors == ["commit"]
    ledger.commit(consumer)
    assert consumer.commits == []  # not on the very next turn
    clock.now += RETRY_AFTER_FAILURE_S
    ledger.commit(consumer)
    assert consumer.commits == [({P0: 1}, True)]


def test_ledger_when_asynchronous_commit_fails_then_its_marks_are_retried() -> None:
    ledger, consumer, clock, errors = ledger_with()
    receive(ledger, P0, 0, 1)
    ledger.delivered([(P0, 0)])
    ledger.commit(consumer)
    ledger.delivered([(P0, 1)])
    ledger.commit_returned(CommitResult({}, "Broker: coordinator not available"))
    assert errors == ["commit"]
    clock.now += RETRY_AFTER_FAILURE_S
    ledger.commit(consumer)
    assert consumer.commits[-1] == ({P0: 2}, True)


def test_ledger_when_waiting_commit_then_synchronous_and_covers_the_one_in_flight() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0)
    receive(ledger, P1, 0)
    ledger.delivered([(P0, 0)])
    ledger.commit(consumer)  # asynchronous, in flight
    ledger.delivered([(P1, 0)])
    ledger.commit(consumer, wait=True)
    assert consumer.commits[-1] == ({P0: 1, P1: 1}, False)
    assert ledger.idle


def test_ledger_when_window_full_then_publisher_waits_until_a_commit_returns() -> None:
    ledger, consumer, _clock, _errors = ledger_with(window=2)
    receive(ledger, P0, 0, 1, 2, 3)
    assert not ledger.wait_for_room([(P0, 0), (P0, 1)], timeout_s=0)
    ledger.delivered([(P0, 0), (P0, 1)])
    ledger.commit(consumer)  # in flight; its result only comes inside a consume()
    waited: list[bool] = []
    publisher = threading.Thread(
        target=lambda: waited.append(ledger.wait_for_room([(P0, 2), (P0, 3)], timeout_s=10))
    )
    publisher.start()
    deadline = time.monotonic() + 5
    while not ledger.publisher_waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    assert ledger.publisher_waiting
    # The receive thread is blocked on a full queue: it commits synchronously, which ends the wait.
    ledger.commit_while_blocked(consumer)
    publisher.join(5)
    assert waited == [True] and not publisher.is_alive()
    assert consumer.commits[-1] == ({P0: 2}, False)
    assert not ledger.publisher_waiting


def test_ledger_when_window_full_and_nothing_to_commit_then_wait_ends_at_once() -> None:
    # What holds the window is a frame held back below the delivered ones: every hand-off is
    # committed already, so waiting for another commit would only time out.
    ledger, consumer, _clock, _errors = ledger_with(window=2)
    receive(ledger, P0, 0, 1, 2, 3)
    ledger.delivered([(P0, 1), (P0, 2)])
    ledger.commit(consumer, wait=True)
    started = time.monotonic()
    assert ledger.wait_for_room([(P0, 3)], timeout_s=10)
    assert time.monotonic() - started < 5


def test_ledger_when_receiver_stopped_then_publisher_no_longer_waits() -> None:
    ledger, consumer, _clock, _errors = ledger_with(window=1)
    receive(ledger, P0, 0, 1)
    ledger.delivered([(P0, 0)])
    ledger.commit(consumer)
    waited: list[bool] = []
    publisher = threading.Thread(
        target=lambda: waited.append(ledger.wait_for_room([(P0, 1)], timeout_s=10))
    )
    publisher.start()
    deadline = time.monotonic() + 5
    while not ledger.publisher_waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    ledger.stop_receiving()
    publisher.join(5)
    assert waited == [True] and not publisher.is_alive()


def test_ledger_when_partition_revoked_mid_flight_then_it_is_never_committed_again() -> None:
    ledger, consumer, clock, _errors = ledger_with(window=1)
    receive(ledger, P0, 0, 1)
    receive(ledger, P1, 0, 1)
    ledger.delivered([(P0, 0), (P1, 0)])
    ledger.commit(consumer)  # in flight when the rebalance comes
    ledger.delivered([(P1, 1)])
    ledger.revoked([P1])
    ledger.commit_returned(CommitResult({}, "Broker: rebalance in progress"))
    clock.now += RETRY_AFTER_FAILURE_S
    ledger.commit(consumer)
    assert consumer.commits[-1] == ({P0: 1}, True)  # the failed marks, less the revoked one
    # Its window is forgotten too: a new owner's batch of it is not held back by the old one.
    ledger.commit_returned(CommitResult({P0: 1}))
    assert not ledger.wait_for_room([(P1, 5)], timeout_s=0)


def test_ledger_when_exactly_once_then_transaction_commits_only_a_gap_free_prefix() -> None:
    ledger, consumer, _clock, _errors = ledger_with()
    receive(ledger, P0, 0, 1, 2)
    assert not ledger.delivered_in_transaction([(P0, 1)])  # offset 0 is held back
    assert ledger.transaction_marks() == {P0: 0}
    assert ledger.delivered_in_transaction([(P0, 0)])
    assert ledger.transaction_marks() == {P0: 2}
    ledger.transaction_committed()
    assert ledger.delivered_in_transaction([(P0, 2)])
    assert ledger.transaction_marks() == {P0: 3}
    assert consumer.commits == []  # offsets went with the transaction, never by the consumer
    assert ledger.idle
