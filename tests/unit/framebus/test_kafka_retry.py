"""Which Kafka errors are tried again, how long, and what is raised once the budget is spent."""

from __future__ import annotations

from collections.abc import Callable

import confluent_kafka
import pytest

from framebus.errors import KafkaError
from framebus.kafka.client import librdkafka_error
from framebus.kafka.retry import TRANSIENT_CODES, RetryPolicy, retry_transient, transient

LIBRDKAFKA = confluent_kafka.KafkaError


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def failing(errors: list[KafkaError], result: str = "answer") -> Callable[[], str]:
    """A call that raises each of `errors` in turn, then returns `result`."""

    def call() -> str:
        if errors:
            raise errors.pop(0)
        return result

    return call


def timed_out() -> KafkaError:
    """librdkafka's own error for a request that got no answer in time, as the wrappers raise it."""
    return librdkafka_error("cannot find t[1]'s offset", LIBRDKAFKA(LIBRDKAFKA._TIMED_OUT))


def test_transient_codes_when_checked_then_every_one_is_a_librdkafka_error_name() -> None:
    codes = [code for code in vars(LIBRDKAFKA).values() if isinstance(code, int)]
    names = {LIBRDKAFKA(code).name() for code in codes}
    assert not TRANSIENT_CODES - names


@pytest.mark.parametrize(
    ("code", "retriable", "also", "expected"),
    [
        ("_TIMED_OUT", False, (), True),
        ("_DESTROY_BROKER", False, (), True),
        ("_ALL_BROKERS_DOWN", False, (), True),
        ("NOT_LEADER_FOR_PARTITION", False, (), True),
        ("TOPIC_AUTHORIZATION_FAILED", False, (), False),
        ("UNKNOWN_TOPIC_OR_PART", False, (), False),
        ("UNKNOWN_TOPIC_OR_PART", False, ("UNKNOWN_TOPIC_OR_PART",), True),
        ("SOMETHING_NEW", True, (), True),  # librdkafka's flag is enough
        (None, False, (), False),
    ],
)
def test_transient_when_error_given_then_only_broker_absence_and_flagged_ones(
    code: str | None, retriable: bool, also: tuple[str, ...], expected: bool
) -> None:
    assert transient(code, retriable, also) is expected


def test_retry_policy_wait_when_tries_pile_up_then_doubling_up_to_its_max_and_none_past_budget() -> (
    None
):
    policy = RetryPolicy(budget_s=10.0, first_wait_s=0.2, max_wait_s=1.0)
    assert [policy.wait_s(n, 0.0) for n in (1, 2, 3, 4)] == [0.2, 0.4, 0.8, 1.0]
    assert policy.wait_s(9, 9.7) == pytest.approx(0.3)  # no wait past the budget
    assert policy.wait_s(9, 10.0) is None


def test_retry_transient_when_librdkafka_times_out_twice_then_the_third_try_answers() -> None:
    clock, retried = FakeTime(), []
    call = failing([timed_out(), timed_out()])
    got = retry_transient(
        call, RetryPolicy(5.0), retried.append, clock=lambda: clock.now, sleep=clock.sleep
    )
    assert got == "answer"
    assert [e.code for e in retried] == ["_TIMED_OUT", "_TIMED_OUT"]
    assert clock.slept == [0.2, 0.4]


def test_retry_transient_when_error_is_flagged_retriable_by_librdkafka_then_retried() -> None:
    flagged = LIBRDKAFKA(LIBRDKAFKA.INVALID_REPLICATION_FACTOR, reason="try again", retriable=True)
    clock = FakeTime()
    call = failing([librdkafka_error("cannot create t", flagged)])
    assert retry_transient(call, RetryPolicy(5.0), clock=lambda: clock.now, sleep=clock.sleep)
    assert len(clock.slept) == 1


def test_retry_transient_when_error_is_not_transient_then_raised_at_once_untouched() -> None:
    clock, retried = FakeTime(), []
    denied = KafkaError("cannot read t: not authorised", "TOPIC_AUTHORIZATION_FAILED")
    with pytest.raises(KafkaError) as raised:
        retry_transient(
            failing([denied]), RetryPolicy(5.0), retried.append,
            clock=lambda: clock.now, sleep=clock.sleep,
        )  # fmt: skip
    assert raised.value is denied
    assert retried == [] and clock.slept == []


def test_retry_transient_when_the_budget_is_spent_then_the_last_error_says_how_long_it_tried() -> (
    None
):
    clock = FakeTime()
    forever = [timed_out() for _ in range(100)]
    with pytest.raises(KafkaError) as raised:
        retry_transient(
            failing(forever), RetryPolicy(3.0, max_wait_s=1.0),
            clock=lambda: clock.now, sleep=clock.sleep,
        )  # fmt: skip
    assert sum(clock.slept) == pytest.approx(3.0)
    assert raised.value.code == "_TIMED_OUT"
    message = str(raised.value)
    assert message.startswith("cannot find t[1]'s offset: Local: Timed out")
    assert "still failing after 6 tries in 3.0 s" in message and "brokers are up" in message
